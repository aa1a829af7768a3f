#include "train/RunPlanning.h"

#include <vector>

#include "config/Validator.h"
#include "device/DeviceInventory.h"
#include "train/ModelFamily.h"

namespace strata::train {

PreparedRun prepareRun(const config::RunConfig& cfg, const device::Inventory& inventory,
                       const PrepareOptions& options) {
  PreparedRun run;
  run.devicesSource = inventory.source;
  config::ValidateOptions vo;
  vo.where = options.where;
  vo.devices = inventory.devices;
  vo.checkPaths = !options.preview;
  vo.placementOnly = options.preview;
  run.problems = config::validate(cfg, vo);
  if (!run.ok()) return run;
  auto fail = [&](const std::string& key, const std::string& message) {
    run.problems.push_back(config::problemAt(config::Severity::Error, key, message, "", options.where));
    return run;
  };

  // The model's part, through its registered family (train/ModelFamily.h).
  const ModelFamily* family = nullptr;
  try {
    family = &modelFamily(cfg.model.arch);
    FamilyPlan fp = family->plan(cfg);
    run.input = std::move(fp.input);
    run.tokens = fp.tokens;
    run.modelSource = std::move(fp.source);
    run.modelSummary = std::move(fp.summary);
    run.tokensNote = std::move(fp.tokensNote);
  } catch (const std::exception& e) {
    return fail(family ? family->planKey(cfg) : "model.arch", e.what());
  }

  // The validator has judged the request against this inventory and the caps
  // against these devices: what is left is to read them.
  const device::DeviceSelection selection =
      device::selectDevices(config::deviceRequestOf(cfg.model), inventory.devices);
  if (!selection.ok()) return fail("model", selection.problems.front().message);
  run.devices = selection.devices;
  const std::string first = run.devices.front().label();
  try {
    run.input.input.otherModules = family->otherModules(cfg, first, &run.otherModulesNote);
  } catch (const std::exception& e) {
    return fail("model.name_or_path", e.what());
  }
  if (options.extraFirstDeviceBytes > 0) {
    placement::OtherModule extra;
    extra.name = "extra (--other-gb)";
    extra.dtype = "-";
    extra.weightBytes = options.extraFirstDeviceBytes;
    run.input.input.otherModules.push_back(extra);
  }
  size_t gpus = 0;
  for (const auto& d : inventory.devices) gpus += d.isCpu() ? 0 : 1;
  if (run.devices.size() == 1 && run.devices.front().isCpu()) {
    run.devicesNote = cfg.model.device == config::ComputeDevice::Cpu
                          ? "The run uses the cpu: model.device is cpu"
                          : "The run uses the cpu: model.device is " + std::string(config::enumName(cfg.model.device)) +
                                " and there is no GPU";
    run.devicesNote += gpus > 0 ? " (the " + std::to_string(gpus) + " GPU(s) of the device list are not used)." : ".";
  } else if (!cfg.model.splitModelOverGpus && gpus > 1) {
    run.devicesNote = "split_model_over_gpus is off: the model goes on " + first + " alone (the other " +
                      std::to_string(gpus - 1) + " GPU(s) are not used).";
  }
  run.capBytes = device::resolveCaps(run.devices, cfg.model.gpuMemoryLimitGb).capBytes;
  for (const auto& d : run.devices) run.freeBytes.push_back(d.simulated ? 0 : device::freeBytesOf(d.index));
  try {
    run.input.input.devices =
        placement::makeBudgets(run.devices, cfg.model.gpuMemoryLimitGb, cfg.model.memoryReserveGb, run.freeBytes);
  } catch (const std::exception& e) {
    return fail("model.memory_reserve_gb", e.what());
  }
  try {
    run.plan = placement::planPlacement(run.input.input);
  } catch (const std::exception& e) {
    return fail("model.placement", e.what());
  }
  return run;
}

std::string planRefusal(const PreparedRun& run) {
  if (!run.ok() || run.plan.fits || run.plan.devices.empty()) return "";
  const bool cpuAlone = run.devices.size() == 1 && run.devices.front().isCpu();
  if (cpuAlone) return "";
  return "the model does not fit: " + run.plan.reason;
}

std::string describePlan(const PreparedRun& run) {
  std::string out;
  for (const std::string* part : {&run.devicesNote, &run.tokensNote, &run.otherModulesNote, &run.plan.reason}) {
    if (part->empty()) continue;
    if (!out.empty()) out += " ";
    out += *part;
  }
  return out;
}

std::vector<QuantizedAlternative> quantizedAlternatives(const config::RunConfig& cfg,
                                                        const device::Inventory& inventory,
                                                        const PrepareOptions& options) {
  std::vector<QuantizedAlternative> out;
  for (const char* qtype : {"qfloat8", "int8"}) {
    config::RunConfig q = cfg;
    q.model.quantize = true;
    q.model.qtype = qtype;
    PrepareOptions o = options;
    o.where = nullptr;
    const PreparedRun run = prepareRun(q, inventory, o);
    if (run.ok()) out.push_back({qtype, run.plan});
  }
  return out;
}

}  // namespace strata::train
