// CUDA kernels of the FLUX transformer's bf16 path (built only when CMake finds a
// CUDA compiler and LibTorch has CUDA; dit/DitKernels.cpp calls them).
// Raw pointers and the CUDA runtime only, no LibTorch headers: this file builds
// with nvcc alone and fast.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dit/cuda/DitKernels.cuh"

namespace strata::dit::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;     // one warp per row (token, head)
constexpr int kMaxPairsPerLane = 4;  // head dims up to 256

__device__ __forceinline__ float roundBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Where row (token, head) of x starts, in pairs: a token's heads lie side by side
// (contiguous), tokens `tokenPairs` apart (heads * pairs when x is contiguous; more
// when x is a narrow of a wider projection, FLUX.2's fused qkv + MLP).
__device__ __forceinline__ int64_t rowOffset(int64_t row, int64_t heads, int pairs, int64_t tokenPairs) {
  return (row / heads) * tokenPairs + (row % heads) * pairs;
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// out = rotary(bf16(bf16(x * rstd) * w)) with rstd = rsqrt(mean(x^2) + eps) over each
// row of `dim` (one head of one token), the roundings of the unfused ATen path
// (RmsNorm then applyRotary): normalised x rounded to bf16, times the bf16
// weight rounded again, then the rotation in float32 without fused multiply-adds.
__global__ void normRopeForwardKernel(const __nv_bfloat162* __restrict__ x, const __nv_bfloat162* __restrict__ w,
                                      const float2* __restrict__ cosTab, const float2* __restrict__ sinTab,
                                      __nv_bfloat162* __restrict__ out, float* __restrict__ rstdOut, int64_t rows,
                                      int64_t heads, int64_t tokens, int pairs, int64_t tokenPairs, float eps) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp shares the row
  const int64_t token = (row / heads) % tokens;
  const __nv_bfloat162* xr = x + rowOffset(row, heads, pairs, tokenPairs);
  float2 v[kMaxPairsPerLane];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxPairsPerLane; ++i) {
    const int p = lane + kWarp * i;
    v[i] = p < pairs ? __bfloat1622float2(xr[p]) : make_float2(0.f, 0.f);
    ss += v[i].x * v[i].x + v[i].y * v[i].y;
  }
  ss = warpSum(ss);
  const float rstd = rsqrtf(ss / static_cast<float>(2 * pairs) + eps);
  const float2* c = cosTab + token * pairs;
  const float2* s = sinTab + token * pairs;
#pragma unroll
  for (int i = 0; i < kMaxPairsPerLane; ++i) {
    const int p = lane + kWarp * i;
    if (p >= pairs) break;
    const float2 wp = __bfloat1622float2(w[p]);
    const float y0 = roundBf16(roundBf16(v[i].x * rstd) * wp.x);
    const float y1 = roundBf16(roundBf16(v[i].y * rstd) * wp.y);
    const float2 cp = c[p], sp = s[p];
    // pairs (y0, y1) rotate to (-y1, y0): out = y * cos + rotated * sin
    const float o0 = __fadd_rn(__fmul_rn(y0, cp.x), __fmul_rn(-y1, sp.x));
    const float o1 = __fadd_rn(__fmul_rn(y1, cp.y), __fmul_rn(y0, sp.y));
    out[row * pairs + p] = __floats2bfloat162_rn(o0, o1);
  }
  if (lane == 0) rstdOut[row] = rstd;
}

// gx from g = d loss / d out: the rotation transposed (rounded to bf16, the dtype of
// the norm's output gradient on the unfused path), times w, then the RMSNorm
// backward rstd * (gn - n * mean(gn * n)) with n = x * rstd, in float32.
__global__ void normRopeBackwardKernel(const __nv_bfloat162* __restrict__ g, const __nv_bfloat162* __restrict__ x,
                                       const float* __restrict__ rstdIn, const __nv_bfloat162* __restrict__ w,
                                       const float2* __restrict__ cosTab, const float2* __restrict__ sinTab,
                                       __nv_bfloat162* __restrict__ gx, int64_t rows, int64_t heads, int64_t tokens,
                                       int pairs, int64_t tokenPairs) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int64_t token = (row / heads) % tokens;
  const __nv_bfloat162* xr = x + rowOffset(row, heads, pairs, tokenPairs);
  const float rstd = rstdIn[row];
  const float2* c = cosTab + token * pairs;
  const float2* s = sinTab + token * pairs;
  float2 gn[kMaxPairsPerLane];
  float2 n[kMaxPairsPerLane];
  float dot = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxPairsPerLane; ++i) {
    const int p = lane + kWarp * i;
    if (p < pairs) {
      const float2 gp = __bfloat1622float2(g[row * pairs + p]);
      const float2 cp = c[p], sp = s[p];
      const float gy0 = roundBf16(gp.x * cp.x + gp.y * sp.y);
      const float gy1 = roundBf16(gp.y * cp.y - gp.x * sp.x);
      const float2 wp = __bfloat1622float2(w[p]);
      const float2 xp = __bfloat1622float2(xr[p]);
      gn[i] = make_float2(gy0 * wp.x, gy1 * wp.y);
      n[i] = make_float2(xp.x * rstd, xp.y * rstd);
    } else {
      gn[i] = make_float2(0.f, 0.f);
      n[i] = make_float2(0.f, 0.f);
    }
    dot += gn[i].x * n[i].x + gn[i].y * n[i].y;
  }
  const float mean = warpSum(dot) / static_cast<float>(2 * pairs);
