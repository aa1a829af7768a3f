#include "text/SentencePieceBackend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "common/Error.h"

namespace strata::text {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModuleName = "libstrata_sentencepiece.so";

std::vector<fs::path> candidates() {
  std::vector<fs::path> out;
  if (const char* env = std::getenv("STRATA_SENTENCEPIECE_MODULE"); env && *env) out.emplace_back(env);
#ifdef STRATA_SPM_MODULE_PATH
  out.emplace_back(STRATA_SPM_MODULE_PATH);
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back(exe.parent_path() / kModuleName);
    out.push_back(exe.parent_path().parent_path() / "lib" / "strata" / kModuleName);
  }
  return out;
}

CreateSentencePieceBackendFn loadModule() {
  static std::once_flag once;
  static CreateSentencePieceBackendFn create = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    std::string tried;
    for (const fs::path& p : candidates()) {
      if (!fs::exists(p)) {
        tried += "\n  " + p.string() + " (not there)";
        continue;
      }
      void* handle = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!handle) {
        const char* err = ::dlerror();
        tried += "\n  " + p.string() + " (" + (err ? err : "dlopen failed") + ")";
        continue;
      }
      // The module stays loaded for the life of the process.
      create = reinterpret_cast<CreateSentencePieceBackendFn>(::dlsym(handle, STRATA_SPM_CREATE_SYMBOL));
      if (create) return;
      tried += "\n  " + p.string() + " (no " STRATA_SPM_CREATE_SYMBOL ")";
    }
    failure = "sentencepiece tokenizers need Strata's module " + std::string(kModuleName) +
              " (built with Strata; set STRATA_SENTENCEPIECE_MODULE to its path); tried:" + tried;
  });
  if (!create) throw Error(failure);
  return create;
}

}  // namespace

std::unique_ptr<SentencePieceBackend> createSentencePieceBackend() {
  return std::unique_ptr<SentencePieceBackend>(loadModule()());
}

}  // namespace strata::text
