#include "nn/QuantKernels.h"

#include <atomic>
#include <limits>
#include <string>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"

#ifdef STRATA_NN_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "nn/cuda/QuantKernels.cuh"
#endif

namespace strata::nn {

namespace {

std::atomic<int64_t> launches{0};

// The ATen ops the kernels replace (and must equal).
Fp8Rows quantizeRowsAten(const at::Tensor& x, const at::Tensor& colScale, double target) {
  const auto y = colScale.defined() ? x * colScale.to(x.scalar_type()) : x;  // [M, K]
  const auto amax =
      at::linalg_vector_norm(y, std::numeric_limits<double>::infinity(), {1}, /*keepdim=*/true, at::kFloat);  // [M, 1]
  const auto inv = (target / amax.clamp_min(1e-30)).to(x.scalar_type());                                      // [M, 1]
  Fp8Rows r;
  r.data = (y * inv).to(compat::float8E4m3Type());
  r.scale = inv.to(at::kFloat).reciprocal();
  return r;
}

at::Tensor transposedCopyAten(const at::Tensor& w) {
  // The byte view transposes with the plain copy kernel, whatever it does with float8.
  return w.view(at::kByte).t().contiguous().view(w.scalar_type());  // [C, R]
}

#ifdef STRATA_NN_CUDA_KERNELS

void check(const char* error, const char* what) {
  if (error) throw Error(std::string("nn::Linear: the CUDA kernel ") + what + " failed: " + error);
}

void* streamOf(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

bool alignedTo(const at::Tensor& t, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0; }

bool oneByte(const at::Tensor& t) { return t.element_size() == 1; }

bool kernelsOn(const at::Tensor& t) { return fusedPaths() && t.is_cuda(); }

#endif

}  // namespace

#ifdef STRATA_NN_CUDA_KERNELS
bool quantKernelsBuilt() { return true; }
#else
bool quantKernelsBuilt() { return false; }
#endif

int64_t quantKernelLaunches() { return launches.load(std::memory_order_relaxed); }

Fp8Rows quantizeRowsE4m3(const at::Tensor& x, const at::Tensor& colScale, double target) {
  if (x.dim() != 2)
    throw Error("quantizeRowsE4m3: a [rows, cols] input expected, got " + std::to_string(x.dim()) + "-d");
#ifdef STRATA_NN_CUDA_KERNELS
  const int64_t cols = x.size(1);
  const bool scaleFits =
      !colScale.defined() || (colScale.scalar_type() == at::kFloat && colScale.is_contiguous() &&
                              colScale.numel() == cols && colScale.device() == x.device() && alignedTo(colScale, 16));
  if (kernelsOn(x) && x.scalar_type() == at::kBFloat16 && x.is_contiguous() && cols % 8 == 0 && alignedTo(x, 16) &&
      scaleFits) {
    const c10::cuda::CUDAGuard guard(x.device());
    Fp8Rows r;
    r.data = at::empty(x.sizes(), x.options().dtype(compat::float8E4m3Type()));  // [M, K]
    r.scale = at::empty({x.size(0), 1}, x.options().dtype(at::kFloat));          // [M, 1]
    check(cuda::quantizeRowsE4m3(x.data_ptr(), colScale.defined() ? colScale.data_ptr<float>() : nullptr,
                                 r.data.data_ptr(), r.scale.data_ptr<float>(), x.size(0), cols,
                                 static_cast<float>(target), streamOf(x)),
          "quantizeRowsE4m3");
    launches.fetch_add(1, std::memory_order_relaxed);
    return r;
  }
#endif
  return quantizeRowsAten(x, colScale, target);
}

at::Tensor transposedCopy(const at::Tensor& w) {
  if (w.dim() != 2)
    throw Error("transposedCopy: a [rows, cols] weight expected, got " + std::to_string(w.dim()) + "-d");
#ifdef STRATA_NN_CUDA_KERNELS
  // The kernel's grid has a tile row per 64 rows, at most 65535 of them.
  if (kernelsOn(w) && oneByte(w) && w.is_contiguous() && w.size(0) % 4 == 0 && w.size(1) % 4 == 0 &&
      w.size(0) <= int64_t{65535} * 64 && alignedTo(w, 4)) {
    const c10::cuda::CUDAGuard guard(w.device());
    auto out = at::empty({w.size(1), w.size(0)}, w.options());  // [C, R]
    check(cuda::transposeBytes(w.data_ptr(), out.data_ptr(), w.size(0), w.size(1), streamOf(w)), "transposeBytes");
    launches.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
#endif
  return transposedCopyAten(w);
}

at::Tensor dequantizeRows(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype) {
#ifdef STRATA_NN_CUDA_KERNELS
  const bool float8 = data.scalar_type() != at::kChar;
  const bool scaleFits = scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
                         scale.device() == data.device() &&
                         (scale.numel() == 1 || (data.dim() == 2 && scale.numel() == data.size(0)));
  if (kernelsOn(data) && dtype == at::kBFloat16 && data.dim() == 2 && oneByte(data) && data.is_contiguous() &&
      data.size(1) % 4 == 0 && alignedTo(data, 4) && scaleFits &&
      (!float8 || data.scalar_type() == compat::float8E4m3Type())) {
    const c10::cuda::CUDAGuard guard(data.device());
    auto out = at::empty(data.sizes(), data.options().dtype(at::kBFloat16));  // [out, in]
    check(cuda::dequantizeRowsBf16(data.data_ptr(), float8, scale.data_ptr<float>(), scale.numel() == 1, out.data_ptr(),
                                   data.size(0), data.size(1), streamOf(data)),
          "dequantizeRowsBf16");
    launches.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
#endif
  return dequantizeWeight(data, scale, dtype);
}

}  // namespace strata::nn
