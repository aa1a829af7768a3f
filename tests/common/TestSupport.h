#pragma once
// Shared helpers for the core test suites.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace strata::test {

// The project's source folder (env STRATA_SOURCE_DIR, else the configure-time path).
std::filesystem::path sourceDir();

// Root of the reference fixtures: $STRATA_REFERENCE_DIR or tests/fixtures/reference.
std::filesystem::path referenceDir();

// A fresh empty folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A loopback TCP port nothing listens on now (the kernel's pick for a socket bound
// to port 0): for tests that start a rendezvous.
int freeLoopbackPort();

// Number of CUDA devices LibTorch sees (0 on a CPU build).
int cudaDeviceCount();

// ::testing::AssertionSuccess when |a - b| <= atol + rtol |b| everywhere, else a
// message with the largest deviation and where it is.
::testing::AssertionResult allClose(const at::Tensor& actual, const at::Tensor& expected, double atol, double rtol);

// ||a - ref|| / ||ref|| in double precision (on the CPU); 0 / 0 counts as 0.
double relL2(const at::Tensor& a, const at::Tensor& ref);

}  // namespace strata::test

// Skips the current test (with the reason) unless `n` CUDA devices exist.
#define STRATA_REQUIRE_CUDA_DEVICES(n)                                                            \
  do {                                                                                            \
    const int strataCudaCount = ::strata::test::cudaDeviceCount();                                \
    if (strataCudaCount < (n))                                                                    \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this machine has " << strataCudaCount; \
  } while (0)
