#include "text/HfTokenizer.h"

#include "common/Error.h"
#include "text/JsonFile.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;

std::optional<std::string> optionalString(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  if (!j.at(key).is_string()) throw IoError(where + "." + key + ": expected a string or null");
  return j.at(key).get<std::string>();
}

std::vector<BpeMerge> readMerges(const Json& model, const std::string& where) {
  std::vector<BpeMerge> merges;
  if (!model.contains("merges")) return merges;
  const Json& list = model.at("merges");
  if (!list.is_array()) throw IoError(where + ".merges: expected an array");
  merges.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + ".merges[" + std::to_string(i) + "]";
    const Json& m = list[i];
    if (m.is_string()) {
      // "a b": exactly one space between the two tokens.
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 >= s.size() ||
          s.find(' ', space + 1) != std::string::npos)
        throw IoError(at + ": expected \"left right\" (two tokens, one space), got \"" + s + "\"");
      merges.push_back({s.substr(0, space), s.substr(space + 1), at});
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back({m[0].get<std::string>(), m[1].get<std::string>(), at});
    } else {
      throw IoError(at + ": expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  return merges;
}

}  // namespace

AddedTokens readAddedTokens(const Json& json, const std::string& where) {
  AddedTokens added;
  if (!json.contains("added_tokens") || json.at("added_tokens").is_null()) return added;
  const Json& list = json.at("added_tokens");
  if (!list.is_array()) throw IoError(where + ": added_tokens: expected an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + ": added_tokens[" + std::to_string(i) + "]";
    const Json& t = list[i];
    if (!t.is_object() || !t.contains("id") || !t.at("id").is_number_integer())
      throw IoError(at + ": expected an object with an integer id");
    AddedToken a;
    a.id = tokenIdOf(t.at("id"), at + ".id");
    a.content = hf::stringField(t, "content", at);
    a.special = hf::boolField(t, "special", at, false);
    a.lstrip = hf::boolField(t, "lstrip", at, false);
    a.rstrip = hf::boolField(t, "rstrip", at, false);
    a.singleWord = hf::boolField(t, "single_word", at, false);
    a.normalized = hf::boolField(t, "normalized", at, !a.special);
    added.add(a);
  }
  return added;
}

HfTokenizer::HfTokenizer(const Json& json, const std::filesystem::path& path, const SpecialTokenNames& names)
    : Tokenizer(path) {
  const std::string file = path.string();
  if (!json.is_object()) throw IoError(file + ": expected a JSON object (a tokenizer.json)");
  if (!json.contains("model") || !json.at("model").is_object()) throw IoError(file + ": model: missing");
  const Json& model = json.at("model");
  const std::string modelWhere = file + ": model";
  const std::string type = model.contains("type") ? hf::stringField(model, "type", modelWhere) : "BPE";
  if (type != "BPE")
    throw IoError(modelWhere + ".type: \"" + type +
                  "\" is not a BPE model (this reader handles BPE; Unigram goes "
                  "through sentencepiece, WordPiece and WordLevel are not supported)");

  if (!model.contains("vocab") || !model.at("vocab").is_object())
    throw IoError(modelWhere + ".vocab: expected an object of token -> id");
  std::unordered_map<std::string, int> vocab;
  vocab.reserve(model.at("vocab").size());
  for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it) {
    vocab.emplace(it.key(), tokenIdOf(it.value(), modelWhere + ".vocab[\"" + it.key() + "\"]"));
  }
  BpeOptions options;
  options.unkToken = optionalString(model, "unk_token", modelWhere);
  options.continuingSubwordPrefix = optionalString(model, "continuing_subword_prefix", modelWhere).value_or("");
  options.endOfWordSuffix = optionalString(model, "end_of_word_suffix", modelWhere).value_or("");
  options.fuseUnk = hf::boolField(model, "fuse_unk", modelWhere, false);
  options.byteFallback = hf::boolField(model, "byte_fallback", modelWhere, false);
  options.ignoreMerges = hf::boolField(model, "ignore_merges", modelWhere, false);
  // dropout only matters while training a tokenizer; encoding stays deterministic.
  bpe_ = std::make_unique<BpeModel>(std::move(vocab), readMerges(model, modelWhere), options, modelWhere);

  added_ = readAddedTokens(json, file);
  auto field = [&](const char* key) { return json.contains(key) ? json.at(key) : Json(); };
  normalizer_ = hf::makeNormalizer(field("normalizer"), file + ": normalizer");
  preTokenizer_ = hf::makePreTokenizer(field("pre_tokenizer"), file + ": pre_tokenizer");
  postProcessor_ = hf::makePostProcessor(field("post_processor"), file + ": post_processor",
                                         [this](const std::string& t) { return tokenToId(t); });
  decoder_ = hf::makeDecoder(field("decoder"), file + ": decoder");

  auto idOf = [&](const std::optional<std::string>& name, const char* role) -> std::optional<int> {
    if (!name) return std::nullopt;
    auto id = tokenToId(*name);
    if (!id) throw IoError(file + ": the " + std::string(role) + " token \"" + *name + "\" is not in the vocabulary");
    return id;
  };
  special_.bos = idOf(names.bos, "bos");
  special_.eos = idOf(names.eos, "eos");
  special_.pad = idOf(names.pad, "pad");
  special_.unk = idOf(names.unk ? names.unk : options.unkToken, "unk");
  if (!special_.pad) {
    const Json padding = field("padding");
    if (padding.is_object() && padding.contains("pad_id") && padding.at("pad_id").is_number_integer())
      special_.pad = tokenIdOf(padding.at("pad_id"), file + ": padding.pad_id");
  }
}

