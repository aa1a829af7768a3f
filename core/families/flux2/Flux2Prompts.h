#pragma once
// FLUX.2's prompts as its pipelines hand them to the text encoder (diffusers
// Flux2Pipeline, Flux2KleinPipeline): the text encoder's chat template applied to
// the prompt, the text tokenized with the folder's tokenizer, cut to
// max_sequence_length after templating (the template's closing tokens are lost for
// a long prompt, as in the pipelines) and padded to it on the tokenizer's padding
// side. Strata runs no Jinja: the template is the one of the text encoder kind,
// written out below; a folder whose chat template does not look like it is
// reported (Flux2PromptTokenizer::notes) and the kind's template is used.
//
//   auto tok = Flux2PromptTokenizer::open(root / "tokenizer", Flux2TextEncoderKind::kQwen3);
//   auto p = tok.tokenize({"a photo of sks person"}, 512);  // p.ids, p.mask [1, 512]
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace strata::text {
class Tokenizer;
}

namespace strata::families {

// Which language model encodes FLUX.2's prompts.
enum class Flux2TextEncoderKind {
  kMistral3,  // FLUX.2-dev: Mistral3ForConditionalGeneration's language model (Mistral-Small-3.x)
  kQwen3,     // FLUX.2 [klein]: Qwen3ForCausalLM (Qwen3-4B, Qwen3-8B)
};
const char* toString(Flux2TextEncoderKind kind);  // "mistral3", "qwen3"

// The hidden states the pipelines stack by default (Flux2Pipeline: 10, 20, 30;
// Flux2KleinPipeline: 9, 18, 27).
std::vector<int64_t> flux2DefaultOutLayers(Flux2TextEncoderKind kind);

// FLUX.2's system message in the Mistral-3 template (diffusers' flux2 SYSTEM_MESSAGE).
extern const char* const kFlux2SystemMessage;

// The templated text of one prompt:
//   kMistral3: bos + "[SYSTEM_PROMPT]" + kFlux2SystemMessage + "[/SYSTEM_PROMPT][INST]" + prompt + "[/INST]"
//   kQwen3:    "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
// (the Qwen3 template's generation prompt with thinking off; no system turn). As
// Flux2Pipeline, the Mistral-3 form removes every "[IMG]" from the prompt first.
std::string flux2TemplatedPrompt(Flux2TextEncoderKind kind, const std::string& prompt,
                                 const std::string& bosToken = "<s>");

// Empty when `chatTemplate` (a folder's Jinja text) has the markers of the kind's
// template; else one sentence saying which are missing.
std::string flux2ChatTemplateMismatch(Flux2TextEncoderKind kind, const std::string& chatTemplate);

enum class PaddingSide { kLeft, kRight };

// Ids of a batch of prompts, as the pipeline gives them to the text encoder.
struct Flux2PromptIds {
  at::Tensor ids;                  // [B, L] int64, L = max_sequence_length
  at::Tensor mask;                 // [B, L] int64: 1 = token, 0 = padding
  std::vector<std::string> texts;  // the templated texts
  std::vector<int64_t> lengths;    // tokens of each templated text (no special tokens added), before truncation
  std::vector<int64_t> dropped;    // tokens cut by truncation (0: none)
};

class Flux2PromptTokenizer {
 public:
  // The tokenizer of `folder` (tokenizer.json), tokenizer_config.json's padding_side,
  // truncation_side, pad and bos tokens, and the folder's chat template
  // (chat_template.jinja, chat_template.json or tokenizer_config.json's
  // chat_template), which is only compared with the kind's. Throws IoError naming
  // the file and key for what is missing or malformed (no pad token: FLUX.2 pads
  // every prompt; a padding_side that is neither left nor right).
  static Flux2PromptTokenizer open(const std::filesystem::path& folder, Flux2TextEncoderKind kind);

  // Templated, tokenized (Mistral-3: apply_chat_template's ids, no special tokens
  // added; Qwen3: the tokenizer's post-processor applied, as tokenizer(text) does),
  // cut to maxLength on the truncation side and padded to it on the padding side.
  // ConfigError for an empty list or maxLength < 1.
  Flux2PromptIds tokenize(const std::vector<std::string>& prompts, int64_t maxLength) const;

  Flux2TextEncoderKind kind() const { return kind_; }
  PaddingSide paddingSide() const { return paddingSide_; }
  int64_t padId() const { return padId_; }
  int vocabSize() const;
  const std::filesystem::path& folder() const { return folder_; }
  // What the caller should tell the user: the folder's chat template differs from
  // the kind's, or there is none (the kind's template is used either way).
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  std::shared_ptr<const text::Tokenizer> tok_;
  std::filesystem::path folder_;
  Flux2TextEncoderKind kind_ = Flux2TextEncoderKind::kMistral3;
  PaddingSide paddingSide_ = PaddingSide::kRight;
  bool truncateLeft_ = false;
  int64_t padId_ = 0;
  std::string bosToken_ = "<s>";
  std::vector<std::string> notes_;
};

}  // namespace strata::families
