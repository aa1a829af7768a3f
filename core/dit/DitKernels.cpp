#include "dit/DitKernels.h"

#include <torch/autograd.h>

#include <string>

#include "common/Error.h"

#ifdef STRATA_DIT_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "dit/cuda/DitKernels.cuh"
#endif

namespace strata::dit {

#ifdef STRATA_DIT_CUDA_KERNELS

bool ditCudaKernelsBuilt() { return true; }

namespace {

// Whether t's first element starts on a multiple of `bytes`.
bool alignedTo(const at::Tensor& t, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % static_cast<uintptr_t>(bytes) == 0;
}

void check(const char* error, const char* what) {
  if (error) throw Error(std::string("DiT layers: the CUDA kernel ") + what + " failed: " + error);
}

void* streamOf(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

// Elements from one row of x [..., W] to the next when its leading dims are rows
// evenly spaced and its last dim contiguous; 0 otherwise.
int64_t rowStrideOf(const at::Tensor& x) {
  const int64_t d = x.dim();
  if (d < 1 || x.stride(d - 1) != 1) return 0;
  if (d == 1) return x.size(0);
  for (int64_t i = 0; i + 2 < d; ++i)
    if (x.size(i) > 1 && x.stride(i) != x.size(i + 1) * x.stride(i + 1)) return 0;
  return x.stride(d - 2) >= x.size(d - 1) ? x.stride(d - 2) : 0;
}

// Elements from one token's heads to the next: x [B, N, H, Dh] with each token's heads
// side by side (contiguous, or a narrow of a wider projection such as FLUX.2's fused
// qkv + MLP), tokens evenly spaced over the batch too: the row stride of x's tokens
// [B, N, H * Dh]. 0 when x is laid out otherwise or tokens are an odd count apart.
int64_t tokenStrideOf(const at::Tensor& x) {
  if (x.stride(3) != 1 || x.stride(2) != x.size(3)) return 0;
  const int64_t stride = rowStrideOf(x.flatten(2));  // a view: the heads are side by side
  return stride % 2 == 0 ? stride : 0;               // bf16 pairs
}

struct NormRope : torch::autograd::Function<NormRope> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& cos, const at::Tensor& sin, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t dim = x.size(-1);
    const int64_t rows = x.numel() / dim;
    auto out = at::empty(x.sizes(), x.options());                  // contiguous
    auto rstd = at::empty({rows}, x.options().dtype(at::kFloat));  // [B*N*H]
    check(cuda::normRopeForward(x.data_ptr(), weight.data_ptr(), cos.data_ptr<float>(), sin.data_ptr<float>(),
                                out.data_ptr(), rstd.data_ptr<float>(), rows, x.size(2), x.size(1), dim,
                                tokenStrideOf(x), eps, streamOf(x)),
          "normRopeForward");
    ctx->save_for_backward({x, rstd, weight, cos, sin});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const c10::cuda::CUDAGuard guard(x.device());
    const auto g = gradOut[0].to(x.scalar_type()).contiguous();  // [B, N, H, Dh]
    auto gx = at::empty(x.sizes(), x.options());                 // contiguous
    const int64_t dim = x.size(-1);
    check(cuda::normRopeBackward(g.data_ptr(), x.data_ptr(), saved[1].data_ptr<float>(), saved[2].data_ptr(),
                                 saved[3].data_ptr<float>(), saved[4].data_ptr<float>(), gx.data_ptr(), x.numel() / dim,
                                 x.size(2), x.size(1), dim, tokenStrideOf(x), streamOf(x)),
          "normRopeBackward");
    return {gx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct NormModulate : torch::autograd::Function<NormModulate> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& shift,
                            const at::Tensor& scale, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t batch = x.size(0);
    const int64_t tokens = x.size(1);
    auto out = at::empty(x.sizes(), x.options());                            // contiguous
    auto mean = at::empty({batch * tokens}, x.options().dtype(at::kFloat));  // [B*N]
    auto rstd = at::empty({batch * tokens}, x.options().dtype(at::kFloat));
    check(cuda::normModulateForward(x.data_ptr(), shift.data_ptr(), scale.data_ptr(), out.data_ptr(),
                                    mean.data_ptr<float>(), rstd.data_ptr<float>(), batch, tokens, x.size(2),
                                    x.stride(0), x.stride(1), shift.stride(0), scale.stride(0), eps, streamOf(x)),
          "normModulateForward");
    ctx->save_for_backward({x, scale, mean, rstd});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& scale = saved[1];
    const c10::cuda::CUDAGuard guard(x.device());
    const auto g = gradOut[0].to(x.scalar_type()).contiguous();  // [B, N, D]
    const int64_t batch = x.size(0);
    const int64_t tokens = x.size(1);
    at::Tensor gx, gShift, gScale;
    if (ctx->needs_input_grad(0)) {
      gx = at::empty(x.sizes(), x.options());  // contiguous
      check(cuda::normModulateBackward(g.data_ptr(), x.data_ptr(), scale.data_ptr(), saved[2].data_ptr<float>(),
                                       saved[3].data_ptr<float>(), gx.data_ptr(), batch, tokens, x.size(2), x.stride(0),
                                       x.stride(1), scale.stride(0), streamOf(x)),
            "normModulateBackward");
    }
    // A trained modulation (a LoRA on norm1.linear, say): its sums over tokens by ATen,
    // as the unfused addcmul's backward takes them, from the normalised x made again.
    if (ctx->needs_input_grad(1)) gShift = g.sum(1);
    if (ctx->needs_input_grad(2)) {
      const auto normalised =
          ((x.to(at::kFloat) - saved[2].view({batch, tokens, 1})) * saved[3].view({batch, tokens, 1}))
              .to(x.scalar_type());
      gScale = (g * normalised).sum(1);
    }
    return {gx, gShift, gScale, at::Tensor()};
  }
};

}  // namespace

bool normRopeFits(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos, const at::Tensor& sin) {
  if (!x.is_cuda() || x.scalar_type() != at::kBFloat16 || x.dim() != 4 || tokenStrideOf(x) == 0 || !alignedTo(x, 4))
    return false;
  const int64_t dim = x.size(-1);
  if (dim % 2 != 0 || dim > cuda::maxNormRopeDim()) return false;
  if (weight.requires_grad() || weight.scalar_type() != at::kBFloat16 || weight.device() != x.device() ||
      weight.numel() != dim || !weight.is_contiguous() || !alignedTo(weight, 4))
    return false;
  for (const auto* t : {&cos, &sin})
    if (t->scalar_type() != at::kFloat || t->device() != x.device() || t->dim() != 2 || t->size(0) != x.size(1) ||
        t->size(1) != dim || !t->is_contiguous() || reinterpret_cast<uintptr_t>(t->data_ptr()) % 8 != 0)
      return false;
  return true;
}

at::Tensor normRope(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos, const at::Tensor& sin,
                    double eps) {
  return NormRope::apply(x, weight, cos, sin, eps);
}

bool normModulateFits(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  // The kernels move `step` values at a time: every row start a multiple of it.
  const int64_t step = cuda::normModulateAlignment();
  const int64_t stepBytes = step * 2;  // bf16
  if (!x.is_cuda() || x.scalar_type() != at::kBFloat16 || x.dim() != 3 || !alignedTo(x, stepBytes)) return false;
  const int64_t batch = x.size(0);
  const int64_t dim = x.size(2);
  if (dim % step != 0 || dim > cuda::maxNormModulateDim() || x.stride(2) != 1 || x.stride(1) % step != 0 ||
      (batch > 1 && x.stride(0) % step != 0) || batch * x.size(1) >= (int64_t{1} << 31))
    return false;
  for (const auto* t : {&shift, &scale})
    if (t->scalar_type() != at::kBFloat16 || t->device() != x.device() || t->dim() != 2 || t->size(0) != batch ||
        t->size(1) != dim || t->stride(1) != 1 || (batch > 1 && t->stride(0) % step != 0) || !alignedTo(*t, stepBytes))
      return false;
  return true;
}

at::Tensor normModulateCuda(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  return NormModulate::apply(x, shift, scale, eps);
}

bool swigluFits(const at::Tensor& x) {
  if (!x.is_cuda() || x.scalar_type() != at::kBFloat16 || x.dim() < 1 || !alignedTo(x, 4)) return false;
  const int64_t width = x.size(-1);
  const int64_t stride = rowStrideOf(x);
  return width % 4 == 0 && stride > 0 && stride % 2 == 0;  // M even: whole bf16 pairs in each half
}

at::Tensor swigluForwardCuda(const at::Tensor& x) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t m = x.size(-1) / 2;
  auto shape = x.sizes().vec();
  shape.back() = m;
  auto out = at::empty(shape, x.options());
  check(cuda::swigluForward(x.data_ptr(), out.data_ptr(), x.numel() / x.size(-1), m, rowStrideOf(x), streamOf(x)),
        "swigluForward");
  return out;
}

void swigluBackwardCudaInto(at::Tensor& gx, const at::Tensor& g, const at::Tensor& x) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t m = x.size(-1) / 2;
  const auto gc = g.to(x.scalar_type()).contiguous();
  check(cuda::swigluBackward(gc.data_ptr(), x.data_ptr(), gx.data_ptr(), x.numel() / x.size(-1), m, rowStrideOf(x),
                             2 * m, streamOf(x)),
        "swigluBackward");
}

#else  // no CUDA kernels in this build

bool ditCudaKernelsBuilt() { return false; }

bool normRopeFits(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor normRope(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, double) {
  throw Error("DiT layers: this build has no CUDA kernels (normRope)");
}

bool normModulateFits(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor normModulateCuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, double) {
  throw Error("DiT layers: this build has no CUDA kernels (normModulate)");
}

bool swigluFits(const at::Tensor&) { return false; }

at::Tensor swigluForwardCuda(const at::Tensor&) { throw Error("DiT layers: this build has no CUDA kernels (swiglu)"); }

void swigluBackwardCudaInto(at::Tensor&, const at::Tensor&, const at::Tensor&) {
  throw Error("DiT layers: this build has no CUDA kernels (swiglu)");
}

#endif

}  // namespace strata::dit
