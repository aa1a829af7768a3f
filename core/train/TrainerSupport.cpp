#include "train/TrainerSupport.h"

#include <ATen/Context.h>
#ifdef STRATA_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <set>

#include "common/TorchCompat.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "io/FileBytes.h"
#include "io/Image.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxSampling.h"
#include "nn/Quantize.h"
#include "placement/OptimizerStateAttachment.h"
#include "placement/QuantScaleAttachment.h"
#include "placement/Planner.h"
#include "train/FlowMatching.h"
#include "train/ModelFamily.h"
#include "train/RngState.h"
#include "train/SamplingWeights.h"

namespace strata::train {

namespace fs = std::filesystem;

Trainer::State::~State() {
  images.reset();
  ema.reset();
  if (placement) placement->detachAll(placement::optimizerStateKind());
  optimizer.reset();
  if (network) network->detach();
  if (placement) placement->detachAll(lora::loraAdapterKind());
  network.reset();
  namedParams.clear();
  checkpointed.reset();
  placement.reset();
  model.reset();
  if (family) family->release();
  family.reset();
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

lora::LoraFileFormat fileFormatOf(config::ExportFormat f) {
  switch (f) {
    case config::ExportFormat::Diffusers:
      return lora::LoraFileFormat::Diffusers;
    case config::ExportFormat::Kohya:
      return lora::LoraFileFormat::Kohya;
    case config::ExportFormat::Comfy:
      return lora::LoraFileFormat::Comfy;
    case config::ExportFormat::Peft:  // a causal LM's adapter folder: the diffusers / peft tensor names
      return lora::LoraFileFormat::Diffusers;
  }
  return lora::LoraFileFormat::Diffusers;
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
  if (!cfg.model.gpuMemoryLimitGb.empty())
    for (size_t i = 0; i < run.devices.size(); ++i)
      if (!run.devices[i].isCpu()) device::setMemoryCap(run.devices[i].index, run.capBytes[i]);
  // cuDNN attention fails in the backward pass of FLUX-sized models (docs/design.md §4).
  compat::disableCudnnAttention();
}

c10::Device firstDevice(const PreparedRun& run) {
  for (const auto& d : run.devices)
    if (!d.isCpu()) return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d.index));
  return c10::Device(c10::kCPU);
}

BuiltModel buildPlacedModel(const config::RunConfig& cfg, const PreparedRun& run,
                            const std::function<void(int64_t done, int64_t total)>& onLoadProgress) {
  const auto& m = cfg.model;
  std::vector<int> ids;  // the CUDA devices of the run, in fill order
  for (const auto& d : run.devices)
    if (!d.isCpu()) ids.push_back(d.index);
  const bool useCuda = !ids.empty();
  prepareDevices(cfg, run);

  const auto dtype = scalarTypeOf(cfg.train.dtype);
  BuiltModel b;
  std::optional<placement::Plan> plan;
  c10::Device buildDevice =
      useCuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(ids[0])) : c10::Device(c10::kCPU);
  if (m.splitModelOverGpus) {
    if (!run.plan.fits) throw PlacementError("the model does not fit: " + run.plan.reason);
    plan = run.plan;
    b.reason = plan->reason;
    // Under caps the whole model may not fit the first device: build on the CPU.
    if (!m.gpuMemoryLimitGb.empty()) buildDevice = c10::Device(c10::kCPU);
  }
  at::manual_seed(static_cast<uint64_t>(cfg.train.seed));  // the same random base on resume
  flux::FluxBuildOptions bo;
  bo.device = buildDevice;
  bo.dtype = dtype;
  const bool loadWeights = !m.nameOrPath.empty() && !m.randomWeights;
  const auto qtype = m.quantize ? nn::quantTypeFromName(m.qtype) : nn::QuantType::None;
  if (loadWeights) {
    // A split builds each block on its plan device, so the model is never whole on
    // one; each is read from the file (and quantized) before the next one exists.
    // (Random blocks keep the build device: their values come from its generator.)
    if (plan) bo.blockDevice = [&plan](size_t i) { return placement::parseDevice(plan->blockDevice.at(i)); };
    flux::FluxStreamOptions so;
    so.quantize = qtype;
    so.onProgress = onLoadProgress;
    b.model = flux::streamFluxTransformer(flux::FluxCheckpoint::open(m.nameOrPath), run.model, bo, so);
  } else {
    // Random weights: each block is quantized as soon as it exists.
    if (qtype != nn::QuantType::None)
      bo.onBlockBuilt = [qtype](torch::nn::Module& block) { nn::quantizeLinears(block, qtype); };
    b.model = std::make_shared<flux::FluxTransformer>(run.model, bo);
  }
  for (auto& p : b.model->parameters()) p.requires_grad_(false);
  if (plan) {
    b.placement = std::make_unique<placement::Placement>(b.model->blockList(), *plan);
  } else {
    b.placement = placement::Placement::singleDevice(b.model->blockList(), buildDevice);
    b.reason = "single device " + buildDevice.str();
  }
  if (qtype != nn::QuantType::None) b.placement->attachAll(placement::QuantScaleAttachment::forModel(*b.model));
  b.placement->apply();
  b.devices = b.placement->devices();
  return b;
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
  if (!latest) throw IoError(runDir.string() + ": no checkpoint to " + purpose);
  run.latest = *latest;
  return run;
}

