#pragma once
// A Llama-family causal LM (transformers LlamaForCausalLM; Mistral and Qwen2 by
// the same code), modules named by the transformers state-dict keys so that
// named_parameters() equals a checkpoint's key set: model.embed_tokens,
// model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, (Qwen3:
// self_attn.{q,k}_norm), post_attention_layernorm, mlp.{gate,up,down}_proj},
// model.norm, lm_head (absent when the embeddings are tied). To placement it is a stem (embed_tokens, and the
// rotary tables and attention mask it computes), one block per decoder layer
// and a head (model.norm, lm_head); every block takes and returns nn::BlockIO:
//   img      [B, L, D] hidden states
//   ropeCos  [B, L, head_dim] rotary cos in the model dtype, halves layout
//   ropeSin  [B, L, head_dim] (transformers' rotate_half: the two halves of a head pair up)
//   mask     [B, 1, L, L] additive attention mask in the model dtype: 0 where a
//            query sees a key (causal, key not padding, inside a sliding window),
//            the dtype's lowest value elsewhere. A query that sees no key at all (a
//            left-padded row's leading padding) gets a zero attention output, as
//            PyTorch's scaled_dot_product_attention gives from 2.5 on (transformers'
//            sdpa path, which FLUX.2's text encoders run: every position's hidden
//            state goes to the transformer)
// Every Linear is an nn::Linear, so LoRA adapters attach per projection.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/llama/LlamaConfig.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::llama {

struct LlamaBuildOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  // Where decoder layer i is built (unset: `device`). A split builds each layer on
  // its plan device, so no card ever holds more than its share of the model.
  std::function<at::Device(size_t layerIndex)> layerDevice;
  // Called with each decoder layer right after it is built, before the next one
  // exists: where a streamed load fills and quantizes it (streamLlamaForCausalLM).
  std::function<void(size_t layerIndex, torch::nn::Module& layer)> onLayerBuilt;
};

// transformers LlamaRMSNorm: normalised in float32, cast back, then scaled.
class LlamaRmsNormImpl : public torch::nn::Module {
 public:
  LlamaRmsNormImpl(int64_t dim, double eps, const LlamaBuildOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // [dim]

 private:
  double eps_;
};
TORCH_MODULE(LlamaRmsNorm);

// Token embedding table with the state-dict name "weight".
class LlamaEmbeddingImpl : public torch::nn::Module {
 public:
  LlamaEmbeddingImpl(int64_t vocab, int64_t dim, const LlamaBuildOptions& options);
  at::Tensor forward(const at::Tensor& ids);  // [B, L] -> [B, L, D]
  at::Tensor weight;                          // [vocab, dim]
};
TORCH_MODULE(LlamaEmbedding);

// The rotary inverse frequencies [head_dim / 2] (float32) as transformers computes
// them: 1 / theta^(2i / head_dim), then the llama3 or linear rule of the config.
at::Tensor ropeInvFreq(const LlamaConfig& cfg);
// cos, sin [B, L, head_dim] float32 for positions [B, L] (halves layout).
std::pair<at::Tensor, at::Tensor> rotaryTables(const at::Tensor& invFreq, const at::Tensor& positions);
// x [B, H, L, Dh] rotated by cos/sin [B, L, Dh] (transformers' apply_rotary_pos_emb).
at::Tensor applyRotaryHalves(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// Additive mask [B, 1, L, L] in `dtype` from attention_mask [B, L] (1 = token,
// 0 = padding; undefined = no padding): causal, padding keys hidden, and keys
// more than `slidingWindow - 1` back hidden when it is > 0.
at::Tensor causalMask(const at::Tensor& attentionMask, int64_t batch, int64_t length, at::ScalarType dtype,
                      const at::Device& device, int64_t slidingWindow = 0);

class LlamaDecoderLayer : public nn::Block {
 public:
  LlamaDecoderLayer(const LlamaConfig& cfg, const LlamaBuildOptions& options);
  nn::BlockIO forward(const nn::BlockIO& io) override;

  LlamaRmsNorm inputLayernorm{nullptr};
  nn::Linear qProj{nullptr}, kProj{nullptr}, vProj{nullptr}, oProj{nullptr};  // self_attn.*
  LlamaRmsNorm qNorm{nullptr}, kNorm{nullptr};  // self_attn.{q,k}_norm: Qwen3 only (else null)
  LlamaRmsNorm postAttentionLayernorm{nullptr};
  nn::Linear gateProj{nullptr}, upProj{nullptr}, downProj{nullptr};  // mlp.*

 private:
  int64_t heads_;
  int64_t kvHeads_;
  int64_t headDim_;
};

// One forward pass's inputs, on the stem's device.
struct LlamaInputs {
  at::Tensor inputIds;       // [B, L] int64
  at::Tensor attentionMask;  // [B, L] 1 = token, 0 = padding; undefined = none
  at::Tensor positionIds;    // [B, L]; undefined = 0..L-1 for every row (what a Trainer passes)
  // The caller has checked every id against the vocabulary (a training run checks its
  // dataset once): the stem skips its own check, which waits for the device and
  // cannot be recorded in a CUDA graph (train.cuda_graph).
  bool idsChecked = false;
};

class LlamaForCausalLM : public torch::nn::Module, public nn::BlockModel {
 public:
  explicit LlamaForCausalLM(const LlamaConfig& cfg, const LlamaBuildOptions& options = {});

  // stem -> runner->run(i, layer, io) for every layer -> runner->toHead -> head.
  // Logits [B, L, vocab] in the model dtype. Runner null = local.
  at::Tensor forward(const LlamaInputs& in, nn::BlockRunner* runner = nullptr);

  nn::BlockIO stem(const LlamaInputs& in);
  at::Tensor head(const nn::BlockIO& io);

  nn::BlockList blockList() override;

  const LlamaConfig& config() const { return cfg_; }
  size_t layerCount() const { return layers_.size(); }
  std::shared_ptr<LlamaDecoderLayer> layer(size_t i) const { return layers_.at(i); }
  at::ScalarType dtype() const { return embedTokens->weight.scalar_type(); }
  // The rotary inverse frequencies the model uses (float32, on the stem's device).
  at::Tensor invFreq() const;

  // Module paths of every nn::Linear, with the module, in forward order.
  std::vector<std::pair<std::string, nn::Linear>> linears();

  LlamaEmbedding embedTokens{nullptr};  // model.embed_tokens
  LlamaRmsNorm norm{nullptr};           // model.norm
  nn::Linear lmHead{nullptr};           // lm_head; null when tie_word_embeddings

 private:
  LlamaConfig cfg_;
  std::shared_ptr<torch::nn::Module> model_;
  torch::nn::ModuleList layerList_{nullptr};
  std::vector<std::shared_ptr<LlamaDecoderLayer>> layers_;
  at::Tensor invFreq_;  // [head_dim / 2] float32 CPU; not a state-dict entry
};

// transformers' causal-LM loss: logits[:, :-1] against labels[:, 1:] in float32,
// mean over the labels that are not -100. logits [B, L, V], labels [B, L].
at::Tensor causalLmLoss(const at::Tensor& logits, const at::Tensor& labels);

}  // namespace strata::llama
