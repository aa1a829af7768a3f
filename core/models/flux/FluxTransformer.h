#pragma once
// The FLUX transformer (diffusers FluxTransformer2DModel), modules named by the
// diffusers state-dict keys so named_parameters() equals a diffusers checkpoint's
// key set. To placement it is a stem (embedders, rotary), double blocks, single
// blocks and a head (norm_out, proj_out); every block takes and returns BlockIO.
// Every Linear is an nn::Linear, so LoRA adapters attach per projection.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/flux/FluxConfig.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::flux {

// Where and in which dtype a model is built. Parameters are created there
// directly (one Linear at a time), so a FLUX.1-dev model never exists whole on
// the CPU when built for a GPU.
struct FluxBuildOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  // Called with each double / single block right after it is built, before the
  // next one exists: where weights are quantized block by block, so the whole
  // model is never held in `dtype` at once.
  std::function<void(torch::nn::Module& block)> onBlockBuilt;
  // The device of block i (double blocks first, then single) when blocks do not
  // all live on `device`: each is built where placement will keep it, so a split
  // model is never whole on one device. Empty: every block on `device`.
  std::function<at::Device(size_t blockIndex)> blockDevice;
};

// RMSNorm over the last dim with a learned scale "weight" (diffusers RMSNorm; FLUX.1 eps 1e-6,
// FLUX.2 takes its config's eps).
class FluxRmsNormImpl : public torch::nn::Module {
 public:
  FluxRmsNormImpl(int64_t dim, const FluxBuildOptions& options, double normEps = FluxConfig::kNormEps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // [dim]
  double eps;
};
TORCH_MODULE(FluxRmsNorm);

// The three projections of one attention stream. `projectQkv` is the one place
// q, k and v are computed, so fusing the base weights into one matmul later
// (LoRA deltas still added per projection) changes only that function.
struct QkvProjections {
  nn::Linear q{nullptr};
  nn::Linear k{nullptr};
  nn::Linear v{nullptr};
};
std::array<at::Tensor, 3> projectQkv(const QkvProjections& p, const at::Tensor& x);

// Rotary embedding applied to q or k: x [B, N, H, Dh], cos/sin [N, Dh] (interleaved pairs).
at::Tensor applyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// applyRotary(norm(x)) over the tokens [offset, offset + N) of the joint rotary tables
// cos/sin [Ntotal, Dh]: x [B, N, H, Dh], norm at its own eps. One CUDA kernel where the
// build has it and the tensors fit (bf16 on CUDA, frozen norm weight), else the ATen ops.
at::Tensor normThenRotary(FluxRmsNormImpl& norm, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t offset);

// Joint attention: q, k, v [B, N, H, Dh] -> [B, N, H * Dh] (scaled dot product).
at::Tensor jointAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// The modules of a double block's attention (FLUX.1 and FLUX.2 name them alike).
struct DoubleAttentionModules {
  const QkvProjections& imgQkv;
  const QkvProjections& txtQkv;
  FluxRmsNormImpl& normQ;
  FluxRmsNormImpl& normK;
  FluxRmsNormImpl& normAddedQ;
  FluxRmsNormImpl& normAddedK;
  nn::LinearImpl& toOut;
  nn::LinearImpl& toAddOut;
  int64_t heads;
};

// A double block's joint attention from its streams' modulated norms imgNorm [B, Ni, D] and
// txtNorm [B, Nt, D]: q, k, v of each stream (projectQkv), RMSNorm + rotary of q and k, one
// attention over [text; image] (the rotary tables' order), each stream's output Linear.
// -> {image [B, Ni, D], text [B, Nt, D]}.
std::pair<at::Tensor, at::Tensor> doubleBlockAttention(const DoubleAttentionModules& m, const at::Tensor& imgNorm,
                                                       const at::Tensor& txtNorm, const at::Tensor& cos,
                                                       const at::Tensor& sin);

// Rotary cos/sin [N, Dh] (float32) from position ids [N, n_axes] (or [B, N, n_axes],
// first batch used, as diffusers does).
std::pair<at::Tensor, at::Tensor> rotaryFromIds(const at::Tensor& ids, const std::vector<int64_t>& axesDims,
                                                double theta);

// Sinusoidal embedding of t [B] (already x1000): [B, 256] float32, cos first.
at::Tensor timestepSinusoid(const at::Tensor& t, int64_t channels = FluxConfig::kTimestepChannels);

// Double-stream block (diffusers FluxTransformerBlock).
class FluxDoubleBlock : public nn::Block {
 public:
  FluxDoubleBlock(const FluxConfig& cfg, const FluxBuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  nn::Linear norm1Linear{nullptr};         // norm1.linear: 6 modulations of the image stream
  nn::Linear norm1ContextLinear{nullptr};  // norm1_context.linear
  QkvProjections imgQkv;                   // attn.to_q / to_k / to_v
  QkvProjections txtQkv;                   // attn.add_q_proj / add_k_proj / add_v_proj
  FluxRmsNorm normQ{nullptr}, normK{nullptr}, normAddedQ{nullptr}, normAddedK{nullptr};
  nn::Linear toOut{nullptr};         // attn.to_out.0
  nn::Linear toAddOut{nullptr};      // attn.to_add_out
  nn::Linear ffIn{nullptr};          // ff.net.0.proj
  nn::Linear ffOut{nullptr};         // ff.net.2
  nn::Linear ffContextIn{nullptr};   // ff_context.net.0.proj
  nn::Linear ffContextOut{nullptr};  // ff_context.net.2

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

class FluxTransformer : public torch::nn::Module, public nn::BlockModel {
 public:
  explicit FluxTransformer(const FluxConfig& cfg, const FluxBuildOptions& options = {});

  // stem -> runner->run(i, block, io) for every block -> runner->toHead -> head.
  // Output: [B, N_img, out_channels] (the flow velocity). Runner null = local.
  at::Tensor forward(const FluxInputs& in, nn::BlockRunner* runner = nullptr);

  // The pieces, for runners and tests: embeddings + rotary, and norm_out + proj_out.
  nn::BlockIO stem(const FluxInputs& in);
  at::Tensor head(const nn::BlockIO& io);

  nn::BlockList blockList() override;

  const FluxConfig& config() const { return cfg_; }
  size_t blockCount() const { return blocks_.size(); }
  std::shared_ptr<nn::Block> block(size_t i) const { return blocks_.at(i); }
  // Dtype of the parameters (of x_embedder); inputs are cast to it.
  at::ScalarType dtype() const;

  // Module paths of every nn::Linear in the model, with the module (forward order).
  std::vector<std::pair<std::string, nn::Linear>> linears();

  nn::Linear xEmbedder{nullptr};                                  // x_embedder
  nn::Linear contextEmbedder{nullptr};                            // context_embedder
  nn::Linear timeLinear1{nullptr}, timeLinear2{nullptr};          // time_text_embed.timestep_embedder.linear_1/2
  nn::Linear guidanceLinear1{nullptr}, guidanceLinear2{nullptr};  // ...guidance_embedder.linear_1/2 (if enabled)
  nn::Linear textLinear1{nullptr}, textLinear2{nullptr};          // ...text_embedder.linear_1/2
  nn::Linear normOutLinear{nullptr};                              // norm_out.linear: (scale, shift)
  nn::Linear projOut{nullptr};                                    // proj_out

 private:
  FluxConfig cfg_;
  std::shared_ptr<torch::nn::Module> timeTextEmbed_;
  std::shared_ptr<torch::nn::Module> normOut_;
  torch::nn::ModuleList doubleBlocks_{nullptr};
  torch::nn::ModuleList singleBlocks_{nullptr};
  std::vector<std::shared_ptr<nn::Block>> blocks_;  // double, then single
};

}  // namespace strata::flux
