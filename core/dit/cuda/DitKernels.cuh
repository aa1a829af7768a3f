#pragma once
// Host entry points of dit/cuda/DitKernels.cu (plain C++ types, so LibTorch
// code includes this without CUDA headers). Each launches on `stream` (a
// cudaStream_t) and returns nullptr, or the CUDA error's text.
#include <cstdint>

namespace strata::dit::cuda {

// The largest head dim the RMSNorm + rotary kernels take (dims must be even).
int maxNormRopeDim();

// q or k: rows = B*N*H of `dim` bf16 (row = (token, head); a token's heads side by
// side, tokens `tokenStride` elements apart, even: heads * dim when contiguous),
// token = (row / heads) % tokens; its bf16 RMSNorm weight [dim], the rotary cos/sin
// [tokens, dim] float32 (interleaved pairs) -> out [rows, dim] bf16 (contiguous) and
// rstd [rows] float32 (kept for the backward).
const char* normRopeForward(const void* x, const void* weight, const float* cosTab, const float* sinTab, void* out,
                            float* rstd, int64_t rows, int64_t heads, int64_t tokens, int64_t dim, int64_t tokenStride,
                            double eps, void* stream);

// gradX [rows, dim] bf16 (contiguous) from gradOut [rows, dim] bf16 (contiguous) and
// the forward's x (laid out as there), rstd, weight, cos, sin.
const char* normRopeBackward(const void* gradOut, const void* x, const float* rstd, const void* weight,
                             const float* cosTab, const float* sinTab, void* gradX, int64_t rows, int64_t heads,
                             int64_t tokens, int64_t dim, int64_t tokenStride, void* stream);

// The widest row the LayerNorm + modulation kernels take, and the count of bf16 values
// that the width, every stride and every pointer's address (in values) must be a
// multiple of: the kernels move 16 bytes at a time.
int maxNormModulateDim();
int normModulateAlignment();

// LayerNorm without affine parameters, then x * (1 + scale) + shift, over x [B, N, D]
// bf16 (element [b, n, d] at b * batchStride + n * tokenStride + d) with shift and
// scale [B, D] bf16 (rows shiftStride and scaleStride apart) -> out [B, N, D] bf16
// contiguous, mean and rstd [B * N] float32 (kept for the backward). The grid has
// one block per token: B * N must stay under 2^31.
const char* normModulateForward(const void* x, const void* shift, const void* scale, void* out, float* mean,
                                float* rstd, int64_t batch, int64_t tokens, int64_t dim, int64_t batchStride,
                                int64_t tokenStride, int64_t shiftStride, int64_t scaleStride, double eps,
                                void* stream);

// gradX [B, N, D] bf16 contiguous from gradOut [B, N, D] bf16 contiguous and the
// forward's x (laid out as there), scale, mean and rstd.
const char* normModulateBackward(const void* gradOut, const void* x, const void* scale, const float* mean,
                                 const float* rstd, void* gradX, int64_t batch, int64_t tokens, int64_t dim,
                                 int64_t batchStride, int64_t tokenStride, int64_t scaleStride, void* stream);

// SwiGLU over rows of x = [gate | up] (each `m` wide; rows `rowStride` elements
// apart, even, >= 2m) -> out [rows, m] bf16 contiguous: silu(gate) * up with the
// roundings of the ATen ops (silu rounded to bf16, then the product).
const char* swigluForward(const void* x, void* out, int64_t rows, int64_t m, int64_t rowStride, void* stream);

// gx [rows, 2m] (rows `gxStride` apart) from g [rows, m] contiguous and the forward's
// x: d gate = silu'(gate) * bf16(g * up), d up = g * bf16(silu(gate)), as ATen's
// mul and silu_backward round them.
const char* swigluBackward(const void* g, const void* x, void* gx, int64_t rows, int64_t m, int64_t rowStride,
                           int64_t gxStride, void* stream);

}  // namespace strata::dit::cuda
