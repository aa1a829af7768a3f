// CUDA kernels of the quantized Linear (nn/Linear.cpp through nn/QuantKernels.cpp):
// what the fp8 matmul path did in four to six ATen kernels each (amax, scale, cast;
// the weight's conversion and scaling for the input gradient), in one. Raw pointers
// and the CUDA runtime only, no LibTorch headers: this file builds with nvcc alone.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "nn/cuda/QuantKernels.cuh"

namespace strata::nn::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kQuantThreads = 256;
constexpr int kTile = 64;  // transpose tile, bytes per side
constexpr int kTransposeThreads = 256;
constexpr int kDequantThreads = 256;

__device__ __forceinline__ float roundBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

const char* launched() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

// Eight bf16 (one 16-byte load) as floats, times bf16(colScale) rounded to bf16 when
// there is a column scale; `i` is the load's index in its row.
__device__ __forceinline__ void scaledFloats(const uint4& raw, const float* colScale, int64_t i, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
  if (colScale) {
    const float4 s0 = reinterpret_cast<const float4*>(colScale)[2 * i];
    const float4 s1 = reinterpret_cast<const float4*>(colScale)[2 * i + 1];
    const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = roundBf16(v[j] * roundBf16(s[j]));
  }
}

__device__ __forceinline__ float absMax8(const float (&v)[8], float m) {
#pragma unroll
  for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(v[j]));
  return m;
}

// The row's amax over the block -> the bf16 inverse scale (every thread gets it); thread
// 0 writes the row scale. ATen's `target / amax` is amax.reciprocal() * target: the
// same two roundings.
__device__ __forceinline__ float rowInverseScale(float amax, float target, float* rowScale) {
  for (int o = kWarp / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  __shared__ float warpMax[kQuantThreads / kWarp];
  __shared__ float invShared;
  if (threadIdx.x % kWarp == 0) warpMax[threadIdx.x / kWarp] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.f;
    for (int w = 0; w < kQuantThreads / kWarp; ++w) m = fmaxf(m, warpMax[w]);
    const float inv = roundBf16((1.f / fmaxf(m, 1e-30f)) * target);
    invShared = inv;
    *rowScale = 1.f / inv;
  }
  __syncthreads();
  return invShared;
}

__device__ __forceinline__ uint2 toE4m3(const float (&v)[8], float inv) {
  __nv_fp8x2_storage_t q[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    q[j] = __nv_cvt_float2_to_fp8x2(make_float2(roundBf16(v[2 * j] * inv), roundBf16(v[2 * j + 1] * inv)),
                                    __NV_SATFINITE, __NV_E4M3);
  uint2 packed;
  packed.x = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16);
  packed.y = static_cast<uint32_t>(q[2]) | (static_cast<uint32_t>(q[3]) << 16);
  return packed;
}

// One block per row, the row read once: each thread keeps up to kLoads 16-byte loads
// in registers between the amax and the cast (rows up to kLoads * 256 * 8 values).
template <int kLoads>
__global__ void __launch_bounds__(kQuantThreads)
    quantizeRowsKernel(const uint4* __restrict__ x, const float* __restrict__ colScale, uint2* __restrict__ out,
                       float* __restrict__ rowScale, int64_t loadsPerRow, float target) {
  const int64_t row = blockIdx.x;
  const uint4* xr = x + row * loadsPerRow;
  uint4 raw[kLoads];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * kQuantThreads;
    if (i < loadsPerRow) {
      raw[j] = xr[i];
      float v[8];
      scaledFloats(raw[j], colScale, i, v);
      amax = absMax8(v, amax);
    }
  }
  const float inv = rowInverseScale(amax, target, rowScale + row);
  uint2* outRow = out + row * loadsPerRow;
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * kQuantThreads;
    if (i < loadsPerRow) {
      float v[8];
      scaledFloats(raw[j], colScale, i, v);
      outRow[i] = toE4m3(v, inv);
    }
  }
}

// Longer rows: the amax pass, then the cast from the same row read again (from cache).
__global__ void __launch_bounds__(kQuantThreads)
    quantizeLongRowsKernel(const uint4* __restrict__ x, const float* __restrict__ colScale, uint2* __restrict__ out,
                           float* __restrict__ rowScale, int64_t loadsPerRow, float target) {
  const int64_t row = blockIdx.x;
  const uint4* xr = x + row * loadsPerRow;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < loadsPerRow; i += kQuantThreads) {
    float v[8];
    scaledFloats(xr[i], colScale, i, v);
    amax = absMax8(v, amax);
  }
  const float inv = rowInverseScale(amax, target, rowScale + row);
  uint2* outRow = out + row * loadsPerRow;
  for (int64_t i = threadIdx.x; i < loadsPerRow; i += kQuantThreads) {
    float v[8];
    scaledFloats(xr[i], colScale, i, v);
    outRow[i] = toE4m3(v, inv);
  }
}

