#include "text/TokenizerFactory.h"

#include "common/Error.h"
#include "text/ClipTokenizer.h"
#include "text/HfTokenizer.h"
#include "text/JsonFile.h"
#include "text/SentencePieceTokenizer.h"
#include "text/UnigramModelProto.h"

namespace strata::text {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// A special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> tokenName(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const Json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return std::nullopt;
}

struct FolderConfig {
  Json config = Json::object();  // tokenizer_config.json, then special_tokens_map.json filling gaps
  std::string tokenizerClass;
  fs::path folder;
};

// T5's tokenizer_config.json asks for 100; each becomes an added token.
constexpr int kMaxExtraIds = 4096;

FolderConfig readConfig(const fs::path& folder) {
  FolderConfig out;
  out.folder = folder;
  if (fs::exists(folder / "tokenizer_config.json")) {
    out.config = readJsonFile(folder / "tokenizer_config.json");
    if (!out.config.is_object())
      throw IoError((folder / "tokenizer_config.json").string() + ": expected a JSON object");
  }
  if (fs::exists(folder / "special_tokens_map.json")) {
    const Json map = readJsonFile(folder / "special_tokens_map.json");
    if (map.is_object())
      for (auto it = map.begin(); it != map.end(); ++it)
        if (!out.config.contains(it.key())) out.config[it.key()] = it.value();
  }
  if (out.config.contains("tokenizer_class") && out.config.at("tokenizer_class").is_string())
    out.tokenizerClass = out.config.at("tokenizer_class").get<std::string>();
  return out;
}

SpecialTokenNames namesOf(const Json& config) {
  return {tokenName(config, "bos_token"), tokenName(config, "eos_token"), tokenName(config, "pad_token"),
          tokenName(config, "unk_token")};
}

bool hasFile(const fs::path& folder, const char* name) { return fs::is_regular_file(folder / name); }

bool looksLikeClip(const FolderConfig& c, const fs::path& vocabJson) {
  if (c.tokenizerClass.rfind("CLIPTokenizer", 0) == 0) return true;
  if (!c.tokenizerClass.empty()) return false;
  // No class named: CLIP's vocabulary has its start token.
  const Json vocab = readJsonFile(vocabJson);
  return vocab.is_object() && vocab.contains("<|startoftext|>");
}

std::unique_ptr<Tokenizer> openTokenizerJson(const fs::path& file, const FolderConfig& c) {
  const Json json = readJsonFile(file);
  if (!json.is_object() || !json.contains("model") || !json.at("model").is_object())
    throw IoError(file.string() + ": model: missing (not a tokenizer.json)");
  const Json& model = json.at("model");
  const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
  if (type == "BPE") return std::make_unique<HfTokenizer>(json, file, namesOf(c.config));
  if (type == "Unigram") {
    UnigramConversion conv = unigramToSentencePiece(json, file.string());
    if (auto pad = tokenName(c.config, "pad_token")) conv.rule.padToken = *pad;
    return std::make_unique<SentencePieceTokenizer>(conv.serializedProto, file, conv.rule);
  }
  throw IoError(file.string() + ": model.type: \"" + type +
                "\" is not supported (Strata reads BPE and Unigram tokenizer.json files)");
}

SentencePieceRule t5Rule(const FolderConfig& c) {
  SentencePieceRule rule = SentencePieceRule::t5();
  if (c.config.contains("extra_ids") && c.config.at("extra_ids").is_number_integer()) {
    // One added token per extra id (T5 has 100): bounded like any id.
    const int n = tokenIdOf(c.config.at("extra_ids"), c.folder.string() + "/tokenizer_config.json: extra_ids");
    if (n > kMaxExtraIds)
      throw IoError(c.folder.string() + "/tokenizer_config.json: extra_ids: " + std::to_string(n) + " is more than " +
                    std::to_string(kMaxExtraIds) + " (T5 has 100)");
    rule.extraIds = n;
  }
  if (auto pad = tokenName(c.config, "pad_token")) rule.padToken = *pad;
  return rule;
}

