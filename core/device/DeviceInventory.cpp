#include "device/DeviceInventory.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "common/Error.h"
#include "common/Text.h"
#include "common/TorchCompat.h"
#include "device/DeviceSelection.h"

#ifdef STRATA_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace strata::device {

namespace {

std::mutex gCapMutex;
std::map<int, int64_t> gCaps;  // device index -> cap set by setMemoryCap

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

int64_t parseByteSize(const std::string& text) {
  const std::string t = toLowerAscii(trim(text));
  size_t pos = 0;
  while (pos < t.size() && (std::isdigit(static_cast<unsigned char>(t[pos])) || t[pos] == '.')) ++pos;
  if (pos == 0) throw ConfigError("size '" + text + "': expected a number with a unit, e.g. 16GB");
  const std::string number = t.substr(0, pos);
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(value))
    throw ConfigError("size '" + text + "': '" + number + "' is not a number");
  const std::string unit = trim(t.substr(pos));
  static const std::map<std::string, double> kUnits = {{"b", 1.0},
                                                       {"kb", 1e3},
                                                       {"mb", 1e6},
                                                       {"gb", 1e9},
                                                       {"tb", 1e12},
                                                       {"kib", 1024.0},
                                                       {"mib", 1048576.0},
                                                       {"gib", 1073741824.0},
                                                       {"tib", 1099511627776.0},
                                                       {"g", 1e9},
                                                       {"m", 1e6}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) {
    throw ConfigError("size '" + text + "': unknown unit '" + unit + "' (use GB, GiB, MB, MiB, TB)");
  }
  if (!(value > 0)) throw ConfigError("size '" + text + "': must be positive");
  // Checked before the conversion: beyond int64 a size would wrap to a negative one.
  const double bytes = value * it->second;
  if (!(bytes <= static_cast<double>(kMaxDeviceBytes)))
    throw ConfigError("size '" + text + "': more than " + formatBytes(kMaxDeviceBytes) + " is not a device");
  if (bytes < 1) throw ConfigError("size '" + text + "': less than a byte");
  return static_cast<int64_t>(std::llround(bytes));
}

DeviceInfo cpuDevice() {
  DeviceInfo d;
  d.index = -1;
  d.name = "cpu";
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageSize = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && pageSize > 0) d.totalBytes = static_cast<int64_t>(pages) * pageSize;
  return d;
}

std::vector<DeviceInfo> parseDeviceSpec(const std::string& spec) {
  std::vector<DeviceInfo> out;
  if (trim(spec).empty()) {
    throw ConfigError("--devices: empty device list (examples: 4x16GB, 24GB,16GB, cpu,2x80GB)");
  }
  int nextGpu = 0;
  bool haveCpu = false;
  // Every item between commas, the empty ones too (getline drops a trailing one: "1x16GB,").
  std::vector<std::string> items;
  for (size_t begin = 0;;) {
    const size_t comma = spec.find(',', begin);
    items.push_back(spec.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  for (const std::string& item : items) {
    const std::string raw = trim(item);
    const std::string it = toLowerAscii(raw);
    if (it.empty()) throw ConfigError("--devices '" + spec + "': empty item between commas");
    if (it == "cpu" || startsWith(it, "cpu:")) {
      if (haveCpu) throw ConfigError("--devices '" + spec + "': cpu listed twice");
      haveCpu = true;
      DeviceInfo d = cpuDevice();
      d.simulated = true;
      if (it.size() > 4) d.totalBytes = parseByteSize(raw.substr(4));
      out.push_back(d);
      continue;
    }
    int64_t count = 1;
    std::string sizeText = raw;
    const size_t x = it.find('x');
    if (x != std::string::npos) {
      const std::string countText = trim(it.substr(0, x));
      if (countText.empty() || countText.find_first_not_of("0123456789") != std::string::npos) {
        throw ConfigError("--devices '" + spec + "': item '" + raw + "' should be COUNTxSIZE, e.g. 4x16GB");
      }
      // At most two digits matter (1..64); a longer text would overflow stoll.
      count = countText.size() > 3 ? 0 : std::stoll(countText);
      if (count < 1 || count > kMaxSimulatedDevices) {
        throw ConfigError("--devices '" + spec + "': item '" + raw + "': count must be 1..64");
      }
      sizeText = raw.substr(x + 1);
    }
    int64_t bytes = 0;
    try {
      bytes = parseByteSize(sizeText);
    } catch (const ConfigError& e) {
      throw ConfigError("--devices '" + spec + "': " + e.what());
    }
    for (int64_t i = 0; i < count; ++i) {
      DeviceInfo d;
      d.index = nextGpu++;
      d.name = "simulated " + formatBytes(bytes);
      d.ccMajor = 8;  // assume a bf16-capable card; the spec has no architecture
      d.ccMinor = 0;
      d.totalBytes = bytes;
      d.simulated = true;
      out.push_back(d);
    }
  }
  return out;
}

std::vector<DeviceInfo> listDevices() {
  std::vector<DeviceInfo> out;
#ifdef STRATA_HAS_CUDA
  const int n = static_cast<int>(c10::cuda::device_count());
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      throw PlacementError("cudaGetDeviceProperties failed for cuda:" + std::to_string(i));
    }
    DeviceInfo d;
    d.index = i;
    d.name = prop.name;
    d.ccMajor = prop.major;
    d.ccMinor = prop.minor;
    d.totalBytes = static_cast<int64_t>(prop.totalGlobalMem);
    out.push_back(d);
  }
#endif
  return out;
}