#pragma unroll
  for (int i = 0; i < kMaxPairsPerLane; ++i) {
    const int p = lane + kWarp * i;
    if (p >= pairs) break;
    gx[row * pairs + p] = __floats2bfloat162_rn(rstd * (gn[i].x - n[i].x * mean), rstd * (gn[i].y - n[i].y * mean));
  }
}

constexpr int kNormThreads = 128;  // one block per token for the LayerNorm + modulation
constexpr int kVec = 8;            // bf16 values a thread loads at once (16 bytes)

// The sum of v over the block, in every thread. `scratch` holds one value per warp.
__device__ __forceinline__ float blockSum(float v, float* scratch) {
  v = warpSum(v);
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warpSum(lane < kNormThreads / kWarp ? scratch[lane] : 0.f);
}

__device__ __forceinline__ void loadVec(const __nv_bfloat16* p, float (&f)[kVec]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) {
    const float2 t = __bfloat1622float2(h[k]);
    f[2 * k] = t.x;
    f[2 * k + 1] = t.y;
  }
}

__device__ __forceinline__ void storeVec(__nv_bfloat16* p, const float (&f)[kVec]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// out = bf16(shift + bf16((x - mean) * rstd) * bf16(1 + scale)) over each token of
// x [B, N, D] (a LayerNorm without affine parameters, then the per-sample modulation),
// with the unfused ATen path's roundings: the normalised row rounded to bf16, 1 + scale
// rounded to bf16, then addcmul's float product and sum. Mean and variance are taken
// in two passes over the row held in registers (ATen: Welford), so rstd may differ in
// its last bit. Each thread holds up to kVecs vectors of kVec values.
template <int kVecs>
__global__ void __launch_bounds__(kNormThreads)
    normModulateForwardKernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ shift,
                              const __nv_bfloat16* __restrict__ scale, __nv_bfloat16* __restrict__ out,
                              float* __restrict__ meanOut, float* __restrict__ rstdOut, int64_t tokens, int dim,
                              int64_t batchStride, int64_t tokenStride, int64_t shiftStride, int64_t scaleStride,
                              float eps) {
  __shared__ float scratch[kNormThreads / kWarp];
  const int64_t row = blockIdx.x;
  const int64_t b = row / tokens;
  const __nv_bfloat16* xr = x + b * batchStride + (row % tokens) * tokenStride;
  const int vecs = dim / kVec;
  float v[kVecs][kVec];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = threadIdx.x + kNormThreads * i;
    if (c < vecs) {
      loadVec(xr + c * kVec, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[i][k] = 0.f;
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum += v[i][k];
  }
  const float n = static_cast<float>(dim);
  const float mean = blockSum(sum, scratch) / n;
  float squares = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (threadIdx.x + kNormThreads * i >= vecs) break;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float d = v[i][k] - mean;
      squares += d * d;
    }
  }
  const float rstd = rsqrtf(blockSum(squares, scratch) / n + eps);
  const __nv_bfloat16* sh = shift + b * shiftStride;
  const __nv_bfloat16* sc = scale + b * scaleStride;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = threadIdx.x + kNormThreads * i;
    if (c >= vecs) break;
    float shv[kVec], scv[kVec], o[kVec];
    loadVec(sh + c * kVec, shv);
    loadVec(sc + c * kVec, scv);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      o[k] = __fadd_rn(shv[k], __fmul_rn(roundBf16(rstd * (v[i][k] - mean)), roundBf16(1.f + scv[k])));
    storeVec(out + row * dim + c * kVec, o);
  }
  if (threadIdx.x == 0) {
    meanOut[row] = mean;
    rstdOut[row] = rstd;
  }
}