fs::path exportPath(const RunFolder& folder, const config::RunConfig& cfg, config::ExportFormat format,
                    std::optional<int64_t> step, const fs::path& outDir) {
  const std::string name =
      cfg.job.name + (step ? "_step" + std::to_string(*step) : "") + "_" + config::enumName(format) + ".safetensors";
  return (outDir.empty() ? folder.exportsDir() : outDir) / name;
}

lora::LoraExportOptions exportOptionsOf(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                        double alpha, const std::string& runYaml, const std::string& softwareVersion) {
  lora::LoraExportOptions eo;
  eo.format = fileFormatOf(format);
  eo.dtype = scalarTypeOf(cfg.save.dtype);
  eo.softwareVersion = softwareVersion;
  eo.baseModel = cfg.model.nameOrPath.empty()
                     ? "random FLUX-architecture model (" + config::enumName(cfg.model.preset) + ")"
                     : cfg.model.nameOrPath;
  eo.title = cfg.job.name;
  eo.rank = cfg.network.linear;
  eo.alpha = alpha;
  eo.steps = steps;
  eo.runYaml = runYaml.empty() ? config::toYaml(cfg) : runYaml;
  return eo;
}

namespace {

TrainItem nextItem(Trainer::State& st, const config::RunConfig& cfg, events::EventBus& bus, int64_t step) {
  const int64_t n = static_cast<int64_t>(st.dataset->size());
  for (int64_t attempt = 0; attempt <= n; ++attempt) {
    const int64_t epoch = st.drawCursor / n;
    const int64_t pos = st.drawCursor % n;
    ++st.drawCursor;
    if (epoch != st.permEpoch) {
      // The order of an epoch depends only on the seed and the epoch: a resumed
      // run needs only the cursor to draw the same items.
      auto g = makeCpuGenerator(static_cast<uint64_t>(cfg.train.seed) * 1000003ull + static_cast<uint64_t>(epoch));
      auto p = at::randperm(n, g, at::kLong);
      st.perm.assign(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
      st.permEpoch = epoch;
    }
    try {
      return st.dataset->item(static_cast<size_t>(st.perm[static_cast<size_t>(pos)]));
    } catch (const std::exception& e) {
      ++st.skippedItems;
      bus.publish(events::WarningEvent{std::string("dataset item skipped: ") + e.what() + " (" +
                                           std::to_string(st.skippedItems) + " skipped so far)",
                                       step});
    }
  }
  throw IoError("no readable dataset item: all " + std::to_string(n) + " failed to load");
}

// txt [N, D] to exactly `tokens` rows (zero padding or truncation).
at::Tensor fitTokens(const at::Tensor& txt, int64_t tokens) {
  if (txt.size(0) == tokens) return txt;
  if (txt.size(0) > tokens) return txt.slice(0, 0, tokens);
  return at::cat({txt, at::zeros({tokens - txt.size(0), txt.size(1)}, txt.options())}, 0);
}

}  // namespace

at::Tensor microStep(Trainer::State& st, const config::RunConfig& cfg, int64_t batch, events::EventBus& bus,
                     int64_t step) {
  std::vector<TrainItem> items;
  for (int64_t i = 0; i < batch; ++i) items.push_back(nextItem(st, cfg, bus, step));
  const int64_t tokens = items.front().txt.size(0);
  std::vector<at::Tensor> lat, txt, pooled;
  for (const auto& it : items) {
    if (!it.latents.sizes().equals(items.front().latents.sizes()))
      throw Error("a batch needs latents of one size: '" + it.caption + "' differs from '" + items.front().caption +
                  "' (use batch_size 1 or one resolution)");
    lat.push_back(it.latents);
    txt.push_back(fitTokens(it.txt, tokens));
    pooled.push_back(it.pooled);
  }
  auto latents = at::stack(lat);  // [B, C, H, W]
  auto text = at::stack(txt);     // [B, N_txt, D]
  auto pool = at::stack(pooled);  // [B, D_pooled]
  const double p = cfg.train.captionDropoutRate;
  if (p > 0) {
    auto drop = at::rand({batch}, st.gen) < p;  // [B] bool
    const auto emptyTxt = fitTokens(st.emptyPrompt.txt, tokens);
    for (int64_t b = 0; b < batch; ++b) {
      if (drop[b].item<bool>()) {
        text[b].copy_(emptyTxt);
        pool[b].copy_(st.emptyPrompt.pooled);
      }
    }
  }
  const int64_t h = latents.size(2), w = latents.size(3);
  const double mu = flux::shiftMu((h / 2) * (w / 2));
  auto noise = at::randn(latents.sizes(), st.gen, at::kFloat);
  auto sigmas = sampleSigmas(cfg.train.timestepType, batch, mu, st.gen);
  auto noised = addNoise(latents, noise, sigmas);

  const auto dev = st.placement->stemDevice();
  flux::FluxInputs in;
  in.img = flux::packLatents(noised.noisy).to(dev);  // [B, HW/4, 4C]
  in.txt = text.to(dev);
  in.pooled = pool.to(dev);
  in.timestep = sigmas.to(dev);
  in.guidance = at::full({batch}, cfg.train.guidance, at::kFloat).to(dev);
  in.imgIds = flux::imageIds(h, w).to(dev);
  in.txtIds = flux::textIds(tokens).to(dev);
  if (st.phases) st.phases->mark("data");
  auto prediction = st.model->forward(in, st.runner);  // [B, HW/4, 4C]
  return flowMatchingLoss(prediction, flux::packLatents(noised.target));
}

void sampleAll(Trainer::State& st, const config::RunConfig& cfg, const RunFolder& folder, int64_t step,
               events::EventBus& bus) {
  at::NoGradGuard noGrad;
  const SamplingWeights sampling(*st.network, st.ema.get());
  // Latent pixels per image pixel: the images run's VAE, the demo's pixel code, else the VAE's 8 (previews).
  const int64_t scale = st.images ? st.images->downscaleFactor() : st.pixelCode ? kPixelCodeScale : 8;
  auto even = [](int64_t v) { return std::max<int64_t>(2, v - v % 2); };
  const int64_t h = even(cfg.sample.height / scale), w = even(cfg.sample.width / scale);
  const auto dev = st.placement->stemDevice();
  for (size_t i = 0; i < cfg.sample.prompts.size(); ++i) {
    // An images run samples the prompt with its trigger word, from the real text encoders' embedding.
    const auto& prompt = st.images ? st.images->promptText(i) : cfg.sample.prompts[i];
    const int64_t seed = cfg.sample.seed + (cfg.sample.walkSeed ? static_cast<int64_t>(i) : 0);
    try {
      auto g = makeCpuGenerator(static_cast<uint64_t>(seed));
      auto noise = at::randn({1, st.fluxConfig.latentChannels(), h, w}, g, at::kFloat);  // [1, C, h, w]
      const auto e = st.images        ? st.images->promptEmbedding(i)
                     : prompt.empty() ? st.emptyPrompt
                                      : st.promptEmbedder->embed(prompt);
      auto out = flux::sample(*st.model, noise.to(dev), e.txt.unsqueeze(0).to(dev), e.pooled.unsqueeze(0).to(dev),
                              cfg.sample.guidanceScale, cfg.sample.sampleSteps, st.placement.get());
      // [3, h scale, w scale]: decoded by the VAE, or the pixel code / its preview.
      const auto rgb = st.images ? st.images->decode(out)[0] : latentsToRgb(out[0].to(at::kCPU, at::kFloat));
      const auto path = folder.samplePath(step, static_cast<int64_t>(i));
      io::writePng(
          path, rgb,
          {{"prompt", prompt}, {"step", std::to_string(step)}, {"seed", std::to_string(seed)}, {"Software", "Strata"}});
      folder.appendSampleIndex({{"file", path.filename().string()},
                                {"step", step},
                                {"prompt_index", i},
                                {"prompt", prompt},
                                {"seed", seed}});
      bus.publish(events::SampleEvent{path.string(), step, static_cast<int64_t>(i), prompt, seed});
    } catch (const std::exception& ex) {
      bus.publish(events::WarningEvent{
          "sample " + std::to_string(i) + " at step " + std::to_string(step) + " failed: " + ex.what(), step});
    }
  }
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

}  // namespace strata::train
