#include "device/DeviceSelection.h"

#include <algorithm>
#include <cmath>

#include "device/DeviceInventory.h"

namespace strata::device {

Inventory thisMachine() {
  Inventory inv;
  inv.devices = listDevices();
  inv.source = "this machine";
  return inv;
}

Inventory simulatedInventory(const std::string& spec) {
  Inventory inv;
  inv.devices = parseDeviceSpec(spec);
  inv.simulated = true;
  inv.source = "simulated (--devices " + spec + ")";
  return inv;
}

namespace {

DeviceInfo cpuOf(const std::vector<DeviceInfo>& inventory) {
  for (const auto& d : inventory)
    if (d.isCpu()) return d;
  return cpuDevice();
}

}  // namespace

DeviceSelection selectDevices(const DeviceRequest& r, const std::vector<DeviceInfo>& inventory) {
  DeviceSelection s;
  std::vector<DeviceInfo> gpus;
  for (const auto& d : inventory)
    if (!d.isCpu()) gpus.push_back(d);
  std::string have;
  for (const auto& d : gpus) have += (have.empty() ? "" : ", ") + d.label();
  const std::string count = std::to_string(gpus.size());

  if (r.kind == ComputeKind::Cuda && gpus.empty()) {
    s.problems.push_back({SelectionIssue::NoCuda, -1, "device is cuda but this machine has no CUDA device"});
    return s;
  }
  if (r.kind == ComputeKind::Cpu || (r.kind == ComputeKind::Auto && gpus.empty() && r.gpuIds.empty())) {
    if (r.split && r.kind != ComputeKind::Cpu)
      s.problems.push_back(
          {SelectionIssue::TooFewForSplit, -1, "a split needs at least two GPUs, this machine has " + count});
    else
      s.devices.push_back(cpuOf(inventory));
    return s;
  }

  std::vector<DeviceInfo> chosen;
  for (int id : r.gpuIds) {
    auto it = std::find_if(gpus.begin(), gpus.end(), [&](const DeviceInfo& d) { return d.index == id; });
    if (it == gpus.end())
      s.problems.push_back({SelectionIssue::UnknownGpu, id,
                            "gpu id " + std::to_string(id) + " does not exist on this machine (CUDA devices: " +
                                (have.empty() ? std::string("none") : have) + ")"});
    else
      chosen.push_back(*it);
  }
  if (!s.ok()) return s;
  if (r.gpuIds.empty()) chosen = r.split ? gpus : std::vector<DeviceInfo>{gpus.front()};
  if (!r.split) {
    chosen.resize(1);
  } else if (chosen.size() < 2) {
    s.problems.push_back(
        {SelectionIssue::TooFewForSplit, -1,
         "a split needs at least two GPUs, " +
             (r.gpuIds.empty() ? "this machine has " + count : std::to_string(chosen.size()) + " selected")});
    return s;
  } else {
    // A spec's cpu is an offload target after the GPUs.
    for (const auto& d : inventory)
      if (d.isCpu()) chosen.push_back(d);
  }
  s.devices = std::move(chosen);
  return s;
}

DeviceCaps resolveCaps(const std::vector<DeviceInfo>& devices, const std::vector<double>& capGb) {
  DeviceCaps c;
  c.capBytes.assign(devices.size(), 0);
  if (capGb.empty()) return c;
  size_t gpus = 0;
  for (const auto& d : devices) gpus += d.isCpu() ? 0 : 1;
  if (capGb.size() != 1 && capGb.size() != gpus) {
    c.problem = std::to_string(capGb.size()) + " caps for " + std::to_string(gpus) +
                " devices (give one for all, or one per device)";
    return c;
  }
  size_t gpu = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    if (d.isCpu()) continue;
    const double gb = capGb.size() == 1 ? capGb[0] : capGb[gpu];
    ++gpu;
    const auto bytes = static_cast<int64_t>(std::llround(gb * 1e9));
    if (bytes < 0 && c.problem.empty()) c.problem = "a negative cap for " + d.label();
    c.capBytes[i] = std::max<int64_t>(bytes, 0);
    // A simulated card smaller than its cap is just that card (plan --devices 2x8GB
    // with a 16 GB cap); a real one cannot be capped above its memory.
    if (!d.simulated && d.totalBytes > 0 && bytes > d.totalBytes && c.problem.empty())
      c.problem =
          "cap " + formatBytes(bytes) + " for " + d.label() + " exceeds its memory " + formatBytes(d.totalBytes);
  }
  return c;
}

}  // namespace strata::device
