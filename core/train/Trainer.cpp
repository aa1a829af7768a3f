#include "train/Trainer.h"

#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"
#include "io/FileBytes.h"
#include "lora/LoraNetwork.h"
#include "nn/Attention.h"
#include "placement/OptimizerStateAttachment.h"
#include "placement/Placement.h"
#include "train/AdamW8bit.h"
#include "train/CheckpointedRunner.h"
#include "train/Collective.h"
#include "train/Ema.h"
#include "train/FusedAdamW.h"
#include "train/GradClip.h"
#include "train/GradientReducer.h"
#include "train/HostToDevice.h"
#include "train/LrSchedule.h"
#include "train/ModelFamily.h"
#include "train/OptimizerState.h"
#include "train/PhaseTimer.h"
#include "train/RngState.h"
#include "train/RunFolder.h"
#include "train/RunContext.h"
#include "train/RunFolderLock.h"
#include "train/RunSink.h"
#include "train/SamplingWeights.h"
#include "train/TrainerSupport.h"

namespace strata::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* toString(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::Finished:
      return "finished";
    case RunOutcome::Stopped:
      return "stopped";
    case RunOutcome::Failed:
      return "failed";
    case RunOutcome::PreflightFailed:
      return "preflight failed";
  }
  return "?";
}

int exitCodeOf(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::Finished:
      return kExitOk;
    case RunOutcome::Stopped:
      return kExitInterrupted;
    case RunOutcome::Failed:
      return kExitFailed;
    case RunOutcome::PreflightFailed:
      return kExitBadInput;
  }
  return kExitFailed;
}

namespace {

// The mean of a step's micro-batch losses; a non-finite loss (or, below, gradient
// norm) of `step` stops the run.
double checkedMeanLoss(const std::vector<double>& losses, int64_t step) {
  double sum = 0.0;
  for (const double l : losses) {
    if (!std::isfinite(l))
      throw NonFiniteLoss("loss is " + std::string(std::isnan(l) ? "NaN" : "Inf") + " at step " + std::to_string(step));
    sum += l;
  }
  return sum / static_cast<double>(losses.size());
}
void checkGradNorm(double norm, int64_t step) {
  if (!std::isfinite(norm)) throw NonFiniteLoss("gradient norm is not finite at step " + std::to_string(step));
}

double millisecondsSince(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// The ranks of a data-parallel run: one process is rank 0 of 1.
int rankOf(const Trainer::State& st) { return st.collective ? st.collective->rank() : 0; }
int worldOf(const Trainer::State& st) { return st.collective ? st.collective->worldSize() : 1; }

// Every rank's `ok`, and-ed: each rank's verdict through one all-reduce.
bool allRanksOk(Collective& collective, bool ok) {
  std::vector<at::Tensor> failed{at::full({1}, ok ? 0.0 : 1.0, at::kFloat)};
  collective.allReduceSum(failed);
  return failed[0].item<double>() == 0.0;
}

// The LoRA weights (and EMA shadows) of every rank made rank 0's.
void broadcastWeights(Collective& collective, lora::LoraNetwork& network, Ema* ema) {
  std::vector<at::Tensor> tensors;
  for (const auto& p : network.parameters()) tensors.push_back(p.detach());
  if (ema)
    for (size_t i = 0; i < ema->size(); ++i) tensors.push_back(ema->shadow(i));
  at::NoGradGuard noGrad;
  collective.broadcastFromRankZero(tensors);
}

// Every rank goes on from rank 0's step: each reads the run folder's latest intact
// checkpoint by itself, and a rank that read another one would train other moments.
void agreeOnStart(Collective& collective, int64_t startStep, std::vector<std::string>& problems) {
  std::vector<at::Tensor> rankZeroStep{at::full({1}, static_cast<double>(startStep), at::kDouble)};
  collective.broadcastFromRankZero(rankZeroStep);
  const auto zeroStep = static_cast<int64_t>(rankZeroStep[0].item<double>());
  const bool same = zeroStep == startStep;
  if (!allRanksOk(collective, same))
    problems.push_back(same
                           ? "another rank of this data-parallel run read another checkpoint than rank 0 (its "
                             "output says which)"
                           : "this rank would go on from step " + std::to_string(startStep) + " and rank 0 from step " +
                                 std::to_string(zeroStep) + ": the ranks read different checkpoints");
}

bool onCuda(const std::vector<c10::Device>& devices) {
  return std::any_of(devices.begin(), devices.end(), [](const c10::Device& d) { return d.is_cuda(); });
}

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

int64_t attachmentTensorCount(const placement::Placement& p) {
  int64_t tensors = 0;
  for (const auto& a : p.attachments()) tensors += static_cast<int64_t>(a->tensors().size());
  return tensors;
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
      pb.paramBytes = b.weightBytes;
      pb.attachmentBytes = b.attachments.totalBytes();
      for (const auto& k : b.attachments.kinds) pb.attachments.push_back({k.kind, k.count, k.bytes});
      pb.hostBytes = b.hostAttachments.totalBytes();
      for (const auto& k : b.hostAttachments.kinds) pb.hostAttachments.push_back({k.kind, k.count, k.bytes});
      e.blocks.push_back(pb);
    }
    events::DeviceMemory m;
    m.device = d.device;
    m.allocatedBytes = d.memory.allocatedBytes;
    m.reservedBytes = d.memory.reservedBytes;
    m.capBytes = d.memory.capBytes;
    e.memory.push_back(m);
  }
  for (const auto& a : p.audit()) e.audit.push_back({a.path, a.expected, a.actual});
  e.checkedTensors = attachmentTensorCount(p);
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
  OpenedRun run = openRunFolder(runDir, "resume from");
  options.runDir = runDir;
  options.resume = true;
  return std::make_unique<Trainer>(std::move(run.config), bus, std::move(options));
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
  // model.gpu_memory_limit_gb holds for this run only: the allocator keeps a cap for
  // the process, so the caps are put back as they were once the run is over.
  const auto capsBefore = device::memoryCaps();
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
  for (const auto& problem : restoreMemoryCaps(capsBefore)) bus_.publish(events::WarningEvent{problem, step_.load()});
  running_ = false;
  return outcome;
}

