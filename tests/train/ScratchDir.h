#pragma once
// A fresh folder under $TMPDIR (mkdtemp), removed with everything in it when
// the object dies.
#include <stdlib.h>

#include <cstdlib>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::test {

class ScratchDir {
 public:
  ScratchDir() {
    // $TMPDIR or /tmp, without std::filesystem::temp_directory_path(), which
    // crashed in the test binaries on the GPU machine (LibTorch 2.11 wheel).
    const char* env = std::getenv("TMPDIR");
    std::string pattern = std::string(env && *env ? env : "/tmp") + "/strata-train-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("ScratchDir: mkdtemp failed for " + pattern);
    path_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace strata::test
