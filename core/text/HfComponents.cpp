#include "text/HfComponents.h"

#include <algorithm>
#include <cctype>

#include "common/Error.h"
#include "text/JsonFile.h"
#include "text/ByteLevel.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace strata::text::hf {
namespace {

namespace u = unicode;
using Json = nlohmann::json;
using Spans = std::vector<std::pair<std::size_t, std::size_t>>;

[[noreturn]] void unsupported(const std::string& where, const std::string& type) {
  throw IoError(where + ": type \"" + type + "\" is not supported by Strata");
}

std::string typeOf(const Json& j, const std::string& where) {
  if (!j.is_object()) throw IoError(where + ": expected an object");
  return stringField(j, "type", where);
}

// A pattern object: {"String": "..."} (literal) or {"Regex": "..."}.
class Pattern {
 public:
  Pattern(const Json& j, const std::string& where) {
    if (!j.is_object()) throw IoError(where + ": expected {\"String\": ...} or {\"Regex\": ...}");
    if (j.contains("String")) {
      literal_ = stringField(j, "String", where);
    } else if (j.contains("Regex")) {
      regex_ = std::make_unique<Regex>(stringField(j, "Regex", where), where + ".Regex");
    } else {
      throw IoError(where + ": expected {\"String\": ...} or {\"Regex\": ...}");
    }
  }

  Spans findAll(std::string_view text) const {
    if (regex_) return regex_->findAll(text);
    Spans out;
    if (literal_.empty()) return out;
    for (std::size_t p = text.find(literal_); p != std::string_view::npos; p = text.find(literal_, p + literal_.size()))
      out.emplace_back(p, p + literal_.size());
    return out;
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior behaviorOf(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw IoError(where + ": unknown split behavior \"" + name + "\"");
}

struct Segment {
  std::size_t begin, end;
  bool delimiter;
};

// Cuts `piece` at `matches` the way tokenizers' split behaviors do.
void splitPiece(const Piece& piece, const Spans& matches, Behavior behavior, bool invert, std::vector<Piece>& out) {
  const std::string& text = piece.text;
  std::vector<Segment> segs;
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) segs.push_back({prev, text.size(), invert});

  std::vector<std::pair<std::size_t, std::size_t>> kept;
  bool previousDelimiter = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& s : segs)
        if (!s.delimiter) kept.emplace_back(s.begin, s.end);
      break;
    case Behavior::kIsolated:
      for (const auto& s : segs) kept.emplace_back(s.begin, s.end);
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& s : segs) {
        if (s.delimiter && !previousDelimiter && !kept.empty())
          kept.back().second = s.end;
        else
          kept.emplace_back(s.begin, s.end);
        previousDelimiter = s.delimiter;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->delimiter && !previousDelimiter && !kept.empty())
          kept.back().first = it->begin;
        else
          kept.emplace_back(it->begin, it->end);
        previousDelimiter = it->delimiter;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::kContiguous:
      for (std::size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].delimiter == previousDelimiter)
          kept.back().second = segs[i].end;
        else
          kept.emplace_back(segs[i].begin, segs[i].end);
        previousDelimiter = segs[i].delimiter;
      }
      break;
  }
  for (const auto& [b, e] : kept)
    if (e > b) out.push_back({text.substr(b, e - b), piece.atStart && b == 0});
}

void replaceAll(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  std::size_t p = 0;
  for (std::size_t q = s.find(from); q != std::string::npos; q = s.find(from, p)) {
    out.append(s, p, q - p);
    out += to;
    p = q + from.size();
  }
  out.append(s, p, std::string::npos);
  s.swap(out);
}

// ---- normalizers ----