RunOutcome Trainer::runImpl() {
  auto st = std::make_unique<State>();
  st->stopRequested = [this] { return stopRequested_.load(); };
  st->context = std::make_unique<RunContext>(*st, cfg_, bus_);
  st->reducer = options_.reducer ? options_.reducer : std::make_shared<LocalGradients>();
  st->collective = options_.collective;
  std::vector<std::string> problems;
  // A stop before the first step (Ctrl-C while caching or loading) ends the run
  // where it is: no checkpoint (nothing was trained), the cache files written so
  // far kept for the next run, a new run's folder removed when empty.
  try {
    preflight(*st, problems);
    if (problems.empty()) stopPoint(*st, "preparing the data");
    if (problems.empty()) buildAndPlace(*st, problems);
    if (problems.empty()) stopPoint(*st, "loading the model");
    if (problems.empty()) restore(*st, problems);
    if (problems.empty()) stopPoint(*st, "restoring the run");
  } catch (const Interrupted& e) {
    if (!options_.resume) st->lock.releaseAndRemoveIfEmpty();
    st.reset();
    bus_.publish(events::WarningEvent{
        std::string("stopped while ") + e.what() + ", before step 1: nothing trained, no checkpoint written", 0});
    bus_.publish(events::StoppedEvent{0, ""});
    return RunOutcome::Stopped;
  }
  if (problems.empty()) {
    try {
      st->sink->create(!options_.skipSaves);
      if (!options_.resume)
        st->sink->writeConfig(options_.configYaml.empty() ? config::toYaml(cfg_) : options_.configYaml);
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  if (st->collective) {
    // Every rank ready, or none trains (a rank that failed alone would leave the
    // others waiting at the first step's all-reduce); then one LoRA initialisation.
    try {
      if (!allRanksOk(*st->collective, problems.empty()) && problems.empty())
        problems.push_back("another rank of this data-parallel run could not start (its output says why)");
      if (problems.empty()) agreeOnStart(*st->collective, st->startStep, problems);
      if (problems.empty()) {
        broadcastWeights(*st->collective, *st->network, st->ema.get());
        seedRankDropout(cfg_.train.seed, st->startStep, rankOf(*st));
      }
    } catch (const std::exception& e) {
      problems.push_back(std::string("data-parallel start: ") + e.what());
    }
  }
  if (!problems.empty()) {
    if (!options_.resume) st->lock.releaseAndRemoveIfEmpty();
    bus_.publish(events::PreflightFailedEvent{problems});
    return RunOutcome::PreflightFailed;
  }
  // Log lines past the resumed step, or of an earlier attempt here that left no checkpoint.
  st->sink->truncateLogsAfter(st->resumeData ? st->startStep : -1);
  step_ = st->startStep;
  startStepGraph(*st);  // before the header: it says whether the step is graphed
  std::string setup = describeRunSetup(cfg_, onCuda(st->devices), st->graph != nullptr, st->graphOff);
  if (const std::string notes = autoChoiceNotes(st->prepared); !notes.empty()) setup += " (" + notes + ")";
  if (st->collective)
    setup += (setup.empty() ? "" : "; ") + std::string("data-parallel over ") + std::to_string(worldOf(*st)) +
             " ranks (a global batch of " + std::to_string(worldOf(*st) * std::max<int64_t>(cfg_.train.batchSize, 1)) +
             " per micro-batch)";
  bus_.publish(events::StartedEvent{runDir_.string(), cfg_.job.name, st->startStep, cfg_.train.steps, options_.resume,
                                    setup, st->graphOff});
  const RunOutcome outcome = loop(*st);
  return outcome == RunOutcome::Finished ? finish(*st) : outcome;
}

void Trainer::preflight(State& st, std::vector<std::string>& problems) {
  // A data-parallel run's ranks other than 0 neither lock nor write the folder (a
  // SilentSink); they read a resumed run's checkpoint from it.
  const bool writer = rankOf(st) == 0;
  // Rank 0 tells the others whether it got through (below, the data it prepares),
  // on every way out of here.
  struct RankZeroVerdict {
    Trainer::State& st;
    const std::vector<std::string>& problems;
    ~RankZeroVerdict() {
      if (!st.collective || st.collective->rank() != 0) return;
      try {
        st.collective->shareFromRankZero("strata/preflight",
                                         problems.empty() && std::uncaught_exceptions() == 0 ? "ok" : "failed");
      } catch (...) {  // the others then time out, or fail at the start's agreement
      }
    }
  } verdict{st, problems};
  // The config's rules and the plan, on this machine's devices (or the simulated ones of the options).
  const device::Inventory inventory = options_.devices ? *options_.devices : device::thisMachine();
  st.prepared = prepareRun(cfg_, inventory);
  // train.gradient_checkpointing and train.offload_optimizer_state: auto, as the plan
  // decided them (the keys still read auto), before the optimizer is built.
  adoptAutoChoices(cfg_, st.prepared);
  for (const auto& p : st.prepared.problems) {
    if (p.isError())
      problems.push_back(p.format());
    else if (options_.reportConfigWarnings)
      bus_.publish(events::WarningEvent{p.key + ": " + p.message, 0});
  }
  if (!problems.empty()) return;  // nothing is written for a config with errors (a bad job.name among them)
  // A plan that does not fit its devices (a split, or one card; training or caching
  // phase) is refused here, before anything is loaded, rather than running out of memory.
  if (const auto why = planRefusal(st.prepared); !why.empty()) {
    problems.push_back(why);
    for (const auto& way : planWayOut(cfg_, inventory, st.prepared)) problems.push_back("way out: " + way);
    return;
  }
  if (options_.devices && options_.devices->simulated) {
    problems.push_back("the plan fits the simulated devices (" + options_.devices->source +
                       "); nothing is loaded or trained on devices that are not there");
    return;
  }
  try {
    st.familyDef = &modelFamily(cfg_.model.arch);
    st.family = st.familyDef->newRun();
  } catch (const std::exception& e) {
    problems.push_back(e.what());
    return;
  }
  // The run folder, locked for this process (a derived one that holds an earlier
  // run or is in use gets the next free name), cleaned of what a killed run left.
  try {
    if (writer) {
      auto opened = lockRunFolder(runDir_, !options_.resume && options_.runDir.empty());
      runDir_ = opened.dir;
      st.lock = std::move(opened.lock);
      for (const auto& n : opened.notes) bus_.publish(events::WarningEvent{n, 0});
      st.sink = options_.makeSink ? options_.makeSink(runDir_, bus_) : std::make_shared<RunSink>(runDir_, bus_);
    } else {
      st.sink = std::make_shared<SilentSink>(runDir_, bus_);
    }
  } catch (const std::exception& e) {
    problems.push_back(e.what());
    return;
  }
  const RunFolder& folder = st.sink->folder();
  if (writer && !options_.resume && !folder.checkpoints().empty()) {
    problems.push_back("run folder " + runDir_.string() +
                       " already has checkpoints: resume it (strata-train resume) or choose another folder");
  }
  if (options_.resume) {
    try {
      auto intact = readLatestIntactCheckpoint(folder);
      for (const auto& d : intact.damaged) bus_.publish(events::WarningEvent{"damaged checkpoint: " + d, 0});
      // Damaged newer ones are set aside, so the run goes on from the intact one.
      for (const auto& c : folder.checkpoints())
        if (c.step > intact.ref.step) {
          const auto aside = st.sink->setAsideDamagedCheckpoint(c);
          bus_.publish(events::WarningEvent{"resuming from " + intact.ref.path.string() + " (step " +
                                                std::to_string(intact.ref.step) + "); the damaged " +
                                                c.path.filename().string() + " is kept as " + aside.string(),
                                            0});
        }
      if (intact.data.step > cfg_.train.steps)
        throw IoError(intact.ref.path.string() + ": its step " + std::to_string(intact.data.step) +
                      " is past train.steps " + std::to_string(cfg_.train.steps) + " of the run's config");
      st.resumePath = intact.ref.path.string();
      st.resumeData = std::move(intact.data);
    } catch (const std::exception& e) {
      problems.push_back(std::string("resume: ") + e.what());
    }
  }
  if (!problems.empty()) return;
  if (!writer) {
    // Rank 0 builds the encode cache; the others read it once it is whole.
    try {
      if (st.collective->shareFromRankZero("strata/preflight", "") != "ok")
        problems.push_back("rank 0 could not prepare the run (its output says why)");
    } catch (const std::exception& e) {
      problems.push_back(std::string("waiting for rank 0 to prepare the data: ") + e.what());
    }
    if (!problems.empty()) return;
  }
  try {
    st.family->prepareData(*st.context);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    problems.push_back(e.what());
  }
}

void Trainer::buildAndPlace(State& st, std::vector<std::string>& problems) {
  const auto& tc = cfg_.train;
  try {
    PlacedModel placed = st.family->buildAndPlace(*st.context);
    st.placement = std::move(placed.placement);
    st.planReason = std::move(placed.reason);
    st.devices = st.placement->devices();
    if (options_.phaseTimer) {
      std::vector<int> cuda;
      for (const auto& d : st.devices)
        if (d.is_cuda()) cuda.push_back(d.index());
      options_.phaseTimer->setDevices(cuda);
      st.phases = options_.phaseTimer.get();
    }
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    problems.push_back(e.what());
    return;
  }
  try {
    lora::LoraConfig lc;
    lc.rank = cfg_.network.linear;
    lc.alpha = cfg_.network.linearAlpha;
    lc.dropout = cfg_.network.dropout;
    lc.targetModules = cfg_.network.targetModules;
    lc.dtype = scalarTypeOf(cfg_.network.dtype);          // fp32 or bf16: the validator refuses fp16
    at::manual_seed(static_cast<uint64_t>(tc.seed) + 1);  // LoRA init, the same on resume
    st.network = lora::LoraNetwork::create(st.family->module(), lc, st.family->loraRules());
    st.placement->attachAll(st.network->attachments());
    st.network->train(true);
    for (const auto& [name, p] : st.network->stateDict("")) st.namedParams.emplace_back(name, p);
    std::vector<at::Tensor> params = st.network->parameters();
    torch::optim::AdamWOptions opts(tc.lr);
    opts.betas(std::make_tuple(tc.betas.size() > 0 ? tc.betas[0] : 0.9, tc.betas.size() > 1 ? tc.betas[1] : 0.999));
    opts.eps(tc.eps);
    opts.weight_decay(tc.weightDecay);
    // After placement: its state is created on each parameter's device (docs/design.md §2.2),
    // or with train.offload_optimizer_state in pinned host memory (the validator keeps
    // that to adamw).
    if (tc.optimizer == config::OptimizerType::AdamW8bit) {
      st.optimizer = std::make_shared<AdamW8bit>(params, opts);
    } else {
      auto fused = std::make_shared<FusedAdamW>(params, opts);
      fused->setStateInHostMemory(tc.offloadOptimizerState);
      st.optimizer = std::move(fused);
    }
    st.placement->attachAll(
        placement::OptimizerStateAttachment::forParameters(st.optimizer, st.namedParams, tc.offloadOptimizerState));
    if (tc.ema.useEma) {
      EmaOptions eo;
      eo.decay = tc.ema.emaDecay;
      eo.updateEvery = tc.ema.updateEvery;
      st.ema = std::make_unique<Ema>(st.namedParams, eo);
      st.ema->registerWith(*st.placement);
    }
    st.schedule = std::make_unique<LrSchedule>(tc.lrScheduler, tc.lr, tc.steps, tc.lrWarmupSteps);
    if (tc.dtype == config::DType::FP16) st.scaler = LossScaler(LossScalerOptions{});
    if (tc.gradientCheckpointing) {
      // LoRA dropout is what draws random numbers in a block while training: only then
      // does the recompute need the forward's random state (which a CUDA graph cannot set).
      const auto& adapters = st.network->adapters();
      const bool blocksDrawRandom =
          std::any_of(adapters.begin(), adapters.end(), [](const auto& a) { return a->dropout() > 0.0; });
      st.checkpointed = std::make_unique<CheckpointedRunner>(*st.placement, tc.offloadCheckpoints, blocksDrawRandom);
      st.runner = st.checkpointed.get();
    } else {
      st.runner = st.placement.get();
    }
  } catch (const std::exception& e) {
    problems.push_back(e.what());
  }
}

// Some attachments get their tensors in the first step (a new run's optimizer state, the
// fp8 weights' kept transposes, nn::Fp8Backward::Fp8KeptTranspose): where that happened,
// the audit runs again and the GPU map gets the placement with them. A misplaced one
// stops the run, as before step 1.
void Trainer::auditAttachmentsMadeByTheFirstStep(State& st, int64_t step) {
  if (attachmentTensorCount(*st.placement) == st.auditedTensors) return;
  auto placed = placementEventOf(*st.placement, st.planReason);
  placed.afterStep = step;
  st.auditedTensors = placed.checkedTensors;
  std::string misplaced;
  for (const auto& i : placed.audit)
    misplaced += (misplaced.empty() ? "" : "; ") + i.path + " is on " + i.actual + ", expected " + i.expected;
  bus_.publish(std::move(placed));
  if (!misplaced.empty())
    throw Error("audit after step " + std::to_string(step) + " (attachments made by it): " + misplaced);
}

void Trainer::restore(State& st, std::vector<std::string>& problems) {
  if (st.resumeData) {
    try {
      st.network->loadStateDict(toMap(st.resumeData->lora), st.familyDef->checkpointPrefix());
      loadAdamWState(*st.optimizer, st.namedParams, toMap(st.resumeData->optimizer), cfg_.train.offloadOptimizerState);
      // Loaded where this run keeps it (pinned host memory with train.offload_optimizer_state,
      // else the parameter's device), whatever the saved run did; placement re-places what
      // the load could not put there (an adamw8bit checkpoint decoded on the card).
      st.placement->placeAttachments(placement::optimizerStateKind());
      if (st.ema) {
        const auto shadows = toMap(st.resumeData->ema);
        for (size_t i = 0; i < st.ema->size(); ++i) {
          auto it = shadows.find(st.ema->path(i));
          if (it == shadows.end()) throw LoadError("checkpoint has no EMA shadow for " + st.ema->path(i));
          at::NoGradGuard ng;
          st.ema->shadow(i).copy_(it->second);
        }
      }
    } catch (const std::exception& e) {
      problems.push_back(std::string("resume: ") + e.what());
      return;
    }
  }
  // The audit: every parameter, buffer and attachment where it belongs (its block's device, or
  // pinned host memory for an offloaded optimizer state).
  for (const auto& i : st.placement->audit())
    problems.push_back("audit: " + i.path + " is on " + i.actual + ", expected " + i.expected + " (block " + i.blockId +
                       ")");
  auto placed = placementEventOf(*st.placement, st.planReason);
  st.auditedTensors = placed.checkedTensors;
  bus_.publish(std::move(placed));
  if (!problems.empty()) return;

  // Counters and random states: a new run starts from the seed, a resumed one
  // where its checkpoint stopped.
  st.gen = makeCpuGenerator(static_cast<uint64_t>(cfg_.train.seed));
  if (!st.resumeData) return;
  st.startStep = st.resumeData->step;
  restoreRngStates(st.gen, st.resumeData->rng);
  const auto& s = st.resumeData->state;
  // The checkpoint counts the draws of all ranks; each rank draws its share (RunContext::shard).
  // Rank r draws the r-th batch of every global batch (RunContext::shard): the
  // position goes on from the last whole global batch of this world size.
  const int64_t drawnByAll = s.value("draw_cursor", int64_t{0});
  const int64_t world = worldOf(st);
  const int64_t perGlobalBatch = world * std::max<int64_t>(cfg_.train.batchSize, 1);
  st.cursor.drawn = world == 1 ? drawnByAll : (drawnByAll / perGlobalBatch) * (perGlobalBatch / world);
  if (world > 1 && drawnByAll % perGlobalBatch != 0)
    bus_.publish(
        events::WarningEvent{"resume: the checkpoint's " + std::to_string(drawnByAll) +
                                 " drawn items are not whole global batches of " + std::to_string(perGlobalBatch) +
                                 " (" + std::to_string(world) + " ranks); the data order goes on from item " +
                                 std::to_string((drawnByAll / perGlobalBatch) * perGlobalBatch) + " (the last " +
                                 std::to_string(drawnByAll % perGlobalBatch) + " are drawn again)",
                             0});
  st.cursor.skippedItems = s.value("skipped_items", int64_t{0});
  st.lossEmaRaw = s.value("loss_ema_raw", 0.0);
  st.lossCount = s.value("loss_count", int64_t{0});
  if (st.scaler.enabled() && s.contains("loss_scale"))
    st.scaler.restore(s.value("loss_scale", 1.0), s.value("loss_scale_clean_steps", int64_t{0}));
  st.lastCheckpoint = st.resumePath;
  st.lastCheckpointStep = st.startStep;
}

bool Trainer::checkpoint(State& st, int64_t step, bool manual) {
  const auto& tc = cfg_.train;
  if (!st.sink->writes()) {  // a data-parallel rank other than 0: rank 0 writes the run's
    st.lastCheckpointStep = step;
    return true;
  }
  CheckpointData d;
  d.step = step;
  d.manual = manual;  // "save now": kept apart from the rolling keep-N checkpoints
  for (const auto& [k, t] : st.network->stateDict(st.familyDef->checkpointPrefix())) d.lora.emplace_back(k, t.detach());
  d.optimizer = saveAdamWState(*st.optimizer, st.namedParams);
  if (st.ema)
    for (size_t i = 0; i < st.ema->size(); ++i) d.ema.emplace_back(st.ema->path(i), st.ema->shadow(i));
  d.rng = captureRngStates(st.gen, st.devices);
  d.state = {{"draw_cursor", st.cursor.drawn * worldOf(st)},  // every rank's draws
             {"skipped_items", st.cursor.skippedItems},
             {"loss_ema_raw", st.lossEmaRaw},
             {"loss_count", st.lossCount},
             {"lr_scheduler", config::enumName(tc.lrScheduler)},
             {"lr", tc.lr},
             {"total_steps", tc.steps},
             {"lora_rank", cfg_.network.linear},
             {"lora_alpha", cfg_.network.linearAlpha},
             {"ema", st.ema != nullptr},
             {"ema_updates", st.ema ? st.ema->numUpdates() : 0},
             {"lora_prefix", st.familyDef->checkpointPrefix()}};
  if (st.scaler.enabled()) {
    d.state["loss_scale"] = st.scaler.scale();
    d.state["loss_scale_clean_steps"] = st.scaler.cleanSteps();
  }
  std::string written;
  try {
    st.sink->writeCheckpoint(d, cfg_.save.maxStepSavesToKeep, written);
    st.lastCheckpoint = written;
    st.lastCheckpointStep = step;
    return true;
  } catch (const std::exception& e) {
    if (!written.empty()) {  // in place; the prune failed
      st.lastCheckpoint = written;
      st.lastCheckpointStep = step;
    }
    bus_.publish(events::WarningEvent{
        std::string(e.what()) + "; " +
            (st.lastCheckpoint.empty() ? std::string("there is no earlier checkpoint")
                                       : "the previous checkpoint " + st.lastCheckpoint + " is intact"),
        step});
    return false;
  }
}

std::vector<std::string> Trainer::exportLora(State& st, int64_t step, bool final) {
  std::vector<std::string> written;
  std::unique_ptr<Ema::SwapGuard> swap;
  if (st.ema) swap = std::make_unique<Ema::SwapGuard>(*st.ema);
  for (auto f : cfg_.save.exportFormats) {
    const auto path = st.familyDef->exportPathIn(st.sink->folder().exportsDir(), cfg_, f,
                                                 final ? std::nullopt : std::optional<int64_t>(step));
    st.sink->writeExport(path, config::enumName(f), step, [&](const fs::path& at) {
      st.family->exportLora(*st.context, f, at, step, options_.configYaml, options_.softwareVersion);
    });
    written.push_back(path.string());
  }
  return written;
}

void Trainer::startStepGraph(State& st) {
  StepGraphSituation situation;
  situation.cudaBuild = StepGraph::available();
  situation.devices = st.devices;
  situation.shapeChange = st.family->microBatchShapeChange();
  const StepGraphDecision d = decideStepGraph(cfg_, situation);
  // Said once: not again where the config's warnings (reported above) said it already.
  const bool warned = options_.reportConfigWarnings &&
                      std::any_of(st.prepared.problems.begin(), st.prepared.problems.end(),
                                  [](const config::Problem& p) { return p.key == "train.cuda_graph"; });
  if (d.say == StepGraphDecision::Say::Warning && !warned)
    bus_.publish(events::WarningEvent{"train.cuda_graph: " + d.why + "; the steps run without a CUDA graph", 0});
  if (d.say == StepGraphDecision::Say::SetupLine) st.graphOff = d.why;
  if (!d.record) return;
  st.graph = std::make_unique<StepGraph>();
  st.stepsBeforeGraph = 0;
}

at::Tensor Trainer::graphedMicroStep(State& st, const std::vector<at::Tensor>& batch,
                                     const std::vector<at::Tensor>& params, int64_t step, int64_t microBatch) {
  // Steps before recording: the first makes what a graph must not make while it
  // records (the optimizer state, kept fp8 transposes, cuDNN's plans, cuBLAS's
  // workspaces); the second runs with all of it there.
  constexpr int64_t kEagerStepsBeforeGraph = 2;
  StepGraph& graph = *st.graph;
  if (graph.recorded()) {
    if (graph.fits(batch)) return graph.replay(batch, params);
    bus_.publish(events::WarningEvent{
        "train.cuda_graph: step " + std::to_string(step) + "'s micro-batch has other shapes (" +
            StepGraph::shapesOf(batch) + ") than the recorded one (" + graph.shapes() +
            "); the graph is dropped and the run goes on without it (one resolution and one batch size keep it)",
        step});
    // The gradients stay: this step's earlier micro-batches are in them.
    graph.reset();
    st.graph.reset();
    return {};
  }
  // Recorded at a step's first micro-batch, with no gradient there yet.
  if (microBatch != 0) return {};
  if (st.stepsBeforeGraph < kEagerStepsBeforeGraph) {
    ++st.stepsBeforeGraph;
    return {};
  }
  try {
    graph.record(
        batch, [&](const std::vector<at::Tensor>& inputs) { return st.family->microLoss(*st.context, inputs); }, params,
        static_cast<double>(std::max<int64_t>(cfg_.train.gradientAccumulationSteps, 1)));
  } catch (const Error& e) {
    bus_.publish(events::WarningEvent{
        "train.cuda_graph: step " + std::to_string(step) + ": " + e.what() + "; the run goes on without it", step});
    st.graph.reset();
    return {};
  }
  return graph.replay(batch, params);
}

// What forwardBackward leaves for the reduce point and the optimizer step.
struct Trainer::MicroBatches {
  std::vector<at::Tensor> losses;  // detached, one per micro-batch
  // The last micro-batch's loss with its autograd graph, released once the step is
  // queued so that the teardown overlaps the device's work.
  at::Tensor lastGraph;
};

// A step's report: its values, or (a step the card skips itself where it is not
// finite) its losses and gradient norm on their way to the host, read once the next
// step is queued.
struct Trainer::StepReport {
  int64_t step = 0;  // the step it reports, counted from 1
  double lr = 0.0;
  double scaleUsed = 1.0;
  bool finiteGrads = true;
  bool graphReplayed = false;
  Clock::time_point started;  // the loop's turn for it began (before a data-parallel agreement)
  double pausedMs = 0.0;      // of its turn, paused: not the step's time
  QueuedScalars queued;       // the micro-batches' losses, then the norm; empty: the values below
  double loss = 0.0;
  double gradNorm = std::numeric_limits<double>::quiet_NaN();
};

void Trainer::trainStep(State& st, StepReport& report, const std::function<void()>& queued) {
  const int64_t step = report.step - 1;
  const auto params = st.network->parameters();
  MicroBatches done = forwardBackward(st, params, step);
  report.graphReplayed = st.lastStepReplayed;
  {
    // The reduce point: once per optimizer step, before any gradient or loss is read.
    RECORD_USER_SCOPE("strata::reduce");
    StepGradients grads{params, done.losses};
    st.reducer->reduce(grads);
  }
  queued();
  optimizerStep(st, params, done, report);
}

Trainer::MicroBatches Trainer::forwardBackward(State& st, const std::vector<at::Tensor>& params, int64_t step) {
  const auto& tc = cfg_.train;
  const int64_t microBatches = std::max<int64_t>(tc.gradientAccumulationSteps, 1);
  const int64_t batch = std::max<int64_t>(tc.batchSize, 1);
  {
    // What the optimizer's zero_grad does on 2.x (gradients set to none), without
    // its detach_ per tensor: ~1 ms a step for FLUX's ~800 LoRA tensors. A recorded
    // step graph that adds into gradients of its own (accumulation) zeroes them instead.
    RECORD_USER_SCOPE("strata::zero_grad");
    if (st.graph && st.graph->recorded())
      st.graph->startStep(params);
    else
      for (const auto& p : params) p.mutable_grad().reset();
  }
  if (st.phases) st.phases->mark("zero_grad");
  MicroBatches done;
  // An earlier micro-batch's graph goes before the next forward: it can hold pinned
  // host copies (train.offload_checkpoints).
  st.lastStepReplayed = false;
  for (int64_t m = 0; m < microBatches; ++m) {
    done.lastGraph.reset();
    at::Tensor l;
    std::vector<at::Tensor> mb;
    {
      RECORD_USER_SCOPE("strata::data_and_forward");
      st.drawStep = step + 1;  // places the samples in the step's global batch (RunContext::sampleGenerator)
      st.drawMicroBatch = m;
      mb = st.family->microBatch(*st.context, batch, step + 1);
      if (st.graph) {
        RECORD_USER_SCOPE("strata::cuda_graph");
        l = graphedMicroStep(st, mb, params, step + 1, m);
      }
      if (l.defined()) {
        // Forward and backward were the graph's (l: a copy of its loss).
        st.lastStepReplayed = true;
        if (st.phases) st.phases->mark("graph");
        done.losses.push_back(l);
        continue;
      }
      l = st.family->microLoss(*st.context, mb);
    }
    mb.clear();
    if (st.phases) st.phases->mark("forward");
    {
      RECORD_USER_SCOPE("strata::backward");
      if (m == microBatches - 1) st.reducer->beforeLastBackward(params);
      st.scaler.scaled(l / static_cast<double>(microBatches)).backward();
    }
    if (st.phases) st.phases->mark("backward");
    done.losses.push_back(l.detach());
    done.lastGraph = std::move(l);
  }
  return done;
}

void Trainer::optimizerStep(State& st, const std::vector<at::Tensor>& params, MicroBatches& done, StepReport& report) {
  const auto& tc = cfg_.train;
  const auto& losses = done.losses;
  // The host waits for nothing of this step (an optimizer that can skips the step on
  // the device when the norm or a loss is not finite): the losses and the norm go to
  // the host behind the optimizer step and are read once the next step is queued
  // (settleReport). Waiting for them here, or for the loss before the backward, would
  // leave the card idle while the host prepared and launched the next step. Other
  // optimizers, and fp16's loss scaling, look at the values before stepping.
  const bool onDevice = !st.scaler.enabled() && st.optimizer->canSkipOnDevice();
  if (!onDevice) {
    std::vector<double> values;
    for (const auto& l : losses) values.push_back(l.item<double>());
    report.loss = checkedMeanLoss(values, report.step);
  }
  // fp16: gradients that overflowed at this loss scale skip the step (and
  // halve the scale); everywhere else a non-finite gradient stops the run.
  report.scaleUsed = st.scaler.scale();
  report.finiteGrads = st.scaler.unscale(params);
  st.scaler.update(report.finiteGrads);
  if (report.finiteGrads && onDevice) {
    at::Tensor norm;
    {
      RECORD_USER_SCOPE("strata::clip");
      norm = clipGradNormQueued(params, tc.maxGradNorm);
    }
    if (st.phases) st.phases->mark("clip");
    {
      RECORD_USER_SCOPE("strata::optimizer");
      // Skipped where the norm or a loss is not finite (a sum of finite values is finite).
      auto check = norm;
      for (const auto& l : losses) check = check + l.to(norm.device(), at::kDouble, /*non_blocking=*/true).sum();
      st.optimizer->skipNextStepIfNotFinite(check);
      // With the state in host memory step() first waits for the last step's copies
      // back (long landed by now; this step's run on past it, beside the next forward):
      // the graph's teardown goes first, while the card still works through the
      // backward and the clip.
      if (st.optimizer->stateInHostMemory()) done.lastGraph.reset();
      st.optimizer->step();
    }
    if (st.phases) st.phases->mark("optimizer");
    done.lastGraph.reset();
    std::vector<at::Tensor> values(losses.begin(), losses.end());
    values.push_back(norm);
    report.queued = QueuedScalars(values);
  } else if (report.finiteGrads) {
    {
      RECORD_USER_SCOPE("strata::clip");
      report.gradNorm = clipGradNorm(params, tc.maxGradNorm);
    }
    if (st.phases) st.phases->mark("clip");
    checkGradNorm(report.gradNorm, report.step);
    {
      RECORD_USER_SCOPE("strata::optimizer");
      st.optimizer->step();
    }
    if (st.phases) st.phases->mark("optimizer");
  } else if (st.scaler.exhausted()) {
    throw NonFiniteLoss("gradients are not finite at step " + std::to_string(report.step) +
                        " even at fp16 loss scale " + std::to_string(report.scaleUsed));
  } else {
    bus_.publish(events::WarningEvent{
        "step " + std::to_string(report.step) + ": fp16 gradients overflowed at loss scale " +
            std::to_string(report.scaleUsed) + "; step skipped, scale now " + std::to_string(st.scaler.scale()),
        report.step});
  }
}

void Trainer::settleReport(State& st, StepReport& report, std::optional<Clock::time_point> nextStarted) {
  if (!report.queued.empty()) {
    std::vector<double> values = report.queued.read();  // the losses, then the norm
    // A sum that failed in stream order may have left finite values behind (a late
    // write after its timeout): the step is not trusted either way.
    if (st.collective)
      if (const std::string why = st.collective->failure(); !why.empty()) throw Error(why);
    report.gradNorm = values.back();
    values.pop_back();
    report.loss = checkedMeanLoss(values, report.step);
    checkGradNorm(report.gradNorm, report.step);
  }
  const Clock::time_point end = nextStarted ? *nextStarted : Clock::now();
  reportStep(st, report, millisecondsSince(report.started, end) - report.pausedMs);
}

void Trainer::samples(State& st, int64_t step) {
  st.lastSampleStep = step;
  if (cfg_.sample.prompts.empty() || !st.sink->writes()) return;
  if (const auto why = st.family->samplesProblem(); !why.empty()) {
    bus_.publish(events::WarningEvent{"samples at step " + std::to_string(step) + " skipped: " + why, step});
    return;
  }
  // A recorded step graph keeps the step's activations reserved; the plan counts the
  // sampler's memory beside the model, not beside them. So the graph is given back
  // first and the step recorded again after two eager steps (StepGraph::reset).
  if (st.graph && st.graph->recorded()) {
    st.graph->reset();
    st.stepsBeforeGraph = 0;
  }
  at::NoGradGuard noGrad;
  const SamplingWeights sampling(*st.network, st.ema.get());
  for (size_t i = 0; i < cfg_.sample.prompts.size(); ++i) {
    try {
      st.sink->writeSample(step, static_cast<int64_t>(i), st.family->sample(*st.context, step, i));
    } catch (const std::exception& ex) {
      bus_.publish(events::WarningEvent{
          "sample " + std::to_string(i) + " at step " + std::to_string(step) + " failed: " + ex.what(), step});
    }
  }
}

void Trainer::reportStep(State& st, const StepReport& report, double ms) {
  const auto& tc = cfg_.train;
  const int64_t step = report.step;
  const double loss = report.loss, lr = report.lr, gradNorm = report.gradNorm;
  const int64_t images =
      std::max<int64_t>(tc.batchSize, 1) * std::max<int64_t>(tc.gradientAccumulationSteps, 1) * worldOf(st);
  st.lastLoss = loss;
  st.lossEmaRaw = 0.9 * st.lossEmaRaw + 0.1 * loss;
  ++st.lossCount;
  const double smoothed = st.lossEmaRaw / (1.0 - std::pow(0.9, static_cast<double>(st.lossCount)));
  st.recentStepMs.push_back(ms);
  if (st.recentStepMs.size() > 20) st.recentStepMs.pop_front();
  const double avgMs = std::accumulate(st.recentStepMs.begin(), st.recentStepMs.end(), 0.0) /
                       static_cast<double>(st.recentStepMs.size());
  events::StepEvent se;
  se.step = step;
  se.totalSteps = tc.steps;
  se.loss = loss;
  se.lossSmoothed = smoothed;
  se.lr = lr;
  se.gradNorm = gradNorm;
  se.stepTimeMs = ms;
  se.imagesPerSec = ms > 0 ? 1000.0 * static_cast<double>(images) / ms : 0.0;
  se.etaSeconds = avgMs * static_cast<double>(tc.steps - step) / 1000.0;
  se.memory = memoryOf(st.devices);
  se.graphReplayed = report.graphReplayed;
  nlohmann::json line = {{"step", step},          {"loss", loss},       {"loss_smoothed", smoothed},        {"lr", lr},
                         {"grad_norm", gradNorm}, {"step_time_ms", ms}, {"images_per_sec", se.imagesPerSec}};
  for (const auto& m : se.memory)
    if (m.allocatedBytes > 0) line["allocated_bytes"][m.device] = m.allocatedBytes;
  if (st.scaler.enabled()) line["loss_scale"] = report.scaleUsed;
  if (!report.finiteGrads) line["skipped"] = true;
  if (se.graphReplayed) line["cuda_graph"] = true;
  st.sink->appendMetrics(line);
  // The attention kernel auto chose for each shape the step met first, once (nn/Attention.h).
  for (const auto& d : nn::attentionDecisions(st.attentionNotesSaid)) {
    bus_.publish(events::NoteEvent{d.text(), step});
    ++st.attentionNotesSaid;
  }
  bus_.publish(se);
}

RunOutcome Trainer::loop(State& st) {
  const auto& tc = cfg_.train;
  int64_t step = st.startStep;
  int64_t failedStep = 0;  // the step a failure is told at; 0: the one after `step`
  // The last step's report, settled once the next step is queued (or before anything
  // that reads the weights, and at the end).
  std::optional<StepReport> pending;
  // `nextStarted`: the next step's turn, where this step's time ends; none: it ends
  // when its values have been read (the card has finished it).
  auto settle = [&](std::optional<Clock::time_point> nextStarted) {
    if (!pending) return;
    StepReport report = std::move(*pending);
    pending.reset();
    failedStep = report.step;
    settleReport(st, report, nextStarted);
    failedStep = 0;
  };
  auto doSamples = [&](int64_t sampleStep) { samples(st, sampleStep); };
  try {
    if (step == 0 && cfg_.sample.sampleEvery > 0) doSamples(0);
    while (step < tc.steps) {
      // A step's time runs from here to the next step's turn: with a data-parallel
      // run's agreement on it, without a pause.
      const auto started = Clock::now();
      double pausedMs = 0.0;
      // A data-parallel run's decisions: the same on every rank.
      StepDecisions shared;
      if (st.collective) {
        shared = agreeOnDecisions(st, step);
        if (shared.paused) pausedMs = millisecondsSince(started, Clock::now());
      } else if (paused_.load()) {
        settle(started);  // the last step told before the pause
        bus_.publish(events::PausedEvent{step});
        waitWhilePaused();
        if (!stopRequested_.load()) bus_.publish(events::ResumedEvent{step});
        pausedMs = millisecondsSince(started, Clock::now());
      }
      const bool stopNow = st.collective ? shared.stop : stopRequested_.load();
      if (stopNow || (options_.stopAfterStep > 0 && step >= options_.stopAfterStep)) {
        settle(std::nullopt);
        // Step 0 of a new run (a stop during the step-0 samples) has nothing trained to keep.
        if (!options_.skipSaves && step > 0 && st.lastCheckpointStep != step && !checkpoint(st, step)) {
          // Stopped without a checkpoint of this step: not the "stopped, checkpoint kept" outcome.
          bus_.publish(events::FailedEvent{
              "stopped at step " + std::to_string(step) + " but its checkpoint could not be written" +
                  (st.lastCheckpoint.empty() ? "; there is no checkpoint"
                                             : "; the last good checkpoint is " + st.lastCheckpoint + " (step " +
                                                   std::to_string(st.lastCheckpointStep) + ")"),
              step, st.lastCheckpoint});
          return RunOutcome::Failed;
        }
        bus_.publish(events::StoppedEvent{step, st.lastCheckpoint});
        return RunOutcome::Stopped;
      }

      if (st.phases) st.phases->beginStep();
      StepReport report;
      report.step = step + 1;
      report.started = started;
      report.pausedMs = pausedMs;
      report.lr = st.schedule->lrAt(step);
      setLearningRate(*st.optimizer, report.lr);
      // The last step is told once this one is queued: the card runs this one meanwhile.
      trainStep(st, report, [&] { settle(started); });
      ++step;
      step_ = step;
      if (st.ema && report.finiteGrads) st.ema->update(step);
      if (st.phases) st.phases->mark("ema");
      const bool finiteGrads = report.finiteGrads;
      if (report.queued.empty()) {
        settleReport(st, report, std::nullopt);
      } else {
        pending = std::move(report);
      }
      // The first step that ran the optimizer (fp16 may skip step 1's) has made what it makes.
      if (!st.auditedAfterFirstStep && finiteGrads) {
        st.auditedAfterFirstStep = true;
        auditAttachmentsMadeByTheFirstStep(st, step);
      }
      if (st.phases) {
        st.phases->mark("report");
        st.phases->endStep();
      }

      const bool last = step == tc.steps;
      const bool sampleNow = st.collective ? shared.sample : sampleRequested_.exchange(false);
      const bool sampling = sampleNow || (cfg_.sample.sampleEvery > 0 && (step % cfg_.sample.sampleEvery == 0 || last));
      const bool manualSave = st.collective ? shared.save : saveRequested_.exchange(false);
      const bool manualExport = st.collective ? shared.exportNow : exportRequested_.exchange(false);
      const bool saving = manualSave || (cfg_.save.saveEvery > 0 && step % cfg_.save.saveEvery == 0) || last;
      const bool periodicExport = cfg_.save.exportEvery > 0 && step % cfg_.save.exportEvery == 0;
      // What reads the weights comes after the step is told (a non-finite one stops first).
      if (sampling || last || (!options_.skipSaves && (saving || manualExport || periodicExport))) settle(std::nullopt);
      if (sampling) doSamples(step);
      if (options_.skipSaves) continue;
      if (saving) checkpoint(st, step, manualSave);
      // save.export_every: LoRA files named with the step, beside the final one, to compare them.
      if ((manualExport || periodicExport) && !last) exportLora(st, step, false);
    }
    settle(std::nullopt);
  } catch (const NonFiniteLoss& e) {
    // A sum that failed in stream order left NaN behind: its reason is the one to give.
    const std::string collectiveFailure = st.collective ? st.collective->failure() : std::string();
    std::string msg = collectiveFailure.empty() ? std::string(e.what()) : collectiveFailure;
    msg += st.lastCheckpoint.empty() ? "; no checkpoint was written before it"
                                     : "; last good checkpoint: " + st.lastCheckpoint;
    if (collectiveFailure.empty()) msg += attentionBackendHint(e.what(), cfg_, onCuda(st.devices));
    bus_.publish(events::FailedEvent{msg, failedStep > 0 ? failedStep : step + 1, st.lastCheckpoint});
    return RunOutcome::Failed;
  } catch (const std::exception& e) {
    // A collective's failure in stream order surfaces at the next call, in the step
    // after the one whose sums failed: that one is named.
    const bool collectiveFailed = st.collective && !st.collective->failure().empty();
    const int64_t failingStep = failedStep > 0 ? failedStep : collectiveFailed && pending ? pending->step : step + 1;
    if (failedStep == 0 && !collectiveFailed) try {
        // The step before the failing one is told, where its values can still be read.
        settle(std::nullopt);
      } catch (const std::exception&) {
      }
    std::string msg = e.what();
    if (device::isOutOfMemory(e))
      msg = "out of memory at step " + std::to_string(failingStep) + ": " + msg;
    else
      msg += attentionBackendHint(msg, cfg_, onCuda(st.devices));
    bus_.publish(events::FailedEvent{msg, failingStep, st.lastCheckpoint});
    return RunOutcome::Failed;
  }
  return RunOutcome::Finished;
}

Trainer::StepDecisions Trainer::agreeOnDecisions(State& st, int64_t step) {
  // One all-reduce of flags: a stop asked of any rank (a signal reaches each
  // process), rank 0's pause and requests (the app and the terminal talk to rank
  // 0). While rank 0 is paused every rank holds here, asking again each 200 ms, so
  // no rank waits on a collective past its timeout.
  enum Flag : int64_t { kStop, kPause, kSample, kSave, kExport, kFlags };
  const bool zero = rankOf(st) == 0;
  StepDecisions out;
  bool announcedPause = false;
  for (;;) {
    std::vector<at::Tensor> flags{at::zeros({kFlags}, at::kFloat)};
    auto f = flags[0].accessor<float, 1>();
    f[kStop] = stopRequested_.load() ? 1.f : 0.f;
    if (zero) {
      f[kPause] = paused_.load() ? 1.f : 0.f;
      f[kSample] = sampleRequested_.exchange(false) ? 1.f : 0.f;
      f[kSave] = saveRequested_.exchange(false) ? 1.f : 0.f;
      f[kExport] = exportRequested_.exchange(false) ? 1.f : 0.f;
    }
    st.collective->allReduceSum(flags);
    auto g = flags[0].accessor<float, 1>();
    out.sample = out.sample || g[kSample] > 0;  // requests made during a pause are kept
    out.save = out.save || g[kSave] > 0;
    out.exportNow = out.exportNow || g[kExport] > 0;
    out.stop = g[kStop] > 0;
    if (out.stop) stopRequested_.store(true);
    if (g[kPause] == 0 || out.stop) break;
    if (!announcedPause) bus_.publish(events::PausedEvent{step});
    announcedPause = true;
    out.paused = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (announcedPause && !out.stop) bus_.publish(events::ResumedEvent{step});
  return out;
}

RunOutcome Trainer::finish(State& st) {
  const int64_t step = step_.load();
  std::vector<std::string> exports;
  try {
    if (!options_.skipSaves) exports = exportLora(st, step, true);
  } catch (const std::exception& e) {
    bus_.publish(events::FailedEvent{std::string("LoRA export failed: ") + e.what() +
                                         (st.lastCheckpoint.empty() ? "" : "; checkpoint kept: " + st.lastCheckpoint),
                                     step, st.lastCheckpoint});
    return RunOutcome::Failed;
  }
  events::FinishedEvent fe;
  fe.step = step;
  fe.finalLoss = st.lastLoss;
  fe.wallSeconds = std::chrono::duration<double>(Clock::now() - st.wallStart).count();
  fe.exports = exports;
  fe.skippedItems = st.cursor.skippedItems;
  bus_.publish(fe);
  return RunOutcome::Finished;
}

namespace {

// <name>-2.safetensors, <name>-2 (a folder), ...: the first that is not there.
fs::path freeExportName(const fs::path& path) {
  const std::string ext = fs::is_directory(path) ? std::string() : path.extension().string();
  const std::string stem = ext.empty() ? path.filename().string() : path.stem().string();
  for (int n = 2;; ++n) {
    const fs::path candidate = path.parent_path() / (stem + "-" + std::to_string(n) + ext);
    std::error_code ec;
    if (!fs::exists(candidate, ec)) return candidate;
  }
}

std::string stepList(const std::vector<CheckpointRef>& refs) {
  std::string out;
  for (const auto& r : refs) out += (out.empty() ? "" : ", ") + std::to_string(r.step);
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<fs::path> exportPaths(const fs::path& runDir, const std::vector<config::ExportFormat>& formats,
                                  int64_t step, const fs::path& outDir) {
  const OpenedRun run = openRunFolder(runDir, "export");
  const ModelFamily& family = modelFamily(run.config.model.arch);
  const fs::path dir = outDir.empty() ? run.folder.exportsDir() : outDir;
  std::vector<fs::path> out;
  for (auto f : formats) out.push_back(family.exportPathIn(dir, run.config, f, step));
  return out;
}

std::vector<fs::path> exportRun(const fs::path& runDir, const std::vector<config::ExportFormat>& formats,
                                const ExportOptions& options, std::vector<std::string>* notes) {
  const OpenedRun run = openRunFolder(runDir, "export");
  const auto& folder = run.folder;
  const auto& cfg = run.config;
  IntactCheckpoint intact;
  if (options.step) {
    // The one the user picked: that one or nothing (never another step in its place).
    const auto all = folder.checkpoints();
    const auto it = std::find_if(all.begin(), all.end(), [&](const auto& r) { return r.step == *options.step; });
    if (it == all.end())
      throw IoError(runDir.string() + ": no checkpoint of step " + std::to_string(*options.step) +
                    " (the checkpoints are of steps " + stepList(all) + ")");
    intact.ref = *it;
    intact.data = readCheckpoint(it->path);  // IoError naming what is damaged
  } else {
    intact = readLatestIntactCheckpoint(folder);
  }
  for (const auto& d : intact.damaged)
    if (notes) notes->push_back("damaged checkpoint: " + d);
  if (!intact.damaged.empty() && notes)
    notes->push_back("exporting " + intact.ref.path.string() + " (step " + std::to_string(intact.ref.step) +
                     "), the newest intact checkpoint");
  const auto* latest = &intact.ref;
  const auto& data = intact.data;
  const ModelFamily& family = modelFamily(cfg.model.arch);
  for (auto f : formats)
    if (const auto why = family.formatProblem(f); !why.empty()) throw ConfigError(runDir.string() + ": " + why);
  const fs::path dir = options.outDir.empty() ? folder.exportsDir() : options.outDir;
  // Where each file goes, decided before anything is written: nothing is replaced unasked.
  std::vector<fs::path> targets;
  std::vector<fs::path> inTheWay;
  for (auto f : formats) {
    fs::path path = family.exportPathIn(dir, cfg, f, data.step);
    std::error_code ec;
    if (fs::exists(path, ec)) {
      if (options.existing == ExistingExport::NewName) {
        const fs::path renamed = freeExportName(path);
        if (notes)
          notes->push_back(path.filename().string() + " is there already: writing " + renamed.filename().string());
        path = renamed;
      } else if (options.existing == ExistingExport::Refuse) {
        inTheWay.push_back(path);
      }
    }
    targets.push_back(path);
  }
  if (!inTheWay.empty()) {
    std::string msg = "not replacing what is there:";
    for (const auto& p : inTheWay) msg += " " + p.string();
    throw ExportExists(msg, inTheWay);
  }
  const double alpha = data.state.value("lora_alpha", cfg.network.linearAlpha);
  const auto ema = toMap(data.ema);
  // EMA shadows (keyed without the prefix) replace the live values they track.
  const std::string prefix = family.checkpointPrefix();
  std::map<std::string, at::Tensor> lora;
  for (const auto& [key, t] : data.lora) {
    const auto e = key.rfind(prefix, 0) == 0 ? ema.find(key.substr(prefix.size())) : ema.end();
    lora[key] = e != ema.end() ? e->second : t;
  }
  const auto modules = lora::moduleWeightsFromStateDict(lora, prefix, alpha, latest->path.string());
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Temp files of these names left by an export that was killed (".<name>.tmp.XXXXXX"):
  // each target is about to be written again.
  for (const auto& target : targets) {
    const std::string stem = "." + target.filename().string() + ".tmp.";
    std::vector<fs::path> leftovers;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(stem, 0) == 0 && name.size() == stem.size() + 6 && e.is_regular_file(ec))
        leftovers.push_back(e.path());
    }
    for (const auto& p : leftovers)
      if (fs::remove(p, ec) && notes) notes->push_back("removed the unfinished file " + p.string());
  }
  std::vector<fs::path> written;
  for (size_t i = 0; i < formats.size(); ++i) {
    if (options.stopRequested && options.stopRequested()) {
      std::string done;
      for (const auto& w : written) done += " " + w.string();
      throw Interrupted("export stopped before " + targets[i].string() +
                        (written.empty() ? "; nothing was written" : "; written:" + done));
    }
    try {
      family.exportModules(modules, cfg, formats[i], targets[i], data.step, options.softwareVersion);
    } catch (const std::exception& e) {
      throw Error(e.what());  // the checkpoint was read: a failure now is the export's, not bad input
    }
    written.push_back(targets[i]);
  }
  return written;
}

}  // namespace strata::train
