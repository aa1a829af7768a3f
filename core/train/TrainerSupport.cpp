#include "train/TrainerSupport.h"

#include <ATen/Context.h>

#ifdef STRATA_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "common/Text.h"
#include "common/TorchCompat.h"
#include "config/FamilyRegistry.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "io/FileBytes.h"
#include "nn/Attention.h"
#include "nn/Quantize.h"
#include "placement/OptimizerStateAttachment.h"
#include "train/ModelFamily.h"
#include "train/RngState.h"
#include "train/RunContext.h"

namespace strata::train {

namespace fs = std::filesystem;

Trainer::State::~State() {
  graph.reset();  // the graph's pool, before the tensors whose gradients it held
  ema.reset();
  if (placement) placement->detachAll(placement::optimizerStateKind());
  optimizer.reset();
  if (network) network->detach();
  if (placement) placement->detachAll(lora::loraAdapterKind());
  network.reset();
  namedParams.clear();
  checkpointed.reset();
  placement.reset();
  if (family) family->release();
  family.reset();
}

void stopPoint(const Trainer::State& st, const std::string& where) {
  if (st.stopRequested && st.stopRequested()) throw Interrupted(where);
}

at::ScalarType scalarTypeOf(config::DType d) {
  switch (d) {
    case config::DType::BF16:
      return at::kBFloat16;
    case config::DType::FP16:
      return at::kHalf;
    case config::DType::FP32:
      return at::kFloat;
  }
  return at::kFloat;
}

namespace {

bool holdsRun(const fs::path& d) {
  std::error_code ec;
  if (fs::exists(d / "metrics.jsonl", ec)) return true;
  return fs::is_directory(d / "checkpoints", ec) && !fs::is_empty(d / "checkpoints", ec);
}

fs::path numbered(const fs::path& dir, int i) { return i < 2 ? dir : fs::path(dir.string() + "_" + std::to_string(i)); }

}  // namespace

fs::path freeRunDir(const fs::path& dir) {
  for (int i = 1;; ++i)
    if (!holdsRun(numbered(dir, i))) return numbered(dir, i);
}

OpenedRunFolder lockRunFolder(const fs::path& dir, bool derivedNewRun) {
  OpenedRunFolder out;
  if (!derivedNewRun) {
    out.lock = RunFolderLock(dir);
    out.dir = dir;
  } else {
    for (int i = 1; !out.lock.held(); ++i) {
      const fs::path cand = numbered(dir, i);
      if (holdsRun(cand)) continue;
      try {
        out.lock = RunFolderLock(cand);
      } catch (const RunFolderBusy& busy) {
        out.notes.push_back(cand.string() + " is in use by process " + std::to_string(busy.holder()) +
                            "; this run takes the next free name");
        continue;
      }
      // Checked again under the lock: a run may have ended there meanwhile.
      if (holdsRun(cand)) {
        out.lock = RunFolderLock();
        continue;
      }
      out.dir = cand;
    }
    if (out.dir != dir)
      out.notes.push_back("this run writes to " + out.dir.string() + " (" + dir.string() +
                          " holds an earlier run or is in use)");
  }
  for (auto& n : RunFolder(out.dir).recover()) out.notes.push_back(std::move(n));
  return out;
}

void prepareDevices(const config::RunConfig& cfg, const PreparedRun& run) {
  std::vector<int> ids;  // the CUDA devices of the run, in fill order
  for (const auto& d : run.devices)
    if (!d.isCpu()) ids.push_back(d.index);
  if (ids.empty()) return;
  // Initialise the allocator of each device: device::memoryFigures (free
  // bytes, stats) refuses a device LibTorch has not touched yet.
  for (int id : ids) (void)at::empty({1}, at::TensorOptions().device(c10::kCUDA, static_cast<c10::DeviceIndex>(id)));
  // Every run sets its devices' caps, none included: the allocator keeps a cap for the
  // process, so a capped run would otherwise cap the next run in the app or a test.
  for (size_t i = 0; i < run.devices.size(); ++i)
    if (!run.devices[i].isCpu())
      device::setMemoryCap(run.devices[i].index, i < run.capBytes.size() ? run.capBytes[i] : 0);
  // model.attention_backend: auto times cuDNN against flash per shape (nn/Attention.h;
  // other attention, the VAE's, runs flash); cudnn lets LibTorch prefer cuDNN; flash
  // turns it off. A family that never uses it says so (FamilyDescription::cudnnAttention).
  const bool autoChoice = attentionChosenPerShape(cfg);
  nn::setAttentionAuto(autoChoice);
  compat::setCudnnAttention(cudnnAttentionAllowed(cfg) && !autoChoice);
}

bool cudnnAttentionAllowed(const config::RunConfig& cfg) {
  const config::FamilyDescription* family = config::findFamily(cfg.model.arch);
  return (!family || family->cudnnAttention) && cfg.model.attentionBackend != config::AttentionBackend::Flash;
}

bool attentionChosenPerShape(const config::RunConfig& cfg) {
  return cudnnAttentionAllowed(cfg) && cfg.model.attentionBackend == config::AttentionBackend::Auto;
}

std::string describeRunSetup(const config::RunConfig& cfg, bool onCuda, bool graphed, const std::string& graphOff) {
  const auto& m = cfg.model;
  const auto& tc = cfg.train;
  std::string s = "base " + config::enumName(tc.dtype);
  if (m.quantize) {
    s += ", quantized " + m.qtype;
    if (onCuda && m.fp8Matmul && nn::isFloat8(nn::quantTypeFromName(m.qtype)))
      s += std::string(" with fp8 matmuls") + (m.fp8Backward ? " (forward and backward)" : " (forward)");
  }
  if (m.quantizeTe) s += "; text encoders quantized " + m.qtype;
  s += cfg.network.dtype == config::DType::BF16 ? "; LoRA bfloat16" : "; LoRA float32";
  if (!onCuda)
    s += "; on the CPU (attention: PyTorch's CPU kernel)";
  else
    s += std::string("; attention: ") +
         (attentionChosenPerShape(cfg) ? "per shape, the faster of cuDNN and flash that is correct here (timed at "
                                         "its first call)"
          : cudnnAttentionAllowed(cfg) ? "cuDNN where LibTorch picks it, else flash"
                                       : "flash (cuDNN off)");
  s += graphed            ? "; the step as a CUDA graph (recorded after two eager steps)"
       : graphOff.empty() ? "; eager steps"
                          : "; eager steps (no CUDA graph: " + graphOff + ")";
  s += tc.gradientCheckpointing ? "; gradient checkpointing" : "; no gradient checkpointing";
  if (tc.gradientCheckpointing && tc.offloadCheckpoints) s += " (block inputs in host memory)";
  if (tc.offloadOptimizerState) s += "; AdamW moments in host memory";
  return s;
}

std::string attentionBackendHint(const std::string& what, const config::RunConfig& cfg, bool onCuda) {
  if (!onCuda || !cudnnAttentionAllowed(cfg)) return "";
  const std::string lower = toLowerAscii(what);
  auto has = [&](const char* s) { return lower.find(s) != std::string::npos; };
  // cuDNN's attention graph names itself; other cuDNN errors (convolutions) may not be it.
  const std::string setting = "model.attention_backend: " + config::enumName(cfg.model.attentionBackend);
  if (has("mha_graph") || (has("cudnn") && (has("attention") || has("sdpa") || has("fmha"))))
    return "; cuDNN's attention failed (" + setting +
           "): set attention_backend: flash and resume from the last checkpoint (docs/training.md)";
  if (has("illegal memory access") || has("cudnn"))
    return "; this may be cuDNN's attention (" + setting +
           "): if it happens again, set attention_backend: flash and resume (docs/training.md)";
  // The trainer's own words for non-finite values (NonFiniteLoss).
  if (has("not finite") || has("loss is nan") || has("loss is inf"))
    return "; if the learning rate and the data are not the cause, try model.attention_backend: flash: cuDNN's "
           "attention has given non-finite gradients before (docs/training.md)";
  return "";
}

c10::Device firstDevice(const PreparedRun& run) {
  for (const auto& d : run.devices)
    if (!d.isCpu()) return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d.index));
  return c10::Device(c10::kCPU);
}

