#pragma once
// The stages of a Hugging Face tokenizer.json, each built from its JSON object:
// normalizer, pre-tokenizer, post-processor and decoder. Types Strata does not
// implement are refused at load with the file, key and type named.
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata::text::hf {

// A piece of text between pre-tokenizer steps; atStart: it begins at offset 0 of
// the input (Metaspace's prepend_scheme "first" looks at that).
struct Piece {
  std::string text;
  bool atStart = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string apply(std::string text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int> apply(std::vector<int> body) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> apply(std::vector<std::string> tokens) const = 0;
};

using TokenLookup = std::function<std::optional<int>(const std::string&)>;

// `where` names the file and key ("tokenizer.json: pre_tokenizer"); a null JSON
// value gives nullptr (the stage is absent).
std::unique_ptr<Normalizer> makeNormalizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PreTokenizer> makePreTokenizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PostProcessor> makePostProcessor(const nlohmann::json& j, const std::string& where,
                                                 const TokenLookup& lookup);
std::unique_ptr<Decoder> makeDecoder(const nlohmann::json& j, const std::string& where);

// Reads j[key] as the given type, or throws IoError "<where>.<key>: ...".
std::string stringField(const nlohmann::json& j, const char* key, const std::string& where);
bool boolField(const nlohmann::json& j, const char* key, const std::string& where, bool fallback);

}  // namespace strata::text::hf
