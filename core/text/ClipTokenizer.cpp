#include "text/ClipTokenizer.h"

#include "common/Error.h"
#include "io/FileBytes.h"
#include "text/ByteLevel.h"
#include "text/JsonFile.h"
#include "text/Unicode.h"

namespace strata::text {
namespace {

namespace u = unicode;

// The reference reads at most this many merges (49152 tokens - 256 bytes - 2 specials).
constexpr std::size_t kClipMaxMerges = 49152 - 256 - 2;

std::unordered_map<std::string, int> readVocab(const std::filesystem::path& path) {
  const nlohmann::json j = readJsonFile(path);
  if (!j.is_object()) throw IoError(path.string() + ": expected a JSON object of token -> id");
  std::unordered_map<std::string, int> vocab;
  vocab.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    vocab.emplace(it.key(), tokenIdOf(it.value(), path.string() + ": token \"" + it.key() + "\""));
  }
  if (vocab.empty()) throw IoError(path.string() + ": the vocabulary is empty");
  return vocab;
}

std::vector<BpeMerge> readMerges(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw IoError(path.string() + ": file not found");
  const std::string bytes = io::readFileBytes(path);
  std::vector<BpeMerge> merges;
  std::size_t lineNo = 0;
  std::size_t pos = 0;
  while (pos < bytes.size() && merges.size() < kClipMaxMerges) {
    std::size_t end = bytes.find('\n', pos);
    if (end == std::string::npos) end = bytes.size();
    std::string line = bytes.substr(pos, end - pos);
    pos = end + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineNo == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      throw IoError(path.string() + ":" + std::to_string(lineNo) +
                    ": expected two tokens separated by one space, got \"" + line + "\"");
    merges.push_back({line.substr(0, space), line.substr(space + 1), path.string() + ":" + std::to_string(lineNo)});
  }
  if (merges.empty()) throw IoError(path.string() + ": no merges in the file");
  return merges;
}

bool isSpaceClass(char32_t cp) { return u::isSpace(cp); }
bool isLetter(char32_t cp) { return u::charClass(cp) == u::CharClass::kLetter; }
bool isNumber(char32_t cp) { return u::charClass(cp) == u::CharClass::kNumber; }

// CLIP's pattern: <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
std::vector<std::u32string> clipSplit(const std::u32string& s) {
  static const std::u32string kContractions[] = {U"'s", U"'t", U"'re", U"'ve", U"'m", U"'ll", U"'d"};
  static const std::u32string kSpecials[] = {U"<|startoftext|>", U"<|endoftext|>"};
  std::vector<std::u32string> out;
  std::size_t i = 0;
  auto startsWith = [&](const std::u32string& p) { return s.compare(i, p.size(), p) == 0; };
  while (i < s.size()) {
    bool matched = false;
    for (const auto& p : kSpecials) {
      if (startsWith(p)) {
        out.push_back(p);
        i += p.size();
        matched = true;
        break;
      }
    }
    if (matched) continue;
    for (const auto& p : kContractions) {
      if (startsWith(p)) {
        out.push_back(p);
        i += p.size();
        matched = true;
        break;
      }
    }
    if (matched) continue;
    const char32_t c = s[i];
    std::size_t j = i + 1;
    if (isLetter(c)) {
      while (j < s.size() && isLetter(s[j])) ++j;
    } else if (isNumber(c)) {
      // one digit at a time
    } else if (!isSpaceClass(c)) {
      while (j < s.size() && !isSpaceClass(s[j]) && !isLetter(s[j]) && !isNumber(s[j])) ++j;
    } else {
      ++i;  // whitespace is not part of any token
      continue;
    }
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

ClipTokenizer::ClipTokenizer(const std::filesystem::path& vocabJson, const std::filesystem::path& mergesTxt,
                             ClipTokenizerOptions options)
    : Tokenizer(vocabJson.parent_path()) {
  BpeOptions bpe;
  bpe.endOfWordSuffix = "</w>";
  bpe.unkToken = options.unkToken;
  auto vocab = readVocab(vocabJson);
  auto need = [&](const std::string& token, const char* role) {
    auto it = vocab.find(token);
    if (it == vocab.end())
      throw IoError(vocabJson.string() + ": the " + std::string(role) + " token \"" + token +
                    "\" is not in the vocabulary");
    return it->second;
  };
  special_.bos = need(options.bosToken, "start");
  special_.eos = need(options.eosToken, "end");
  special_.pad = need(options.padToken, "pad");
  special_.unk = need(options.unkToken, "unknown");
  for (const std::string* t : {&options.bosToken, &options.eosToken}) {
    AddedToken a;
    a.content = *t;
    a.id = vocab.at(*t);
    a.special = true;
    added_.add(a);
  }
  bpe_ = std::make_unique<BpeModel>(std::move(vocab), readMerges(mergesTxt), bpe, vocabJson.string());
}

std::string ClipTokenizer::cleanText(const std::string& text) {
  // Basic clean: drop NUL, U+FFFD and control/format characters; whitespace -> space;
  // CJK ideographs get spaces around them.
  std::u32string cleaned;
  for (char32_t cp : u::decodeUtf8(text)) {
    if (cp == 0 || cp == 0xFFFD) continue;
    const bool tabOrNewline = cp == '\t' || cp == '\n' || cp == '\r';
    if (!tabOrNewline && u::charClass(cp) == u::CharClass::kOther) continue;
    if (tabOrNewline || u::charClass(cp) == u::CharClass::kSpaceSep) {
      cleaned.push_back(' ');
    } else if (u::isCjk(cp)) {
      cleaned.push_back(' ');
      cleaned.push_back(cp);
      cleaned.push_back(' ');
    } else {
      cleaned.push_back(cp);
    }
  }
  cleaned = u::toLower(u::nfc(cleaned));
  // Whitespace fold: words joined by single spaces, no space at either end.
  std::u32string folded;
  bool pendingSpace = false;
  for (char32_t cp : cleaned) {
    if (u::isSpace(cp)) {
      pendingSpace = !folded.empty();
      continue;
    }
    if (pendingSpace) folded.push_back(' ');
    pendingSpace = false;
    folded.push_back(cp);
  }
  return u::encodeUtf8(folded);
}

std::vector<int> ClipTokenizer::encodeBody(const std::string& text) const {
  std::vector<int> ids;
  for (const TextPiece& piece : added_.split(text, false)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    for (const std::u32string& word : clipSplit(u::decodeUtf8(cleanText(piece.text))))
      bpe_->encodeWord(bytelevel::encode(u::encodeUtf8(word)), ids);
  }
  return ids;
}

std::vector<int> ClipTokenizer::addSpecialTokens(std::vector<int> body) const {
  body.insert(body.begin(), *special_.bos);
  body.push_back(*special_.eos);
  return body;
}

std::optional<std::string> ClipTokenizer::idToToken(int id) const {
  const std::string* t = bpe_->idToToken(id);
  if (!t) return std::nullopt;
  return *t;
}

std::string ClipTokenizer::decode(const std::vector<int>& ids, bool skipSpecialTokens) const {
  // Runs of ordinary tokens: byte-decode, "</w>" -> space, trim; special tokens
  // stand alone, joined to the runs by single spaces (the reference's default).
  std::vector<std::string> parts;
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    std::string text = u::encodeUtf8(u::decodeUtf8(bytes));
    std::string spaced;
    for (std::size_t i = 0; i < text.size();) {
      if (text.compare(i, 4, "</w>") == 0) {
        spaced += ' ';
        i += 4;
      } else {
        spaced += text[i++];
      }
    }
    const auto b = spaced.find_first_not_of(' ');
    const auto e = spaced.find_last_not_of(' ');
    if (b != std::string::npos) parts.push_back(spaced.substr(b, e - b + 1));
    bytes.clear();
  };
  for (int id : ids) {
    if (const AddedToken* a = added_.byId(id)) {
      if (skipSpecialTokens && a->special) continue;
      flush();
      parts.push_back(a->content);
      continue;
    }
    const std::string* token = bpe_->idToToken(id);
    if (!token) continue;
    for (char32_t cp : u::decodeUtf8(*token)) {
      if (auto b = bytelevel::byteOf(cp)) {
        bytes.push_back(static_cast<char>(*b));
      } else {
        u::appendUtf8(bytes, cp);
      }
    }
  }
  flush();
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? " " : "") + parts[i];
  return out;
}

std::string ClipTokenizer::description() const {
  return "CLIP BPE (vocab.json + merges.txt in " + source().string() + ")";
}

}  // namespace strata::text