DeviceSetup setUpDevices(const config::RunConfig& cfg, const PreparedRun& run) {
  prepareDevices(cfg, run);
  DeviceSetup s;
  s.buildDevice = firstDevice(run);
  if (cfg.model.splitModelOverGpus) {
    s.plan = run.plan;  // preflight refused a plan that does not fit (train::planRefusal)
    if (!cfg.model.gpuMemoryLimitGb.empty()) s.buildDevice = c10::Device(c10::kCPU);
  }
  return s;
}

std::function<c10::Device(size_t)> planBlockDevice(const DeviceSetup& setup) {
  if (!setup.plan) return {};
  return [devices = setup.plan->blockDevice](size_t i) { return placement::parseDevice(devices.at(i)); };
}

bool keepsFp8Transposes(const config::ModelConfig& m) {
  return m.quantize && m.fp8Matmul && m.fp8Backward && m.fp8KeepTranspose &&
         nn::isFloat8(nn::quantTypeFromName(m.qtype));
}

std::function<void(size_t, torch::nn::Module&)> randomBlockHook(nn::QuantType qtype, const DeviceSetup& setup) {
  if (qtype == nn::QuantType::None && !setup.plan) return {};
  return [qtype, to = planBlockDevice(setup)](size_t i, torch::nn::Module& block) {
    if (qtype != nn::QuantType::None) nn::quantizeLinears(block, qtype);
    if (to) block.to(to(i));
  };
}

