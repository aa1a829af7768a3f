#include "placement/Planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/Error.h"
#include "common/Text.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"

namespace strata::placement {

const char* toString(PlanMode mode) { return mode == PlanMode::Memory ? "memory" : "param_count"; }

std::string formatParams(int64_t count) {
  char buf[32];
  const double c = static_cast<double>(count);
  if (c >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", c / 1e9);
  else if (c >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fM", c / 1e6);
  else if (c >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", c / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(count));
  return buf;
}

int64_t PlannerInput::otherParamCount() const {
  int64_t n = 0;
  for (const auto& m : otherModules) n += m.paramCount;
  return n;
}

int64_t PlannerInput::otherResidentBytes() const {
  int64_t n = 0;
  for (const auto& m : otherModules)
    if (!m.freedBeforeTraining) n += m.weightBytes;
  return n;
}

int64_t PlannerInput::otherTrainingPeakBytes() const {
  int64_t n = 0;
  for (const auto& m : otherModules)
    if (!m.freedBeforeTraining) n = std::max(n, m.trainingPeakBytes);
  return n;
}

namespace {

// "T5, CLIP and VAE"
std::string namesOf(const std::vector<const OtherModule*>& modules) {
  std::string out;
  for (size_t i = 0; i < modules.size(); ++i) {
    if (i > 0) out += i + 1 == modules.size() ? " and " : ", ";
    out += modules[i]->name;
  }
  return out;
}

std::vector<const OtherModule*> otherModulesWhere(const PlannerInput& in, bool freed) {
  std::vector<const OtherModule*> out;
  for (const auto& m : in.otherModules)
    if (m.freedBeforeTraining == freed) out.push_back(&m);
  return out;
}

// ---- the caching phase -------------------------------------------------------

constexpr size_t kWhole = static_cast<size_t>(-1);

// The caching stages there are, in order.
std::vector<int> cachingStages(const PlannerInput& in) {
  std::vector<int> stages;
  for (const auto& m : in.otherModules) stages.push_back(m.cachingStage);
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  return stages;
}

// What a device holds in its fullest caching stage: the whole modules (first
// device only) and `partBytes` of the split module `split` (kWhole: none), whose
// per-layer peak counts where `holdsPart`.
struct CachingLoad {
  int64_t weightBytes = 0;
  int64_t peakBytes = 0;
  int64_t totalBytes = 0;
};
CachingLoad cachingLoad(const PlannerInput& in, const std::vector<int>& stages, size_t split, bool first,
                        int64_t partBytes, bool holdsPart) {
  CachingLoad worst;
  for (int stage : stages) {
    CachingLoad st;
    for (size_t i = 0; i < in.otherModules.size(); ++i) {
      const OtherModule& m = in.otherModules[i];
      if (m.cachingStage > stage) continue;
      const bool runs = m.cachingStage == stage;
      if (i == split) {
        st.weightBytes += partBytes;
        if (runs && holdsPart) st.peakBytes = std::max(st.peakBytes, m.cachingPeakBytes);
      } else if (first) {
        st.weightBytes += m.weightBytes;
        if (runs) st.peakBytes = std::max(st.peakBytes, m.cachingPeakBytes);
      }
    }
    st.totalBytes = st.weightBytes + st.peakBytes;
    if (st.totalBytes > worst.totalBytes) worst = st;
  }
  return worst;
}

// Where the split module's parts go: its stem on the first device, layer i on
// device layerDevice[i], its head on headDevice.
struct CachingSplit {
  std::vector<size_t> layerDevice;
  size_t headDevice = 0;
};

// Bytes of the split module per device under `split`.
std::vector<int64_t> splitPartBytes(const OtherModule& m, const CachingSplit& split, size_t devices) {
  std::vector<int64_t> part(devices, 0);
  part[0] += m.stemBytes;
  for (size_t i = 0; i < m.layerBytes.size(); ++i) part[split.layerDevice[i]] += m.layerBytes[i];
  part[split.headDevice] += m.headBytes;
  return part;
}

// Contiguous greedy fill of the split module's layers, then its head, from the
// first device on, where device d may hold capacity[d] bytes. False when
// something does not fit; `out` then has the rest on the last device.
bool splitFill(const PlannerInput& in, const std::vector<int>& stages, size_t split,
               const std::vector<double>& capacity, CachingSplit& out) {
  const OtherModule& m = in.otherModules[split];
  const size_t n = in.devices.size();
  out.layerDevice.assign(m.layerBytes.size(), n - 1);
  out.headDevice = n - 1;
  auto fitsOn = [&](size_t d, int64_t bytes) {
    return static_cast<double>(cachingLoad(in, stages, split, d == 0, bytes, true).totalBytes) <= capacity[d];
  };
  size_t d = 0;
  int64_t used = m.stemBytes;  // the stem stays on the first device
  bool ok = fitsOn(0, used);
  if (!ok && n > 1) {
    d = 1;  // not even the stem fits: the layers from the next device on
    used = 0;
  }
  auto place = [&](int64_t bytes) -> bool {
    for (;;) {
      if (fitsOn(d, used + bytes)) {
        used += bytes;
        return true;
      }
      if (d + 1 >= n) return false;
      ++d;
      used = 0;
    }
  };
  for (size_t i = 0; i < m.layerBytes.size(); ++i) {
    if (!place(m.layerBytes[i])) return false;
    out.layerDevice[i] = d;
  }
  if (!place(m.headBytes)) return false;
  out.headDevice = d;
  return ok;
}

// Smallest factor in [lo, hi] for which fill(factor) succeeds (fill(hi) must).
template <class Fill>
double smallestFactor(double lo, double hi, Fill&& fill) {
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (fill(mid))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

// Capacities: accelerators at `gpuFraction` of their budget, the cpu at `cpuFraction`.
std::vector<double> capacities(const PlannerInput& in, double gpuFraction, double cpuFraction) {
  std::vector<double> cap;
  for (const auto& d : in.devices) {
    const double f = d.device == "cpu" ? cpuFraction : gpuFraction;
    cap.push_back(f * static_cast<double>(d.budgetBytes));
  }
  return cap;
}

// memory: every device filled to the same, smallest share of its budget, the cpu
// only for what the accelerators cannot hold; when even full budgets are not
// enough, the same share above 1 on every device, so each says what it misses.
CachingSplit splitByMemory(const PlannerInput& in, const std::vector<int>& stages, size_t split) {
  CachingSplit out, tmp;
  bool hasCpu = false, hasGpu = false;
  for (const auto& d : in.devices) (d.device == "cpu" ? hasCpu : hasGpu) = true;
  auto fill = [&](double gpu, double cpu, CachingSplit& into) {
    return splitFill(in, stages, split, capacities(in, gpu, cpu), into);
  };
  if (hasGpu && fill(1.0, 0.0, tmp)) {
    fill(smallestFactor(0.0, 1.0, [&](double f) { return fill(f, 0.0, tmp); }), 0.0, out);
  } else if (fill(1.0, 1.0, tmp)) {
    const double gpu = hasGpu ? 1.0 : 0.0;
    fill(gpu, smallestFactor(0.0, 1.0, [&](double f) { return fill(gpu, f, tmp); }), out);
  } else {
    double hi = 2.0;
    while (hi < 1e6 && !fill(hi, hi, tmp)) hi *= 2.0;
    const double f = smallestFactor(1.0, hi, [&](double x) { return fill(x, x, tmp); });
    fill(f, f, out);
  }
  return out;
}

// param_count: the layers shared evenly by count, in order; the head with the last.
CachingSplit splitEvenly(const PlannerInput& in, size_t split) {
  const size_t layers = in.otherModules[split].layerBytes.size();
  const size_t n = in.devices.size();
  CachingSplit out;
  for (size_t i = 0; i < layers; ++i) out.layerDevice.push_back(i * n / layers);
  out.headDevice = out.layerDevice.back();
  return out;
}

// Fills plan.caching: every module whole on the first device, or, when that does
// not fit and there are several devices, the largest splittable module's layers
// over the devices.
void planCaching(const PlannerInput& in, Plan& plan) {
  CachingPlan& c = plan.caching;
  c.needed = !in.otherModules.empty();
  if (!c.needed) return;
  const size_t n = in.devices.size();
  const std::vector<int> stages = cachingStages(in);
  auto loadOf = [&](size_t split, const CachingSplit* layout) {
    std::vector<CachingLoad> loads;
    const std::vector<int64_t> part =
        split == kWhole ? std::vector<int64_t>(n, 0) : splitPartBytes(in.otherModules[split], *layout, n);
    for (size_t d = 0; d < n; ++d) {
      const bool holds = split != kWhole && (d == 0 || part[d] > 0);
      loads.push_back(cachingLoad(in, stages, split, d == 0, part[d], holds));
    }
    return loads;
  };
  auto over = [&](const std::vector<CachingLoad>& loads) {
    for (size_t d = 0; d < n; ++d)
      if (in.devices[d].budgetBytes > 0 && loads[d].totalBytes > in.devices[d].budgetBytes) return true;
    return false;
  };
  size_t split = kWhole;
  CachingSplit layout;
  std::vector<CachingLoad> loads = loadOf(kWhole, nullptr);
  if (over(loads) && n > 1) {
    for (size_t i = 0; i < in.otherModules.size(); ++i) {
      const OtherModule& m = in.otherModules[i];
      if (m.splittable() && (split == kWhole || m.weightBytes > in.otherModules[split].weightBytes)) split = i;
    }
    if (split != kWhole) {
      layout = in.mode == PlanMode::Memory ? splitByMemory(in, stages, split) : splitEvenly(in, split);
      loads = loadOf(split, &layout);
    }
  }
  c.device = in.devices.front().device;
  c.fits = true;
  const std::vector<int64_t> part =
      split == kWhole ? std::vector<int64_t>(n, 0) : splitPartBytes(in.otherModules[split], layout, n);
  for (size_t d = 0; d < n; ++d) {
    CachingDevice cd;
    cd.device = in.devices[d].device;
    cd.budgetBytes = in.devices[d].budgetBytes;
    cd.weightBytes = part[d];
    if (d == 0)
      for (size_t i = 0; i < in.otherModules.size(); ++i)
        if (i != split) {
          cd.modules.push_back(in.otherModules[i].name);
          cd.weightBytes += in.otherModules[i].weightBytes;
        }
    cd.totalBytes = loads[d].totalBytes;
    cd.missingBytes = cd.budgetBytes > 0 && cd.totalBytes > cd.budgetBytes ? cd.totalBytes - cd.budgetBytes : 0;
    c.missingBytes += cd.missingBytes;
    if (cd.missingBytes > 0) c.fits = false;
    c.devices.push_back(cd);
  }
  if (split != kWhole) {
    c.splitModule = in.otherModules[split].name;
    c.splitStemDevice = c.device;
    c.devices.front().hasSplitStem = true;
    for (size_t i = 0; i < layout.layerDevice.size(); ++i) {
      CachingDevice& cd = c.devices[layout.layerDevice[i]];
      if (cd.endLayer == cd.firstLayer) cd.firstLayer = i;
      cd.endLayer = i + 1;
      c.layerDevice.push_back(in.devices[layout.layerDevice[i]].device);
    }
    c.splitHeadDevice = in.devices[layout.headDevice].device;
    c.devices[layout.headDevice].hasSplitHead = true;
  }
  // The first device's stages and fullest stage.
  const int64_t firstPart = part[0];
  for (int stage : stages) {
    CachingStage st;
    st.stage = stage;
    for (size_t i = 0; i < in.otherModules.size(); ++i) {
      const OtherModule& m = in.otherModules[i];
      if (m.cachingStage > stage) continue;
      st.weightBytes += i == split ? firstPart : m.weightBytes;
      if (m.cachingStage != stage) continue;
      st.modules.push_back(m.name);
      st.peakBytes = std::max(st.peakBytes, m.cachingPeakBytes);
    }
    st.totalBytes = st.weightBytes + st.peakBytes;
    c.stages.push_back(st);
  }
  c.weightBytes = loads[0].weightBytes;
  c.peakBytes = loads[0].peakBytes;
  c.totalBytes = loads[0].totalBytes;
  c.budgetBytes = in.devices.front().budgetBytes;
}

// Fills the per-device sums of a finished assignment.
void summarise(const PlannerInput& in, Plan& plan) {
  const auto& first = in.devices.front().device;
  for (size_t d = 0; d < in.devices.size(); ++d) {
    DevicePlan dp;
    dp.device = in.devices[d].device;
    dp.name = in.devices[d].name;
    dp.budgetBytes = in.devices[d].budgetBytes;
    plan.devices.push_back(dp);
  }
  auto add = [](DevicePlan& dp, const BlockCost& c) {
    dp.paramCount += c.paramCount;
    dp.weightBytes += c.weightBytes;
    dp.adapterBytes += c.adapterBytes;
    dp.gradBytes += c.gradBytes;
    dp.emaBytes += c.emaBytes;
    dp.optimizerBytes += c.optimizerBytes;
    dp.activationBytes += c.activationBytes;
    dp.workspaceBytes = std::max(dp.workspaceBytes, c.workspaceBytes);
    dp.hostBytes += c.hostBytes;
  };
  DevicePlan& d0 = plan.devices.front();
  d0.hasStem = d0.hasHead = true;
  add(d0, in.stem);
  add(d0, in.head);
  d0.otherBytes = in.otherResidentBytes();
  d0.otherPeakBytes = in.otherTrainingPeakBytes();
  plan.otherModules = in.otherModules;
  plan.stemDevice = plan.headDevice = first;
  for (size_t b = 0; b < in.blocks.size(); ++b) {
    for (auto& dp : plan.devices) {
      if (dp.device != plan.blockDevice[b]) continue;
      if (dp.blockIds.empty()) dp.firstBlock = b;
      dp.endBlock = b + 1;
      dp.blockIds.push_back(in.blocks[b].id);
      add(dp, in.blocks[b]);
      break;
    }
  }
  plan.fits = true;
  for (auto& dp : plan.devices) {
    if (dp.blockIds.empty()) dp.firstBlock = dp.endBlock = 0;
    dp.totalBytes = dp.weightBytes + dp.adapterBytes + dp.gradBytes + dp.emaBytes + dp.optimizerBytes + dp.otherBytes +
                    std::max(dp.activationBytes + dp.workspaceBytes, dp.otherPeakBytes);
    if (dp.device == "cpu") dp.totalBytes += dp.hostBytes;  // host memory is the cpu device's own
    dp.missingBytes = dp.budgetBytes > 0 && dp.totalBytes > dp.budgetBytes ? dp.totalBytes - dp.budgetBytes : 0;
    if (dp.missingBytes > 0) plan.fits = false;
  }
  planCaching(in, plan);
  if (!plan.caching.fits) plan.fits = false;
}

// What a device holds while caching: "VAE, text encoder stem + layers 0-6", "text encoder layers 7-14 + head".
std::string cachingPartText(const CachingPlan& c, const CachingDevice& cd) {
  std::string out;
  for (const auto& name : cd.modules) out += (out.empty() ? "" : ", ") + name;
  const bool layers = cd.endLayer > cd.firstLayer;
  if (cd.hasSplitStem || layers || cd.hasSplitHead) {
    out += (out.empty() ? "" : ", ") + c.splitModule;
    std::string parts;
    if (cd.hasSplitStem) parts = "stem";
    if (layers) {
      parts += std::string(parts.empty() ? "" : " + ") + (cd.endLayer - cd.firstLayer == 1 ? "layer " : "layers ") +
               std::to_string(cd.firstLayer);
      if (cd.endLayer - cd.firstLayer > 1) parts += "-" + std::to_string(cd.endLayer - 1);
    }
    if (cd.hasSplitHead) parts += std::string(parts.empty() ? "" : " + ") + "head";
    out += " " + parts;
  }
  return out.empty() ? "nothing" : out;
}

// The caching phase in words (empty without other modules).
std::string cachingText(const PlannerInput& in, const Plan& plan) {
  const CachingPlan& c = plan.caching;
  if (!c.needed) return "";
  std::ostringstream os;
  if (!c.splitModule.empty()) {
    std::vector<const OtherModule*> whole;
    for (const auto& m : in.otherModules)
      if (m.name != c.splitModule) whole.push_back(&m);
    os << " Caching, before the transformer is placed: the " << c.splitModule << " does not fit " << c.device
       << (whole.empty() ? "" : " beside the " + namesOf(whole)) << ", so its " << c.layerDevice.size()
       << " layers are split over the devices ("
       << (plan.mode == PlanMode::Memory ? "each filled to the same share of its budget" : "an even count per device")
       << ", the hidden states passed on from card to card): ";
    bool firstPart = true;
    for (const auto& cd : c.devices) {
      if (!cd.holdsSomething()) continue;
      os << (firstPart ? "" : "; ") << cd.device << " " << cachingPartText(c, cd) << " (" << formatBytes(cd.totalBytes);
      if (cd.budgetBytes > 0) os << " of " << formatBytes(cd.budgetBytes);
      os << ")";
      firstPart = false;
    }
    if (c.fits) {
      os << "; fits.";
    } else {
      os << "; does not fit:";
      for (const auto& cd : c.devices)
        if (cd.missingBytes > 0) os << " " << cd.device << " " << formatBytes(cd.missingBytes) << " missing;";
      os << " in all " << formatBytes(c.missingBytes) << " missing.";
    }
    const auto freed = otherModulesWhere(in, true);
    if (!freed.empty()) {
      int64_t bytes = 0;
      for (const auto* m : freed) bytes += m->weightBytes;
      os << " Freed from every card before step 1: " << namesOf(freed) << " (" << formatBytes(bytes) << ").";
    }
    return os.str();
  }
  os << " Caching, before the transformer is placed, on " << c.device << ":";
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const CachingStage& st = c.stages[i];
    std::string names;
    for (size_t k = 0; k < st.modules.size(); ++k)
      names += (k == 0 ? "" : k + 1 == st.modules.size() ? " and " : ", ") + st.modules[k];
    os << (i == 0 ? " first " : ", then ") << names
       << (i == 0                   ? ""
           : st.modules.size() == 1 ? " joins"
                                    : " join")
       << " (" << formatBytes(st.weightBytes) << " of weights + " << formatBytes(st.peakBytes) << " encoding a batch)";
  }
  os << "; at most " << formatBytes(c.totalBytes);
  if (c.budgetBytes > 0) os << " of its " << formatBytes(c.budgetBytes);
  if (!c.fits) {
    os << ": does not fit, " << formatBytes(c.missingBytes) << " missing.";
  } else {
    os << ", fits.";
  }
  const auto freed = otherModulesWhere(in, true);
  if (!freed.empty()) {
    int64_t bytes = 0;
    for (const auto* m : freed) bytes += m->weightBytes;
    os << " " << namesOf(freed) << " (" << formatBytes(bytes) << ") " << (freed.size() == 1 ? "is" : "are")
       << " freed before step 1.";
  }
  return os.str();
}

// Why a device has no blocks while a later one has (or the model has fewer
// blocks than devices). `skipFirst`: the first device's case is said elsewhere.
std::string emptyDevicesText(const PlannerInput& in, const Plan& plan, const std::string& why, bool skipFirst = false) {
  size_t lastUsed = 0;
  bool any = false;
  for (size_t d = 0; d < plan.devices.size(); ++d)
    if (!plan.devices[d].blockIds.empty()) {
      lastUsed = d;
      any = true;
    }
  if (!any || plan.devices.size() < 2) return "";
  std::vector<std::string> before, after;
  for (size_t d = skipFirst ? 1 : 0; d < plan.devices.size(); ++d) {
    if (!plan.devices[d].blockIds.empty()) continue;
    (d < lastUsed ? before : after).push_back(plan.devices[d].device);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
    return out;
  };
  std::ostringstream os;
  if (!before.empty()) os << " " << list(before) << (before.size() == 1 ? " gets" : " get") << " no blocks: " << why;
  if (!after.empty()) {
    os << " " << list(after) << (after.size() == 1 ? " gets" : " get") << " no blocks: ";
    if (in.blocks.size() < plan.devices.size())
      os << "the model has " << in.blocks.size() << " blocks for " << plan.devices.size() << " devices.";
    else
      os << "the devices before " << (after.size() == 1 ? "it" : "them") << " hold them all.";
  }
  return os.str();
}

std::string missingText(const Plan& plan) {
  std::ostringstream os;
  int64_t total = 0;
  for (const auto& dp : plan.devices) {
    if (dp.missingBytes <= 0) continue;
    os << " " << dp.device << " needs " << formatBytes(dp.totalBytes) << " but its budget is "
       << formatBytes(dp.budgetBytes) << ": " << formatBytes(dp.missingBytes) << " missing.";
    total += dp.missingBytes;
  }
  if (total > 0) os << " In all " << formatBytes(total) << " missing.";
  return os.str();
}

// Contiguous greedy fill where device d may hold capacity[d] bytes; the fixed
// cost (stem, head, other) sits on device 0. Returns false when something does
// not fit; `out` then holds the fill with the rest on the last device.
bool greedyFill(const PlannerInput& in, const std::vector<double>& capacity, std::vector<size_t>& out) {
  const size_t n = in.devices.size();
  out.assign(in.blocks.size(), n - 1);
  // Device 0 also holds the other modules; their peak (the VAE decoding samples)
  // replaces the blocks' activations and workspace rather than adding to them:
  // total = resident + max(activations + workspace, peak).
  const double otherPeak = static_cast<double>(in.otherTrainingPeakBytes());
  size_t d = 0;
  // On a cpu device the host memory an offloaded optimizer state takes is its own.
  auto resident = [&](const BlockCost& c) {
    return static_cast<double>(c.residentBytes() + (in.devices[d].device == "cpu" ? c.hostBytes : 0));
  };
  double used = resident(in.stem) + resident(in.head) + static_cast<double>(in.otherResidentBytes());
  double activations = static_cast<double>(in.stem.activationBytes + in.head.activationBytes);
  double workspace = static_cast<double>(std::max(in.stem.workspaceBytes, in.head.workspaceBytes));
  auto need = [&](double u, double act, double ws) { return u + (d == 0 ? std::max(ws, otherPeak - act) : ws); };
  bool ok = true;
  if (need(used, activations, workspace) > capacity[0]) {
    ok = false;  // not even the stem fits: fill the blocks from the next device on
    if (n > 1) {
      d = 1;
      used = activations = workspace = 0;
    }
  }
  for (size_t b = 0; b < in.blocks.size(); ++b) {
    const BlockCost& c = in.blocks[b];
    for (;;) {
      const double ws = std::max(workspace, static_cast<double>(c.workspaceBytes));
      if (need(used + resident(c), activations + static_cast<double>(c.activationBytes), ws) <= capacity[d]) {
        out[b] = d;
        used += resident(c);
        activations += static_cast<double>(c.activationBytes);
        workspace = ws;
        break;
      }
      if (d + 1 >= n) return false;  // out[b..] stay on the last device
      ++d;
      used = activations = workspace = 0;
    }
  }
  return ok;
}

Plan planMemory(const PlannerInput& in) {
  Plan plan;
  plan.mode = PlanMode::Memory;
  std::vector<size_t> assign, tmp;
  bool hasCpu = false, hasGpu = false;
  for (const auto& d : in.devices) (d.device == "cpu" ? hasCpu : hasGpu) = true;
  // The cpu is the last resort (offload): first try the accelerators alone,
  // each filled to the same, smallest share of its budget.
  if (hasGpu && greedyFill(in, capacities(in, 1.0, 0.0), assign)) {
    const double u = smallestFactor(0.0, 1.0, [&](double f) { return greedyFill(in, capacities(in, f, 0.0), tmp); });
    greedyFill(in, capacities(in, u, 0.0), assign);
  } else if (greedyFill(in, capacities(in, 1.0, 1.0), assign)) {
    // Accelerators full, the cpu takes as little as it can.
    const double gpuFraction = hasGpu ? 1.0 : 0.0;
    const double v =
        smallestFactor(0.0, 1.0, [&](double f) { return greedyFill(in, capacities(in, gpuFraction, f), tmp); });
    greedyFill(in, capacities(in, gpuFraction, v), assign);
  } else {
    greedyFill(in, capacities(in, 1.0, 1.0), assign);
  }
  for (size_t b = 0; b < in.blocks.size(); ++b) plan.blockDevice.push_back(in.devices[assign[b]].device);
  summarise(in, plan);
  std::ostringstream os;
  os << "memory: " << in.blocks.size() << " blocks over " << in.devices.size()
     << " device(s), each filled to the same share of its budget (cap or free memory minus "
        "the reserve)";
  if (hasCpu) os << ", the cpu only for what the GPUs cannot hold";
  os << "; stem, head";
  const auto kept = otherModulesWhere(in, false);
  if (!kept.empty()) os << " and " << namesOf(kept) << " (" << formatBytes(in.otherResidentBytes()) << ")";
  os << " on " << in.devices.front().device << ".";
  const bool blocksFit =
      std::all_of(plan.devices.begin(), plan.devices.end(), [](const DevicePlan& dp) { return dp.missingBytes == 0; });
  if (!blocksFit) {
    os << " Does not fit:" << missingText(plan);
  } else {
    double worst = 0;
    for (const auto& dp : plan.devices) {
      worst = std::max(worst, static_cast<double>(dp.totalBytes) / static_cast<double>(dp.budgetBytes));
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, " Fits: the fullest device is at %.0f%% of its budget.", 100.0 * worst);
    os << buf;
  }
  os << emptyDevicesText(in, plan,
                         "at the common share of its budget it holds none of the next blocks (the stem, head and "
                         "other modules on the first device, or a budget smaller than one block).");
  os << cachingText(in, plan);
  plan.reason = os.str();
  return plan;
}

Plan planParamCount(const PlannerInput& in) {
  Plan plan;
  plan.mode = PlanMode::ParamCount;
  const size_t n = in.devices.size();
  const double otherParams = static_cast<double>(in.otherParamCount());
  const double other = otherParams * in.otherModuleParamCountScale;
  const double fixed = other + static_cast<double>(in.stem.paramCount + in.head.paramCount);
  double blocks = 0;
  double largest = 0;
  for (const auto& b : in.blocks) {
    blocks += static_cast<double>(b.paramCount);
    largest = std::max(largest, static_cast<double>(b.paramCount));
  }
  const double total = fixed + blocks;
  // Levelled shares: device 0 takes blocks up to the even share less its fixed
  // charge; when that charge alone exceeds the share, device 0 takes none and
  // the others share the blocks evenly (no card is skipped).
  double share = total / static_cast<double>(n);
  double firstQuota = share - fixed;
  const bool firstOverShare = n > 1 && firstQuota < 0;
  if (firstOverShare) {
    share = blocks / static_cast<double>(n - 1);
    firstQuota = 0;
  }
  if (n == 1) firstQuota = blocks;
  double cumulative = 0;  // block parameters before this block
  for (const auto& b : in.blocks) {
    const double mid = cumulative + 0.5 * static_cast<double>(b.paramCount);
    size_t d = 0;
    if (mid >= firstQuota && share > 0) d = 1 + static_cast<size_t>((mid - firstQuota) / share);
    d = std::min(d, n - 1);
    plan.blockDevice.push_back(in.devices[d].device);
    cumulative += static_cast<double>(b.paramCount);
  }
  summarise(in, plan);
  std::ostringstream os;
  const std::string& first = in.devices.front().device;
  os << "param_count: " << formatParams(static_cast<int64_t>(total - other)) << " parameters in the model";
  if (in.otherModules.empty()) {
    os << ", no other modules";
  } else {
    std::vector<const OtherModule*> all;
    for (const auto& m : in.otherModules) all.push_back(&m);
    os << " + " << formatParams(static_cast<int64_t>(otherParams)) << " in " << namesOf(all) << " x "
       << in.otherModuleParamCountScale << " = " << formatParams(static_cast<int64_t>(other)) << " charged to "
       << first;
  }
  if (firstOverShare) {
    os << "; " << first << "'s stem, head and other modules (" << formatParams(static_cast<int64_t>(fixed))
       << ") exceed an even share (" << formatParams(static_cast<int64_t>(total / static_cast<double>(n)))
       << "), so it gets no blocks and the other " << n - 1 << " devices share them, "
       << formatParams(static_cast<int64_t>(share)) << " each";
  } else {
    os << "; " << formatParams(static_cast<int64_t>(total)) << " shared evenly, "
       << formatParams(static_cast<int64_t>(share)) << " per device";
  }
  os << "; a block goes where its midpoint falls.";
  char why[160];
  std::snprintf(why, sizeof why,
                "a block (up to %s parameters) is larger than a device's share (%s) and goes where its midpoint falls.",
                formatParams(static_cast<int64_t>(largest)).c_str(), formatParams(static_cast<int64_t>(share)).c_str());
  // The first device without blocks is said above when its charge is the cause.
  os << emptyDevicesText(in, plan, why, firstOverShare);
  const bool blocksFit =
      std::all_of(plan.devices.begin(), plan.devices.end(), [](const DevicePlan& dp) { return dp.missingBytes == 0; });
  if (!blocksFit) os << " Over budget:" << missingText(plan);
  os << cachingText(in, plan);
  plan.reason = os.str();
  return plan;
}

}  // namespace

const std::string& Plan::deviceOf(const std::string& blockId) const {
  if (blockId == "stem") return stemDevice;
  if (blockId == "head") return headDevice;
  for (const auto& dp : devices) {
    for (size_t i = 0; i < dp.blockIds.size(); ++i) {
      if (dp.blockIds[i] == blockId) return blockDevice[dp.firstBlock + i];
    }
  }
  throw PlacementError("plan: no block '" + blockId + "'");
}

const std::string& CachingPlan::deviceOfLayer(size_t layer) const {
  if (splitModule.empty()) throw PlacementError("caching plan: no module is split over devices");
  if (layer >= layerDevice.size())
    throw PlacementError("caching plan: " + splitModule + " has " + std::to_string(layerDevice.size()) +
                         " layers, no layer " + std::to_string(layer));
  return layerDevice[layer];
}

Plan planPlacement(const PlannerInput& input) {
  if (input.devices.empty()) throw PlacementError("planner: no devices to place the model on");
  for (const auto& d : input.devices) {
    if (d.budgetBytes < 0) {
      throw PlacementError("planner: negative budget for " + d.device + " (the reserve exceeds its memory?)");
    }
    if (input.mode == PlanMode::Memory && d.budgetBytes == 0) {
      throw PlacementError("planner: memory mode needs a budget for " + d.device);
    }
  }
  for (const auto& m : input.otherModules) {
    if (m.paramCount < 0 || m.weightBytes < 0 || m.cachingPeakBytes < 0 || m.trainingPeakBytes < 0 || m.stemBytes < 0 ||
        m.headBytes < 0)
      throw PlacementError("planner: negative size for the other module " + m.name);
    if (!m.splittable()) continue;
    int64_t parts = m.stemBytes + m.headBytes;
    for (const int64_t b : m.layerBytes) {
      if (b < 0) throw PlacementError("planner: negative layer size for the other module " + m.name);
      parts += b;
    }
    if (parts != m.weightBytes)
      throw PlacementError("planner: the other module " + m.name + "'s stem, layers and head come to " +
                           std::to_string(parts) + " bytes, its weights to " + std::to_string(m.weightBytes));
  }
  for (size_t i = 0; i < input.devices.size(); ++i) {
    for (size_t j = i + 1; j < input.devices.size(); ++j) {
      if (input.devices[i].device == input.devices[j].device) {
        throw PlacementError("planner: device " + input.devices[i].device + " listed twice");
      }
    }
  }
  return input.mode == PlanMode::Memory ? planMemory(input) : planParamCount(input);
}

void requireFits(const Plan& plan) {
  if (!plan.fits) throw PlacementError("placement does not fit: " + plan.reason);
}

std::vector<DeviceBudget> makeBudgets(const std::vector<device::DeviceInfo>& devices, const std::vector<double>& capGb,
                                      double reserveGb, const std::vector<int64_t>& freeBytes) {
  const device::DeviceCaps caps = device::resolveCaps(devices, capGb);
  if (!caps.ok()) throw ConfigError("memory caps: " + caps.problem);
  std::vector<DeviceBudget> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& dev = devices[i];
    DeviceBudget b;
    b.device = dev.label();
    b.name = dev.name;
    int64_t base = dev.totalBytes;
    if (i < freeBytes.size() && freeBytes[i] > 0) base = freeBytes[i];
    if (caps.capBytes[i] > 0) base = std::min(base, caps.capBytes[i]);
    b.budgetBytes = base - static_cast<int64_t>(std::llround(reserveGb * 1e9));
    if (b.budgetBytes <= 0) {
      throw ConfigError("a reserve of " + formatBytes(static_cast<int64_t>(std::llround(reserveGb * 1e9))) +
                        " leaves nothing of " + b.device + "'s " + formatBytes(base));
    }
    out.push_back(b);
  }
  return out;
}

namespace {

// The card's staging for offloaded moments (train/FusedAdamW's slots): the whole state in
// one slot where it is one chunk, else two slots of a chunk or of the largest tensor's moments.
int64_t stagingWorkspaceBytes(int64_t chunk, int64_t largest, int64_t state) {
  const int64_t slot = std::max(chunk, largest);
  return state <= slot ? state : 2 * slot;
}

}  // namespace

BlockCost estimateCost(const UnitShape& unit, const CostOptions& o) {
  BlockCost c;
  c.id = unit.id;
  c.kind = unit.kind;
  c.paramCount = unit.paramCount;
  c.weightBytes = (unit.paramCount - unit.quantizedWeightCount) * o.weightElementBytes +
                  unit.quantizedWeightCount * o.quantizedElementBytes +
                  unit.quantScaleCount * o.quantScaleElementBytes + unit.keptTransposeCount;  // fp8: 1 byte each
  // A quantized Linear's weight converted to the activation dtype lives while its
  // matmul runs, forward or backward; none waits for the backward (nn/Linear.cpp).
  const int64_t convertedBytes = unit.largestQuantizedWeightCount * o.activationElementBytes;
  int64_t loraParams = 0;
  if (o.loraRank > 0) {
    for (const auto& l : unit.loraLinears) loraParams += o.loraRank * (l.inFeatures + l.outFeatures);
  }
  const int64_t trainable = loraParams * o.loraElementBytes;
  c.adapterBytes = trainable;
  c.gradBytes = trainable;
  c.optimizerBytes = static_cast<int64_t>(static_cast<double>(loraParams) * o.optimizerBytesPerParam);
  c.emaBytes = o.ema ? loraParams * 4 : 0;  // float32 shadows (train/Ema.cpp)
  if (o.offloadOptimizerState) {
    // In host memory between steps; the step stages at most one chunk of it.
    c.hostBytes = c.optimizerBytes;
    c.optimizerBytes = 0;
  }
  if (unit.isBlock) {
    const double perTokenState = static_cast<double>(o.batchSize * o.tokens * o.hiddenSize * o.activationElementBytes);
    const auto full = static_cast<int64_t>(perTokenState * o.activationElementsPerTokenPerHidden);
    if (o.gradientCheckpointing) {
      const auto input = static_cast<int64_t>(perTokenState);  // the block's input
      c.activationBytes = o.offloadCheckpoints ? 0 : input;
      // Offloaded: the recomputed block's input, and the next one's coming back beside it.
      c.workspaceBytes = full + convertedBytes + (o.offloadCheckpoints ? 2 * input : 0);
    } else {
      c.activationBytes = full;
      c.workspaceBytes = convertedBytes;
    }
  }
  // The staging is there during the optimizer step (and its last copies back into the
  // next forward's first kernels), when no block's activations are: two slots
  // (train/FusedAdamW: one chunk's copy back beside the next one's copy in), each of a
  // chunk or of the largest tensor's moments (one over the chunk is staged alone), or one
  // slot of the whole state where it is a single chunk.
  if (c.hostBytes > 0) {
    c.largestStagedBytes = 0;
    for (const auto& l : unit.loraLinears)
      c.largestStagedBytes =
          std::max(c.largestStagedBytes,
                   static_cast<int64_t>(static_cast<double>(o.loraRank * std::max(l.inFeatures, l.outFeatures)) *
                                        o.optimizerBytesPerParam));
    c.workspaceBytes =
        std::max(c.workspaceBytes, stagingWorkspaceBytes(o.optimizerStagingBytes, c.largestStagedBytes, c.hostBytes));
  }
  return c;
}

PlannerInput estimateInput(const UnitShape& stem, const std::vector<UnitShape>& blocks, const UnitShape& head,
                           const CostOptions& options) {
  PlannerInput in;
  in.stem = estimateCost(stem, options);
  in.head = estimateCost(head, options);
  for (const auto& b : blocks) in.blocks.push_back(estimateCost(b, options));
  // A staged chunk spans the moments of several units: its size is the whole
  // state's, capped by the chunk, not one unit's.
  int64_t hostTotal = in.stem.hostBytes + in.head.hostBytes;
  int64_t largest = std::max(in.stem.largestStagedBytes, in.head.largestStagedBytes);
  for (const auto& c : in.blocks) {
    hostTotal += c.hostBytes;
    largest = std::max(largest, c.largestStagedBytes);
  }
  const int64_t staging = stagingWorkspaceBytes(options.optimizerStagingBytes, largest, hostTotal);
  for (BlockCost* c : {&in.stem, &in.head}) {
    if (c->hostBytes > 0) c->workspaceBytes = std::max(c->workspaceBytes, staging);
  }
  for (auto& c : in.blocks) {
    if (c.hostBytes > 0) c.workspaceBytes = std::max(c.workspaceBytes, staging);
  }
  return in;
}

std::string formatPlan(const Plan& plan) { return formatPlanTable(plan) + "\n" + plan.reason + "\n"; }

std::string formatPlanTable(const Plan& plan) {
  std::ostringstream os;
  os << "placement (" << toString(plan.mode) << "): " << (plan.fits ? "fits" : "DOES NOT FIT") << "\n";
  for (const auto& dp : plan.devices) {
    os << "\n" << dp.device << "  " << dp.name << "\n";
    os << "  blocks      ";
    if (dp.blockIds.empty()) {
      os << "none";
    } else {
      os << dp.blockIds.size() << ": " << dp.blockIds.front();
      if (dp.blockIds.size() > 1) os << " .. " << dp.blockIds.back();
    }
    if (dp.hasStem) os << "  (+ stem, head)";
    os << "\n";
    os << "  weights     " << formatBytes(dp.weightBytes) << "  (" << formatParams(dp.paramCount) << " params)\n";
    os << "  adapters    " << formatBytes(dp.adapterBytes) << "  + grads " << formatBytes(dp.gradBytes) << "\n";
    os << "  EMA         " << formatBytes(dp.emaBytes) << "\n";
    os << "  optimizer   " << formatBytes(dp.optimizerBytes);
    if (dp.hostBytes > 0) os << "  (+ " << formatBytes(dp.hostBytes) << " in host memory, staged for the step)";
    os << "\n";
    os << "  activations " << formatBytes(dp.activationBytes) << "  + workspace " << formatBytes(dp.workspaceBytes)
       << "\n";
    if (dp.hasStem) {
      for (const auto& m : plan.otherModules) {
        if (m.freedBeforeTraining) continue;
        os << "  " << m.name << std::string(m.name.size() < 12 ? 12 - m.name.size() : 1, ' ')
           << formatBytes(m.weightBytes) << "  (" << m.dtype << ", " << formatParams(m.paramCount) << " params; "
           << formatBytes(m.trainingPeakBytes) << " more while it runs, not with the activations)\n";
      }
    }
    os << "  total       " << formatBytes(dp.totalBytes) << " / budget "
       << (dp.budgetBytes > 0 ? formatBytes(dp.budgetBytes) : std::string("unknown"));
    if (dp.missingBytes > 0) os << "  OVER by " << formatBytes(dp.missingBytes);
    os << "\n";
  }
  if (plan.caching.needed) {
    const CachingPlan& c = plan.caching;
    os << "\ncaching (before the transformer is placed) ";
    if (c.splitModule.empty())
      os << "on " << c.device;
    else
      os << "over " << c.devices.size() << " devices, " << c.splitModule << " split by layers";
    os << ": " << (c.fits ? "fits" : "DOES NOT FIT") << "\n";
    for (const auto& m : plan.otherModules) {
      os << "  " << m.name << std::string(m.name.size() < 12 ? 12 - m.name.size() : 1, ' ')
         << formatBytes(m.weightBytes) << "  (" << m.dtype << ", " << formatParams(m.paramCount) << " params) + "
         << formatBytes(m.cachingPeakBytes) << " encoding a batch" << (m.cachingStage > 0 ? ", loaded second" : "")
         << (m.freedBeforeTraining ? "; freed before step 1" : "; kept for the run") << "\n";
    }
    auto budgetOf = [](int64_t budget) { return budget > 0 ? formatBytes(budget) : std::string("unknown"); };
    if (c.splitModule.empty()) {
      os << "  total       " << formatBytes(c.totalBytes) << " / budget " << budgetOf(c.budgetBytes);
      if (c.missingBytes > 0) os << "  OVER by " << formatBytes(c.missingBytes);
      os << "\n";
    } else {
      for (const auto& cd : c.devices) {
        os << "  " << cd.device << std::string(cd.device.size() < 12 ? 12 - cd.device.size() : 1, ' ')
           << cachingPartText(c, cd) << ": " << formatBytes(cd.weightBytes) << " of weights, at most "
           << formatBytes(cd.totalBytes) << " while encoding / budget " << budgetOf(cd.budgetBytes);
        if (cd.missingBytes > 0) os << "  OVER by " << formatBytes(cd.missingBytes);
        os << "\n";
      }
    }
  }
  return os.str();
}

nlohmann::json planToJson(const Plan& plan) {
  nlohmann::json j;
  j["mode"] = toString(plan.mode);
  j["fits"] = plan.fits;
  j["reason"] = plan.reason;
  j["stem_device"] = plan.stemDevice;
  j["head_device"] = plan.headDevice;
  j["block_device"] = plan.blockDevice;
  auto& devs = j["devices"] = nlohmann::json::array();
  for (const auto& dp : plan.devices) {
    devs.push_back({{"device", dp.device},
                    {"name", dp.name},
                    {"budget_bytes", dp.budgetBytes},
                    {"has_stem", dp.hasStem},
                    {"has_head", dp.hasHead},
                    {"blocks", dp.blockIds},
                    {"param_count", dp.paramCount},
                    {"weight_bytes", dp.weightBytes},
                    {"adapter_bytes", dp.adapterBytes},
                    {"grad_bytes", dp.gradBytes},
                    {"ema_bytes", dp.emaBytes},
                    {"optimizer_bytes", dp.optimizerBytes},
                    {"host_bytes", dp.hostBytes},
                    {"activation_bytes", dp.activationBytes},
                    {"workspace_bytes", dp.workspaceBytes},
                    {"other_bytes", dp.otherBytes},
                    {"other_peak_bytes", dp.otherPeakBytes},
                    {"total_bytes", dp.totalBytes},
                    {"missing_bytes", dp.missingBytes}});
  }
  auto& others = j["other_modules"] = nlohmann::json::array();
  for (const auto& m : plan.otherModules) {
    others.push_back({{"name", m.name},
                      {"dtype", m.dtype},
                      {"param_count", m.paramCount},
                      {"weight_bytes", m.weightBytes},
                      {"caching_peak_bytes", m.cachingPeakBytes},
                      {"training_peak_bytes", m.trainingPeakBytes},
                      {"freed_before_training", m.freedBeforeTraining},
                      {"layers", m.layerBytes.size()}});
  }
  const CachingPlan& c = plan.caching;
  auto stages = nlohmann::json::array();
  for (const auto& st : c.stages)
    stages.push_back({{"stage", st.stage},
                      {"modules", st.modules},
                      {"weight_bytes", st.weightBytes},
                      {"peak_bytes", st.peakBytes},
                      {"total_bytes", st.totalBytes}});
  auto cachingDevices = nlohmann::json::array();
  for (const auto& cd : c.devices) {
    nlohmann::json d = {{"device", cd.device},          {"budget_bytes", cd.budgetBytes},
                        {"modules", cd.modules},        {"weight_bytes", cd.weightBytes},
                        {"total_bytes", cd.totalBytes}, {"missing_bytes", cd.missingBytes},
                        {"fits", cd.missingBytes == 0}};
    if (!c.splitModule.empty()) {
      d["split_stem"] = cd.hasSplitStem;
      d["split_head"] = cd.hasSplitHead;
      d["split_layers"] =
          cd.endLayer > cd.firstLayer ? nlohmann::json::array({cd.firstLayer, cd.endLayer}) : nlohmann::json::array();
    }
    cachingDevices.push_back(d);
  }
  j["caching"] = {{"needed", c.needed},
                  {"devices", cachingDevices},
                  {"split_module", c.splitModule},
                  {"split_stem_device", c.splitStemDevice},
                  {"layer_device", c.layerDevice},
                  {"split_head_device", c.splitHeadDevice},
                  {"stages", stages},
                  {"device", c.device},
                  {"weight_bytes", c.weightBytes},
                  {"peak_bytes", c.peakBytes},
                  {"total_bytes", c.totalBytes},
                  {"budget_bytes", c.budgetBytes},
                  {"missing_bytes", c.missingBytes},
                  {"fits", c.fits}};
  return j;
}

}  // namespace strata::placement
