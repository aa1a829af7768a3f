#include "train/Trainer.h"

#include <ATen/Context.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "io/AtomicFile.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "placement/OptimizerStateAttachment.h"
#include "placement/Placement.h"
#include "placement/Planner.h"
#include "train/CheckpointedRunner.h"
#include "train/Datasets.h"
#include "train/Ema.h"
#include "train/FlowMatching.h"
#include "train/GradClip.h"
#include "train/LrSchedule.h"
#include "train/OptimizerState.h"
#include "train/RngState.h"
#include "train/RunFolder.h"
#include "train/TrainerSupport.h"

namespace strata::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* toString(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::Finished: return "finished";
    case RunOutcome::Stopped: return "stopped";
    case RunOutcome::Failed: return "failed";
    case RunOutcome::PreflightFailed: return "preflight failed";
  }
  return "?";
}

int exitCodeOf(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::Finished: return kExitOk;
    case RunOutcome::Stopped: return kExitInterrupted;
    case RunOutcome::Failed: return kExitFailed;
    case RunOutcome::PreflightFailed: return kExitBadInput;
  }
  return kExitFailed;
}

namespace {

std::vector<events::DeviceMemory> memoryOf(const std::vector<c10::Device>& devices) {
  std::vector<events::DeviceMemory> out;
  for (const auto& d : devices) {
    events::DeviceMemory m;
    m.device = d.str();
    if (d.is_cuda()) {
      const auto f = device::memoryFigures(d.index());
      m.allocatedBytes = f.allocatedBytes;
      m.reservedBytes = f.reservedBytes;
      m.capBytes = f.capBytes;
    }
    out.push_back(m);
  }
  return out;
}

events::PlacementEvent placementEventOf(const placement::Placement& p, const std::string& reason) {
  events::PlacementEvent e;
  e.reason = reason;
  for (const auto& d : p.snapshot().devices) {
    for (const auto& b : d.blocks) {
      events::PlacedBlock pb;
      pb.id = b.id;
      pb.kind = b.kind;
      pb.device = d.device;
      e.blocks.push_back(pb);
    }
    events::DeviceMemory m;
    m.device = d.device;
    m.allocatedBytes = d.memory.allocatedBytes;
    m.reservedBytes = d.memory.reservedBytes;
    m.capBytes = d.memory.capBytes;
    e.memory.push_back(m);
    // Per-block bytes are not in the snapshot; the device's totals go on its first block.
    for (auto& pb : e.blocks)
      if (pb.device == d.device) {
        pb.paramBytes = d.weightBytes;
        pb.attachmentBytes = d.adapterBytes + d.emaBytes + d.optimizerStateBytes + d.quantScaleBytes;
        break;
      }
  }
  for (const auto& a : p.audit()) e.audit.push_back({a.path, a.expected, a.actual});
  int64_t tensors = 0;
  for (const auto& a : p.attachments()) tensors += static_cast<int64_t>(a->tensors().size());
  e.checkedTensors = tensors;
  return e;
}

std::map<std::string, at::Tensor> toMap(const NamedTensors& v) {
  std::map<std::string, at::Tensor> m;
  for (const auto& [k, t] : v) m[k] = t;
  return m;
}


}  // namespace

// ---------------------------------------------------------------------------

Trainer::Trainer(config::RunConfig cfg, events::EventBus& bus, TrainerOptions options)
    : cfg_(std::move(cfg)), bus_(bus), options_(std::move(options)) {
  runDir_ = options_.runDir.empty() ? fs::path(cfg_.job.trainingFolder) / cfg_.job.name : options_.runDir;
}

