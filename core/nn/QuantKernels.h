#pragma once
// The elementwise work around a quantized Linear's matmuls (nn/Linear.cpp): the
// per-token e4m3 quantization of an input or a gradient, the transposed copy of
// an fp8 weight for the input gradient, a weight dequantized with its row scales.
// On CUDA with the kernels built (nn/cuda/QuantKernels.cu) each is one kernel;
// elsewhere, or with nn::setFusedPaths(false), the ATen ops with the same roundings.
#include <ATen/ATen.h>

namespace strata::nn {

// Whether this build has the CUDA kernels (LibTorch with CUDA and a CUDA compiler).
bool quantKernelsBuilt();
// How many times the functions below took a CUDA kernel in this process (a test's
// proof that a call did not fall back to the ATen ops).
int64_t quantKernelLaunches();

struct Fp8Rows {
  at::Tensor data;   // [M, K] e4m3
  at::Tensor scale;  // [M, 1] float32: data * scale ~ the input
};

// x [M, K] bf16 (or any float dtype on the ATen path), times colScale [K] float32
// first when it is defined (rounded to x's dtype), quantized per row so that the
// row's amax maps to `target`. LibTorch 2.1+ (float8).
Fp8Rows quantizeRowsE4m3(const at::Tensor& x, const at::Tensor& colScale, double target);

// w [R, C] of a one-byte dtype (float8, int8) -> its transpose [C, R], contiguous.
at::Tensor transposedCopy(const at::Tensor& w);

// data [out, in] (int8 or float8) * scale ([out] or [1], float32) in `dtype`:
// nn::dequantizeWeight's arithmetic (float32 product, one rounding).
at::Tensor dequantizeRows(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype);

}  // namespace strata::nn
