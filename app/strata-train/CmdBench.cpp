// `strata-train bench CONFIG [--steps N] [--warmup N] [--phases] [--profile FILE] [--json] [--set key=value]...`: what
// a run of this config costs before committing to it. Trains N steps (after 2 warm-up, or --warmup steps) of the
// config's shapes (its resolution, batch size, gradient accumulation, model, LoRA, dtype and placement) on data that
// reads no files: a shapes or synthetic dataset as the config has it, any other dataset replaced by synthetic data of
// its largest resolution. No samples, no checkpoints, no exports, a temporary run folder removed on every way out
// (Ctrl-C stops after the current step). Prints the median and min step time, the peak allocated and reserved memory
// per CUDA device, the FLOP rate (the family's trainStepFlops per micro-batch, times the micro-batches of a step) and
// its share of the card's dense bf16 peak where the card is known (device/CardPeaks.h). --phases adds the median time
// of each phase of a step (data, forward, backward, clip, optimizer, EMA, report), measured with a device wait between
// phases (train/PhaseTimer.h), and the peak allocated memory reached inside each, which says where a step's memory
// peaks (the activations kept for the backward, the backward's own, the optimizer's state). Exit codes as for run: 0
// measured, 1 failed while training, 2 bad command line, config or preflight, 130 stopped.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "BenchProfile.h"
#include "CliChecks.h"
#include "Commands.h"
#include "common/Error.h"
#include "config/ConfigSchema.h"
#include "config/FamilyRegistry.h"
#include "config/RunConfigYaml.h"
#include "device/CardPeaks.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"
#include "device/PeakMemoryWindows.h"
#include "events/EventBus.h"
#include "nn/Attention.h"
#include "train/ModelFamily.h"
#include "train/PhaseTimer.h"
#include "train/RunPlanning.h"
#include "train/StopSignals.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

namespace fs = std::filesystem;