class NfcNormalizer : public Normalizer {
 public:
  std::string apply(std::string t) const override { return u::nfc(t); }
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string apply(std::string t) const override { return u::toLower(t); }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(const Json& j, const std::string& where)
      : pattern_(j.at("pattern"), where + ".pattern"), content_(stringField(j, "content", where)) {}
  std::string apply(std::string t) const override {
    std::string out;
    std::size_t prev = 0;
    for (const auto& [b, e] : pattern_.findAll(t)) {
      out.append(t, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(t, prev, std::string::npos);
    return out;
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  std::string apply(std::string t) const override { return t.empty() ? t : prepend_ + t; }

 private:
  std::string prepend_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string apply(std::string t) const override {
    std::u32string s = u::decodeUtf8(t);
    std::size_t b = 0, e = s.size();
    if (left_)
      while (b < e && u::isSpace(s[b])) ++b;
    if (right_)
      while (e > b && u::isSpace(s[e - 1])) --e;
    return u::encodeUtf8(s.substr(b, e - b));
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> steps;
  std::string apply(std::string t) const override {
    for (const auto& s : steps) t = s->apply(std::move(t));
    return t;
  }
};

// ---- pre-tokenizers ----

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const Json& j, const std::string& where)
      : pattern_(j.at("pattern"), where + ".pattern"),
        behavior_(behaviorOf(stringField(j, "behavior", where), where + ".behavior")),
        invert_(boolField(j, "invert", where, false)) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) splitPiece(p, pattern_.findAll(p.text), behavior_, invert_, out);
    pieces.swap(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

const Regex& gpt2Regex() {
  static const Regex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                        "ByteLevel pre-tokenizer (GPT-2 split pattern)");
  return re;
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const Json& j, const std::string& where)
      : addPrefixSpace_(boolField(j, "add_prefix_space", where, true)),
        useRegex_(boolField(j, "use_regex", where, true)) {
    if (useRegex_) gpt2Regex();  // compile once, at load
  }
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece p : pieces) {
      if (addPrefixSpace_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(p.text.begin(), ' ');
      if (useRegex_) {
        std::vector<Piece> parts;
        splitPiece(p, gpt2Regex().findAll(p.text), Behavior::kIsolated, false, parts);
        for (auto& q : parts) out.push_back({bytelevel::encode(q.text), q.atStart});
      } else if (!p.text.empty()) {
        out.push_back({bytelevel::encode(p.text), p.atStart});
      }
    }
    pieces.swap(out);
  }

 private:
  bool addPrefixSpace_, useRegex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

PrependScheme prependSchemeOf(const Json& j, const std::string& where) {
  if (j.contains("prepend_scheme")) {
    const std::string s = stringField(j, "prepend_scheme", where);
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    throw IoError(where + ".prepend_scheme: unknown value \"" + s + "\"");
  }
  // Older files: add_prefix_space (true = always).
  return boolField(j, "add_prefix_space", where, true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(const Json& j, const std::string& where)
      : replacement_(stringField(j, "replacement", where)),
        scheme_(prependSchemeOf(j, where)),
        split_(boolField(j, "split", where, true)) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece p : pieces) {
      replaceAll(p.text, " ", replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.atStart);
      if (prepend && p.text.compare(0, replacement_.size(), replacement_) != 0) p.text = replacement_ + p.text;
      if (!split_) {
        if (!p.text.empty()) out.push_back(p);
        continue;
      }
      Spans m;
      for (std::size_t q = p.text.find(replacement_); q != std::string::npos;
           q = p.text.find(replacement_, q + replacement_.size()))
        m.emplace_back(q, q + replacement_.size());
      splitPiece(p, m, Behavior::kMergedWithNext, false, out);
    }
    pieces.swap(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) {
      const std::u32string s = u::decodeUtf8(p.text);
      std::size_t i = 0;
      while (i < s.size()) {
        while (i < s.size() && u::isSpace(s[i])) ++i;
        std::size_t j = i;
        while (j < s.size() && !u::isSpace(s[j])) ++j;
        if (j > i) out.push_back({u::encodeUtf8(s.substr(i, j - i)), p.atStart && i == 0});
        i = j;
      }
    }
    pieces.swap(out);
  }
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) {
      Spans m;
      std::size_t i = 0;
      while (i < p.text.size()) {
        const std::size_t n = u::utf8Length(p.text, i);
        const std::u32string cp = u::decodeUtf8(std::string_view(p.text).substr(i, n));
        const bool digit = !cp.empty() && u::charClass(cp[0]) == u::CharClass::kNumber;
        if (digit) {
          if (!individual_ && !m.empty() && m.back().second == i)
            m.back().second = i + n;
          else
            m.emplace_back(i, i + n);
        }
        i += n;
      }
      splitPiece(p, m, Behavior::kIsolated, false, out);
    }
    pieces.swap(out);
  }

 private:
  bool individual_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps) s->apply(pieces);
  }
};

