#pragma once
// Host entry points of nn/cuda/QuantKernels.cu (plain C++ types, so LibTorch code
// includes this without CUDA headers). Each launches on `stream` (a cudaStream_t)
// and returns nullptr, or the CUDA error's text. nn/QuantKernels.h is the LibTorch
// side, with the ATen fallback these kernels must equal.
#include <cstdint>

namespace strata::nn::cuda {

// Per-row e4m3 quantization of x [rows, cols] bf16, in one kernel:
//   y = bf16(x * bf16(colScale))            (colScale [cols] float32, or nullptr: y = x)
//   inv = bf16(target * (1 / max(amax(|y| of the row), 1e-30)))
//   out = e4m3(bf16(y * inv)), rowScale = 1 / float(inv)
// the roundings of the ATen ops it replaces. cols % 8 == 0; x, out 16-byte aligned.
const char* quantizeRowsE4m3(const void* x, const float* colScale, void* out, float* rowScale, int64_t rows,
                             int64_t cols, float target, void* stream);

// out [cols, rows] = in [rows, cols]^T, one byte per element (fp8 or int8 weights).
// rows % 4 == 0, cols % 4 == 0; both 4-byte aligned.
const char* transposeBytes(const void* in, void* out, int64_t rows, int64_t cols, void* stream);

// out [rows, cols] bf16 = bf16(float(q) * scale[row]) for int8 (isFloat8 false) or e4m3
// weights; scale has `rows` entries, or one (perTensor). cols % 4 == 0; 4-byte aligned.
const char* dequantizeRowsBf16(const void* q, bool isFloat8, const float* scale, bool perTensor, void* out,
                               int64_t rows, int64_t cols, void* stream);

}  // namespace strata::nn::cuda