namespace strata::cli {

namespace {

constexpr int64_t kDefaultWarmupSteps = 2;
constexpr long long kMaxWarmupSteps = 1000;
constexpr long long kMaxBenchSteps = 1000000;  // far beyond a useful bench; keeps warm-up + N in range

struct BenchArgs {
  std::string configPath;
  int64_t steps = 10;
  int64_t warmup = kDefaultWarmupSteps;  // --warmup: steps run before the measured ones
  bool json = false;
  bool phases = false;
  std::string profilePath;  // --profile: kineto trace of the first measured steps
  int64_t profileSteps = 1;
  std::vector<std::string> sets;
};

// The bench's run folder: made unique by mkdtemp, removed with all it holds when
// the bench returns or throws (Ctrl-C stops the trainer, so that returns too).
class ScratchFolder {
 public:
  ScratchFolder() {
    std::error_code ec;
    const fs::path base = fs::temp_directory_path(ec);
    if (ec) throw IoError("no folder for temporary files (TMPDIR): " + ec.message());
    std::string name = (base / "strata-bench-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr)
      throw IoError(name + ": cannot create a temporary run folder: " + std::strerror(errno));
    path_ = name;
  }
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The config as benched, validated and planned.
struct BenchSetup {
  config::RunConfig cfg;
  train::PreparedRun prepared;
  int64_t px = 0;      // the largest resolution of the data benched
  double flops = 0.0;  // per optimizer step
};

// Reads, overrides, swaps in data that reads no files and validates the config with
// every rule a run has, its problems on stderr with the config's lines. nullopt: bad
// input, said. Throws strata::Error for a file it cannot read (bad input as well).
std::optional<BenchSetup> setUpBench(const BenchArgs& args, const fs::path& runFolder,
                                     const device::Inventory& inventory) {
  config::LoadedConfig loaded = config::loadRunConfig(args.configPath);
  if (!args.sets.empty()) config::applyOverrides(loaded, args.sets);
  bool bad = false;
  for (const auto& p : loaded.problems)
    if (p.isError()) {
      std::cerr << p.format() << "\n";
      bad = true;
    }
  if (bad) return std::nullopt;
  BenchSetup b;
  b.cfg = loaded.config;
  config::RunConfig& cfg = b.cfg;
  for (const auto& d : cfg.datasets)
    for (int64_t r : d.resolution) b.px = std::max(b.px, r);
  // Shapes and synthetic datasets read no files: benched as they are, so the latent
  // scale and the tokens are those plan and run use (shapes' pixel code is px/2,
  // synthetic's VAE scale px/8). Any other dataset is replaced by synthetic data of
  // the largest resolution (a causal LM's: max_seq_len random tokens).
  const bool readsNoFiles =
      !cfg.datasets.empty() && std::all_of(cfg.datasets.begin(), cfg.datasets.end(), [](const auto& d) {
        return d.type == config::DatasetType::Shapes || d.type == config::DatasetType::Synthetic;
      });
  if (!readsNoFiles) {
    if (b.px == 0) b.px = 512;
    int64_t seq = 0;
    for (const auto& d : cfg.datasets) seq = std::max(seq, d.maxSeqLen);
    config::DatasetConfig d;
    d.type = config::DatasetType::Synthetic;
    d.resolution = {b.px};
    if (seq > 0) d.maxSeqLen = seq;
    d.numItems = std::max<int64_t>(cfg.train.batchSize, 2);
    cfg.datasets = {d};
  }
  cfg.train.steps = args.warmup + args.steps;  // both bounded by the command line's ranges
  if (cfg.train.cudaGraph != config::CudaGraphMode::Off && args.warmup < 3)
    std::cerr << "strata-train bench: note: train.cuda_graph (where it applies) records the graph at step 3, so "
                 "with --warmup "
              << args.warmup << " that slower step is among the measured ones (--warmup 3 leaves it out)\n";
  cfg.sample.sampleEvery = 0;
  cfg.sample.prompts.clear();
  cfg.save.saveEvery = 0;
  cfg.job.trainingFolder = runFolder.string();

  // Every rule of a run (not a preview's): what the trainer's preflight would refuse
  // is said here, with the config's lines.
  train::PrepareOptions po;
  po.where = &loaded.where;
  b.prepared = train::prepareRun(cfg, inventory, po);
  if (!b.prepared.ok()) {
    for (const auto& p : b.prepared.problems)
      if (p.isError()) std::cerr << p.format() << "\n";
    return std::nullopt;
  }
  train::adoptAutoChoices(cfg, b.prepared);  // what `auto` chose: the paths line says it
  // trainStepFlops counts one micro-batch; the timed step runs all of them.
  b.flops = train::modelFamily(cfg.model.arch).trainStepFlops(cfg) *
            static_cast<double>(std::max<int64_t>(cfg.train.gradientAccumulationSteps, 1));
  return b;
}

int runBench(const BenchArgs& args) {
  if (args.profileSteps > args.steps) {
    std::cerr << "strata-train bench: error: --profile-steps " << args.profileSteps << " is more than the "
              << args.steps << " measured steps (--steps)\n";
    return kExitBadInput;
  }
  if (!args.profilePath.empty()) {
    try {
      BenchProfile::checkCanSave(args.profilePath);
    } catch (const std::exception& e) {
      std::cerr << "strata-train bench: error: --profile " << e.what() << "\n";
      return kExitFailed;
    }
  }
  const auto inventory = device::thisMachine();
  std::optional<ScratchFolder> scratch;
  std::optional<BenchSetup> setup;
  try {
    scratch.emplace();
    setup = setUpBench(args, scratch->path(), inventory);
  } catch (const Error& e) {  // an unreadable config or model file: bad input, one line
    std::cerr << "strata-train bench: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  if (!setup) return kExitBadInput;
  const config::RunConfig& cfg = setup->cfg;
  const train::PreparedRun& prepared = setup->prepared;
  const int64_t px = setup->px;
  const double flops = setup->flops;

  for (const auto& dev : inventory.devices)
    if (!dev.isCpu()) device::resetPeakMemory(dev.index);
  events::EventBus bus;
  BenchProfile profile;
  const bool profiling = !args.profilePath.empty();
  const int64_t profileSteps = args.profileSteps;  // 1 .. steps, checked above
  std::vector<KernelTotal> kernels;
  std::vector<double> stepMs;
  int64_t graphSteps = 0;  // measured steps that replayed the recorded CUDA graph (train.cuda_graph)
  std::string graphOff;    // why the trainer left the graph off (its run's setup line says it too)
  std::vector<std::string> failures;
  std::vector<std::string> runDevices;
  // Peak allocated memory between one step event and the next, the largest device's: says
  // which step sets the run's peak (a graph's recording, a warm-up step, the steady steps).
  // A step's event comes once the next step's forward and backward are queued, so entry i
  // holds step i+1's optimizer and step i+2's forward and backward (the trainer's loop).
  // Not with --phases, whose timer takes a window per phase.
  std::vector<int64_t> stepPeakBytes;
  device::PeakMemoryWindows stepWindows([&] {
    std::vector<int> cuda;
    for (const auto& dev : inventory.devices)
      if (!dev.isCpu()) cuda.push_back(dev.index);
    return cuda;
  }());
  std::string profileError;  // why --profile wrote no trace
  bool profiled = false;
  auto stopProfile = [&] {
    try {
      kernels = profile.stop(args.profilePath);
      profiled = true;
    } catch (const std::exception& e) {
      profileError = e.what();
    }
  };
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* s = std::get_if<events::StepEvent>(&e)) {
      if (s->step > args.warmup) stepMs.push_back(s->stepTimeMs);
      if (s->step > args.warmup && s->graphReplayed) ++graphSteps;
      if (!args.phases) stepPeakBytes.push_back(stepWindows.take());
      // Published on the training thread after each step: the profiled steps are
      // the first `profileSteps` measured ones (their times are in stepMs too).
      if (profiling && s->step == args.warmup) profile.start();
      if (profiling && s->step == args.warmup + profileSteps) stopProfile();
      if (runDevices.empty())
        for (const auto& m : s->memory) runDevices.push_back(m.device);
    }
    if (auto* started = std::get_if<events::StartedEvent>(&e)) graphOff = started->graphOff;
    if (auto* f = std::get_if<events::FailedEvent>(&e)) failures.push_back(f->message);
    // A refused config (the validator, a plan that does not fit) never starts: name why.
    if (auto* p = std::get_if<events::PreflightFailedEvent>(&e))
      for (const auto& problem : p->problems) failures.push_back("preflight: " + problem);
  });
  train::TrainerOptions to;
  to.reportConfigWarnings = false;
  to.skipSaves = true;  // the folder is scratch: a save would only cost time, and could fail the measurement
  if (args.phases) to.phaseTimer = std::make_shared<train::PhaseTimer>();
  train::Trainer trainer(cfg, bus, to);
  train::RunOutcome outcome = train::RunOutcome::Failed;
  {
    // Ctrl-C, SIGTERM, SIGHUP: stop after the current step; the scratch folder goes with the return.
    const train::StopOnSignals signals(
        trainer, "strata-train bench",
        "stopping after this step (nothing is saved; the temporary run folder is removed)");
    outcome = trainer.run();
  }
  if (profile.running()) stopProfile();
  if (outcome == train::RunOutcome::Stopped) {
    std::cerr << "strata-train bench: stopped at step " << trainer.currentStep() << " of " << cfg.train.steps
              << "; no figures\n";
    return train::exitCodeOf(outcome);
  }
  if (outcome != train::RunOutcome::Finished || stepMs.empty()) {
    for (const auto& f : failures) std::cerr << "strata-train bench: " << f << "\n";
    if (failures.empty()) std::cerr << "strata-train bench: the run did not finish\n";
    // A refused preflight is bad input (2), as for run; a failure while training is 1.
    return outcome == train::RunOutcome::Finished ? kExitFailed : train::exitCodeOf(outcome);
  }
  if (profiling && profileError.empty() && !profiled) profileError = args.profilePath + ": the profiler never ran";
  if (!profileError.empty()) {
    std::cerr << "strata-train bench: error: --profile " << profileError << "\n";
    return kExitFailed;
  }
  // A step's time runs from its turn to the next step's, and the host reads a step's
  // values a step late: the first measured step can come short (the card still runs the
  // step before, after the graph's recording waited for it) and the last one long (it
  // waits for the card to finish). Median and min over the steps between the two; the
  // sum over all of them is the run's. All the steps where fewer than 3 were measured.
  const std::vector<double> inner =
      stepMs.size() >= 3 ? std::vector<double>(stepMs.begin() + 1, stepMs.end() - 1) : stepMs;
  const double medianMs = train::medianOf(inner);
  const double minMs = *std::min_element(inner.begin(), inner.end());
  const double tflops = flops / (medianMs * 1e-3) / 1e12;

