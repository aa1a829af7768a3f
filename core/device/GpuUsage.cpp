#include "device/GpuUsage.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#ifdef STRATA_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace strata::device {

namespace {

// The few NVML types and entry points used, as nvml.h declares them (the header
// is not needed to build; the library is opened with dlopen).
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct Nvml {
  void* handle = nullptr;
  std::string failure;  // set when it cannot be used
  NvmlReturn (*init)() = nullptr;
  const char* (*errorString)(NvmlReturn) = nullptr;
  NvmlReturn (*getCount)(unsigned int*) = nullptr;
  NvmlReturn (*getHandle)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*getName)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*getUtilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*getMemory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*getPci)(NvmlDevice, NvmlPciInfo*) = nullptr;

  std::string error(NvmlReturn r) const {
    return errorString ? std::string(errorString(r)) : "NVML error " + std::to_string(r);
  }
};

template <class Fn>
bool bind(void* handle, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  return fn != nullptr;
}

Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* lib : {"libnvidia-ml.so.1", "libnvidia-ml.so"}) {
      n.handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (n.handle) break;
    }
    if (!n.handle) {
      n.failure = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
      return;
    }
    bind(n.handle, "nvmlErrorString", n.errorString);
    const bool ok = bind(n.handle, "nvmlInit_v2", n.init) && bind(n.handle, "nvmlDeviceGetCount_v2", n.getCount) &&
                    bind(n.handle, "nvmlDeviceGetHandleByIndex_v2", n.getHandle) &&
                    bind(n.handle, "nvmlDeviceGetName", n.getName) &&
                    bind(n.handle, "nvmlDeviceGetUtilizationRates", n.getUtilization) &&
                    bind(n.handle, "nvmlDeviceGetMemoryInfo", n.getMemory);
    bind(n.handle, "nvmlDeviceGetPciInfo_v3", n.getPci);  // optional: only for the CUDA ordinal
    if (!ok) {
      n.failure = "libnvidia-ml.so.1 lacks the NVML functions Strata reads (driver too old)";
      return;
    }
    const NvmlReturn r = n.init();
    if (r != kNvmlSuccess) n.failure = "NVML did not start: " + n.error(r);
  });
  return n;
}

std::mutex gReadMutex;
std::map<unsigned int, int> gCudaOrdinals;  // NVML index -> CUDA ordinal, found once (under gReadMutex)

// The CUDA ordinal of the card at this PCI address; -1 when not known. CUDA's
// order (and CUDA_VISIBLE_DEVICES) can differ from NVML's PCI order.
int cudaOrdinalOf(const NvmlPciInfo& pci) {
#ifdef STRATA_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    if (unsigned(prop.pciDomainID) == pci.domain && unsigned(prop.pciBusID) == pci.bus &&
        unsigned(prop.pciDeviceID) == pci.device)
      return i;
  }
#else
  (void)pci;
#endif
  return -1;
}

}  // namespace

std::string GpuUsage::label() const {
  return cudaIndex >= 0 ? "cuda:" + std::to_string(cudaIndex) : "gpu " + std::to_string(nvmlIndex);
}

GpuUsageReading readGpuUsage() {
  std::lock_guard<std::mutex> lock(gReadMutex);
  GpuUsageReading out;
  Nvml& n = nvml();
  if (!n.failure.empty()) {
    out.reason = n.failure;
    return out;
  }
  unsigned int count = 0;
  if (const NvmlReturn r = n.getCount(&count); r != kNvmlSuccess) {
    out.reason = "NVML could not count the GPUs: " + n.error(r);
    return out;
  }
  out.available = true;
  if (count == 0) out.reason = "NVML sees no GPU";
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice dev = nullptr;
    if (n.getHandle(i, &dev) != kNvmlSuccess) continue;  // a card NVML cannot open (lost, no permission)
    GpuUsage g;
    g.nvmlIndex = int(i);
    char name[96] = {0};
    if (n.getName(dev, name, sizeof name) == kNvmlSuccess) g.name = name;
    NvmlUtilization u{};
    if (n.getUtilization(dev, &u) == kNvmlSuccess) g.utilizationPercent = int(u.gpu);
    NvmlMemory m{};
    if (n.getMemory(dev, &m) == kNvmlSuccess) {
      g.memoryUsedBytes = int64_t(m.used);
      g.memoryTotalBytes = int64_t(m.total);
    }
    auto known = gCudaOrdinals.find(i);
    if (known == gCudaOrdinals.end()) {
      NvmlPciInfo pci{};
      const int ordinal = n.getPci && n.getPci(dev, &pci) == kNvmlSuccess ? cudaOrdinalOf(pci) : -1;
      known = gCudaOrdinals.emplace(i, ordinal).first;
    }
    g.cudaIndex = known->second;
    out.gpus.push_back(g);
  }
  return out;
}

}  // namespace strata::device