std::vector<std::string> HfTokenizer::tokens(const std::string& text) const {
  std::vector<std::string> out;
  for (int id : encodeBody(text)) out.push_back(idToToken(id).value_or("?"));
  return out;
}

std::vector<int> HfTokenizer::encodeBody(const std::string& text) const {
  std::vector<int> ids;
  bool atStart = true;
  for (const TextPiece& raw : added_.split(text, false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      atStart = false;
      continue;
    }
    const std::string normalized = normalizer_ ? normalizer_->apply(raw.text) : raw.text;
    for (const TextPiece& piece : added_.split(normalized, true)) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
        atStart = false;
        continue;
      }
      std::vector<hf::Piece> words{{piece.text, atStart}};
      atStart = false;
      if (preTokenizer_) preTokenizer_->apply(words);
      for (const hf::Piece& w : words) bpe_->encodeWord(w.text, ids);
    }
  }
  return ids;
}

std::vector<int> HfTokenizer::addSpecialTokens(std::vector<int> body) const {
  return postProcessor_ ? postProcessor_->apply(std::move(body)) : body;
}

std::string HfTokenizer::decode(const std::vector<int>& ids, bool skipSpecialTokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    if (const AddedToken* a = added_.byId(id)) {
      if (!(skipSpecialTokens && a->special)) tokens.push_back(a->content);
      continue;
    }
    if (const std::string* t = bpe_->idToToken(id)) tokens.push_back(*t);
  }
  if (decoder_) tokens = decoder_->apply(std::move(tokens));
  std::string out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!decoder_ && i > 0) out += ' ';
    out += tokens[i];
  }
  return out;
}

int HfTokenizer::vocabSize() const { return std::max(bpe_->vocabSize(), added_.maxId() + 1); }

std::optional<int> HfTokenizer::tokenToId(const std::string& token) const {
  if (const AddedToken* a = added_.byContent(token)) return a->id;
  return bpe_->tokenToId(token);
}

std::optional<std::string> HfTokenizer::idToToken(int id) const {
  if (const AddedToken* a = added_.byId(id)) return a->content;
  if (const std::string* t = bpe_->idToToken(id)) return *t;
  return std::nullopt;
}

std::string HfTokenizer::description() const {
  return "tokenizer.json BPE (" + source().string() + ", " + std::to_string(vocabSize()) + " tokens)";
}

}  // namespace strata::text
