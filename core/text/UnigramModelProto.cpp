#include "text/UnigramModelProto.h"

#include <algorithm>
#include <set>

#include "common/Error.h"
#include "text/JsonFile.h"
#include "text/HfComponents.h"
#include "text/HfTokenizer.h"
#include "text/ProtoWriter.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;

std::string base64Decode(const std::string& in, const std::string& where) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0, buffer = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) throw IoError(where + ": not valid base64");
    buffer = (buffer << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

struct WhitespaceRules {
  std::string charsmap;
  bool removeExtraWhitespace = false;
  bool addDummyPrefix = false;
};

bool isMultiSpaceReplace(const Json& n) {
  if (n.value("type", "") != "Replace" || n.value("content", "") != " " || !n.contains("pattern")) return false;
  const Json& p = n.at("pattern");
  const std::string pattern = p.contains("String") ? p.value("String", "") : p.value("Regex", "");
  return pattern == " {2,}";
}

void readNormalizer(const Json& n, const std::string& where, WhitespaceRules& rules) {
  if (n.is_null()) return;
  const std::string type = hf::stringField(n, "type", where);
  if (type == "Precompiled") {
    const std::string b64 = n.contains("precompiled_charsmap") && n.at("precompiled_charsmap").is_string()
                                ? n.at("precompiled_charsmap").get<std::string>()
                                : "";
    rules.charsmap = base64Decode(b64, where + ".precompiled_charsmap");
  } else if (type == "Sequence") {
    const Json& list = n.at("normalizers");
    for (std::size_t i = 0; i < list.size(); ++i)
      readNormalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]", rules);
  } else if (isMultiSpaceReplace(n)) {
    rules.removeExtraWhitespace = true;
  } else {
    throw IoError(where + ": a Unigram tokenizer.json with a \"" + type +
                  "\" normalizer cannot be run as a sentencepiece model; Strata reads Unigram files only in the "
                  "form transformers writes for sentencepiece models (use the folder's spiece.model instead)");
  }
}

void readPreTokenizer(const Json& p, const std::string& where, WhitespaceRules& rules) {
  if (p.is_null()) return;
  const std::string type = hf::stringField(p, "type", where);
  if (type == "WhitespaceSplit") {
    rules.removeExtraWhitespace = true;
  } else if (type == "Metaspace") {
    if (hf::stringField(p, "replacement", where) != "\xE2\x96\x81")
      throw IoError(where + ".replacement: sentencepiece models use U+2581 only");
    const std::string scheme = p.contains("prepend_scheme") ? hf::stringField(p, "prepend_scheme", where)
                               : hf::boolField(p, "add_prefix_space", where, true) ? "always"
                                                                                   : "never";
    rules.addDummyPrefix = scheme != "never";
  } else if (type == "Sequence") {
    const Json& list = p.at("pretokenizers");
    for (std::size_t i = 0; i < list.size(); ++i)
      readPreTokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]", rules);
  } else {
    throw IoError(where + ": a Unigram tokenizer.json with a \"" + type +
                  "\" pre-tokenizer cannot be run as a sentencepiece model (use the folder's spiece.model instead)");
  }
}

}  // namespace

UnigramConversion unigramToSentencePiece(const Json& json, const std::string& file) {
  const std::string where = file + ": model";
  const Json& model = json.at("model");
  if (!model.contains("vocab") || !model.at("vocab").is_array())
    throw IoError(where + ".vocab: expected an array of [piece, score]");
  const Json& vocab = model.at("vocab");
  if (!model.contains("unk_id") || !model.at("unk_id").is_number_integer())
    throw IoError(where + ".unk_id: missing (sentencepiece needs an unknown piece)");
  const int unkId = tokenIdOf(model.at("unk_id"), where + ".unk_id");
  if (static_cast<std::size_t>(unkId) >= vocab.size())
    throw IoError(where + ".unk_id: " + std::to_string(unkId) + " is not a piece of the vocabulary");
  const bool byteFallback = hf::boolField(model, "byte_fallback", where, false);

  const AddedTokens added = readAddedTokens(json, file);
  WhitespaceRules rules;
  readNormalizer(json.contains("normalizer") ? json.at("normalizer") : Json(), file + ": normalizer", rules);
  readPreTokenizer(json.contains("pre_tokenizer") ? json.at("pre_tokenizer") : Json(), file + ": pre_tokenizer", rules);

  ProtoWriter proto;
  std::optional<int> bos, eos, pad;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    const Json& entry = vocab[i];
    const std::string at = where + ".vocab[" + std::to_string(i) + "]";
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
      throw IoError(at + ": expected [piece, score]");
    const std::string piece = entry[0].get<std::string>();
    if (piece.empty() || !seen.insert(piece).second) throw IoError(at + ": empty or repeated piece \"" + piece + "\"");
    const int id = static_cast<int>(i);
    ProtoWriter p;
    p.bytesField(1, piece);
    p.floatField(2, entry[1].get<float>());
    const bool isByte = byteFallback && piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>';
    if (id == unkId) {
      p.intField(3, 2);  // UNKNOWN
    } else if (added.byId(id)) {
      p.intField(3, 3);  // CONTROL: split out before sentencepiece sees the text
      if (piece == "<s>") bos = id;
      if (piece == "</s>") eos = id;
      if (piece == "<pad>") pad = id;
    } else if (isByte) {
      p.intField(3, 6);  // BYTE
    }
    proto.bytesField(1, p.str());
  }
  ProtoWriter trainer;
  trainer.intField(3, 1);  // UNIGRAM
  trainer.intField(4, static_cast<std::int64_t>(vocab.size()));
  if (byteFallback) trainer.intField(35, 1);
  trainer.intField(40, unkId);
  trainer.intField(41, bos.value_or(-1));
  trainer.intField(42, eos.value_or(-1));
  trainer.intField(43, pad.value_or(-1));
  proto.bytesField(2, trainer.str());
  ProtoWriter normalizer;
  normalizer.bytesField(1, rules.charsmap.empty() ? "identity" : "nmt_nfkc");
  if (!rules.charsmap.empty()) normalizer.bytesField(2, rules.charsmap);
  normalizer.intField(3, rules.addDummyPrefix ? 1 : 0);
  normalizer.intField(4, rules.removeExtraWhitespace ? 1 : 0);
  normalizer.intField(5, 1);  // escape whitespace as U+2581
  proto.bytesField(3, normalizer.str());

  // bos/eos from the post-processor: the text (a marker id) with what goes around it.
  UnigramConversion out;
  out.serializedProto = proto.str();
  out.rule = SentencePieceRule{false, false, 0, std::nullopt};
  const Json post = json.contains("post_processor") ? json.at("post_processor") : Json();
  auto lookup = [&](const std::string& t) -> std::optional<int> {
    if (const AddedToken* a = added.byContent(t)) return a->id;
    return std::nullopt;
  };
  if (auto pp = hf::makePostProcessor(post, file + ": post_processor", lookup)) {
    constexpr int kMarker = -7;
    const std::vector<int> ids = pp->apply({kMarker});
    const auto mark = std::find(ids.begin(), ids.end(), kMarker);
    const std::vector<int> before(ids.begin(), mark), after(mark + 1, ids.end());
    if (!(before.empty() || (bos && before == std::vector<int>{*bos})) ||
        !(after.empty() || (eos && after == std::vector<int>{*eos})))
      throw IoError(file +
                    ": post_processor: only \"<s>\" before and \"</s>\" after the text are supported with a "
                    "Unigram model");
    out.rule.addBos = !before.empty();
    out.rule.addEos = !after.empty();
  }
  return out;
}

}  // namespace strata::text
