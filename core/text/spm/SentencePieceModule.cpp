// The strata_sentencepiece module: the only code that links libsentencepiece.
// Loaded with RTLD_LOCAL | RTLD_DEEPBIND (see SentencePieceBackend.h).
#include <sentencepiece_processor.h>

#include "text/SentencePieceBackend.h"

namespace {

class Backend final : public strata::text::SentencePieceBackend {
 public:
  std::string loadSerialized(const std::string& modelProto) override {
    const auto status = sp_.LoadFromSerializedProto(modelProto);
    return status.ok() ? std::string() : status.ToString();
  }
  std::string encode(const std::string& text, std::vector<int>& ids) const override {
    const auto status = sp_.Encode(text, &ids);
    return status.ok() ? std::string() : status.ToString();
  }
  std::string decode(const std::vector<int>& ids, std::string& text) const override {
    const auto status = sp_.Decode(ids, &text);
    return status.ok() ? std::string() : status.ToString();
  }
  int pieceCount() const override { return sp_.GetPieceSize(); }
  int pieceToId(const std::string& piece) const override { return sp_.PieceToId(piece); }
  std::string idToPiece(int id) const override { return sp_.IdToPiece(id); }
  bool isControl(int id) const override { return sp_.IsControl(id); }
  bool isUnknown(int id) const override { return sp_.IsUnknown(id); }
  int bosId() const override { return sp_.bos_id(); }
  int eosId() const override { return sp_.eos_id(); }
  int unkId() const override { return sp_.unk_id(); }
  int padId() const override { return sp_.pad_id(); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) strata::text::SentencePieceBackend*
strata_create_sentencepiece_backend() {
  return new Backend();
}
