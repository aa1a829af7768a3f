#pragma once
// A tokenizer.json with a Unigram model (what transformers writes for T5) is a
// sentencepiece model in other clothes: this rebuilds the sentencepiece
// ModelProto from it (pieces, scores, the precompiled normalizer, the whitespace
// rules), so libsentencepiece runs it exactly as it runs spiece.model. Files whose
// normalizer or pre-tokenizer a sentencepiece model cannot express are refused.
#include <nlohmann/json.hpp>
#include <string>

#include "text/SentencePieceTokenizer.h"

namespace strata::text {

struct UnigramConversion {
  std::string serializedProto;
  SentencePieceRule rule;  // bos/eos from the file's post-processor
};

// `file` names the tokenizer.json in errors.
UnigramConversion unigramToSentencePiece(const nlohmann::json& json, const std::string& file);

}  // namespace strata::text