SentencePieceRule llamaRule(const FolderConfig& c) {
  SentencePieceRule rule = SentencePieceRule::llama();
  if (c.config.contains("add_bos_token") && c.config.at("add_bos_token").is_boolean())
    rule.addBos = c.config.at("add_bos_token").get<bool>();
  if (c.config.contains("add_eos_token") && c.config.at("add_eos_token").is_boolean())
    rule.addEos = c.config.at("add_eos_token").get<bool>();
  if (auto pad = tokenName(c.config, "pad_token")) rule.padToken = *pad;
  return rule;
}

}  // namespace

OpenedTokenizer openTokenizer(const fs::path& folder, TokenizerKind kind) {
  if (!fs::is_directory(folder)) throw IoError(folder.string() + ": tokenizer folder not found");
  const FolderConfig c = readConfig(folder);
  OpenedTokenizer out;
  if (c.config.contains("model_max_length") && c.config.at("model_max_length").is_number()) {
    // transformers writes 1e30 for "no limit".
    const double m = c.config.at("model_max_length").get<double>();
    if (m > 0 && m < 1e9) out.modelMaxLength = static_cast<int>(m);
  }

  const bool clipFiles = hasFile(folder, "vocab.json") && hasFile(folder, "merges.txt");
  const bool wantClip = kind == TokenizerKind::kClip ||
                        (kind == TokenizerKind::kAuto && clipFiles && looksLikeClip(c, folder / "vocab.json"));
  const bool wantT5 =
      kind == TokenizerKind::kT5 || (kind == TokenizerKind::kAuto && c.tokenizerClass.rfind("T5", 0) == 0);

  if (wantClip && clipFiles) {
    ClipTokenizerOptions o;
    const SpecialTokenNames n = namesOf(c.config);
    if (n.bos) o.bosToken = *n.bos;
    if (n.eos) o.eosToken = *n.eos;
    if (n.pad) o.padToken = *n.pad;
    if (n.unk) o.unkToken = *n.unk;
    out.file = folder / "vocab.json";
    out.tokenizer = std::make_unique<ClipTokenizer>(folder / "vocab.json", folder / "merges.txt", o);
    return out;
  }
  if (hasFile(folder, "spiece.model") && kind != TokenizerKind::kCausalLm && kind != TokenizerKind::kClip) {
    out.file = folder / "spiece.model";
    out.tokenizer = std::make_unique<SentencePieceTokenizer>(out.file, t5Rule(c));
    return out;
  }
  if (hasFile(folder, "tokenizer.json")) {
    out.file = folder / "tokenizer.json";
    out.tokenizer = openTokenizerJson(out.file, c);
    return out;
  }
  if (hasFile(folder, "tokenizer.model")) {
    out.file = folder / "tokenizer.model";
    out.tokenizer = std::make_unique<SentencePieceTokenizer>(out.file, wantT5 ? t5Rule(c) : llamaRule(c));
    return out;
  }
  if (wantClip) {
    const char* missing = hasFile(folder, "vocab.json") ? "merges.txt" : "vocab.json";
    throw IoError((folder / missing).string() +
                  ": missing; a CLIP tokenizer needs vocab.json and merges.txt "
                  "(or a tokenizer.json)");
  }
  if (wantT5)
    throw IoError((folder / "spiece.model").string() +
                  ": missing; a T5 tokenizer needs spiece.model (or a tokenizer.json)");
  if (hasFile(folder, "vocab.json") || hasFile(folder, "merges.txt"))
    throw IoError(folder.string() +
                  ": has vocab.json/merges.txt but no tokenizer.json; outside CLIP, Strata needs "
                  "the tokenizer.json that says how to pre-tokenize");
  throw IoError(folder.string() +
                ": no tokenizer files; expected tokenizer.json, spiece.model or tokenizer.model "
                "(sentencepiece), or vocab.json + merges.txt (CLIP)");
}

}  // namespace strata::text
