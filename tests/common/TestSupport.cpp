#include "common/TestSupport.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <random>
#include <sstream>

namespace strata::test {

std::filesystem::path sourceDir() {
  if (const char* env = std::getenv("STRATA_SOURCE_DIR"); env && *env) return env;
  return STRATA_DEFAULT_SOURCE_DIR;
}

std::filesystem::path referenceDir() {
  if (const char* env = std::getenv("STRATA_REFERENCE_DIR"); env && *env) return env;
  return sourceDir() / "tests" / "fixtures" / "reference";
}

TempDir::TempDir() {
  std::random_device rd;
  const auto base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate = base / ("strata-test-" + std::to_string(rd()));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("TempDir: could not create a folder under " + base.string());
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int cudaDeviceCount() { return static_cast<int>(torch::cuda::device_count()); }

::testing::AssertionResult allClose(const at::Tensor& actual, const at::Tensor& expected,
                                    double atol, double rtol) {
  if (actual.sizes() != expected.sizes()) {
    std::ostringstream os;
    os << "shape " << actual.sizes() << " != expected " << expected.sizes();
    return ::testing::AssertionFailure() << os.str();
  }
  const auto a = actual.detach().to(at::kCPU, at::kDouble);
  const auto e = expected.detach().to(at::kCPU, at::kDouble);
  const auto excess = (a - e).abs() - (atol + rtol * e.abs());
  if (excess.numel() == 0 || excess.max().item<double>() <= 0.0) return ::testing::AssertionSuccess();
  const auto flat = excess.flatten().argmax().item<int64_t>();
  std::ostringstream os;
  os << "max |actual - expected| = " << (a - e).abs().max().item<double>() << " (atol " << atol
     << ", rtol " << rtol << "); worst at flat index " << flat << ": actual "
     << a.flatten()[flat].item<double>() << ", expected " << e.flatten()[flat].item<double>();
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace strata::test
