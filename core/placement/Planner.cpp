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

namespace {

std::string billions(int64_t count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fB", static_cast<double>(count) / 1e9);
  return buf;
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
  };
  DevicePlan& d0 = plan.devices.front();
  d0.hasStem = d0.hasHead = true;
  add(d0, in.stem);
  add(d0, in.head);
  d0.otherBytes = in.otherModuleBytes;
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
    dp.totalBytes = dp.weightBytes + dp.adapterBytes + dp.gradBytes + dp.emaBytes + dp.optimizerBytes +
                    dp.activationBytes + dp.workspaceBytes + dp.otherBytes;
    dp.missingBytes = dp.budgetBytes > 0 && dp.totalBytes > dp.budgetBytes ? dp.totalBytes - dp.budgetBytes : 0;
    if (dp.missingBytes > 0) plan.fits = false;
  }
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
  size_t d = 0;
  double used = static_cast<double>(in.stem.residentBytes() + in.head.residentBytes() + in.otherModuleBytes);
  int64_t workspace = std::max(in.stem.workspaceBytes, in.head.workspaceBytes);
  bool ok = true;
  if (used + static_cast<double>(workspace) > capacity[0]) {
    ok = false;  // not even the stem fits: fill the blocks from the next device on
    if (n > 1) {
      d = 1;
      used = 0;
      workspace = 0;
    }
  }
  for (size_t b = 0; b < in.blocks.size(); ++b) {
    const BlockCost& c = in.blocks[b];
    for (;;) {
      const double need =
          used + static_cast<double>(c.residentBytes()) + static_cast<double>(std::max(workspace, c.workspaceBytes));
      if (need <= capacity[d]) {
        out[b] = d;
        used += static_cast<double>(c.residentBytes());
        workspace = std::max(workspace, c.workspaceBytes);
        break;
      }
      if (d + 1 >= n) return false;  // out[b..] stay on the last device
      ++d;
      used = 0;
      workspace = 0;
    }
  }
  return ok;
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

