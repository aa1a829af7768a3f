#pragma once
// The FLUX.2 transformer (diffusers Flux2Transformer2DModel), modules named by the
// diffusers state-dict keys, so named_parameters() equals a diffusers checkpoint's
// key set. Unlike FLUX.1 the modulation is shared: three Linears at model level
// (double_stream_modulation_img / _txt, single_stream_modulation) compute it once
// per forward from the timestep (+ guidance) embedding, and every block reads its
// part. It travels in BlockIO::temb, so a block split over devices gets it with
// the rotary tables:
//   temb [B, 16 D] = (embedding [D], image-stream (shift, scale, gate) x 2 [6 D],
//                     text-stream (shift, scale, gate) x 2 [6 D], single (shift, scale, gate) [3 D]).
// SwiGLU MLPs, no biases anywhere, 4-axis rotary (t, h, w, l). To placement it is
// a stem (embedders, modulation, rotary), double blocks, single blocks and a head
// (norm_out, proj_out), every block an nn::Block over BlockIO.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dit/DitLayers.h"
#include "dit/DitModel.h"
#include "models/flux2/Flux2Config.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::flux2 {

// Device, dtype and per-block hooks: the shared DiT build options.
using Flux2BuildOptions = dit::BuildOptions;

// The slices of BlockIO::temb (see above), in units of the hidden size D.
struct Flux2Modulation {
  static constexpr int64_t kEmbedding = 0;  // [0, D): the conditioning embedding (norm_out reads it)
  static constexpr int64_t kDoubleImg = 1;  // [D, 7D)
  static constexpr int64_t kDoubleTxt = 7;  // [7D, 13D)
  static constexpr int64_t kSingle = 13;    // [13D, 16D)
  static constexpr int64_t kWidth = 16;     // temb is [B, 16 D]
};

// Double-stream block (diffusers Flux2TransformerBlock).
class Flux2DoubleBlock : public nn::Block {
 public:
  Flux2DoubleBlock(const Flux2Config& cfg, const Flux2BuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  dit::DoubleAttention attn;  // attn.*
  dit::StreamMlps mlp;        // ff / ff_context: linear_in (SwiGLU's gate, up), linear_out

 private:
  int64_t heads_;
  double eps_;
};

// Single-stream block (diffusers Flux2SingleTransformerBlock): attention and MLP
// in parallel over [text; image], their inputs one fused projection and their
// outputs one projection over concat(attention, mlp).
class Flux2SingleBlock : public nn::Block {
 public:
  Flux2SingleBlock(const Flux2Config& cfg, const Flux2BuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  nn::Linear toQkvMlp{nullptr};  // attn.to_qkv_mlp_proj: q, k, v, gate, up
  dit::RmsNorm normQ{nullptr}, normK{nullptr};
  nn::Linear toOut{nullptr};  // attn.to_out

 private:
  int64_t heads_;
  int64_t hidden_;
  int64_t mlpHidden_;
  double eps_;
};

// Inputs of one forward pass, all on the stem's device.
struct Flux2Inputs {
  at::Tensor img;       // [B, N_img, in_channels] packed latents ("hidden_states")
  at::Tensor txt;       // [B, N_txt, joint_attention_dim] text encoder states
  at::Tensor timestep;  // [B] sigma in 0..1 (multiplied by 1000 inside)
  at::Tensor guidance;  // [B] guidance scale (x1000 inside); ignored without guidance_embeds
  at::Tensor imgIds;    // [N_img, 4] or [B, N_img, 4] (t, row, col, l); the first batch row is used
  at::Tensor txtIds;    // [N_txt, 4] or [B, N_txt, 4] (0, 0, 0, l)
};

// The stack (block list, the loop over blocks, block accessors) and forward are
// dit::DitTransformer's.
class Flux2Transformer : public dit::DitTransformer<Flux2Config, Flux2Inputs> {
 public:
  explicit Flux2Transformer(const Flux2Config& cfg, const Flux2BuildOptions& options = {});

  nn::BlockIO stem(const Flux2Inputs& in) override;  // embeddings, the shared modulation, rotary
  at::Tensor head(const nn::BlockIO& io) override;   // norm_out + proj_out

  dit::ScalarEmbedders embedders;    // time_guidance_embed.*
  nn::Linear modDoubleImg{nullptr};  // double_stream_modulation_img.linear
  nn::Linear modDoubleTxt{nullptr};  // double_stream_modulation_txt.linear
  nn::Linear modSingle{nullptr};     // single_stream_modulation.linear
};

}  // namespace strata::flux2
