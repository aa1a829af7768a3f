#pragma once
// The one input/output type of every block (docs/design.md §2.3). Double and single
// blocks, and the blocks of other families, share it, so a relay or wrapper can
// never drift from the block it wraps (seed bug 4), and `to()` carries every
// field across devices, the text tokens included.
#include <ATen/ATen.h>

#include <vector>

namespace strata::nn {

struct BlockIO {
  at::Tensor img;      // [B, N_img, D] image tokens (a causal LM's hidden states)
  at::Tensor txt;      // [B, N_txt, D] text tokens; undefined for one-stream families
  at::Tensor temb;     // [B, D] conditioning vector; undefined where unused
  at::Tensor ropeCos;  // [N_txt + N_img, head_dim] rotary cos (interleaved pairs)
  at::Tensor ropeSin;  // [N_txt + N_img, head_dim] rotary sin
  at::Tensor mask;     // optional attention mask

  static constexpr int kFieldCount = 6;

  // Every defined field moved to `device`; a field already there is not copied.
  BlockIO to(const c10::Device& device) const;

  // Fields in declaration order (undefined ones included), and back. Used by
  // activation checkpointing, which needs the fields as a flat tensor list.
  std::vector<at::Tensor> fields() const;
  static BlockIO fromFields(const std::vector<at::Tensor>& fields);
};

}  // namespace strata::nn
