#pragma once
// The FLUX transformer (diffusers FluxTransformer2DModel), modules named by the
// diffusers state-dict keys so named_parameters() equals a diffusers checkpoint's
// key set. To placement it is a stem (embedders, rotary), double blocks, single
// blocks and a head (norm_out, proj_out); every block takes and returns BlockIO.
// Every Linear is an nn::Linear, so LoRA adapters attach per projection.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "dit/DitLayers.h"
#include "dit/DitModel.h"
#include "models/flux/FluxConfig.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::flux {

// The shared DiT layers under FLUX.1's names (dit/DitLayers.h).
using FluxBuildOptions = dit::BuildOptions;
using FluxRmsNormImpl = dit::RmsNormImpl;
using FluxRmsNorm = dit::RmsNorm;
using dit::applyRotary;
using dit::jointAttention;
using dit::normThenRotary;
using dit::projectQkv;
using dit::QkvProjections;
using dit::rotaryFromIds;
using dit::timestepSinusoid;

// Double-stream block (diffusers FluxTransformerBlock).
class FluxDoubleBlock : public nn::Block {
 public:
  FluxDoubleBlock(const FluxConfig& cfg, const FluxBuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  nn::Linear norm1Linear{nullptr};         // norm1.linear: 6 modulations of the image stream
  nn::Linear norm1ContextLinear{nullptr};  // norm1_context.linear
  dit::DoubleAttention attn;               // attn.*
  dit::StreamMlps mlp;                     // ff / ff_context: net.0.proj (GELU after it), net.2

 private:
  int64_t heads_;
  int64_t headDim_;
};

// Single-stream block (diffusers FluxSingleTransformerBlock): parallel attention
// and MLP over [text; image].
class FluxSingleBlock : public nn::Block {
 public:
  FluxSingleBlock(const FluxConfig& cfg, const FluxBuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  nn::Linear normLinear{nullptr};  // norm.linear: 3 modulations
  QkvProjections qkv;              // attn.to_q / to_k / to_v
  FluxRmsNorm normQ{nullptr}, normK{nullptr};
  nn::Linear projMlp{nullptr};  // proj_mlp
  nn::Linear projOut{nullptr};  // proj_out over concat(attn, mlp)

 private:
  int64_t heads_;
  int64_t headDim_;
};

// Inputs of one forward pass, all on the stem's device.
struct FluxInputs {
  at::Tensor img;       // [B, N_img, in_channels] packed latents ("hidden_states")
  at::Tensor txt;       // [B, N_txt, joint_attention_dim] T5 states
  at::Tensor pooled;    // [B, pooled_projection_dim] CLIP pooled
  at::Tensor timestep;  // [B] sigma in 0..1 (multiplied by 1000 inside)
  at::Tensor guidance;  // [B] guidance scale (x1000 inside); ignored without guidance_embeds
  at::Tensor imgIds;    // [N_img, 3] (0, row, col)
  at::Tensor txtIds;    // [N_txt, 3] zeros
};

// The stack (block list, the loop over blocks, block accessors, linears()) and forward
// are dit::DitTransformer's.
class FluxTransformer : public dit::DitTransformer<FluxConfig, FluxInputs> {
 public:
  explicit FluxTransformer(const FluxConfig& cfg, const FluxBuildOptions& options = {});

  nn::BlockIO stem(const FluxInputs& in) override;  // embeddings + rotary
  at::Tensor head(const nn::BlockIO& io) override;  // norm_out + proj_out

  dit::ScalarEmbedders embedders;                         // time_text_embed.timestep_ / guidance_embedder
  nn::Linear textLinear1{nullptr}, textLinear2{nullptr};  // time_text_embed.text_embedder.linear_1/2
};

}  // namespace strata::flux