  nlohmann::json j;
  j["config"] = args.configPath;
  j["steps"] = args.steps;
  j["warmup_steps"] = args.warmup;
  j["resolution"] = px;
  j["batch_size"] = cfg.train.batchSize;
  j["gradient_accumulation_steps"] = std::max<int64_t>(cfg.train.gradientAccumulationSteps, 1);
  j["tokens"] = prepared.tokens;
  j["step_ms"] = stepMs;
  j["graph_steps"] = graphSteps;
  j["median_step_ms"] = medianMs;
  j["min_step_ms"] = minMs;
  j["flops_per_step"] = flops;
  j["tflops"] = tflops;
  j["devices"] = nlohmann::json::array();
  std::optional<double> share;
  bool onCuda = false;
  for (const auto& label : runDevices) {
    nlohmann::json dj;
    dj["device"] = label;
    const device::DeviceInfo* info = nullptr;
    for (const auto& dev : inventory.devices)
      if (dev.label() == label) info = &dev;
    if (info && !info->isCpu()) {
      onCuda = true;
      const auto f = device::memoryFigures(info->index);
      dj["name"] = info->name;
      // Windows of memory (a step's, or with --phases a phase's) start the device's peak
      // figures afresh: their maxima, with what came after the last window (f), are the
      // run's peaks.
      const int i = info->index;
      dj["peak_allocated_bytes"] = to.phaseTimer ? to.phaseTimer->peakAllocatedOn(i)
                                                 : std::max(stepWindows.runPeakAllocatedOn(i), f.peakAllocatedBytes);
      dj["peak_reserved_bytes"] = to.phaseTimer ? to.phaseTimer->peakReservedOn(i)
                                                : std::max(stepWindows.runPeakReservedOn(i), f.peakReservedBytes);
      if (auto peak = device::denseBf16PeakTflops(info->name)) {
        dj["peak_tflops"] = *peak;
        // The work is spread over the run's devices: the share of their summed peak.
        share = share.value_or(0.0) + *peak;
      }
    } else {
      dj["name"] = "cpu";
      dj["peak_allocated_bytes"] = nullptr;  // the CPU allocator keeps no peak
      dj["peak_reserved_bytes"] = nullptr;
    }
    j["devices"].push_back(dj);
  }
  j["share_of_peak"] = share ? nlohmann::json(tflops / *share) : nlohmann::json(nullptr);
  // Per step from the first warm-up step on (empty on the CPU and with --phases).
  if (onCuda && !to.phaseTimer) j["step_peak_allocated_bytes"] = stepPeakBytes;
  // The attention setting the numbers were measured with (CUDA only; a family without
  // cuDNN's attention, Llama, runs with it off, as `flash` says, whatever its config says).
  j["attention_backend"] = nullptr;
  const config::FamilyDescription* family = config::findFamily(cfg.model.arch);
  if (onCuda)
    j["attention_backend"] = family && !family->cudnnAttention ? "flash" : config::enumName(cfg.model.attentionBackend);
  // Which paths the steps ran (quantization, fp8 matmuls, attention, graph, checkpointing,
  // offloads): the run's own summary line, so a figure is never read without them.
  j["paths"] = train::describeRunSetup(cfg, onCuda, graphSteps > 0, graphOff);
  if (const std::string notes = train::autoChoiceNotes(prepared); !notes.empty())
    j["paths"] = j["paths"].get<std::string>() + " (" + notes + ")";
  // model.attention_backend: auto's choice for each attention shape the steps met, timed.
  j["attention_choices"] = nlohmann::json::array();
  for (const auto& d : nn::attentionDecisions()) j["attention_choices"].push_back(d.text());
  if (to.phaseTimer) {
    // Medians over the measured steps (the warm-up steps are skipped), in step order.
    nlohmann::json pj = nlohmann::json::array();
    double sum = 0.0;
    for (const auto& name : to.phaseTimer->phases()) {
      const double ms = to.phaseTimer->medianMs(name, static_cast<size_t>(args.warmup));
      sum += ms;
      pj.push_back({{"phase", name},
                    {"median_ms", ms},
                    {"ms", to.phaseTimer->perStep().at(name)},
                    {"allocated_bytes_after", to.phaseTimer->allocatedAfter(name)},
                    {"peak_allocated_bytes", to.phaseTimer->peakDuring(name, static_cast<size_t>(args.warmup))}});
    }
    j["phases"] = pj;
    j["phases_sum_ms"] = sum;
  }

