#pragma once
// FLUX.2's text side: prompts -> the prompt embeddings its transformer attends to,
// as Flux2Pipeline (Mistral-3, dev) and Flux2KleinPipeline (Qwen3, [klein]) make
// them. The prompts are templated and tokenized (Flux2Prompts.h), the language
// model runs under the padding mask with positions 0..L-1 (the pipelines pass no
// position ids), and the hidden states of the chosen layers (transformers'
// hidden_states[k]: 0 = the embeddings, k = the output of decoder layer k, the
// last index after the final norm) are stacked [B, K, L, d] and laid side by side
// per token: [B, L, K*d] (dev: 3 x 5120 = 15360). Only the layers up to the
// highest tapped one are read and run. Every position, padding included, goes to
// the transformer (the pipelines pass it no text mask).
//
//   auto enc = Flux2PromptEncoder::load(Flux2TextEncoderFiles::fromDiffusersFolder(root), opts);
//   at::Tensor e = enc->encode({"a photo of sks person"});  // [1, 512, 3d]
//   enc->release();                                         // frees the weights (before step 1)
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "diffusion/TextEncoder.h"
#include "families/flux2/Flux2Prompts.h"
#include "models/llama/LlamaConfig.h"
#include "nn/Quantize.h"

namespace strata::llama {
class LlamaForCausalLM;
}
namespace strata::nn {
class BlockRunner;
}
namespace strata::placement {
class Placement;
}

namespace strata::families {

struct Flux2TextEncoderFiles {
  std::filesystem::path encoder;    // a transformers folder: config.json + safetensors (or shards + index)
  std::filesystem::path tokenizer;  // tokenizer.json + tokenizer_config.json (+ the chat template)

  // A diffusers FLUX.2 folder: model_index.json's text encoder
  // (Mistral3ForConditionalGeneration or Qwen3ForCausalLM) and tokenizer/.
  static Flux2TextEncoderFiles fromDiffusersFolder(const std::filesystem::path& root);
  // A text encoder folder as transformers saves it (beside BFL single files): the
  // tokenizer in the same folder (tokenizer.json), else in its tokenizer/ folder.
  static Flux2TextEncoderFiles fromTransformersFolder(const std::filesystem::path& folder);
};

// The kind of the encoder folder's config.json: model_type mistral3 or qwen3.
// ConfigError naming the file for any other.
Flux2TextEncoderKind flux2TextEncoderKindOf(const std::filesystem::path& encoderFolder);

struct Flux2TextEncoderOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;  // bf16 on a GPU
  int64_t maxSequenceLength = 512;    // tokens per prompt after templating (both pipelines: 512)
  // hidden_states indices to stack; empty: the kind's (flux2DefaultOutLayers).
  std::vector<int64_t> outLayers;
  // model.quantize_te: the decoder layers' Linears quantized while they are read.
  nn::QuantType quantize = nn::QuantType::None;
  // While loading: decoder layers done and in all (+ 1 for the embeddings and norm).
  std::function<void(int64_t done, int64_t total)> onProgress;
  // A split over devices (the caching plan's, placement::cachingLayerDevices): decoder
  // layer i is built on layerDevices[i] (one per layer read), the embeddings on
  // `device`, the final norm on headDevice, and the layers run through a
  // placement::Placement that passes the hidden states from card to card; the
  // embeddings come back on `device`. Empty: every layer on `device`.
  std::vector<at::Device> layerDevices;
  at::Device headDevice = at::kCPU;
};

struct Flux2PromptEncoding {
  Flux2PromptIds prompt;                 // ids, attention mask, templated texts
  std::vector<at::Tensor> hiddenStates;  // one [B, L, d] per out layer, in outLayers' order
  at::Tensor embeds;                     // [B, L, K*d]
};

class Flux2PromptEncoder {
 public:
  // Reads the tokenizer, the config and the language model's weights (strict; the
  // vision tower of a Mistral-3 folder and everything past the last tapped layer
  // skipped). Throws ConfigError / LoadError / IoError naming the file and key.
  static std::shared_ptr<Flux2PromptEncoder> load(const Flux2TextEncoderFiles& files,
                                                  const Flux2TextEncoderOptions& options = {});
  // A language model of `cfg`'s shape with random weights (benchmarks, GPU tests)
  // and the tokenizer of `tokenizerFolder`. ConfigError when the tokenizer has more
  // tokens than cfg's vocabulary.
  static std::shared_ptr<Flux2PromptEncoder> random(const std::filesystem::path& tokenizerFolder,
                                                    Flux2TextEncoderKind kind, const llama::LlamaConfig& cfg,
                                                    const Flux2TextEncoderOptions& options = {});

