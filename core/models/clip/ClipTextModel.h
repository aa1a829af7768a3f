#pragma once
// The CLIP text encoder (transformers CLIPTextModel), modules named by the
// transformers state-dict keys (transformers 5 spelling, without "text_model."):
// embeddings.{token,position}_embedding, encoder.layers.N..., final_layer_norm.
// Pre-LN layers with causal self-attention; the pooled output is the final-norm
// state at one position per prompt (ClipTextConfig::eosTokenId says which).
// To placement: stem (embeddings), the layers, head (final_layer_norm).
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <vector>

#include "models/clip/ClipTextConfig.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::clip {

struct ClipBuildOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
};

// LayerNorm with "weight" and "bias".
class ClipLayerNormImpl : public torch::nn::Module {
 public:
  ClipLayerNormImpl(int64_t dim, double eps, const ClipBuildOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;  // [dim]

 private:
  double eps_;
};
TORCH_MODULE(ClipLayerNorm);

// One encoder layer (CLIPEncoderLayer). BlockIO: img = hidden states [B, L, D];
// mask = the additive attention mask [B|1, 1, L, L] (causal, plus padding).
class ClipEncoderLayer : public nn::Block {
 public:
  ClipEncoderLayer(const ClipTextConfig& cfg, const ClipBuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  ClipLayerNorm layerNorm1{nullptr}, layerNorm2{nullptr};
  nn::Linear qProj{nullptr}, kProj{nullptr}, vProj{nullptr}, outProj{nullptr};  // self_attn.*
  nn::Linear fc1{nullptr}, fc2{nullptr};                                        // mlp.*

 private:
  ClipTextConfig cfg_;
};

struct ClipTextOutput {
  at::Tensor lastHiddenState;  // [B, L, D] after final_layer_norm
  at::Tensor pooled;           // [B, D] (pooler_output)
};

class ClipTextModel : public torch::nn::Module, public nn::BlockModel {
 public:
  explicit ClipTextModel(const ClipTextConfig& cfg, const ClipBuildOptions& options = {});

  // inputIds [B, L] (L <= max_position_embeddings); attentionMask [B, L] (1 = attend,
  // 0 = padding) or undefined: FLUX passes none, only the causal mask applies.
  ClipTextOutput forward(const at::Tensor& inputIds, const at::Tensor& attentionMask = {},
                         nn::BlockRunner* runner = nullptr);

  nn::BlockIO stem(const at::Tensor& inputIds, const at::Tensor& attentionMask = {});
  ClipTextOutput head(const nn::BlockIO& io, const at::Tensor& inputIds);
  // The pooled positions [B] for these ids (argmax or first eos, see the config).
  at::Tensor pooledPositions(const at::Tensor& inputIds) const;

  nn::BlockList blockList() override;

  const ClipTextConfig& config() const { return cfg_; }
  size_t blockCount() const { return layers_.size(); }
  std::shared_ptr<ClipEncoderLayer> layer(size_t i) const { return layers_.at(i); }
  at::ScalarType dtype() const { return tokenEmbedding.scalar_type(); }

  at::Tensor tokenEmbedding;     // embeddings.token_embedding.weight [vocab, D]
  at::Tensor positionEmbedding;  // embeddings.position_embedding.weight [max_pos, D]
  ClipLayerNorm finalLayerNorm{nullptr};

 private:
  ClipTextConfig cfg_;
  std::shared_ptr<torch::nn::Module> embeddings_;
  torch::nn::ModuleList layerList_{nullptr};
  std::vector<std::shared_ptr<ClipEncoderLayer>> layers_;
};

}  // namespace strata::clip
