#pragma once
// The one place where LibTorch 1.13 (Debian 12, CPU) and 2.x (GPU machine) differ.
#include <ATen/ATen.h>
#include <torch/version.h>

#define STRATA_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace strata::compat {

// softmax(q k^T / sqrt(d)) v for q, k, v: [B, H, N, D]. On 2.x this is the fused
// kernel (flash on CUDA); 1.13 has no public fused op, so it is spelled out.
inline at::Tensor scaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v) {
#if STRATA_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, N, N]
  return at::matmul(at::softmax(scores, -1), v);
#endif
}

// float8 dtypes exist from 2.1 on.
constexpr bool kHasFloat8 = STRATA_TORCH_AT_LEAST(2, 1);

}  // namespace strata::compat