PlacedModel placeBlocks(nn::BlockList blocks, const DeviceSetup& setup) {
  PlacedModel out;
  if (setup.plan) {
    out.placement = std::make_unique<placement::Placement>(std::move(blocks), *setup.plan);
    out.reason = setup.plan->reason;
  } else {
    out.placement = placement::Placement::singleDevice(std::move(blocks), setup.buildDevice);
    out.reason = "single device " + setup.buildDevice.str();
  }
  return out;
}

std::vector<std::string> restoreMemoryCaps(const std::map<int, int64_t>& before) {
  std::map<int, int64_t> wanted = before;
  for (const auto& [index, cap] : device::memoryCaps()) wanted.emplace(index, 0);  // capped by the run only
  std::vector<std::string> problems;
  for (const auto& [index, cap] : wanted) {
    if (device::memoryCap(index) == cap) continue;
    try {
      device::setMemoryCap(index, cap);
    } catch (const std::exception& e) {
      problems.push_back("the memory cap of cuda:" + std::to_string(index) +
                         " was not put back after the run: " + e.what());
    }
  }
  return problems;
}

void checkFp8MatmulRuns(const nn::BlockList& blocks, at::ScalarType dtype) {
  for (const auto& slot : blocks.blocks) {
    try {
      nn::checkFp8Matmul(*slot.block, dtype);
    } catch (const std::exception& e) {
      throw ConfigError(std::string("model.fp8_matmul: ") + e.what() +
                        "; set model.fp8_matmul: false (the quantized base then converts its weights per matmul)");
    }
  }
}

OpenedRun openRunFolder(const fs::path& runDir, const std::string& purpose) {
  OpenedRun run{RunFolder(runDir), {}, {}};
  std::error_code ec;
  if (const auto why = io::pathProblem(runDir); !why.empty()) throw IoError(runDir.string() + ": " + why);
  if (!fs::exists(run.folder.configPath(), ec)) throw IoError(runDir.string() + ": not a run folder (no config.yaml)");
  const auto loaded = config::loadRunConfig(run.folder.configPath());
  if (!loaded.ok()) {
    std::string msg = run.folder.configPath().string() + ": the run's config has errors:";
    for (const auto& p : loaded.problems)
      if (p.isError()) msg += "\n  " + p.format();
    throw ConfigError(msg);
  }
  run.config = loaded.config;
  const auto latest = run.folder.latestCheckpoint();
  if (!latest) {
    // A run still training before its first checkpoint: say that, not "no checkpoint".
    if (const pid_t holder = RunFolderLock::holderOf(runDir); holder > 0) throw RunFolderBusy(runDir, holder);
    throw IoError(runDir.string() + ": no checkpoint to " + purpose);
  }
  run.latest = *latest;
  return run;
}

void releaseDeviceCaches() {
#ifdef STRATA_HAS_CUDA
  if (!at::hasCUDA()) return;
#if STRATA_TORCH_AT_LEAST(2, 1)
  // cuBLAS keeps its workspaces in the caching allocator (allocated bytes) per
  // handle and stream; they would outlive the run.
  at::cuda::clearCublasWorkspaces();
#endif
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

void seedRankDropout(int64_t seed, int64_t startStep, int rank) {
  if (rank == 0) return;
  at::manual_seed(sampleSeed(seed, startStep, -1 - static_cast<int64_t>(rank), SampleStream::LoraDropout));
}

}  // namespace strata::train
