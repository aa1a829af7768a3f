#pragma once
// libsentencepiece behind a small interface, loaded at run time from a module of
// our own (strata_sentencepiece, core/text/spm/) with dlopen(RTLD_LOCAL |
// RTLD_DEEPBIND). Why: Debian's libsentencepiece carries its own protobuf-lite and
// exports it; LibTorch loads the system libprotobuf. Linked into one process
// they bind each other's protobuf symbols and crash at start-up (seen here:
// libprotobuf's static init ran sentencepiece's MergeFromImpl). Loaded locally,
// each keeps its own.
#include <memory>
#include <string>
#include <vector>

namespace strata::text {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  // Each returns "" on success, else sentencepiece's message.
  virtual std::string loadSerialized(const std::string& modelProto) = 0;
  virtual std::string encode(const std::string& text, std::vector<int>& ids) const = 0;
  virtual std::string decode(const std::vector<int>& ids, std::string& text) const = 0;
  virtual int pieceCount() const = 0;
  virtual int pieceToId(const std::string& piece) const = 0;
  virtual std::string idToPiece(int id) const = 0;
  virtual bool isControl(int id) const = 0;
  virtual bool isUnknown(int id) const = 0;
  virtual int bosId() const = 0;
  virtual int eosId() const = 0;
  virtual int unkId() const = 0;
  virtual int padId() const = 0;
};

// The module's one exported function.
using CreateSentencePieceBackendFn = SentencePieceBackend* (*)();
#define STRATA_SPM_CREATE_SYMBOL "strata_create_sentencepiece_backend"

// A fresh backend. Throws strata::Error naming the module paths it tried when the
// module cannot be loaded. Search: $STRATA_SENTENCEPIECE_MODULE, the build's
// module path, then next to the running executable and in ../lib/strata/.
std::unique_ptr<SentencePieceBackend> createSentencePieceBackend();

}  // namespace strata::text
