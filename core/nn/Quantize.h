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
// Throws ConfigError naming `t` and suggesting int8 when this LibTorch cannot store it.
void requireQuantTypeAvailable(QuantType t);
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

// ---- fp8 matmul (model.fp8_matmul) ------------------------------------------
// An fp8-quantized Linear may multiply on the fp8 tensor cores (at::_scaled_mm,
// sm_89+): the input is quantized per token (row-wise amax, e4m3) and the weight's
// own scale (per row or per tensor) applies to the output columns.
//
// The input gradient of that Linear (the base is frozen: no weight gradient):
//   Bf16  the weight converted to bf16 again, a bf16 matmul (the default: measured
//         in docs/quantization.md, fp8 here bought little time and cost precision)
//   Fp8   grad_out times the weight's scale, quantized per row to e4m3, times a
//         transposed copy of the fp8 weight made per backward
//   Fp8KeptTranspose  as Fp8, but the transposed copy is made once, by the first
//         forward whose backward will need it, and kept for the run (1 byte per weight
//         more on the weight's card; none for a Linear whose input needs no gradient)
enum class Fp8Backward { Bf16, Fp8, Fp8KeptTranspose };
// model.fp8_backward and model.fp8_keep_transpose.
inline Fp8Backward fp8BackwardOf(bool fp8, bool keepTranspose = false) {
  return !fp8 ? Fp8Backward::Bf16 : keepTranspose ? Fp8Backward::Fp8KeptTranspose : Fp8Backward::Fp8;
}

// _scaled_mm needs both weight dims to be multiples of 16 and fp8 storage.
bool fp8MatmulQualifies(int64_t inFeatures, int64_t outFeatures, QuantType t);

struct Fp8MatmulCount {
  int64_t fp8 = 0;       // Linears switched to the fp8 matmul
  int64_t fallback = 0;  // fp8-quantized Linears that keep the dequantizing matmul (a dim not a multiple of 16)
  Fp8MatmulCount& operator+=(const Fp8MatmulCount& o) {
    fp8 += o.fp8;
    fallback += o.fallback;
    return *this;
  }
};
// "fp8 matmul: 494 Linears (2 keep the dequantizing matmul: a dim not a multiple of 16)"
std::string fp8MatmulSummary(const Fp8MatmulCount& c);
// Switches every qualifying quantized Linear inside `module` to the fp8 matmul.
// Where the matmul runs, the input must be bf16 on CUDA; any other input takes
// the dequantizing matmul.
Fp8MatmulCount enableFp8Matmul(torch::nn::Module& module, Fp8Backward backward = Fp8Backward::Bf16);
// Runs the first fp8-matmul Linear inside `module` once on a [16, in] zero input in
// `dtype` on its device, without autograd: whether this LibTorch and this card can do
// the row-wise fp8 matmul (builds without CUDA 12, and some cards on some LibTorch
// versions, cannot) is known before a step runs. Throws Error naming the Linear's
// device with what LibTorch said; returns false where `module` has no such Linear.
bool checkFp8Matmul(torch::nn::Module& module, at::ScalarType dtype);

}  // namespace strata::nn
