#pragma once
// The one place where LibTorch 1.13 (Debian 12, CPU) and 2.x (GPU machine) differ.
#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#define STRATA_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10d (dist/): from 2.0 a process group's collectives live on its c10d::Backend
// (ProcessGroupGloo and ProcessGroupNCCL derive from it); 1.13's derive from
// c10d::ProcessGroup. The calls (allreduce, broadcast, Work::wait) are the same.
#define STRATA_TORCH_C10D_BACKENDS STRATA_TORCH_AT_LEAST(2, 0)

namespace strata::compat {

// softmax(q k^T / sqrt(d)) v for q, k, v: [B, H, N, D]. On 2.x this is the fused
// kernel (flash on CUDA); 1.13 has no public fused op, so it is spelled out.
inline at::Tensor scaledDotProductAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if STRATA_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, N, N]
  return at::matmul(at::softmax(scores, -1), v);
#endif
}

// The same with an additive mask broadcastable to [B, H, N, N] in q's dtype (0
// where a query sees a key, a large negative value elsewhere). The 1.13 path
// takes the softmax in float32, as transformers' eager attention does.
inline at::Tensor scaledDotProductAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& additiveMask) {
#if STRATA_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, additiveMask);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale + additiveMask;  // [B, H, N, N]
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), v);
#endif
}

// float8 dtypes exist from 2.1 on.
constexpr bool kHasFloat8 = STRATA_TORCH_AT_LEAST(2, 1);

// The fp8 e4m3 (fn: finite, max 448) storage dtype. Throws where this LibTorch has
// none; the validator refuses float8 qtypes on such builds before anything runs.
inline at::ScalarType float8E4m3Type() {
#if STRATA_TORCH_AT_LEAST(2, 1)
  return at::kFloat8_e4m3fn;
#else
  throw std::runtime_error("this LibTorch has no float8 dtypes (they exist from 2.1 on)");
#endif
}

// ---- fp8 matmul (added by nn/Linear) -----------------------------------------
// at::_scaled_mm with row-wise scales (scale_a [M, 1], scale_b [1, N]) exists from
// 2.5 on; 1.13 has no fp8 matmul at all. The validator refuses model.fp8_matmul
// on a build without it (docs/quantization.md).
constexpr bool kHasScaledMm = STRATA_TORCH_AT_LEAST(2, 5);

// a [M, K] fp8 row-major times b [K, N] fp8 column-major, each row of a times
// scaleA [M, 1] and each column of b times scaleB [1, N] (float32), plus bias [N],
// accumulated by the tensor cores and written in outDtype: [M, N].
inline at::Tensor scaledMm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scaleA, const at::Tensor& scaleB,
                           const at::Tensor& bias, at::ScalarType outDtype, bool fastAccum) {
#if STRATA_TORCH_AT_LEAST(2, 5)
  return at::_scaled_mm(a, b, scaleA, scaleB, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt,
                        c10::nullopt, outDtype, fastAccum);
#else
  (void)a, (void)b, (void)scaleA, (void)scaleB, (void)bias, (void)outDtype, (void)fastAccum;
  throw std::runtime_error("this LibTorch has no fp8 matmul (at::_scaled_mm with row-wise scales exists from 2.5 on)");
#endif
}

// ---- float32 products of half-precision matrices (added by lora/LoraAdapter) --
// a [M, K] @ b [K, N] in float32 for bf16 / fp16 a and b, as a float32 trained
// tensor's gradient wants it. On CUDA from 2.9 on (at::mm's out_dtype) the GEMM writes
// float32 itself: one kernel instead of two, and the tensor cores' float32 sums are
// not rounded to the inputs' dtype first. Elsewhere the product is cast.
inline at::Tensor mmToFloat(const at::Tensor& a, const at::Tensor& b) {
#if STRATA_TORCH_AT_LEAST(2, 9)
  const auto t = a.scalar_type();
  if (a.is_cuda() && (t == at::kBFloat16 || t == at::kHalf) && b.scalar_type() == t) return at::mm(a, b, at::kFloat);
#endif
  return at::mm(a, b).to(at::kFloat);
}

// ---- fused optimizer kernel (added by train/FusedAdamW) ---------------------
// at::_fused_adamw_ (CUDA) exists from 2.0 on; 2.1 is the first this project builds with it.
constexpr bool kHasFusedAdamW = STRATA_TORCH_AT_LEAST(2, 1);

