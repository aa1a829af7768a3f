#include "train/RunPlanning.h"

#include <algorithm>
#include <vector>

#include "config/Validator.h"
#include "device/DeviceInventory.h"
#include "train/ModelFamily.h"

namespace strata::train {

namespace {

// One config with no `auto` left among the keys prepareRun resolves: validated, sized, planned.
PreparedRun prepareResolved(const config::RunConfig& cfg, const device::Inventory& inventory,
                            const PrepareOptions& options);

// Whether AdamW's moments could wait in host memory: only adamw's float moments are
// staged (adamw8bit's are a quarter of the size already), and a run on the cpu alone has
// them in host memory anyway.
bool momentsCanLeaveTheCards(const config::RunConfig& cfg, const device::Inventory& inventory) {
  if (cfg.train.optimizer != config::OptimizerType::AdamW) return false;
  if (cfg.model.device == config::ComputeDevice::Cpu) return false;
  const device::DeviceSelection selection =
      device::selectDevices(config::deviceRequestOf(cfg.model), inventory.devices);
  return !(selection.ok() && !selection.devices.empty() &&
           std::all_of(selection.devices.begin(), selection.devices.end(),
                       [](const device::DeviceInfo& d) { return d.isCpu(); }));
}

}  // namespace

PreparedRun prepareRun(const config::RunConfig& cfg, const device::Inventory& inventory,
                       const PrepareOptions& options) {
  const config::TrainConfig& t = cfg.train;
  if (!t.gradientCheckpointingAuto && !t.offloadOptimizerStateAuto) return prepareResolved(cfg, inventory, options);
  // train.gradient_checkpointing and train.offload_optimizer_state: auto, resolved together,
  // fastest first: recomputing activations costs ~30-40% of a step, staging the moments
  // ~3-5%. A key said outright keeps its value. The first that fits the cards (caps and
  // reserve included: the trainer refuses a plan that does not) wins; where none does,
  // the last, which saves the most, so its refusal and way out are the ones shown.
  std::vector<bool> ckptChoices{t.gradientCheckpointing};
  if (t.gradientCheckpointingAuto) ckptChoices = {false, true};
  std::vector<bool> offloadChoices{t.offloadOptimizerState};
  if (t.offloadOptimizerStateAuto)
    offloadChoices =
        momentsCanLeaveTheCards(cfg, inventory) ? std::vector<bool>{false, true} : std::vector<bool>{false};

  struct Tried {
    bool ckpt, offload;
    PreparedRun run;
  };
  std::vector<Tried> tried;
  auto lastFits = [&] { return tried.back().run.ok() && planRefusal(tried.back().run).empty(); };
  for (const bool ckpt : ckptChoices) {
    for (const bool offload : offloadChoices) {
      config::RunConfig c = cfg;
      c.train.gradientCheckpointingAuto = false;
      c.train.gradientCheckpointing = ckpt;
      c.train.offloadOptimizerStateAuto = false;
      c.train.offloadOptimizerState = offload;
      tried.push_back({ckpt, offload, prepareResolved(c, inventory, options)});
      if (lastFits()) break;
    }
    if (lastFits()) break;
  }
  PreparedRun chosen = std::move(tried.back().run);
  const bool ckpt = tried.back().ckpt, offload = tried.back().offload;
  tried.pop_back();
  // Why not a faster one, from the candidates tried before it.
  if (t.gradientCheckpointingAuto && chosen.ok()) {
    if (!ckpt) {
      chosen.checkpointingNote = "train.gradient_checkpointing: auto, off: the plan fits without it";
    } else {
      std::string why;
      for (auto it = tried.rbegin(); it != tried.rend() && why.empty(); ++it)
        if (!it->ckpt && it->run.ok()) why = planRefusal(it->run);
      if (!why.empty()) chosen.checkpointingNote = "train.gradient_checkpointing: auto, on: without it " + why;
    }
  }
  if (t.offloadOptimizerStateAuto && chosen.ok()) {
    if (offloadChoices.size() == 1) {
      if (cfg.train.optimizer != config::OptimizerType::AdamW)
        chosen.offloadNote = "train.offload_optimizer_state: auto, on the card: it stages adamw's moments only";
    } else if (!offload) {
      chosen.offloadNote = "train.offload_optimizer_state: auto, on the card: the plan fits with the moments there";
    } else {
      std::string why;
      for (const auto& other : tried)
        if (other.ckpt == ckpt && !other.offload && other.run.ok()) why = planRefusal(other.run);
      if (!why.empty())
        chosen.offloadNote = "train.offload_optimizer_state: auto, in host memory: with the moments on the card " + why;
    }
  }
  return chosen;
}

namespace {

PreparedRun prepareResolved(const config::RunConfig& cfg, const device::Inventory& inventory,
                            const PrepareOptions& options) {
  PreparedRun run;
  run.gradientCheckpointing = cfg.train.gradientCheckpointing;
  run.offloadOptimizerState = cfg.train.offloadOptimizerState;
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

}  // namespace

std::string planRefusal(const PreparedRun& run) {
  if (!run.ok() || run.plan.fits || run.plan.devices.empty()) return "";
  const bool cpuAlone = run.devices.size() == 1 && run.devices.front().isCpu();
  if (cpuAlone) return "";
  return "the model does not fit: " + run.plan.reason;
}

std::vector<std::string> planWayOut(const config::RunConfig& cfg, const device::Inventory& inventory,
                                    const PreparedRun& run, const PrepareOptions& options) {
  std::vector<std::string> out;
  if (planRefusal(run).empty()) return out;
  PrepareOptions o = options;
  o.where = nullptr;
  // Whether `changed` fits on the same devices: "fits", "not enough alone", or "" when it cannot be planned.
  auto verdict = [&](const config::RunConfig& changed) -> std::string {
    const PreparedRun again = prepareRun(changed, inventory, o);
    if (!again.ok() || again.plan.devices.empty()) return "";
    return again.plan.fits ? "this fits" : "not enough on its own";
  };
  auto add = [&](const std::string& what, const std::string& v) {
    out.push_back(v.empty() ? what : what + " (" + v + ")");
  };

  if (!cfg.model.quantize) {
    std::string fitting;
    for (const auto& alt : quantizedAlternatives(cfg, inventory, o))
      if (alt.plan.fits && fitting.empty()) fitting = alt.qtype;
    if (!fitting.empty())
      add("quantize the frozen model: model.quantize: true, model.qtype: " + fitting, "this fits");
    else
      add("quantize the frozen model: model.quantize: true, model.qtype: int8", "not enough on its own");
  }
  if (!cfg.model.quantizeTe && !run.plan.caching.fits) {
    // The text encoders while they fill the cache: offered where it makes the plan fit.
    // The config's qtype, or int8 where this build has no float8 (every build and card has int8).
    config::RunConfig te = cfg;
    te.model.quantizeTe = true;
    std::string what = "quantize the text encoders: model.quantize_te: true";
    if (!prepareRun(te, inventory, o).ok()) {
      te.model.qtype = "int8";
      what += ", model.qtype: int8";
    }
    if (verdict(te) == "this fits") add(what, "this fits");
  }
  size_t gpus = 0;
  for (const auto& d : inventory.devices) gpus += d.isCpu() ? 0 : 1;
  const size_t used = run.devices.size();
  if (gpus > used) {
    config::RunConfig split = cfg;
    split.model.splitModelOverGpus = true;
    split.model.gpuIds.clear();
    add("split the model over all " + std::to_string(gpus) +
            " GPUs: model.split_model_over_gpus: true, model.gpu_ids empty (all)",
        verdict(split));
  } else {
    add("split the model over more GPUs than the " + std::to_string(used) +
            " it has (model.split_model_over_gpus: true; plan it first for the cards you would add, such as 4x16GB)",
        "");
  }
  if (!cfg.model.gpuMemoryLimitGb.empty()) {
    config::RunConfig uncapped = cfg;
    uncapped.model.gpuMemoryLimitGb.clear();
    add("raise or remove the memory cap per card, model.gpu_memory_limit_gb", verdict(uncapped));
  }
  if (cfg.model.memoryReserveGb > 1.0) {
    config::RunConfig less = cfg;
    less.model.memoryReserveGb = 1.0;
    add("keep less memory free per card: model.memory_reserve_gb: 1", verdict(less));
  }
  if (!cfg.train.gradientCheckpointing) {
    config::RunConfig ckpt = cfg;
    ckpt.train.gradientCheckpointing = true;
    add("recompute activations: train.gradient_checkpointing: true", verdict(ckpt));
  }
  if (!run.offloadOptimizerState && !cfg.train.offloadOptimizerStateAuto && momentsCanLeaveTheCards(cfg, inventory)) {
    config::RunConfig host = cfg;
    host.train.offloadOptimizerState = true;
    add("keep AdamW's moments in host memory: train.offload_optimizer_state: true", verdict(host));
  }
  return out;
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

void adoptAutoChoices(config::RunConfig& cfg, const PreparedRun& run) {
  cfg.train.gradientCheckpointing = run.gradientCheckpointing;
  cfg.train.offloadOptimizerState = run.offloadOptimizerState;
}

std::string autoChoiceNotes(const PreparedRun& run) {
  std::string out = run.checkpointingNote;
  if (!run.offloadNote.empty()) out += (out.empty() ? "" : "; ") + run.offloadNote;
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
