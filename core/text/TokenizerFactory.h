#pragma once
// Opens the tokenizer of a model folder, whatever form it was saved in:
//   diffusers tokenizer/     vocab.json + merges.txt (CLIP), or tokenizer.json
//   diffusers tokenizer_2/   spiece.model (T5), or tokenizer.json (Unigram)
//   transformers folders     tokenizer.json (BPE), or tokenizer.model (Llama 2 sentencepiece)
// tokenizer_config.json / special_tokens_map.json, when present, name the special
// tokens and the model's max length. Fails with IoError naming the folder and the
// file that is missing or wrong.
#include <filesystem>
#include <memory>
#include <optional>

#include "text/Tokenizer.h"

namespace strata::text {

// What the caller expects; kAuto decides from the files (and tokenizer_class).
enum class TokenizerKind { kAuto, kT5, kClip, kCausalLm };

struct OpenedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::filesystem::path file;         // the file it was built from
  std::optional<int> modelMaxLength;  // tokenizer_config.json's model_max_length, when a real limit
};

OpenedTokenizer openTokenizer(const std::filesystem::path& folder, TokenizerKind kind = TokenizerKind::kAuto);

}  // namespace strata::text