// ---- post-processors ----

class IdsPostProcessor : public PostProcessor {
 public:
  std::vector<int> before, after;
  std::vector<int> apply(std::vector<int> body) const override {
    body.insert(body.begin(), before.begin(), before.end());
    body.insert(body.end(), after.begin(), after.end());
    return body;
  }
};

class SequencePostProcessor : public PostProcessor {
 public:
  std::vector<std::unique_ptr<PostProcessor>> steps;
  std::vector<int> apply(std::vector<int> body) const override {
    for (const auto& s : steps) body = s->apply(std::move(body));
    return body;
  }
};

int tokenPairId(const Json& j, const std::string& where) {
  // ["<s>", 0]
  if (!j.is_array() || j.size() != 2 || !j[1].is_number_integer()) throw IoError(where + ": expected [token, id]");
  return tokenIdOf(j[1], where);
}

// ---- decoders ----

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all = true;
      for (char32_t cp : u::decodeUtf8(t)) {
        auto b = bytelevel::byteOf(cp);
        if (!b) {
          all = false;
          break;
        }
        mapped.push_back(static_cast<char>(*b));
      }
      bytes += all ? mapped : t;
    }
    // Invalid UTF-8 (a token cut inside a character) becomes U+FFFD.
    return {u::encodeUtf8(u::decodeUtf8(bytes))};
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(const Json& j, const std::string& where)
      : replacement_(stringField(j, "replacement", where)), scheme_(prependSchemeOf(j, where)) {}
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      replaceAll(tokens[i], replacement_, " ");
      if (i == 0 && scheme_ != PrependScheme::kNever && !tokens[i].empty() && tokens[i][0] == ' ')
        tokens[i].erase(0, 1);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) replaceAll(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
    return tokens;
  }

 private:
  std::string suffix_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    std::size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      const std::u32string cps = u::decodeUtf8(bytes);
      const bool valid = u::encodeUtf8(cps) == bytes;
      if (valid) {
        out.push_back(bytes);
      } else {
        for (std::size_t k = 0; k < count; ++k) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (const std::string& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {
        bytes.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
        ++count;
        continue;
      }
      flush();
      out.push_back(t);
    }
    flush();
    return out;
  }
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop) : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::u32string s = u::decodeUtf8(t);
      std::size_t b = 0;
      while (b < start_ && b < s.size() && s[b] == content_) ++b;
      std::size_t e = s.size();
      for (std::size_t k = 0; k < stop_ && e > b && s[e - 1] == content_; ++k) --e;
      t = u::encodeUtf8(s.substr(b, e - b));
    }
    return tokens;
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const Json& j, const std::string& where)
      : pattern_(j.at("pattern"), where + ".pattern"), content_(stringField(j, "content", where)) {}
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      std::size_t prev = 0;
      for (const auto& [b, e] : pattern_.findAll(t)) {
        out.append(t, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t = out;
    }
    return tokens;
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceDecoder : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> steps;
  std::vector<std::string> apply(std::vector<std::string> tokens) const override {
    for (const auto& s : steps) tokens = s->apply(std::move(tokens));
    return tokens;
  }
};

const Json& arrayField(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_array()) throw IoError(where + "." + key + ": expected an array");
  return j.at(key);
}

}  // namespace

std::string stringField(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw IoError(where + "." + key + ": missing");
  if (!j.at(key).is_string()) throw IoError(where + "." + key + ": expected a string");
  return j.at(key).get<std::string>();
}

bool boolField(const Json& j, const char* key, const std::string& where, bool fallback) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean()) throw IoError(where + "." + key + ": expected true or false");
  return j.at(key).get<bool>();
}