  if (profiling) {
    // Device kernel time per profiled step, by group and by kernel (largest first).
    std::map<std::string, std::pair<int64_t, double>> groups;
    double total = 0.0;
    for (const auto& k : kernels) {
      auto& g = groups[kernelGroup(k.name)];
      g.first += k.count;
      g.second += k.totalMs / static_cast<double>(profileSteps);
      total += k.totalMs / static_cast<double>(profileSteps);
    }
    nlohmann::json pj;
    pj["trace"] = args.profilePath;
    pj["steps"] = profileSteps;
    pj["kernel_ms_per_step"] = total;
    pj["busy_ms_per_step"] = profile.busyMs() / static_cast<double>(profileSteps);
    pj["span_ms_per_step"] = profile.spanMs() / static_cast<double>(profileSteps);
    pj["groups"] = nlohmann::json::object();
    for (const auto& [name, g] : groups)
      pj["groups"][name] = {{"launches_per_step", g.first / profileSteps}, {"ms_per_step", g.second}};
    pj["kernels"] = nlohmann::json::array();
    for (size_t i = 0; i < kernels.size() && i < 60; ++i)
      pj["kernels"].push_back({{"name", kernels[i].name},
                               {"group", kernelGroup(kernels[i].name)},
                               {"launches_per_step", kernels[i].count / profileSteps},
                               {"ms_per_step", kernels[i].totalMs / static_cast<double>(profileSteps)}});
    j["profile"] = pj;
  }