// gx from g = d loss / d out: gn = bf16(g * bf16(1 + scale)) (addcmul's backward, a
// bf16 product), then the LayerNorm backward rstd * (gn - mean(gn) - xh * mean(gn * xh))
// with xh = (x - mean) * rstd, in float32.
template <int kVecs>
__global__ void __launch_bounds__(kNormThreads)
    normModulateBackwardKernel(const __nv_bfloat16* __restrict__ g, const __nv_bfloat16* __restrict__ x,
                               const __nv_bfloat16* __restrict__ scale, const float* __restrict__ meanIn,
                               const float* __restrict__ rstdIn, __nv_bfloat16* __restrict__ gx, int64_t tokens,
                               int dim, int64_t batchStride, int64_t tokenStride, int64_t scaleStride) {
  __shared__ float scratch[kNormThreads / kWarp];
  const int64_t row = blockIdx.x;
  const int64_t b = row / tokens;
  const __nv_bfloat16* xr = x + b * batchStride + (row % tokens) * tokenStride;
  const __nv_bfloat16* sc = scale + b * scaleStride;
  const float mean = meanIn[row];
  const float rstd = rstdIn[row];
  const int vecs = dim / kVec;
  float gn[kVecs][kVec];
  float xh[kVecs][kVec];
  float sumG = 0.f, sumGX = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = threadIdx.x + kNormThreads * i;
    if (c < vecs) {
      float scv[kVec];
      loadVec(g + row * dim + c * kVec, gn[i]);
      loadVec(xr + c * kVec, xh[i]);
      loadVec(sc + c * kVec, scv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        gn[i][k] = roundBf16(gn[i][k] * roundBf16(1.f + scv[k]));
        xh[i][k] = (xh[i][k] - mean) * rstd;
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) gn[i][k] = xh[i][k] = 0.f;
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      sumG += gn[i][k];
      sumGX += gn[i][k] * xh[i][k];
    }
  }
  const float n = static_cast<float>(dim);
  const float meanG = blockSum(sumG, scratch) / n;
  const float meanGX = blockSum(sumGX, scratch) / n;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = threadIdx.x + kNormThreads * i;
    if (c >= vecs) break;
    float o[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) o[k] = rstd * (gn[i][k] - meanG - xh[i][k] * meanGX);
    storeVec(gx + row * dim + c * kVec, o);
  }
}

// Vectors a thread holds for rows of `dim`: 4 up to 4096 wide (fewer registers, more
// blocks resident), 8 up to 8192.
constexpr int kNormVecsSmall = 4;
constexpr int kNormVecsLarge = 8;
constexpr bool fewNormVecs(int64_t dim) { return dim <= kNormThreads * kNormVecsSmall * kVec; }

// silu in float as ATen's kernel computes it (x / (1 + exp(-x))).
__device__ __forceinline__ float siluOf(float x) { return x / (1.f + expf(-x)); }

// One thread per pair of columns (bf16x2) of one row.
__global__ void swigluForwardKernel(const __nv_bfloat162* __restrict__ x, __nv_bfloat162* __restrict__ out,
                                    int64_t rows, int64_t halfPairs, int64_t rowPairs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * halfPairs) return;
  const int64_t row = i / halfPairs, p = i % halfPairs;
  const float2 a = __bfloat1622float2(x[row * rowPairs + p]);
  const float2 b = __bfloat1622float2(x[row * rowPairs + halfPairs + p]);
  const float s0 = roundBf16(siluOf(a.x)), s1 = roundBf16(siluOf(a.y));
  out[i] = __floats2bfloat162_rn(__fmul_rn(s0, b.x), __fmul_rn(s1, b.y));
}

__device__ __forceinline__ float siluGrad(float dy, float x) {
  const float s = 1.f / (1.f + expf(-x));
  return dy * s * (1.f + x * (1.f - s));
}

__global__ void swigluBackwardKernel(const __nv_bfloat162* __restrict__ g, const __nv_bfloat162* __restrict__ x,
                                     __nv_bfloat162* __restrict__ gx, int64_t rows, int64_t halfPairs, int64_t rowPairs,
                                     int64_t gxRowPairs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * halfPairs) return;
  const int64_t row = i / halfPairs, p = i % halfPairs;
  const float2 gp = __bfloat1622float2(g[i]);
  const float2 a = __bfloat1622float2(x[row * rowPairs + p]);
  const float2 b = __bfloat1622float2(x[row * rowPairs + halfPairs + p]);
  const float gb0 = roundBf16(__fmul_rn(gp.x, b.x)), gb1 = roundBf16(__fmul_rn(gp.y, b.y));  // bf16(g * up)
  gx[row * gxRowPairs + p] = __floats2bfloat162_rn(siluGrad(gb0, a.x), siluGrad(gb1, a.y));
  const float s0 = roundBf16(siluOf(a.x)), s1 = roundBf16(siluOf(a.y));
  gx[row * gxRowPairs + halfPairs + p] = __floats2bfloat162_rn(__fmul_rn(gp.x, s0), __fmul_rn(gp.y, s1));
}

const char* lastError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

