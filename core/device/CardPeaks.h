#pragma once
// The dense bf16 tensor-core peak of a CUDA card, by the name the driver reports
// ("NVIDIA H100 PCIe", "NVIDIA L40S"), for the share of the peak that
// `strata-train bench` prints.
#include <optional>
#include <string>

namespace strata::device {

// TFLOP/s, dense bf16 without sparsity (the data sheets' starred figures are with
// 2:4 sparsity, twice these). A known part of a name matches on whole words, the
// longest known part wins ("L40" is not "L4", "H100 PCIe" not "H100"); nullopt for
// a card that is not known, and for variants known to differ whose figure is not
// confirmed here (H100 NVL, H200 NVL), rather than a neighbour's figure.
std::optional<double> denseBf16PeakTflops(const std::string& cardName);

}  // namespace strata::device
