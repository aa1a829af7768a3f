#pragma once
// Weight-only quantization of a frozen base (docs/quantization.md). A quantized
// nn::Linear stores its weight in 1 byte per element and a float32 scale; forward
// multiplies the matmul's output by the scale (the same as dequantizing W first,
// for a per-output-row or per-tensor scale), in the input's dtype.
//
//   int8          symmetric, per output row: scale = max|W_row| / 127
//   qfloat8       fp8 e4m3fn, per output row: scale = max|W_row| / 448
//   float8_e4m3   fp8 e4m3fn, one scale for the whole tensor: max|W| / 448
//                 (decision: the plain dtype name gets the plain per-tensor
//                 scheme; qfloat8 is ai-toolkit's name and gets the finer one)
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace strata::nn {

enum class QuantType { None, Int8, QFloat8, Float8E4m3 };

// "int8", "qfloat8", "float8_e4m3" (also "float8", "float8_e4m3fn"). Throws
// strata::ConfigError naming the accepted names.
QuantType quantTypeFromName(const std::string& name);
const char* quantTypeName(QuantType t);
const std::vector<std::string>& quantTypeNames();
// Whether this LibTorch can store `t` (float8 needs 2.1+).
bool quantTypeAvailable(QuantType t);
bool isFloat8(QuantType t);
bool perRowScale(QuantType t);

struct QuantizedWeight {
  at::Tensor data;   // [out, in] int8 or float8_e4m3fn, on w's device
  at::Tensor scale;  // [out] (per row) or [1] (per tensor), float32
};

// w: [out, in], any floating dtype. Rows of zeros get scale 1 (their data is 0).
QuantizedWeight quantizeWeight(const at::Tensor& w, QuantType t);
// data * scale in `dtype`: [out, in].
at::Tensor dequantizeWeight(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype);

// Quantizes every nn::Linear inside `module` (itself included) in place, on the
// device its weight is on. Returns how many were quantized.
int64_t quantizeLinears(torch::nn::Module& module, QuantType t);

}  // namespace strata::nn