unsigned gridFor(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

constexpr int kElementwiseThreads = 256;

unsigned elementwiseGrid(int64_t n) {
  return static_cast<unsigned>((n + kElementwiseThreads - 1) / kElementwiseThreads);
}

}  // namespace

int maxNormRopeDim() { return 2 * kWarp * kMaxPairsPerLane; }

const char* normRopeForward(const void* x, const void* weight, const float* cosTab, const float* sinTab, void* out,
                            float* rstd, int64_t rows, int64_t heads, int64_t tokens, int64_t dim, int64_t tokenStride,
                            double eps, void* stream) {
  if (rows == 0) return nullptr;
  normRopeForwardKernel<<<gridFor(rows), kRowsPerBlock * kWarp, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(x), static_cast<const __nv_bfloat162*>(weight),
      reinterpret_cast<const float2*>(cosTab), reinterpret_cast<const float2*>(sinTab),
      static_cast<__nv_bfloat162*>(out), rstd, rows, heads, tokens, static_cast<int>(dim / 2), tokenStride / 2,
      static_cast<float>(eps));
  return lastError();
}

const char* normRopeBackward(const void* gradOut, const void* x, const float* rstd, const void* weight,
                             const float* cosTab, const float* sinTab, void* gradX, int64_t rows, int64_t heads,
                             int64_t tokens, int64_t dim, int64_t tokenStride, void* stream) {
  if (rows == 0) return nullptr;
  normRopeBackwardKernel<<<gridFor(rows), kRowsPerBlock * kWarp, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(gradOut), static_cast<const __nv_bfloat162*>(x), rstd,
      static_cast<const __nv_bfloat162*>(weight), reinterpret_cast<const float2*>(cosTab),
      reinterpret_cast<const float2*>(sinTab), static_cast<__nv_bfloat162*>(gradX), rows, heads, tokens,
      static_cast<int>(dim / 2), tokenStride / 2);
  return lastError();
}

int maxNormModulateDim() { return kNormThreads * kNormVecsLarge * kVec; }

int normModulateAlignment() { return kVec; }

const char* normModulateForward(const void* x, const void* shift, const void* scale, void* out, float* mean,
                                float* rstd, int64_t batch, int64_t tokens, int64_t dim, int64_t batchStride,
                                int64_t tokenStride, int64_t shiftStride, int64_t scaleStride, double eps,
                                void* stream) {
  const int64_t rows = batch * tokens;
  if (rows == 0) return nullptr;
  auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(shift),
        static_cast<const __nv_bfloat16*>(scale), static_cast<__nv_bfloat16*>(out), mean, rstd, tokens,
        static_cast<int>(dim), batchStride, tokenStride, shiftStride, scaleStride, static_cast<float>(eps));
  };
  if (fewNormVecs(dim))
    launch(normModulateForwardKernel<kNormVecsSmall>);
  else
    launch(normModulateForwardKernel<kNormVecsLarge>);
  return lastError();
}

const char* normModulateBackward(const void* gradOut, const void* x, const void* scale, const float* mean,
                                 const float* rstd, void* gradX, int64_t batch, int64_t tokens, int64_t dim,
                                 int64_t batchStride, int64_t tokenStride, int64_t scaleStride, void* stream) {
  const int64_t rows = batch * tokens;
  if (rows == 0) return nullptr;
  auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const __nv_bfloat16*>(gradOut), static_cast<const __nv_bfloat16*>(x),
        static_cast<const __nv_bfloat16*>(scale), mean, rstd, static_cast<__nv_bfloat16*>(gradX), tokens,
        static_cast<int>(dim), batchStride, tokenStride, scaleStride);
  };
  if (fewNormVecs(dim))
    launch(normModulateBackwardKernel<kNormVecsSmall>);
  else
    launch(normModulateBackwardKernel<kNormVecsLarge>);
  return lastError();
}

const char* swigluForward(const void* x, void* out, int64_t rows, int64_t m, int64_t rowStride, void* stream) {
  const int64_t n = rows * (m / 2);
  if (n == 0) return nullptr;
  swigluForwardKernel<<<elementwiseGrid(n), kElementwiseThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(x), static_cast<__nv_bfloat162*>(out), rows, m / 2, rowStride / 2);
  return lastError();
}

const char* swigluBackward(const void* g, const void* x, void* gx, int64_t rows, int64_t m, int64_t rowStride,
                           int64_t gxStride, void* stream) {
  const int64_t n = rows * (m / 2);
  if (n == 0) return nullptr;
  swigluBackwardKernel<<<elementwiseGrid(n), kElementwiseThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(g), static_cast<const __nv_bfloat162*>(x), static_cast<__nv_bfloat162*>(gx),
      rows, m / 2, rowStride / 2, gxStride / 2);
  return lastError();
}

}  // namespace strata::dit::cuda
