#include "common/TestSupport.h"

#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

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
  // mkdtemp: the simplest way to a unique folder. (The crashes once seen here on
  // the GPU machine came from two libstdc++ copies; see cmake/StrataTorch.cmake.)
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/strata-test-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    throw std::runtime_error("TempDir: could not create a folder from " + pattern + ": " + std::strerror(errno));
  }
  path_ = buffer.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int cudaDeviceCount() { return static_cast<int>(torch::cuda::device_count()); }

double relL2(const at::Tensor& a, const at::Tensor& ref) {
  const auto r = ref.detach().to(at::kCPU, at::kDouble);
  return (a.detach().to(at::kCPU, at::kDouble) - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-300);
}

::testing::AssertionResult allClose(const at::Tensor& actual, const at::Tensor& expected, double atol, double rtol) {
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
  os << "max |actual - expected| = " << (a - e).abs().max().item<double>() << " (atol " << atol << ", rtol " << rtol
     << "); worst at flat index " << flat << ": actual " << a.flatten()[flat].item<double>() << ", expected "
     << e.flatten()[flat].item<double>();
  return ::testing::AssertionFailure() << os.str();
}

int freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

}  // namespace strata::test
