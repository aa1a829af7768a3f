#pragma once
// The ATen pieces of a DiT block, shared by FLUX.1 and FLUX.2: one definition, so the
// two models cannot drift apart in how they normalise, modulate, gate or split heads.
#include <ATen/ATen.h>

namespace strata::dit {

// The eps of FLUX.1's norms, and FLUX.2's default (its config carries its own).
inline constexpr double kNormEps = 1e-6;

// LayerNorm over the last dim without affine parameters (FLUX's norm1 / norm2 / norm_out).
inline at::Tensor layerNorm(const at::Tensor& x, double eps = kNormEps) {
  return at::layer_norm(x, {x.size(-1)}, /*weight=*/{}, /*bias=*/{}, eps);
}

// x * (1 + scale) + shift with per-sample modulation [B, D] over tokens [B, N, D]: one
// pass over x (addcmul) instead of a product and a sum, each a pass over [B, N, D].
inline at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return at::addcmul(shift.unsqueeze(1), x, 1 + scale.unsqueeze(1));
}

// modulate(layerNorm(x, eps), shift, scale): FLUX's norm1 / norm2 / norm_out with their
// modulation, x [B, N, D]. One CUDA kernel each way where it fits (bf16 on a card; off
// with the fused paths), the two ATen ops elsewhere.
at::Tensor normModulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps);

// x + gate * y (gate [B, D] per sample over tokens [B, N, D]) in one pass.
inline at::Tensor gated(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y) {
  return at::addcmul(x, gate.unsqueeze(1), y);
}

// diffusers clamps fp16 activations so the residual stream cannot reach inf.
inline at::Tensor clipHalf(const at::Tensor& x) {
  return x.scalar_type() == at::kHalf ? x.clamp(-65504.0, 65504.0) : x;
}

// cat({txt, img}, 1): [B, Nt + Ni, D]. When txt and img are, in that order, the two halves
// of one contiguous tensor (a single block's output narrowed into BlockIO) and autograd
// reaches that tensor through them, that tensor itself: no copy forward, and without
// checkpointing its gradient arrives whole instead of as two zero-padded halves summed
// (two fills and a strided add per block, 28 MB each at 1024 px). A checkpointed block's
// recompute gets detached inputs and takes the concatenation. Off with the fused paths.
at::Tensor joinedTokens(const at::Tensor& txt, const at::Tensor& img);

// [B, N, H*Dh] -> [B, N, H, Dh]
inline at::Tensor splitHeads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads});
}

}  // namespace strata::dit