// Smallest fraction in [0, 1] for which fill(fraction) succeeds (fill(1) must).
template <class Fill>
double smallestFraction(Fill&& fill) {
  double lo = 0.0, hi = 1.0;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (fill(mid))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
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
    const double u = smallestFraction([&](double f) { return greedyFill(in, capacities(in, f, 0.0), tmp); });
    greedyFill(in, capacities(in, u, 0.0), assign);
  } else if (greedyFill(in, capacities(in, 1.0, 1.0), assign)) {
    // Accelerators full, the cpu takes as little as it can.
    const double gpuFraction = hasGpu ? 1.0 : 0.0;
    const double v = smallestFraction([&](double f) { return greedyFill(in, capacities(in, gpuFraction, f), tmp); });
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
  if (in.otherModuleBytes > 0) os << " and other modules (" << formatBytes(in.otherModuleBytes) << ")";
  os << " on " << in.devices.front().device << ".";
  if (!plan.fits) {
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
  plan.reason = os.str();
  return plan;
}

Plan planParamCount(const PlannerInput& in) {
  Plan plan;
  plan.mode = PlanMode::ParamCount;
  const size_t n = in.devices.size();
  const double other = static_cast<double>(in.otherModuleParamCount) * in.otherModuleParamCountScale;
  double total = other + static_cast<double>(in.stem.paramCount + in.head.paramCount);
  for (const auto& b : in.blocks) total += static_cast<double>(b.paramCount);
  const double share = total / static_cast<double>(n);
  double cumulative = other + static_cast<double>(in.stem.paramCount + in.head.paramCount);
  for (const auto& b : in.blocks) {
    const double mid = cumulative + 0.5 * static_cast<double>(b.paramCount);
    size_t d = share > 0 ? static_cast<size_t>(mid / share) : 0;
    d = std::min(d, n - 1);
    plan.blockDevice.push_back(in.devices[d].device);
    cumulative += static_cast<double>(b.paramCount);
  }
  summarise(in, plan);
  std::ostringstream os;
  os << "param_count: " << billions(static_cast<int64_t>(total)) << " parameters ("
     << billions(static_cast<int64_t>(total - other)) << " in the model + " << billions(in.otherModuleParamCount)
     << " other modules x " << in.otherModuleParamCountScale << " on " << in.devices.front().device
     << ") shared evenly, " << billions(static_cast<int64_t>(share))
     << " per device; a block goes where its midpoint falls.";
  if (!plan.fits) os << " Over budget:" << missingText(plan);
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

BlockCost estimateCost(const UnitShape& unit, const CostOptions& o) {
  BlockCost c;
  c.id = unit.id;
  c.kind = unit.kind;
  c.paramCount = unit.paramCount;
  c.weightBytes = (unit.paramCount - unit.quantizedWeightCount) * o.weightElementBytes +
                  unit.quantizedWeightCount * o.quantizedElementBytes + unit.quantScaleCount * o.quantScaleElementBytes;
  const int64_t dequantizedBytes = unit.quantizedWeightCount * o.activationElementBytes;
  int64_t loraParams = 0;
  if (o.loraRank > 0) {
    for (const auto& l : unit.loraLinears) loraParams += o.loraRank * (l.inFeatures + l.outFeatures);
  }
  const int64_t trainable = loraParams * o.loraElementBytes;
  c.adapterBytes = trainable;
  c.gradBytes = trainable;
  c.optimizerBytes = trainable * o.optimizerStatesPerParam;
  c.emaBytes = o.ema ? trainable : 0;
  if (unit.isBlock) {
    const double perTokenState = static_cast<double>(o.batchSize * o.tokens * o.hiddenSize * o.activationElementBytes);
    const auto full = static_cast<int64_t>(perTokenState * o.activationElementsPerTokenPerHidden);
    if (o.gradientCheckpointing) {
      const auto input = static_cast<int64_t>(perTokenState);  // the block's input
      c.activationBytes = o.offloadCheckpoints ? 0 : input;
      c.workspaceBytes = full + dequantizedBytes + (o.offloadCheckpoints ? input : 0);
    } else {
      c.activationBytes = full + dequantizedBytes;
    }
  }
  return c;
}

PlannerInput estimateInput(const UnitShape& stem, const std::vector<UnitShape>& blocks, const UnitShape& head,
                           const CostOptions& options) {
  PlannerInput in;
  in.stem = estimateCost(stem, options);
  in.head = estimateCost(head, options);
  for (const auto& b : blocks) in.blocks.push_back(estimateCost(b, options));
  return in;
}

std::string formatPlan(const Plan& plan) {
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
    os << "  weights     " << formatBytes(dp.weightBytes) << "  (" << billions(dp.paramCount) << " params)\n";
    os << "  adapters    " << formatBytes(dp.adapterBytes) << "  + grads " << formatBytes(dp.gradBytes) << "\n";
    os << "  EMA         " << formatBytes(dp.emaBytes) << "\n";
    os << "  optimizer   " << formatBytes(dp.optimizerBytes) << "\n";
    os << "  activations " << formatBytes(dp.activationBytes) << "  + workspace " << formatBytes(dp.workspaceBytes)
       << "\n";
    if (dp.otherBytes > 0) os << "  other       " << formatBytes(dp.otherBytes) << "\n";
    os << "  total       " << formatBytes(dp.totalBytes) << " / budget "
       << (dp.budgetBytes > 0 ? formatBytes(dp.budgetBytes) : std::string("unknown"));
    if (dp.missingBytes > 0) os << "  OVER by " << formatBytes(dp.missingBytes);
    os << "\n";
  }
  os << "\n" << plan.reason << "\n";
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
                    {"activation_bytes", dp.activationBytes},
                    {"workspace_bytes", dp.workspaceBytes},
                    {"other_bytes", dp.otherBytes},
                    {"total_bytes", dp.totalBytes},
                    {"missing_bytes", dp.missingBytes}});
  }
  return j;
}

}  // namespace strata::placement
