#pragma once
// Scaled-dot-product attention for the DiT blocks, with the CUDA kernel chosen per
// shape (model.attention_backend, docs/training.md "Attention kernel").
//
// Why a choice at all: on Hopper LibTorch prefers cuDNN's fused attention, 12-15%
// faster than flash at FLUX.1-dev's 1024 px (docs/speed.md), but LibTorch 2.11 keys
// its cached cuDNN backward plan on q, k and v alone: a later backward whose output
// gradient has other strides (a narrow of a wider tensor, as a quantized single
// block's fused projection gave) runs the plan made for the first layout, reads the
// gradient at the wrong addresses, and gives non-finite gradients or an illegal memory
// access (tests/gpu/cudnn_sdpa_repro.cpp reproduces it; docs/design.md §4). attention()
// always hands the backward a gradient in the output's own layout, whatever the kernel,
// so one plan per shape is right for every call.
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace strata::nn {

// model.attention_backend: auto (on) takes, per shape, the faster of cuDNN and flash that
// is correct on this card, timed on the shape's first call; off, LibTorch's process-wide
// switches pick (compat::setCudnnAttention: cuDNN first on Hopper, or flash). Process-wide
// like those switches: a run sets it before its first step. Off by default.
void setAttentionAuto(bool on);
bool attentionAuto();

// softmax(q k^T / sqrt(Dh)) v for q, k, v: [B, H, N, Dh] -> [B, H, N, Dh]. The output's
// gradient always reaches the kernel's backward in the output's layout.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// One kernel's forward and backward at a shape, on random inputs.
struct AttentionTiming {
  bool ran = false;       // false: the kernel refused the shape or failed (why)
  bool finite = false;    // every output and gradient finite
  double relativeL2 = 0;  // the largest of output, dq, dk, dv against flash's (cuDNN only)
  double ms = 0;          // median forward + backward, milliseconds
  std::string why;
};

// The largest relative L2 distance from flash's results that still counts as the same
// numbers: bf16 kernels that sum in another order differ by ~3e-3 (docs/speed.md).
inline constexpr double kAttentionTolerance = 2e-2;

// Whether auto takes cuDNN: it ran, its numbers are finite and flash's, and it is faster.
bool preferCudnn(const AttentionTiming& cudnn, const AttentionTiming& flash);

// What auto chose for one shape, and why.
struct AttentionDecision {
  std::string shape;  // "4608 tokens, 24 heads of 128, batch 1, bf16, cuda:0"
  bool cudnn = false;
  AttentionTiming cudnnTiming;
  AttentionTiming flashTiming;
  // "attention at 4608 tokens, ...: cuDNN, 7.9 ms a forward and backward against flash's 9.1 ms"
  std::string text() const;
};

// auto's decisions in this process, in the order they were made (one per shape), from the
// `from`-th on: a caller that said the first n asks for those after them (none: no copy).
std::vector<AttentionDecision> attentionDecisions(size_t from = 0);

// Times cuDNN and flash at q's shape (forward and backward, each output-gradient
// layout a block can give) and decides; what auto runs on a shape's first call.
// CUDA tensors only; an empty decision with both timings not run elsewhere.
AttentionDecision probeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

}  // namespace strata::nn