#ifdef STRATA_HAS_CUDA
namespace {
// LibTorch sets its CUDA caching allocator up lazily, on the first CUDA tensor;
// before that its statistics crash and setMemoryFraction throws "Allocator not
// initialized". Creating one tiny tensor runs that set-up for every device.
void ensureCudaAllocatorReady() {
  static std::once_flag once;
  std::call_once(once, [] { (void)at::empty({1}, at::TensorOptions().device(at::kCUDA)); });
}
}  // namespace
#endif

void resetPeakMemory(int index) {
#ifdef STRATA_HAS_CUDA
  if (index < 0 || index >= static_cast<int>(c10::cuda::device_count())) return;
  ensureCudaAllocatorReady();
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
#endif
}

void synchronize(int index) {
#ifdef STRATA_HAS_CUDA
  if (index < 0 || index >= static_cast<int>(c10::cuda::device_count())) return;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  c10::cuda::device_synchronize();
#else
  (void)index;
#endif
}

MemoryFigures memoryFigures(int index) {
  MemoryFigures f;
  if (index < 0) return f;
  f.capBytes = memoryCap(index);
#ifdef STRATA_HAS_CUDA
  if (index >= static_cast<int>(c10::cuda::device_count())) return f;
  ensureCudaAllocatorReady();
  // Stat index 0 is the aggregate over pool types in every LibTorch version.
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  f.allocatedBytes = stats.allocated_bytes[0].current;
  f.reservedBytes = stats.reserved_bytes[0].current;
  f.peakAllocatedBytes = stats.allocated_bytes[0].peak;
  f.peakReservedBytes = stats.reserved_bytes[0].peak;
  size_t freeB = 0, totalB = 0;
  {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
    if (cudaMemGetInfo(&freeB, &totalB) == cudaSuccess) {
      f.freeBytes = static_cast<int64_t>(freeB);
      f.totalBytes = static_cast<int64_t>(totalB);
      f.known = true;
    } else {
      (void)cudaGetLastError();  // clear the sticky-free error state
    }
  }
#endif
  return f;
}

void setMemoryCap(int index, int64_t capBytes) {
#ifdef STRATA_HAS_CUDA
  if (index < 0 || index >= static_cast<int>(c10::cuda::device_count())) {
    throw PlacementError("memory cap for cuda:" + std::to_string(index) + ": no such device (this machine has " +
                         std::to_string(c10::cuda::device_count()) + ")");
  }
  ensureCudaAllocatorReady();
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, index);
  const auto total = static_cast<int64_t>(prop.totalGlobalMem);
  if (capBytes > total) {
    throw PlacementError("memory cap " + formatBytes(capBytes) + " for cuda:" + std::to_string(index) +
                         " exceeds its memory " + formatBytes(total));
  }
  const double fraction = capBytes > 0 ? static_cast<double>(capBytes) / static_cast<double>(total) : 1.0;
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(index));
#if STRATA_TORCH_AT_LEAST(2, 1)
  // Under a cap, memory the allocator holds in half-used segments is lost to the
  // run (a 16 GB FLUX run failed with 0.8 GB reserved but free): expandable
  // segments grow in place instead. A PYTORCH_CUDA_ALLOC_CONF the user set wins.
  if (capBytes > 0 && std::getenv("PYTORCH_CUDA_ALLOC_CONF") == nullptr)
    c10::cuda::CUDACachingAllocator::setAllocatorSettings("expandable_segments:True");