std::unique_ptr<Trainer> Trainer::resumeFrom(const fs::path& runDir, events::EventBus& bus, TrainerOptions options) {
  RunFolder folder(runDir);
  std::error_code ec;
  if (!fs::exists(folder.configPath(), ec))
    throw IoError(runDir.string() + ": not a run folder (no config.yaml)");
  auto loaded = config::loadRunConfig(folder.configPath());
  if (!loaded.ok()) {
    std::string msg = folder.configPath().string() + ": the run's config has errors:";
    for (const auto& p : loaded.problems)
      if (p.isError()) msg += "\n  " + p.format();
    throw ConfigError(msg);
  }
  if (!folder.latestCheckpoint()) throw IoError(runDir.string() + ": no checkpoint to resume from");
  options.runDir = runDir;
  options.resume = true;
  return std::make_unique<Trainer>(loaded.config, bus, std::move(options));
}

Trainer::~Trainer() {
  if (thread_.joinable()) {
    requestStop();
    thread_.join();
  }
}

void Trainer::start() {
  if (thread_.joinable() || ran_.load()) throw Error("Trainer::start: a trainer runs once");
  running_ = true;  // visible before the thread starts
  thread_ = std::thread([this] { threadOutcome_ = run(); });
}

RunOutcome Trainer::wait() {
  if (thread_.joinable()) thread_.join();
  return threadOutcome_;
}

void Trainer::requestStop() { stopRequested_.store(true); }
void Trainer::setPaused(bool paused) {
  paused_.store(paused);
  pauseCv_.notify_all();
}
void Trainer::requestSample() { sampleRequested_.store(true); }
void Trainer::requestSave() { saveRequested_.store(true); }
void Trainer::requestExport() { exportRequested_.store(true); }

void Trainer::waitWhilePaused() {
  std::unique_lock<std::mutex> lock(pauseMutex_);
  // Timed: requestStop only stores an atomic (signal handlers cannot notify).
  while (paused_.load() && !stopRequested_.load()) pauseCv_.wait_for(lock, std::chrono::milliseconds(100));
}

RunOutcome Trainer::run() {
  if (ran_.exchange(true)) {
    bus_.publish(events::FailedEvent{"Trainer::run: a trainer runs once", 0, ""});
    return RunOutcome::Failed;
  }
  running_ = true;
  RunOutcome outcome = RunOutcome::Failed;
  try {
    outcome = runImpl();
  } catch (const std::exception& e) {
    bus_.publish(events::FailedEvent{e.what(), step_.load(), ""});
    outcome = RunOutcome::Failed;
  } catch (...) {
    bus_.publish(events::FailedEvent{"unknown error", step_.load(), ""});
  }
  releaseDeviceCaches();
  running_ = false;
  return outcome;
}

