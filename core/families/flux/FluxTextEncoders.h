#pragma once
// FLUX.1's two text encoders with their tokenizers, as one prompt encoder:
//   T5 (text_encoder_2 / t5xxl*.safetensors) -> the token sequence the transformer
//     attends to, [B, maxSequenceLength, d_model] (4096 for T5-XXL);
//   CLIP-L (text_encoder / clip_l.safetensors) -> the pooled vector, [B, 768].
// This is FluxPipeline.encode_prompt: both tokenizers pad to a fixed length and
// truncate (T5 to maxSequenceLength, CLIP to its model_max_length, 77), and
// neither encoder gets an attention mask.
//
// Use (the caching code calls exactly this):
//   auto enc = families::FluxTextEncoders::load(families::TextEncoderFiles::fromDiffusersFolder(root), opts);
//   auto e = enc->encode({"a photo of sks person"});   // e.t5 [1, L, 4096], e.pooled [1, 768]
//   enc->release();  // frees the weights (before training step 1)
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/Quantize.h"
#include "models/clip/ClipTextConfig.h"
#include "models/t5/T5Config.h"

namespace strata::t5 {
class T5Encoder;
}
namespace strata::clip {
class ClipTextModel;
}
namespace strata::text {
class Tokenizer;
}

namespace strata::families {

// Where the four pieces are. Encoders: a transformers folder, a diffusers root or
// one safetensors file; tokenizers: the folder holding the tokenizer files.
struct TextEncoderFiles {
  std::filesystem::path t5;
  std::filesystem::path clip;
  std::filesystem::path t5Tokenizer;    // spiece.model or tokenizer.json (diffusers tokenizer_2/)
  std::filesystem::path clipTokenizer;  // vocab.json + merges.txt or tokenizer.json (diffusers tokenizer/)
  // What a single file cannot tell (CLIP's head count is in no tensor); unset: from
  // config.json, else from the shapes (FLUX.1's CLIP-L has 12 heads).
  std::optional<t5::T5Config> t5Config;
  std::optional<clip::ClipTextConfig> clipConfig;

  // A diffusers FLUX.1 folder: model_index.json names the components.
  static TextEncoderFiles fromDiffusersFolder(const std::filesystem::path& root);
  // Single files plus a tokenizer folder in the diffusers layout (tokenizer/ and
  // tokenizer_2/ inside it).
  static TextEncoderFiles fromSingleFiles(const std::filesystem::path& t5File, const std::filesystem::path& clipFile,
                                          const std::filesystem::path& tokenizerFolder);
};

struct TextEncoderOptions {
  at::Device device = at::kCPU;
  at::ScalarType t5Dtype = at::kFloat;  // bf16 for T5-XXL on a GPU
  at::ScalarType clipDtype = at::kFloat;
  int64_t maxSequenceLength = 512;  // T5 tokens (FLUX.1-dev: 512, schnell: 256)
  // model.quantize_te: T5's Linears in 1 byte + a scale, quantized block by block
  // while loading. CLIP-L stays float: 123M parameters, 0.25 GB in bf16.
  nn::QuantType t5Quantize = nn::QuantType::None;
  // load(): after each T5 block is streamed in and once at the end, the units
  // done and in all (blocks + 1; t5::T5StreamOptions::onProgress).
  std::function<void(int64_t done, int64_t total)> onT5Progress;
};

struct PromptEmbeddings {
  at::Tensor t5;                           // [B, maxSequenceLength, d_model] in the T5 dtype, on the device
  at::Tensor pooled;                       // [B, clip hidden] in the CLIP dtype, on the device
  std::vector<int64_t> t5DroppedTokens;    // per prompt: tokens cut by truncation (0: none)
  std::vector<int64_t> clipDroppedTokens;  // per prompt (CLIP cuts at 77: common and harmless)
};

class FluxTextEncoders {
 public:
  // Loads both encoders strictly (errors name the file) and both tokenizers.
  // Nothing is kept when one piece fails.
  static std::shared_ptr<FluxTextEncoders> load(const TextEncoderFiles& files, const TextEncoderOptions& options = {});
  // Both encoders built with random weights of these shapes (benchmarks, GPU tests:
  // model.random_weights); the tokenizers are read from `tokenizers` (its t5 / clip
  // paths are not used). Throws ConfigError when a tokenizer has more tokens than
  // its model's vocabulary.
  static std::shared_ptr<FluxTextEncoders> random(const TextEncoderFiles& tokenizers, const t5::T5Config& t5Cfg,
                                                  const clip::ClipTextConfig& clipCfg,
                                                  const TextEncoderOptions& options = {});

  // One row per prompt. Throws ConfigError for an empty list, strata::Error after release().
  PromptEmbeddings encode(const std::vector<std::string>& prompts) const;

  // The fixed token ids the encoders see, [B, L] int64 (for tests and cache keys).
  at::Tensor t5Ids(const std::vector<std::string>& prompts) const;
  at::Tensor clipIds(const std::vector<std::string>& prompts) const;

  int64_t maxSequenceLength() const { return options_.maxSequenceLength; }
  int64_t clipLength() const { return clipLength_; }
  int64_t t5Width() const { return t5Cfg_.dModel; }
  int64_t pooledWidth() const { return clipCfg_.hiddenSize; }
  // A text naming the files and lengths, for cache keys and logs.
  std::string identity() const;

  // Frees both encoders (the tokenizers stay); encode() throws afterwards.
  void release();
  bool released() const { return !t5_; }

 private:
  FluxTextEncoders() = default;
  // The tokenizers and lengths, without the encoders.
  static std::shared_ptr<FluxTextEncoders> open(const TextEncoderFiles& files, const TextEncoderOptions& options,
                                                const t5::T5Config& t5Cfg, const clip::ClipTextConfig& clipCfg);

  TextEncoderFiles files_;
  TextEncoderOptions options_;
  t5::T5Config t5Cfg_;
  clip::ClipTextConfig clipCfg_;
  int64_t clipLength_ = 77;
  std::shared_ptr<t5::T5Encoder> t5_;
  std::shared_ptr<clip::ClipTextModel> clip_;
  std::shared_ptr<text::Tokenizer> t5Tok_;
  std::shared_ptr<text::Tokenizer> clipTok_;
};

}  // namespace strata::families