std::unique_ptr<Normalizer> makeNormalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = typeOf(j, where);
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j, where);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(stringField(j, "prepend", where));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(boolField(j, "strip_left", where, true),
                                             boolField(j, "strip_right", where, true));
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    const Json& list = arrayField(j, "normalizers", where);
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto n = makeNormalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]"))
        seq->steps.push_back(std::move(n));
    return seq;
  }
  unsupported(where, type);
}

std::unique_ptr<PreTokenizer> makePreTokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = typeOf(j, where);
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j, where);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(j, where);
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(boolField(j, "individual_digits", where, false));
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    const Json& list = arrayField(j, "pretokenizers", where);
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = makePreTokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]"))
        seq->steps.push_back(std::move(p));
    return seq;
  }
  unsupported(where, type);
}

std::unique_ptr<PostProcessor> makePostProcessor(const Json& j, const std::string& where, const TokenLookup& lookup) {
  if (j.is_null()) return nullptr;
  const std::string type = typeOf(j, where);
  if (type == "ByteLevel") return std::make_unique<IdsPostProcessor>();  // offsets only; ids unchanged
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto p = std::make_unique<IdsPostProcessor>();
    p->before.push_back(tokenPairId(j.at("cls"), where + ".cls"));
    p->after.push_back(tokenPairId(j.at("sep"), where + ".sep"));
    return p;
  }
  if (type == "TemplateProcessing") {
    auto p = std::make_unique<IdsPostProcessor>();
    const Json& single = arrayField(j, "single", where);
    const Json specials = j.contains("special_tokens") ? j.at("special_tokens") : Json::object();
    bool seenSequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      const Json& item = single[i];
      if (item.contains("Sequence")) {
        if (seenSequence) throw IoError(at + ": a second Sequence in the single template");
        seenSequence = true;
        continue;
      }
      if (!item.contains("SpecialToken")) throw IoError(at + ": expected Sequence or SpecialToken");
      const std::string name = stringField(item.at("SpecialToken"), "id", at + ".SpecialToken");
      std::vector<int> ids;
      if (specials.contains(name) && specials.at(name).contains("ids")) {
        for (const auto& id : specials.at(name).at("ids")) ids.push_back(tokenIdOf(id, at + ".ids"));
      } else if (auto id = lookup(name)) {
        ids.push_back(*id);
      } else {
        throw IoError(at + ": special token \"" + name + "\" is neither in special_tokens nor in the vocabulary");
      }
      auto& target = seenSequence ? p->after : p->before;
      target.insert(target.end(), ids.begin(), ids.end());
    }
    if (!seenSequence) throw IoError(where + ".single: no Sequence item (where the text goes)");
    return p;
  }
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePostProcessor>();
    const Json& list = arrayField(j, "processors", where);
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = makePostProcessor(list[i], where + ".processors[" + std::to_string(i) + "]", lookup))
        seq->steps.push_back(std::move(p));
    return seq;
  }
  unsupported(where, type);
}

std::unique_ptr<Decoder> makeDecoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = typeOf(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(j, where);
  if (type == "BPEDecoder")
    return std::make_unique<BpeSuffixDecoder>(j.contains("suffix") ? stringField(j, "suffix", where) : "</w>");
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j, where);
  if (type == "Strip") {
    const std::u32string content = u::decodeUtf8(stringField(j, "content", where));
    if (content.size() != 1) throw IoError(where + ".content: expected one character");
    auto count = [&](const char* key) {
      if (!j.contains(key) || !j.at(key).is_number_integer() || j.at(key).get<std::int64_t>() < 0)
        throw IoError(where + "." + key + ": expected a count");
      return j.at(key).get<std::size_t>();
    };
    return std::make_unique<StripDecoder>(content[0], count("start"), count("stop"));
  }
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    const Json& list = arrayField(j, "decoders", where);
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto d = makeDecoder(list[i], where + ".decoders[" + std::to_string(i) + "]"))
        seq->steps.push_back(std::move(d));
    return seq;
  }
  unsupported(where, type);
}

}  // namespace strata::text::hf