// A 64 x 64 byte tile through shared memory, read and written as 32-bit words.
__global__ void transposeBytesKernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out, int64_t rows,
                                     int64_t cols) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  constexpr int kWords = kTile / 4;
  for (int idx = threadIdx.x; idx < kTile * kWords; idx += blockDim.x) {
    const int r = idx / kWords, w = idx % kWords;
    const int64_t gr = row0 + r, gc = col0 + 4 * w;
    if (gr < rows && gc < cols) {
      const uint32_t v = *reinterpret_cast<const uint32_t*>(in + gr * cols + gc);
#pragma unroll
      for (int b = 0; b < 4; ++b) tile[r][4 * w + b] = static_cast<uint8_t>(v >> (8 * b));
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTile * kWords; idx += blockDim.x) {
    const int c = idx / kWords, w = idx % kWords;  // output row c (an input column), input rows 4w..4w+3
    const int64_t oc = col0 + c, orow = row0 + 4 * w;
    if (oc < cols && orow < rows) {
      const uint32_t v = static_cast<uint32_t>(tile[4 * w][c]) | (static_cast<uint32_t>(tile[4 * w + 1][c]) << 8) |
                         (static_cast<uint32_t>(tile[4 * w + 2][c]) << 16) |
                         (static_cast<uint32_t>(tile[4 * w + 3][c]) << 24);
      *reinterpret_cast<uint32_t*>(out + oc * rows + orow) = v;
    }
  }
}

__device__ __forceinline__ float byteValue(uint8_t b, bool isFloat8) {
  if (!isFloat8) return static_cast<float>(static_cast<int8_t>(b));
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// Four weights per thread (one 32-bit load, one 8-byte store).
__global__ void dequantizeRowsKernel(const uint32_t* __restrict__ q, bool isFloat8, const float* __restrict__ scale,
                                     bool perTensor, uint2* __restrict__ out, int64_t rows, int64_t wordsPerRow) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * wordsPerRow) return;
  const float s = scale[perTensor ? 0 : i / wordsPerRow];
  const uint32_t v = q[i];
  __nv_bfloat162 h[2];
  h[0] = __floats2bfloat162_rn(byteValue(static_cast<uint8_t>(v), isFloat8) * s,
                               byteValue(static_cast<uint8_t>(v >> 8), isFloat8) * s);
  h[1] = __floats2bfloat162_rn(byteValue(static_cast<uint8_t>(v >> 16), isFloat8) * s,
                               byteValue(static_cast<uint8_t>(v >> 24), isFloat8) * s);
  out[i] = *reinterpret_cast<const uint2*>(h);
}

}  // namespace

const char* quantizeRowsE4m3(const void* x, const float* colScale, void* out, float* rowScale, int64_t rows,
                             int64_t cols, float target, void* stream) {
  if (rows == 0) return nullptr;
  if (cols % 8 != 0) return "quantizeRowsE4m3: the row length must be a multiple of 8";
  const int64_t loads = cols / 8;
  const int64_t perThread = (loads + kQuantThreads - 1) / kQuantThreads;
  const auto in = static_cast<const uint4*>(x);
  const auto q = static_cast<uint2*>(out);
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(rows);
  if (perThread <= 2)
    quantizeRowsKernel<2><<<blocks, kQuantThreads, 0, s>>>(in, colScale, q, rowScale, loads, target);
  else if (perThread <= 4)
    quantizeRowsKernel<4><<<blocks, kQuantThreads, 0, s>>>(in, colScale, q, rowScale, loads, target);
  else if (perThread <= 8)
    quantizeRowsKernel<8><<<blocks, kQuantThreads, 0, s>>>(in, colScale, q, rowScale, loads, target);
  else if (perThread <= 12)
    quantizeRowsKernel<12><<<blocks, kQuantThreads, 0, s>>>(in, colScale, q, rowScale, loads, target);
  else
    quantizeLongRowsKernel<<<blocks, kQuantThreads, 0, s>>>(in, colScale, q, rowScale, loads, target);
  return launched();
}

const char* transposeBytes(const void* in, void* out, int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  if (rows % 4 != 0 || cols % 4 != 0) return "transposeBytes: both dims must be multiples of 4";
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  transposeBytesKernel<<<grid, kTransposeThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), rows, cols);
  return launched();
}

const char* dequantizeRowsBf16(const void* q, bool isFloat8, const float* scale, bool perTensor, void* out,
                               int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return nullptr;
  if (cols % 4 != 0) return "dequantizeRowsBf16: the row length must be a multiple of 4";
  const int64_t words = rows * (cols / 4);
  const auto blocks = static_cast<unsigned>((words + kDequantThreads - 1) / kDequantThreads);
  dequantizeRowsKernel<<<blocks, kDequantThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint32_t*>(q), isFloat8, scale, perTensor, static_cast<uint2*>(out), rows, cols / 4);
  return launched();
}

}  // namespace strata::nn::cuda
