#pragma once
// Helpers shared by the FLUX.1 and FLUX.2 transformer parity checks (CPU, label parity)
// and their CUDA versions (label gpu): the manifest's tolerance, the fixture inputs as
// model inputs, the reference's AdamW settings, the stated bf16 tolerance, a file's shapes.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux/FluxTransformer.h"

namespace strata::parity {

struct Tolerance {
  double atol = 1e-4;
  double rtol = 1e-3;
};

inline Tolerance toleranceOf(const nlohmann::json& manifest) {
  Tolerance t;
  if (manifest.contains("tolerance")) {
    t.atol = manifest["tolerance"].value("atol", t.atol);
    t.rtol = manifest["tolerance"].value("rtol", t.rtol);
  }
  return t;
}

// inputs.safetensors of a flux_transformer fixture, as the model takes them.
inline flux::FluxInputs inputsOf(const std::map<std::string, at::Tensor>& in, const at::Device& device = at::kCPU) {
  flux::FluxInputs x;
  x.img = in.at("hidden_states").to(device);
  x.txt = in.at("encoder_hidden_states").to(device);
  x.pooled = in.at("pooled_projections").to(device);
  x.timestep = in.at("timestep").to(device);
  x.guidance = in.at("guidance").to(device);
  x.imgIds = in.at("img_ids").to(device);
  x.txtIds = in.at("txt_ids").to(device);
  return x;
}

// AdamW settings: a manifest "optimizer" object if there is one, else the numbers
// in the description of lora_after_adamw.safetensors, else torch's defaults with
// the reference's lr 1e-3 and weight decay 0.01.
inline torch::optim::AdamWOptions adamwOptionsOf(const nlohmann::json& manifest) {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
  std::string text;
  if (manifest.contains("files") && manifest["files"].contains("lora_after_adamw.safetensors"))
    text = manifest["files"]["lora_after_adamw.safetensors"].get<std::string>();
  const std::string num = "([0-9.]+(?:e-?[0-9]+)?)";
  std::smatch m;
  if (std::regex_search(text, m, std::regex("lr " + num))) lr = std::stod(m[1]);
  if (std::regex_search(text, m, std::regex("betas " + num + "/" + num))) {
    beta1 = std::stod(m[1]);
    beta2 = std::stod(m[2]);
  }
  if (std::regex_search(text, m, std::regex("eps " + num))) eps = std::stod(m[1]);
  if (std::regex_search(text, m, std::regex("weight_decay " + num))) wd = std::stod(m[1]);
  if (manifest.contains("optimizer")) {
    const auto& o = manifest["optimizer"];
    lr = o.value("lr", lr);
    eps = o.value("eps", eps);
    wd = o.value("weight_decay", wd);
    if (o.contains("betas")) {
      beta1 = o["betas"].at(0).get<double>();
      beta2 = o["betas"].at(1).get<double>();
    }
  }
  return torch::optim::AdamWOptions(lr).betas({beta1, beta2}).eps(eps).weight_decay(wd);
}

// bf16 keeps 8 mantissa bits: the stated tolerance of a bf16 forward against the float32
// reference, FLUX.1 and FLUX.2 alike.
constexpr double kBf16Atol = 5e-2;
constexpr double kBf16Rtol = 5e-2;
constexpr double kBf16MaxRelL2 = 2e-2;

// A bf16 forward `out` against the float32 reference `ref` at that tolerance (printed).
inline void expectBf16Forward(const at::Tensor& out, const at::Tensor& ref) {
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  const auto diff = out.to(at::kDouble) - ref.to(at::kDouble);
  const double relL2 = diff.norm().item<double>() / ref.to(at::kDouble).norm().item<double>();
  std::cout << "[parity]     bf16: relative L2 error " << relL2 << ", max abs error " << diff.abs().max().item<double>()
            << std::endl;
  EXPECT_TRUE(test::allClose(out, ref, kBf16Atol, kBf16Rtol)) << "bf16 forward";
  EXPECT_LT(relL2, kBf16MaxRelL2);
}

// The shape of every tensor of a .safetensors file, by name (header only).
inline std::map<std::string, std::vector<int64_t>> safetensorsShapes(const std::filesystem::path& file) {
  const auto f = io::SafetensorsFile::open(file);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& n : f.names()) shapes[n] = f.info(n).shape;
  return shapes;
}

}  // namespace strata::parity
