#include "text/SentencePieceTokenizer.h"

#include "common/Error.h"
#include "io/FileBytes.h"

namespace strata::text {

SentencePieceTokenizer::SentencePieceTokenizer(const std::filesystem::path& model, SentencePieceRule rule)
    : Tokenizer(model), sp_(createSentencePieceBackend()), rule_(std::move(rule)) {
  if (!std::filesystem::exists(model)) throw IoError(model.string() + ": file not found");
  // Read the bytes ourselves: our error names the file, and no path encoding issues.
  const std::string bytes = io::readFileBytes(model);
  const std::string status = sp_->loadSerialized(bytes);
  if (!status.empty())
    throw IoError(model.string() + ": not a sentencepiece model (" + std::to_string(bytes.size()) +
                  " bytes): " + status);
  setUp();
}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& serializedProto, const std::filesystem::path& source,
                                               SentencePieceRule rule)
    : Tokenizer(source), sp_(createSentencePieceBackend()), rule_(std::move(rule)) {
  const std::string status = sp_->loadSerialized(serializedProto);
  if (!status.empty())
    throw IoError(source.string() + ": sentencepiece refused the model built from this file: " + status);
  setUp();
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::setUp() {
  pieceCount_ = sp_->pieceCount();
  auto idOrNone = [](int id) { return id >= 0 ? std::optional<int>(id) : std::nullopt; };
  special_.bos = idOrNone(sp_->bosId());
  special_.eos = idOrNone(sp_->eosId());
  special_.unk = idOrNone(sp_->unkId());
  special_.pad = idOrNone(sp_->padId());
  if (rule_.padToken) {
    const int id = sp_->pieceToId(*rule_.padToken);
    if (sp_->idToPiece(id) == *rule_.padToken) special_.pad = id;
  }
  if (rule_.addBos && !special_.bos)
    throw IoError(source().string() + ": the model has no bos piece, which this tokenizer's rule puts first");
  if (rule_.addEos && !special_.eos)
    throw IoError(source().string() + ": the model has no eos piece, which this tokenizer's rule puts last");
  for (int id = 0; id < pieceCount_; ++id) {
    if (sp_->isControl(id) || sp_->isUnknown(id)) {
      AddedToken t;
      t.content = sp_->idToPiece(id);
      t.id = id;
      t.special = true;
      added_.add(t);
    }
  }
  // transformers numbers <extra_id_0> highest: pieces + extraIds - 1 down to pieces.
  for (int n = 0; n < rule_.extraIds; ++n) {
    AddedToken t;
    t.content = "<extra_id_" + std::to_string(n) + ">";
    t.id = pieceCount_ + rule_.extraIds - 1 - n;
    t.special = true;
    added_.add(t);
  }
}

std::vector<int> SentencePieceTokenizer::encodeBody(const std::string& text) const {
  std::vector<int> ids;
  for (const TextPiece& piece : added_.split(text, false)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    std::vector<int> part;
    const std::string status = sp_->encode(piece.text, part);
    if (!status.empty()) throw Error(source().string() + ": sentencepiece could not encode the text: " + status);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::vector<std::string> SentencePieceTokenizer::pieces(const std::string& text) const {
  std::vector<std::string> out;
  for (int id : encodeBody(text)) out.push_back(idToToken(id).value_or("?"));
  return out;
}

std::vector<int> SentencePieceTokenizer::addSpecialTokens(std::vector<int> body) const {
  if (rule_.addBos) body.insert(body.begin(), *special_.bos);
  if (rule_.addEos) body.push_back(*special_.eos);
  return body;
}

std::string SentencePieceTokenizer::decode(const std::vector<int>& ids, bool skipSpecialTokens) const {
  std::string out;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    const std::string status = sp_->decode(run, text);
    if (!status.empty()) throw Error(source().string() + ": sentencepiece could not decode: " + status);
    out += text;
    run.clear();
  };
  for (int id : ids) {
    if (const AddedToken* a = added_.byId(id)) {
      flush();
      if (!skipSpecialTokens) out += a->content;
      continue;
    }
    if (id < 0 || id >= pieceCount_) continue;  // not a piece of this model
    run.push_back(id);
  }
  flush();
  return out;
}

int SentencePieceTokenizer::vocabSize() const { return pieceCount_ + rule_.extraIds; }

std::optional<int> SentencePieceTokenizer::tokenToId(const std::string& token) const {
  if (const AddedToken* a = added_.byContent(token)) return a->id;
  const int id = sp_->pieceToId(token);
  if (id >= 0 && id < pieceCount_ && sp_->idToPiece(id) == token) return id;
  return std::nullopt;
}

std::optional<std::string> SentencePieceTokenizer::idToToken(int id) const {
  if (const AddedToken* a = added_.byId(id)) return a->content;
  if (id < 0 || id >= pieceCount_) return std::nullopt;
  return sp_->idToPiece(id);
}

std::string SentencePieceTokenizer::description() const {
  return "sentencepiece (" + source().string() + ", " + std::to_string(pieceCount_) + " pieces)";
}

}  // namespace strata::text