#endif
  std::lock_guard<std::mutex> lock(gCapMutex);
  if (capBytes > 0)
    gCaps[index] = capBytes;
  else
    gCaps.erase(index);
#else
  (void)capBytes;
  throw PlacementError("memory cap for cuda:" + std::to_string(index) + ": this build of Strata has no CUDA");
#endif
}

int64_t memoryCap(int index) {
  std::lock_guard<std::mutex> lock(gCapMutex);
  auto it = gCaps.find(index);
  return it == gCaps.end() ? 0 : it->second;
}

std::map<int, int64_t> memoryCaps() {
  std::lock_guard<std::mutex> lock(gCapMutex);
  return {gCaps.begin(), gCaps.end()};
}

void applyMemoryCaps(const std::vector<int>& indices, const std::vector<double>& limitGb) {
  std::vector<DeviceInfo> devices;
  for (int i : indices) {
    DeviceInfo d;
    d.index = i;  // memory unknown here: setMemoryCap checks it against the device
    devices.push_back(d);
  }
  const DeviceCaps caps = resolveCaps(devices, limitGb);
  if (!caps.ok()) throw ConfigError("memory caps: " + caps.problem);
  for (size_t i = 0; i < indices.size() && !limitGb.empty(); ++i) setMemoryCap(indices[i], caps.capBytes[i]);
}

int64_t freeBytesOf(int index) {
  if (index < 0) return 0;
#ifdef STRATA_HAS_CUDA
  if (index >= static_cast<int>(c10::cuda::device_count())) return 0;
  // The allocator's figures need the device touched once.
  (void)at::empty({1}, at::TensorOptions().device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)));
#endif
  return memoryFigures(index).freeBytes;
}

bool cpuHasHalfMatmul() {
  static const bool has = [] {
    try {
      const auto a = at::ones({2, 2}, at::TensorOptions().dtype(at::kHalf));
      (void)at::mm(a, a);
      (void)at::addmm(a, a, a);  // what nn::Linear runs
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }();
  return has;
}

bool isOutOfMemory(const std::exception& e) {
  const std::string what = e.what();
  return what.find("out of memory") != std::string::npos || what.find("Out of memory") != std::string::npos ||
         what.find("OutOfMemory") != std::string::npos;
}

void rethrowWithCapContext(const std::string& where) {
  std::exception_ptr current = std::current_exception();
  try {
    std::rethrow_exception(current);
  } catch (const PlacementError&) {
    throw;
  } catch (const std::exception& e) {
    if (!isOutOfMemory(e)) throw;
    const std::string what = e.what();
    // The allocator names the device ("GPU 1") and the request ("Tried to allocate 2.00 GiB").
    int index = -1;
    std::smatch m;
    if (std::regex_search(what, m, std::regex("GPU ([0-9]+)"))) index = std::stoi(m[1].str());
    std::string request = "an unknown amount";
    if (std::regex_search(what, m, std::regex("Tried to allocate ([0-9.]+ ?[KMGT]?i?B)"))) {
      request = m[1].str();
    }
    std::ostringstream msg;
    msg << where << ": out of memory on "
        << (index >= 0 ? "cuda:" + std::to_string(index) : std::string("a CUDA device")) << " while allocating "
        << request;
    auto describe = [&](int i) {
      const MemoryFigures f = memoryFigures(i);
      msg << "; cuda:" << i << " cap " << (f.capBytes > 0 ? formatBytes(f.capBytes) : std::string("none"))
          << ", in use " << formatBytes(f.allocatedBytes) << " allocated / " << formatBytes(f.reservedBytes)
          << " reserved, device total " << formatBytes(f.totalBytes);
    };
    if (index >= 0) {
      describe(index);
    } else {
      std::vector<int> capped;
      {
        std::lock_guard<std::mutex> lock(gCapMutex);
        for (const auto& kv : gCaps) capped.push_back(kv.first);
      }
      for (int i : capped) describe(i);
    }
    const std::string first = what.substr(0, what.find('\n'));
    msg << " (allocator: " << first << ")";
    throw PlacementError(msg.str());
  }
}

}  // namespace strata::device
