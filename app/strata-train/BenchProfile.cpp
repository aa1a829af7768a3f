#include "BenchProfile.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace strata::cli {

namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

// KinetoEvent reports microseconds in 1.13 and nanoseconds from 2.x on (startNs and
// durationNs came together).
template <class E, class = void>
struct ReportsNs : std::false_type {};
template <class E>
struct ReportsNs<E, std::void_t<decltype(std::declval<const E&>().durationNs())>> : std::true_type {};

template <class E>
double durationMs(const E& e) {
  if constexpr (ReportsNs<E>::value)
    return static_cast<double>(e.durationNs()) * 1e-6;
  else
    return static_cast<double>(e.durationUs()) * 1e-3;
}

template <class E>
double startMs(const E& e) {
  if constexpr (ReportsNs<E>::value)
    return static_cast<double>(e.startNs()) * 1e-6;
  else
    return static_cast<double>(e.startUs()) * 1e-3;
}

// Strata's own ranges (record_function "strata::data_and_forward", ...): the profiler
// mirrors them on the device's timeline, but they are spans of the step, not kernels.
// Strata's own kernels are named "strata::dit::cuda::...Kernel(args)": a kernel's name
// has its parameter list, a range's has none.
bool isStrataRange(const std::string& name) {
  return name.rfind("strata::", 0) == 0 && name.find('(') == std::string::npos;
}

// The length of the union of [start, end) intervals.
double unionMs(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0.0, start = 0.0, end = 0.0;
  bool open = false;
  for (const auto& [s, e] : spans) {
    if (open && s <= end) {
      end = std::max(end, e);
      continue;
    }
    if (open) total += end - start;
    start = s;
    end = e;
    open = true;
  }
  return open ? total + (end - start) : total;
}

prof::ProfilerConfig config() { return prof::ProfilerConfig(prof::ProfilerState::KINETO); }

std::set<impl::ActivityType> activities() { return {impl::ActivityType::CPU, impl::ActivityType::CUDA}; }

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

void BenchProfile::start() {
  if (running_) return;
  prof::prepareProfiler(config(), activities());
  prof::enableProfiler(config(), activities());
  running_ = true;
}

void BenchProfile::checkCanSave(const std::string& tracePath) {
  BenchProfile probe;
  probe.start();
  probe.stop(tracePath);
  std::error_code ec;
  std::filesystem::remove(tracePath, ec);
}

std::vector<KernelTotal> BenchProfile::stop(const std::string& tracePath) {
  if (!running_) return {};
  running_ = false;
  auto result = prof::disableProfiler();
  if (!result) throw std::runtime_error("the profiler returned no result");
  std::map<std::string, KernelTotal> byName;
  std::vector<std::pair<double, double>> spans;  // [start, end) of each kernel, ms
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA || isStrataRange(e.name())) continue;
    auto& t = byName[e.name()];
    t.name = e.name();
    t.count += 1;
    t.totalMs += durationMs(e);
    spans.emplace_back(startMs(e), startMs(e) + durationMs(e));
  }
  busyMs_ = unionMs(spans);
  spanMs_ = 0.0;
  if (!spans.empty()) {
    double first = spans.front().first, last = spans.front().second;
    for (const auto& [s, e] : spans) {
      first = std::min(first, s);
      last = std::max(last, e);
    }
    spanMs_ = last - first;
  }
  if (!tracePath.empty()) {
    // save() says nothing when it writes nothing (a LibTorch built without kineto,
    // an unwritable path): the file is what counts.
    std::error_code ec;
    std::filesystem::remove(tracePath, ec);
    try {
      result->save(tracePath);
    } catch (const c10::Error& e) {
      // Debian's LibTorch is built without kineto (USE_KINETO=0): no trace can be saved.
      throw std::runtime_error(tracePath + ": " + e.what_without_backtrace() +
                               " (this LibTorch cannot write a trace; a LibTorch with kineto, such as the "
                               "Python wheel's, can)");
    }
    if (!std::filesystem::is_regular_file(tracePath, ec) || std::filesystem::file_size(tracePath, ec) == 0)
      throw std::runtime_error(tracePath + ": the profiler wrote no trace (" +
                               (result->events().empty() ? "it recorded no events: this LibTorch's profiler (kineto) "
                                                           "records nothing here"
                                                         : "the file could not be written") +
                               ")");
  }
  std::vector<KernelTotal> out;
  out.reserve(byName.size());
  for (auto& [name, t] : byName) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const KernelTotal& a, const KernelTotal& b) { return a.totalMs > b.totalMs; });
  return out;
}

std::string kernelGroup(const std::string& name) {
  // Order matters: flash kernels are also cutlass templates, copies are elementwise kernels.
  if (contains(name, "flash") || contains(name, "fmha") || contains(name, "attention") || contains(name, "cudnn"))
    return "attention";
  if (contains(name, "gemm") || contains(name, "nvjet") || contains(name, "xmma") || contains(name, "cutlass") ||
      contains(name, "splitKreduce") || contains(name, "cublas"))
    return "gemm";
  if (contains(name, "adam") || contains(name, "Adam") || contains(name, "multi_tensor_apply")) return "optimizer";
  if (contains(name, "layer_norm") || contains(name, "LayerNorm") || contains(name, "rms_norm") ||
      contains(name, "RmsNorm"))
    return "norm";
  if (contains(name, "reduce_kernel") || contains(name, "Reduce")) return "reduce";
  if (contains(name, "CatArray") || contains(name, "copy") || contains(name, "Memcpy") || contains(name, "Memset"))
    return "copy/cat";
  if (contains(name, "elementwise")) return "elementwise";
  return "other";
}

}  // namespace strata::cli