  if (args.json) {
    std::cout << j.dump(2) << std::endl;
    return kExitOk;
  }
  // An image family's step has a size in pixels (it reads datasets[].resolution).
  const config::KeySpec* resolution = config::findKey("datasets[].resolution");
  const bool imageFamily = resolution && resolution->appliesTo(cfg.model.arch);
  std::cout << "bench " << args.configPath << ": " << args.steps << " steps after " << args.warmup << " warm-up, "
            << (imageFamily ? std::to_string(px) + " px, " : std::string()) << "batch " << cfg.train.batchSize
            << (cfg.train.gradientAccumulationSteps > 1
                    ? " x " + std::to_string(cfg.train.gradientAccumulationSteps) + " micro-batches"
                    : std::string())
            << ", " << prepared.tokens << " tokens"
            << (j["attention_backend"].is_null() ? std::string()
                                                 : ", attention_backend " + j["attention_backend"].get<std::string>())
            << "\n";
  std::cout << "  step time   median " << medianMs << " ms, min " << minMs << " ms"
            << (inner.size() < stepMs.size() ? " (the first and last measured steps left out)" : "") << "\n";
  std::cout << "  paths       " << j["paths"].get<std::string>() << "\n";
  for (const auto& c : j["attention_choices"]) std::cout << "  attention   " << c.get<std::string>() << "\n";
  if (cfg.train.cudaGraph != config::CudaGraphMode::Off && onCuda)
    std::cout << "  cuda graph  " << graphSteps << " of " << stepMs.size()
              << " measured steps replayed the recorded graph (its memory pool stays reserved between steps: "
                 "peak reserved is what the card holds)\n";
  if (j.contains("step_peak_allocated_bytes")) {
    // Which step set the peak: a graph's recording, a warm-up step or the measured ones.
    std::cout << "  memory      peak allocated between one step's report and the next, GB (warm-up | measured):";
    const auto& peaks = j["step_peak_allocated_bytes"];
    for (size_t i = 0; i < peaks.size(); ++i)
      std::cout << (i == static_cast<size_t>(args.warmup) ? " |" : "") << " " << std::fixed << std::setprecision(2)
                << peaks[i].get<int64_t>() / 1e9 << std::defaultfloat << std::setprecision(6);
    std::cout << "\n";
  }
  std::cout << "  compute     " << flops / 1e12 << " TFLOP per step, " << tflops << " TFLOP/s";
  if (share) std::cout << ", " << 100.0 * tflops / *share << "% of the card's dense bf16 peak";
  std::cout << "\n";
  if (j.contains("phases")) {
    const bool cuda = std::any_of(j["phases"].begin(), j["phases"].end(), [](const nlohmann::json& pj) {
      return pj["peak_allocated_bytes"].get<int64_t>() > 0;
    });
    std::cout << "  phases (median ms, with a device wait between phases"
              << (cuda ? "; peak allocated inside the phase on the largest device, allocated at its end on all" : "")
              << "):\n";
    for (const auto& pj : j["phases"]) {
      std::cout << "    " << std::left << std::setw(12) << pj["phase"].get<std::string>() << std::right << std::setw(10)
                << pj["median_ms"].get<double>();
      if (cuda)
        std::cout << "  peak " << std::setw(8) << pj["peak_allocated_bytes"].get<int64_t>() / 1e9 << " GB, after "
                  << std::setw(8) << pj["allocated_bytes_after"].get<int64_t>() / 1e9 << " GB";
      std::cout << "\n";
    }
    std::cout << "    " << std::left << std::setw(12) << "sum" << std::right << j["phases_sum_ms"].get<double>()
              << "\n";
  }
  if (j.contains("profile")) {
    const auto& pj = j["profile"];
    std::cout << "  device kernels per profiled step: " << pj["kernel_ms_per_step"].get<double>() << " ms (trace "
              << pj["trace"].get<std::string>() << ")\n";
    const double span = pj["span_ms_per_step"].get<double>();
    const double busy = pj["busy_ms_per_step"].get<double>();
    std::cout << "  device busy " << busy << " ms of " << span << " ms from the first kernel to the last (idle "
              << span - busy << " ms, waiting for the host)\n";
    for (const auto& [name, g] : pj["groups"].items())
      std::cout << "    " << std::left << std::setw(12) << name << std::right << std::setw(10)
                << g["ms_per_step"].get<double>() << " ms  " << g["launches_per_step"].get<int64_t>() << " launches\n";
    for (const auto& k : pj["kernels"])
      std::cout << "    " << std::setw(9) << k["ms_per_step"].get<double>() << " ms " << std::setw(6)
                << k["launches_per_step"].get<int64_t>() << "x  " << k["name"].get<std::string>().substr(0, 150)
                << "\n";
  }
  for (const auto& dj : j["devices"]) {
    std::cout << "  " << dj["device"].get<std::string>();
    if (dj["peak_allocated_bytes"].is_null()) {
      std::cout << "  (no peak memory figures on the CPU)\n";
    } else {
      std::cout << "  peak allocated " << dj["peak_allocated_bytes"].get<int64_t>() / 1e9 << " GB, peak reserved "
                << dj["peak_reserved_bytes"].get<int64_t>() / 1e9 << " GB\n";
    }
  }
  return kExitOk;
}

}  // namespace

void addBenchCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Time a few training steps of a config on data of its shapes");
  cmd->add_option("config", args->configPath, "Run config (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--steps", args->steps, "Measured steps (after the warm-up steps; default 10)")
      ->check(countCheck("a number of measured steps", kMaxBenchSteps));
  cmd->add_option("--warmup", args->warmup,
                  "Warm-up steps before the measured ones, not timed (default 2; the peer benchmark runs 3)")
      ->check(countCheck("a number of warm-up steps", kMaxWarmupSteps));
  cmd->add_flag("--json", args->json, "Print the figures as JSON");
  cmd->add_flag("--phases", args->phases,
                "Also time each phase of a step (data, forward, backward, clip, optimizer, EMA, report)");
  CLI::Option* profile =
      cmd->add_option("--profile", args->profilePath,
                      "Profile the first measured steps (LibTorch's kineto profiler): write the trace to this file "
                      "and sum the device kernels by name")
          ->check(nonEmptyCheck("a file to write the trace to"));
  cmd->add_option("--profile-steps", args->profileSteps, "Measured steps to profile (default 1, at most --steps)")
      ->check(countCheck("a number of steps to profile", kMaxBenchSteps))
      ->needs(profile);
  cmd->add_option("--set", args->sets, "Override a key: --set train.batch_size=2 (repeatable)");
  cmd->footer("Exit codes: 0 measured, 1 failed while training, 2 bad input or preflight, 130 interrupted.");
  cmd->callback([args, &exitCode] {
    try {
      exitCode = runBench(*args);
    } catch (const std::exception& e) {  // after the setup: the measurement failed
      std::cerr << "strata-train bench: " << e.what() << std::endl;
      exitCode = kExitFailed;
    }
  });
}

}  // namespace strata::cli