RunOutcome Trainer::runImpl() {
  const auto wallStart = Clock::now();
  auto st = std::make_unique<State>();
  RunFolder folder(runDir_);
  const auto& tc = cfg_.train;

  // ---- preflight -----------------------------------------------------------
  std::vector<std::string> warnings;
  std::vector<std::string> problems = validateForTraining(cfg_, &warnings);
  if (options_.reportConfigWarnings)
    for (const auto& w : warnings) bus_.publish(events::WarningEvent{w, 0});
  if (!options_.resume && options_.runDir.empty()) {
    // A derived folder that holds an earlier run: pick the next free name.
    const auto wanted = runDir_;
    runDir_ = freeRunDir(runDir_);
    folder = RunFolder(runDir_);
    if (runDir_ != wanted)
      bus_.publish(events::WarningEvent{wanted.string() + " holds an earlier run; this run writes to " + runDir_.string(), 0});
  } else if (!options_.resume && !folder.checkpoints().empty()) {
    problems.push_back("run folder " + runDir_.string() +
                       " already has checkpoints: resume it (strata-train resume) or choose another folder");
  }
  std::optional<CheckpointData> resumeData;
  if (options_.resume) {
    auto latest = folder.latestCheckpoint();
    if (!latest) {
      problems.push_back(runDir_.string() + ": no checkpoint to resume from");
    } else {
      try {
        resumeData = readCheckpoint(latest->path);
      } catch (const std::exception& e) {
        problems.push_back(e.what());
      }
    }
  }
  if (problems.empty()) {
    try {
      st->fluxConfig = resolveFluxConfig(cfg_.model);
    } catch (const std::exception& e) {
      problems.push_back(std::string("model: ") + e.what());
    }
  }
  if (problems.empty()) {
    DatasetContext ctx;
    ctx.latentChannels = st->fluxConfig.latentChannels();
    ctx.textTokens = defaultTextTokens(st->fluxConfig.jointAttentionDim);
    ctx.textDim = st->fluxConfig.jointAttentionDim;
    ctx.pooledDim = st->fluxConfig.pooledProjectionDim;
    ctx.seed = tc.seed;
    st->textTokens = ctx.textTokens;
    try {
      st->dataset = makeDatasets(cfg_.datasets, ctx);
      st->emptyPrompt = st->dataset->emptyPrompt();
      st->pixelCode = cfg_.datasets.front().type == config::DatasetType::Shapes;
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
    st->promptEmbedder = std::make_unique<WordEmbedder>(ctx.textTokens, ctx.textDim, ctx.pooledDim);
  }
  std::string planReason;
  if (problems.empty()) {
    try {
      auto built = buildPlacedModel(cfg_, st->fluxConfig, planTokens(cfg_, st->fluxConfig));
      st->model = std::move(built.model);
      st->placement = std::move(built.placement);
      st->devices = built.devices;
      planReason = built.reason;
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  if (problems.empty()) {
    try {
      lora::LoraConfig lc;
      lc.rank = cfg_.network.linear;
      lc.alpha = cfg_.network.linearAlpha;
      lc.dropout = cfg_.network.dropout;
      lc.targetModules = cfg_.network.targetModules;
      at::manual_seed(static_cast<uint64_t>(tc.seed) + 1);  // LoRA init, the same on resume
      st->network = lora::LoraNetwork::create(*st->model, lc);
      st->placement->attachAll(st->network->attachments());
      st->network->train(true);
      for (const auto& [name, p] : st->network->stateDict("")) st->namedParams.emplace_back(name, p);
      std::vector<at::Tensor> params = st->network->parameters();
      torch::optim::AdamWOptions opts(tc.lr);
      opts.betas(std::make_tuple(tc.betas.size() > 0 ? tc.betas[0] : 0.9, tc.betas.size() > 1 ? tc.betas[1] : 0.999));
      opts.eps(tc.eps);
      opts.weight_decay(tc.weightDecay);
      // After placement: its state is created on each parameter's device (DESIGN §2.2).
      st->optimizer = std::make_shared<torch::optim::AdamW>(params, opts);
      st->placement->attachAll(placement::OptimizerStateAttachment::forParameters(st->optimizer, st->namedParams));
      if (tc.ema.useEma) {
        EmaOptions eo;
        eo.decay = tc.ema.emaDecay;
        eo.updateEvery = tc.ema.updateEvery;
        st->ema = std::make_unique<Ema>(st->namedParams, eo);
        st->ema->registerWith(*st->placement);
      }
      st->schedule = std::make_unique<LrSchedule>(tc.lrScheduler, tc.lr, tc.steps, tc.lrWarmupSteps);
      if (tc.dtype == config::DType::FP16) st->scaler = LossScaler(LossScalerOptions{});
      if (tc.gradientCheckpointing) {
        st->checkpointed = std::make_unique<CheckpointedRunner>(*st->placement);
        st->runner = st->checkpointed.get();
      } else {
        st->runner = st->placement.get();
      }
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  if (problems.empty() && resumeData) {
    try {
      st->network->loadStateDict(toMap(resumeData->lora), "transformer.");
      loadAdamWState(*st->optimizer, st->namedParams, toMap(resumeData->optimizer));
      if (st->ema) {
        const auto shadows = toMap(resumeData->ema);
        for (size_t i = 0; i < st->ema->size(); ++i) {
          auto it = shadows.find(st->ema->path(i));
          if (it == shadows.end()) throw LoadError("checkpoint has no EMA shadow for " + st->ema->path(i));
          at::NoGradGuard ng;
          st->ema->shadow(i).copy_(it->second);
        }
      }
    } catch (const std::exception& e) {
      problems.push_back(std::string("resume: ") + e.what());
    }
  }
  if (problems.empty()) {
    // The audit: every parameter, buffer and attachment where its block is.
    const auto issues = st->placement->audit();
    for (const auto& i : issues)
      problems.push_back("audit: " + i.path + " is on " + i.actual + ", its block " + i.blockId + " is on " +
                         i.expected);
    bus_.publish(placementEventOf(*st->placement, planReason));
  }
  if (problems.empty()) {
    try {
      folder.create();
      if (!options_.resume) {
        io::writeFileAtomic(folder.configPath(),
                            options_.configYaml.empty() ? config::toYaml(cfg_) : options_.configYaml);
      }
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  if (!problems.empty()) {
    bus_.publish(events::PreflightFailedEvent{problems});
    return RunOutcome::PreflightFailed;
  }

  // ---- state of a new or resumed run --------------------------------------
  int64_t startStep = 0;
  st->gen = makeCpuGenerator(static_cast<uint64_t>(tc.seed));
  if (resumeData) {
    startStep = resumeData->step;
    restoreRngStates(st->gen, resumeData->rng);
    const auto& s = resumeData->state;
    st->drawCursor = s.value("draw_cursor", int64_t{0});
    st->skippedItems = s.value("skipped_items", int64_t{0});
    st->lossEmaRaw = s.value("loss_ema_raw", 0.0);
    st->lossCount = s.value("loss_count", int64_t{0});
    if (st->scaler.enabled() && s.contains("loss_scale"))
      st->scaler.restore(s.value("loss_scale", 1.0), s.value("loss_scale_clean_steps", int64_t{0}));
    st->lastCheckpoint = folder.latestCheckpoint()->path.string();
    st->lastCheckpointStep = startStep;
    folder.truncateLogsAfter(startStep);
  }
  step_ = startStep;
  bus_.publish(events::StartedEvent{runDir_.string(), cfg_.job.name, startStep, tc.steps, options_.resume});

  // ---- helpers over the state ---------------------------------------------
  auto checkpoint = [&](int64_t step, bool manual = false) -> bool {
    CheckpointData d;
    d.step = step;
    d.manual = manual;  // "save now": kept apart from the rolling keep-N checkpoints
    for (const auto& [k, t] : st->network->stateDict("transformer.")) d.lora.emplace_back(k, t.detach());
    d.optimizer = saveAdamWState(*st->optimizer, st->namedParams);
    if (st->ema)
      for (size_t i = 0; i < st->ema->size(); ++i) d.ema.emplace_back(st->ema->path(i), st->ema->shadow(i));
    d.rng = captureRngStates(st->gen, st->devices);
    d.state = {{"draw_cursor", st->drawCursor},
               {"skipped_items", st->skippedItems},
               {"loss_ema_raw", st->lossEmaRaw},
               {"loss_count", st->lossCount},
               {"lr_scheduler", config::enumName(tc.lrScheduler)},
               {"lr", tc.lr},
               {"total_steps", tc.steps},
               {"lora_rank", cfg_.network.linear},
               {"lora_alpha", cfg_.network.linearAlpha},
               {"ema", st->ema != nullptr},
               {"ema_updates", st->ema ? st->ema->numUpdates() : 0}};
    if (st->scaler.enabled()) {
      d.state["loss_scale"] = st->scaler.scale();
      d.state["loss_scale_clean_steps"] = st->scaler.cleanSteps();
    }
    try {
      const auto path = writeCheckpoint(folder, d);
      st->lastCheckpoint = path.string();
      st->lastCheckpointStep = step;
      events::CheckpointEvent ce{path.string(), step, {}};
      for (const auto& r : pruneCheckpoints(folder, cfg_.save.maxStepSavesToKeep)) ce.removed.push_back(r.string());
      bus_.publish(ce);
      return true;
    } catch (const std::exception& e) {
      bus_.publish(events::WarningEvent{std::string(e.what()) + "; " +
                                         (st->lastCheckpoint.empty()
                                              ? std::string("there is no earlier checkpoint")
                                              : "the previous checkpoint " + st->lastCheckpoint + " is intact"),
                                     step});
      return false;
    }
  };

  auto doSamples = [&](int64_t step) {
    st->lastSampleStep = step;
    if (cfg_.sample.prompts.empty()) return;
    sampleAll(*st, cfg_, folder, step, bus_);
  };

  auto exportLora = [&](int64_t step, bool final) -> std::vector<std::string> {
    std::vector<std::string> written;
    std::unique_ptr<Ema::SwapGuard> swap;
    if (st->ema) swap = std::make_unique<Ema::SwapGuard>(*st->ema);
    for (auto f : cfg_.save.exportFormats) {
      const std::string name = cfg_.job.name + (final ? "" : "_step" + std::to_string(step)) + "_" +
                               config::enumName(f) + ".safetensors";
      const auto path = folder.exportsDir() / name;
      lora::LoraExportOptions eo;
      eo.format = fileFormatOf(f);
      eo.dtype = scalarTypeOf(cfg_.save.dtype);
      eo.softwareVersion = options_.softwareVersion;
      eo.baseModel = cfg_.model.nameOrPath.empty() ? "random FLUX-architecture model (" +
                                                         config::enumName(cfg_.model.preset) + ")"
                                                   : cfg_.model.nameOrPath;
      eo.title = cfg_.job.name;
      eo.rank = cfg_.network.linear;
      eo.alpha = cfg_.network.linearAlpha;
      eo.steps = step;
      eo.runYaml = options_.configYaml.empty() ? config::toYaml(cfg_) : options_.configYaml;
      lora::writeLoraFile(path, *st->network, st->fluxConfig, eo);
      written.push_back(path.string());
      bus_.publish(events::ExportEvent{path.string(), config::enumName(f), step});
    }
    return written;
  };

  // ---- the loop ------------------------------------------------------------
  int64_t step = startStep;
  double lastLoss = 0.0;
  std::deque<double> recentStepMs;
  const int64_t microBatches = std::max<int64_t>(tc.gradientAccumulationSteps, 1);
  const int64_t batch = std::max<int64_t>(tc.batchSize, 1);
  try {
    if (startStep == 0 && cfg_.sample.sampleEvery > 0) doSamples(0);
    while (step < tc.steps) {
      if (paused_.load()) {
        bus_.publish(events::PausedEvent{step});
        waitWhilePaused();
        if (!stopRequested_.load()) bus_.publish(events::ResumedEvent{step});
      }
      if (stopRequested_.load() || (options_.stopAfterStep > 0 && step >= options_.stopAfterStep)) {
        if (st->lastCheckpointStep != step) checkpoint(step);
        bus_.publish(events::StoppedEvent{step, st->lastCheckpoint});
        return RunOutcome::Stopped;
      }

      const auto t0 = Clock::now();
      const double lr = st->schedule->lrAt(step);
      setLearningRate(*st->optimizer, lr);
      st->optimizer->zero_grad();
      double lossSum = 0.0;
      for (int64_t m = 0; m < microBatches; ++m) {
        auto loss = microStep(*st, cfg_, batch, bus_, step + 1);
        const double v = loss.item<double>();
        if (!std::isfinite(v)) {
          throw NonFiniteLoss("loss is " + std::string(std::isnan(v) ? "NaN" : "Inf") + " at step " +
                              std::to_string(step + 1));
        }
        st->scaler.scaled(loss / static_cast<double>(microBatches)).backward();
        lossSum += v;
      }
      const auto params = st->network->parameters();
      // fp16: gradients that overflowed at this loss scale skip the step (and
      // halve the scale); everywhere else a non-finite gradient stops the run.
      const double scaleUsed = st->scaler.scale();
      const bool finiteGrads = st->scaler.unscale(params);
      st->scaler.update(finiteGrads);
      double gradNormValue = std::numeric_limits<double>::quiet_NaN();
      if (finiteGrads) {
        gradNormValue = clipGradNorm(params, tc.maxGradNorm);
        if (!std::isfinite(gradNormValue))
          throw NonFiniteLoss("gradient norm is not finite at step " + std::to_string(step + 1));
        st->optimizer->step();
      } else if (st->scaler.exhausted()) {
        throw NonFiniteLoss("gradients are not finite at step " + std::to_string(step + 1) +
                            " even at fp16 loss scale " + std::to_string(scaleUsed));
      } else {
        bus_.publish(events::WarningEvent{"step " + std::to_string(step + 1) +
                                           ": fp16 gradients overflowed at loss scale " + std::to_string(scaleUsed) +
                                           "; step skipped, scale now " + std::to_string(st->scaler.scale()),
                                       step + 1});
      }
      ++step;
      step_ = step;
      if (st->ema && finiteGrads) st->ema->update(step);

      const double loss = lossSum / static_cast<double>(microBatches);
      lastLoss = loss;
      st->lossEmaRaw = 0.9 * st->lossEmaRaw + 0.1 * loss;
      ++st->lossCount;
      const double smoothed = st->lossEmaRaw / (1.0 - std::pow(0.9, static_cast<double>(st->lossCount)));
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      recentStepMs.push_back(ms);
      if (recentStepMs.size() > 20) recentStepMs.pop_front();
      const double avgMs = std::accumulate(recentStepMs.begin(), recentStepMs.end(), 0.0) /
                           static_cast<double>(recentStepMs.size());
      events::StepEvent se;
      se.step = step;
      se.totalSteps = tc.steps;
      se.loss = loss;
      se.lossSmoothed = smoothed;
      se.lr = lr;
      se.gradNorm = gradNormValue;
      se.stepTimeMs = ms;
      se.imagesPerSec = ms > 0 ? 1000.0 * static_cast<double>(batch * microBatches) / ms : 0.0;
      se.etaSeconds = avgMs * static_cast<double>(tc.steps - step) / 1000.0;
      se.memory = memoryOf(st->devices);
      nlohmann::json line = {{"step", step},      {"loss", loss},          {"loss_smoothed", smoothed},
                             {"lr", lr},          {"grad_norm", gradNormValue}, {"step_time_ms", ms},
                             {"images_per_sec", se.imagesPerSec}};
      for (const auto& m : se.memory)
        if (m.allocatedBytes > 0) line["allocated_bytes"][m.device] = m.allocatedBytes;
      if (st->scaler.enabled()) line["loss_scale"] = scaleUsed;
      if (!finiteGrads) line["skipped"] = true;
      folder.appendMetrics(line);
      bus_.publish(se);

      const bool last = step == tc.steps;
      if (sampleRequested_.exchange(false) ||
          (cfg_.sample.sampleEvery > 0 && (step % cfg_.sample.sampleEvery == 0 || last)))
        doSamples(step);
      const bool manualSave = saveRequested_.exchange(false);
      if (manualSave || (cfg_.save.saveEvery > 0 && step % cfg_.save.saveEvery == 0) || last)
        checkpoint(step, manualSave);
      if (exportRequested_.exchange(false) && !last) exportLora(step, false);
    }
  } catch (const NonFiniteLoss& e) {
    bus_.publish(events::FailedEvent{std::string(e.what()) + (st->lastCheckpoint.empty()
                                                                ? "; no checkpoint was written before it"
                                                                : "; last good checkpoint: " + st->lastCheckpoint),
                                  step + 1, st->lastCheckpoint});
    return RunOutcome::Failed;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (device::isOutOfMemory(e)) msg = "out of memory at step " + std::to_string(step + 1) + ": " + msg;
    bus_.publish(events::FailedEvent{msg, step + 1, st->lastCheckpoint});
    return RunOutcome::Failed;
  }

  std::vector<std::string> exports;
  try {
    exports = exportLora(step, true);
  } catch (const std::exception& e) {
    bus_.publish(events::FailedEvent{std::string("LoRA export failed: ") + e.what() +
                                      (st->lastCheckpoint.empty() ? "" : "; checkpoint kept: " + st->lastCheckpoint),
                                  step, st->lastCheckpoint});
    return RunOutcome::Failed;
  }
  events::FinishedEvent fe;
  fe.step = step;
  fe.finalLoss = lastLoss;
  fe.wallSeconds = std::chrono::duration<double>(Clock::now() - wallStart).count();
  fe.exports = exports;
  fe.skippedItems = st->skippedItems;
  bus_.publish(fe);
  return RunOutcome::Finished;
}

std::vector<fs::path> exportRun(const fs::path& runDir, const std::vector<config::ExportFormat>& formats,
                                const fs::path& outDir, const std::string& softwareVersion) {
  RunFolder folder(runDir);
  std::error_code ec;
  if (!fs::exists(folder.configPath(), ec)) throw IoError(runDir.string() + ": not a run folder (no config.yaml)");
  auto loaded = config::loadRunConfig(folder.configPath());
  if (!loaded.ok()) throw ConfigError(folder.configPath().string() + ": the run's config has errors");
  const auto& cfg = loaded.config;
  const auto latest = folder.latestCheckpoint();
  if (!latest) throw IoError(runDir.string() + ": no checkpoint to export");
  const auto data = readCheckpoint(latest->path);
  const auto fcfg = resolveFluxConfig(cfg.model);
  const double alpha = data.state.value("lora_alpha", cfg.network.linearAlpha);
  const auto ema = toMap(data.ema);
  const std::string prefix = "transformer.";
  std::map<std::string, lora::LoraModuleWeights> byModule;
  for (const auto& [key, t] : data.lora) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string rest = key.substr(prefix.size());
    for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
      const std::string sfx = suffix;
      if (rest.size() <= sfx.size() || rest.compare(rest.size() - sfx.size(), sfx.size(), sfx) != 0) continue;
      const std::string module = rest.substr(0, rest.size() - sfx.size());
      auto& w = byModule[module];
      w.modulePath = module;
      w.alpha = alpha;
      auto e = ema.find(rest);  // EMA shadows are keyed without the prefix
      const auto value = (e != ema.end() ? e->second : t).to(at::kFloat);
      (sfx == ".lora_A.weight" ? w.down : w.up) = value;
    }
  }
  std::vector<lora::LoraModuleWeights> modules;
  for (auto& [k, w] : byModule) {
    if (!w.down.defined() || !w.up.defined()) throw LoadError(latest->path.string() + ": incomplete LoRA for " + k);
    modules.push_back(std::move(w));
  }
  const fs::path dir = outDir.empty() ? folder.exportsDir() : outDir;
  fs::create_directories(dir, ec);
  std::vector<fs::path> written;
  for (auto f : formats) {
    const auto path = dir / (cfg.job.name + "_" + config::enumName(f) + ".safetensors");
    lora::LoraExportOptions eo;
    eo.format = fileFormatOf(f);
    eo.dtype = scalarTypeOf(cfg.save.dtype);
    eo.softwareVersion = softwareVersion;
    eo.baseModel = cfg.model.nameOrPath.empty() ? "random FLUX-architecture model" : cfg.model.nameOrPath;
    eo.title = cfg.job.name;
    eo.rank = cfg.network.linear;
    eo.alpha = alpha;
    eo.steps = data.step;
    eo.runYaml = config::toYaml(cfg);
    lora::writeLoraFile(path, modules, fcfg, eo);
    written.push_back(path);
  }
  return written;
}

}  // namespace strata::train