  Flux2PromptIds tokenize(const std::vector<std::string>& prompts) const;
  // hidden_states[k] for every k of outLayers, from ids / mask [B, L] (Flux2PromptIds),
  // on the embeddings' device. `runner` runs the decoder layers (null: the encoder's
  // placement when it is split over devices, else in place on one device).
  std::vector<at::Tensor> hiddenStates(const at::Tensor& ids, const at::Tensor& mask,
                                       nn::BlockRunner* runner = nullptr) const;
  // The stack of hidden states [B, L, K*d] as the pipelines lay it out.
  static at::Tensor stackHiddenStates(const std::vector<at::Tensor>& states);
  Flux2PromptEncoding encodeDetailed(const std::vector<std::string>& prompts) const;
  at::Tensor encode(const std::vector<std::string>& prompts) const;  // [B, L, K*d]

  Flux2TextEncoderKind kind() const { return tokenizer_.kind(); }
  const std::vector<int64_t>& outLayers() const { return outLayers_; }
  int64_t hiddenSize() const { return cfg_.hiddenSize; }
  int64_t width() const { return cfg_.hiddenSize * static_cast<int64_t>(outLayers_.size()); }  // K*d
  int64_t maxSequenceLength() const { return options_.maxSequenceLength; }
  const llama::LlamaConfig& config() const { return cfg_; }  // the whole model's (every layer)
  const Flux2PromptTokenizer& tokenizer() const { return tokenizer_; }
  // The built model (the layers up to the last tapped one); null after release().
  std::shared_ptr<llama::LlamaForCausalLM> model() const { return model_; }
  // The owner of its layers' devices when it is split (options.layerDevices); null
  // on one device and after release().
  const placement::Placement* placement() const { return placement_.get(); }
  // What the cache key names besides the files' content: kind, template, layers,
  // max length, dtype, quantization.
  std::string settingsText() const;

  // Frees the weights on every device they are on.
  void release();
  bool released() const { return !model_; }

 private:
  Flux2PromptEncoder() = default;
  // Tokenizer, config and layers checked; no weights.
  static std::shared_ptr<Flux2PromptEncoder> open(const std::filesystem::path& tokenizerFolder,
                                                  Flux2TextEncoderKind kind, const llama::LlamaConfig& cfg,
                                                  const Flux2TextEncoderOptions& options);
  // The decoder layers read (up to the last tapped one).
  int64_t layersRead() const;
  // With options.layerDevices: the placement over the built model, applied and audited.
  void placeLayers();

  Flux2PromptTokenizer tokenizer_;
  llama::LlamaConfig cfg_;
  Flux2TextEncoderOptions options_;
  std::vector<int64_t> outLayers_;
  std::shared_ptr<llama::LlamaForCausalLM> model_;
  std::shared_ptr<placement::Placement> placement_;
};

// FLUX.2's text ids [B, L, 4] int64: (0, 0, 0, l) for token l (Flux2Pipeline._prepare_text_ids).
at::Tensor flux2TextIds(int64_t batch, int64_t length);

// Flux2PromptEncoder as the image path's text encoder: tokens = the prompt
// embeddings [B, L, K*d], no mask (the transformer sees every position), no pooled
// vector. The weights load on the first encode().
class Flux2TextEncoder final : public diffusion::TextEncoder {
 public:
  using Loader = std::function<std::shared_ptr<Flux2PromptEncoder>()>;
  Flux2TextEncoder(Loader load, std::string identity, int64_t sequenceLength);
  explicit Flux2TextEncoder(std::shared_ptr<Flux2PromptEncoder> loaded);  // identity: its settings

  diffusion::TextEncoding encode(const std::vector<std::string>& prompts) override;
  const std::string& identity() const override { return identity_; }
  int64_t sequenceLength() const override { return sequenceLength_; }
  void release() override;
  bool loaded() const override { return encoder_ != nullptr; }

  // The empty prompt's embedding [L, K*d] (caption dropout; the negative of true
  // CFG for [klein] base): what the pipeline gives for "". Computed once, kept
  // after release() so a run can still drop captions.
  at::Tensor emptyPromptEmbedding();

 private:
  Loader load_;
  std::shared_ptr<Flux2PromptEncoder> encoder_;
  std::string identity_;
  int64_t sequenceLength_ = 0;
  bool released_ = false;
  at::Tensor empty_;
};

// The cache key of a FLUX.2 text encoder read from `files`: the content hashes of
// the encoder's and the tokenizer's files, and Flux2PromptEncoder::settingsText's
// settings for `kind` and `options` (no weights are read).
std::string flux2TextEncoderIdentity(const Flux2TextEncoderFiles& files, Flux2TextEncoderKind kind,
                                     const Flux2TextEncoderOptions& options);

}  // namespace strata::families
