#pragma once
// The T5 encoder (transformers T5EncoderModel), modules named by the transformers
// state-dict keys so named_parameters() equals a checkpoint's key set:
// shared.weight, encoder.block.N.layer.{0,1}..., encoder.final_layer_norm.weight.
// To placement it is a stem (the shared embedding), the blocks and a head
// (final_layer_norm); every block takes and returns BlockIO.
//
// Precision: fp32 and bf16 are the supported paths (FLUX runs T5 in bf16). T5's
// feed-forward output overflows fp16; in fp16 this mirrors transformers'
// mitigations (each wo is kept in fp32, activations are clamped below the fp16
// maximum) but fp16 is not recommended (docs/text-encoders.md).
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/t5/T5Config.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::t5 {

// Where and in which dtype the encoder is built (parameters are created there).
struct T5BuildOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  // Called with each block right after it is built, before the next one exists:
  // where a streamed load fills and quantizes it (streamT5Encoder).
  std::function<void(torch::nn::Module& block)> onBlockBuilt;
};

// T5LayerNorm: RMS over the last dim (no mean, no bias), scale "weight", variance in fp32.
class T5LayerNormImpl : public torch::nn::Module {
 public:
  T5LayerNormImpl(int64_t dim, double eps, const T5BuildOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // [dim]

 private:
  double eps_;
};
TORCH_MODULE(T5LayerNorm);

// Bucket of each relative position (memory - query), bidirectional as in an encoder:
// half the buckets per sign, exact below a quarter of the buckets, log-spaced up
// to maxDistance, the last bucket beyond. relativePosition: int64, any shape.
at::Tensor relativePositionBucket(const at::Tensor& relativePosition, int64_t numBuckets, int64_t maxDistance);

// One encoder block (T5Block: layer.0 = self-attention, layer.1 = feed-forward).
// BlockIO: img = hidden states [B, L, d_model]; mask = the additive attention bias.
// Block 0 holds relative_attention_bias: it turns `mask` (undefined, or the
// padding mask [B, 1, 1, L]) into position bias + mask [B|1, H, L, L] and hands it
// on; every later block adds that same bias (T5 shares block 0's table).
class T5Block : public nn::Block {
 public:
  T5Block(const T5Config& cfg, bool hasRelativeAttentionBias, const T5BuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  // [1, H, L, L] position bias from this block's table (block 0 only).
  at::Tensor positionBias(int64_t length) const;
  bool hasRelativeAttentionBias() const { return relativeAttentionBias.defined(); }

  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};  // layer.0.SelfAttention.*
  at::Tensor relativeAttentionBias;       // layer.0.SelfAttention.relative_attention_bias.weight [buckets, H]
  T5LayerNorm attnNorm{nullptr};          // layer.0.layer_norm
  nn::Linear wi0{nullptr}, wi1{nullptr};  // layer.1.DenseReluDense.wi_0 / wi_1 (gated)
  nn::Linear wi{nullptr};                 // layer.1.DenseReluDense.wi (not gated)
  nn::Linear wo{nullptr};                 // layer.1.DenseReluDense.wo
  T5LayerNorm ffNorm{nullptr};            // layer.1.layer_norm

 private:
  T5Config cfg_;
  at::ScalarType woDtype_ = at::kFloat;  // wo computes in fp32 when the model is fp16, even once quantized
};

class T5Encoder : public torch::nn::Module, public nn::BlockModel {
 public:
  explicit T5Encoder(const T5Config& cfg, const T5BuildOptions& options = {});

  // inputIds [B, L] (integer ids < vocab_size); attentionMask [B, L] (1 = attend,
  // 0 = padding) or undefined: FLUX passes none. Returns last_hidden_state
  // [B, L, d_model] in the model's dtype. Runner null = local.
  at::Tensor forward(const at::Tensor& inputIds, const at::Tensor& attentionMask = {},
                     nn::BlockRunner* runner = nullptr);

  // The pieces, for runners and tests: embedding (+ padding mask), final norm.
  nn::BlockIO stem(const at::Tensor& inputIds, const at::Tensor& attentionMask = {});
  at::Tensor head(const nn::BlockIO& io);

  nn::BlockList blockList() override;

  const T5Config& config() const { return cfg_; }
  size_t blockCount() const { return blocks_.size(); }
  std::shared_ptr<T5Block> block(size_t i) const { return blocks_.at(i); }
  at::ScalarType dtype() const { return shared.scalar_type(); }

  at::Tensor shared;                    // shared.weight [vocab, d_model] (encoder.embed_tokens is the same tensor)
  T5LayerNorm finalLayerNorm{nullptr};  // encoder.final_layer_norm

 private:
  T5Config cfg_;
  std::shared_ptr<torch::nn::Module> sharedNode_;
  torch::nn::ModuleList blockList_{nullptr};
  std::vector<std::shared_ptr<T5Block>> blocks_;
};

}  // namespace strata::t5