// One AdamW step of lists of one device and dtype in one kernel. `steps`: float32
// step counts (already counting this step) on the same device, one per tensor.
// `foundInf` (optional, a float32 scalar on the same device): where it is 1 the
// kernel leaves every tensor as it is, decided on the device.
inline void fusedAdamW(at::TensorList params, at::TensorList grads, at::TensorList expAvgs, at::TensorList expAvgSqs,
                       at::TensorList steps, double lr, double beta1, double beta2, double weightDecay, double eps,
                       const at::Tensor& foundInf = at::Tensor()) {
#if STRATA_TORCH_AT_LEAST(2, 1)
  if (foundInf.defined())
    at::_fused_adamw_(params, grads, expAvgs, expAvgSqs, at::TensorList(), steps, lr, beta1, beta2, weightDecay, eps,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/{}, foundInf);
  else
    at::_fused_adamw_(params, grads, expAvgs, expAvgSqs, at::TensorList(), steps, lr, beta1, beta2, weightDecay, eps,
                      /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)expAvgs, (void)expAvgSqs, (void)steps, (void)foundInf;
  (void)lr, (void)beta1, (void)beta2, (void)weightDecay, (void)eps;
  throw std::runtime_error("this LibTorch has no fused AdamW kernel (it exists from 2.1 on)");
#endif
}

// Multiplies every tensor of the list in place by the 0-dim tensor `factor` (same
// device and dtype as the list), without reading it on the host where this
// LibTorch can (2.1+); 1.13 reads it (a wait on the device).
inline void foreachMulByScalarTensor(at::TensorList tensors, const at::Tensor& factor) {
#if STRATA_TORCH_AT_LEAST(2, 1)
  at::_foreach_mul_(tensors, factor);
#else
  at::_foreach_mul_(tensors, factor.item());
#endif
}

// ---- attention backend (added by the flux model) ----------------------------
// Whether the cuDNN scaled-dot-product backend may be chosen (LibTorch 2.11 picks it
// first on Hopper and newer: twice flash's speed at FLUX.1-dev sizes, docs/speed.md;
// model.attention_backend, docs/design.md §4). Process-wide and idempotent; returns
// false where this LibTorch has no cuDNN backend switch.
inline bool setCudnnAttention(bool enabled) {
#if STRATA_TORCH_AT_LEAST(2, 4)
  at::globalContext().setSDPUseCuDNN(enabled);
  return true;
#else
  (void)enabled;
  return false;
#endif
}
inline bool disableCudnnAttention() { return setCudnnAttention(false); }

// Which scaled-dot-product kernels LibTorch may pick (process-wide switches, 2.4+):
// nn/Attention.cpp narrows them for one call or one timing and puts them back.
struct SdpKernels {
  bool cudnn = true;
  bool flash = true;
  bool memEfficient = true;
  bool math = true;
};
inline SdpKernels sdpKernels() {
  SdpKernels k;
#if STRATA_TORCH_AT_LEAST(2, 4)
  auto& c = at::globalContext();
  k.cudnn = c.userEnabledCuDNNSDP();
  k.flash = c.userEnabledFlashSDP();
  k.memEfficient = c.userEnabledMemEfficientSDP();
  k.math = c.userEnabledMathSDP();
#endif
  return k;
}
// Returns false where this LibTorch has no such switches (nothing changed).
inline bool setSdpKernels(const SdpKernels& k) {
#if STRATA_TORCH_AT_LEAST(2, 4)
  auto& c = at::globalContext();
  c.setSDPUseCuDNN(k.cudnn);
  c.setSDPUseFlash(k.flash);
  c.setSDPUseMemEfficient(k.memEfficient);
  c.setSDPUseMath(k.math);
  return true;
#else
  (void)k;
  return false;
#endif
}

// Whether the flash backend of scaled-dot-product attention is enabled (2.x).
inline bool flashAttentionEnabled() {
#if STRATA_TORCH_AT_LEAST(2, 0)
  return at::globalContext().userEnabledFlashSDP();
#else
  return false;
#endif
}

// The key of a parameter in torch::optim::Optimizer::state(): the TensorImpl
// address printed as text in 1.13, the address itself in 2.x.
using OptimizerStateKey = typename std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

// A template so that the branch of the other version is discarded (an
// `if constexpr` outside a template still compiles both).
template <class Key = OptimizerStateKey>
inline Key optimizerStateKey(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << param.unsafeGetTensorImpl();
    return os.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace strata::compat
