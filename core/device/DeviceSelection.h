#pragma once
// Which devices a run means, and the memory cap of each: written once, here, for
// the validator, the trainer, `strata-train plan` and the app's GPU map. Reports
// in device terms (ids, devices, bytes); the config layer adds the YAML key and line.
#include <cstdint>
#include <string>
#include <vector>

#include "device/DeviceInfo.h"

namespace strata::device {

// The devices a run may use: this machine's GPUs, or simulated ones from a spec,
// which may list the cpu too (an offload target for a split).
struct Inventory {
  std::vector<DeviceInfo> devices;
  bool simulated = false;
  std::string source;  // "this machine", "simulated (--devices 4x16GB)"
};
Inventory thisMachine();                                // listDevices()
Inventory simulatedInventory(const std::string& spec);  // parseDeviceSpec; throws ConfigError

enum class ComputeKind { Auto, Cpu, Cuda };

// What a config asks for (model.device, model.gpu_ids, model.split_model_over_gpus).
struct DeviceRequest {
  ComputeKind kind = ComputeKind::Auto;
  std::vector<int> gpuIds;  // empty: every GPU for a split, else the first
  bool split = false;
};

enum class SelectionIssue {
  NoCuda,          // cuda asked for, the inventory has no GPU
  UnknownGpu,      // a requested id the inventory lacks (gpuId says which)
  TooFewForSplit,  // a split over fewer than two GPUs
};

struct DeviceSelection {
  struct Problem {
    SelectionIssue issue;
    int gpuId = -1;
    std::string message;  // one line, device terms
  };
  // In fill order: the GPUs (then the inventory's cpu for a split, when it lists
  // one), or the cpu alone. Empty when there are problems.
  std::vector<DeviceInfo> devices;
  std::vector<Problem> problems;
  bool ok() const { return problems.empty(); }
};

// Rules: kind cpu (or auto without a GPU) -> the cpu (the inventory's entry when it
// lists one, else this host); otherwise the GPUs named by gpuIds (each must exist),
// or without ids every GPU for a split and the first one else; without a split
// only the first selected GPU is used; a split needs two or more GPUs.
DeviceSelection selectDevices(const DeviceRequest& request, const std::vector<DeviceInfo>& inventory);

// The cap of each device from a cap list (GB): one value caps every GPU, else one
// value per GPU in order; the cpu is never capped. 0 = no cap.
struct DeviceCaps {
  std::vector<int64_t> capBytes;  // per device of `devices`
  std::string problem;            // "2 caps for 3 devices ...", or a cap above a real device's memory
  bool ok() const { return problem.empty(); }
};
DeviceCaps resolveCaps(const std::vector<DeviceInfo>& devices, const std::vector<double>& capGb);

}  // namespace strata::device
