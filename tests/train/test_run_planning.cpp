// train::prepareRun, the one preparation of a run that the trainer, `strata-train
// plan` and the app's plan view share: this machine's or simulated devices, which
// devices a config means, one cap for all or one per device, and problems that
// carry the config's key and line.
#include <gtest/gtest.h>

#include <string>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "config/RunConfigYaml.h"
#include "models/clip/ClipTextConfig.h"
#include "models/t5/T5Config.h"
#include "models/vae/VaeConfig.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"
#include "placement/Planner.h"
#include "train/EncodeCache.h"
#include "train/RunPlanning.h"

namespace strata::train {
namespace {

constexpr int64_t kGB = 1000000000LL;

// A tiny random model: shapes only, nothing to read.
config::RunConfig tinyConfig() {
  config::RunConfig c;
  c.model.preset = "tiny";
  c.model.randomWeights = true;
  c.train.dtype = config::DType::FP32;
  config::DatasetConfig d;
  d.type = config::DatasetType::Shapes;
  d.resolution = {32};
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  return c;
}

config::RunConfig splitConfig(std::vector<double> capsGb) {
  config::RunConfig c = tinyConfig();
  c.model.device = config::ComputeDevice::Cuda;
  c.model.splitModelOverGpus = true;
  c.model.placement = config::PlacementMode::Memory;
  c.model.gpuMemoryLimitGb = std::move(capsGb);
  return c;
}

PreparedRun preview(const config::RunConfig& c, const std::string& spec, const config::SourceMap* where = nullptr) {
  PrepareOptions o;
  o.preview = true;
  o.where = where;
  return prepareRun(c, device::simulatedInventory(spec), o);
}

std::string errors(const PreparedRun& r) {
  std::string s;
  for (const auto& p : r.problems)
    if (p.isError()) s += p.format() + "\n";
  return s;
}

TEST(PrepareRun, ThisMachineAndASimulatedCpuGiveTheSamePlan) {
  config::RunConfig c = tinyConfig();
  c.model.device = config::ComputeDevice::Cpu;
  const PreparedRun real = prepareRun(c, device::thisMachine());
  ASSERT_TRUE(real.ok()) << errors(real);
  ASSERT_EQ(real.devices.size(), 1u);
  EXPECT_TRUE(real.devices[0].isCpu());
  EXPECT_FALSE(real.devices[0].simulated);
  EXPECT_EQ(real.devicesSource, "this machine");
  EXPECT_EQ(real.modelSource, "preset tiny");

  // "cpu" in a spec is this host's memory too, marked simulated.
  const PreparedRun sim = preview(c, "cpu");
  ASSERT_TRUE(sim.ok()) << errors(sim);
  ASSERT_EQ(sim.devices.size(), 1u);
  EXPECT_TRUE(sim.devices[0].simulated);
  EXPECT_EQ(sim.devicesSource, "simulated (--devices cpu)");
  EXPECT_EQ(placement::formatPlan(sim.plan), placement::formatPlan(real.plan));
  EXPECT_EQ(sim.tokens, real.tokens);
}

TEST(PrepareRun, ASplitOnThisMachineNeedsItsGpus) {
  const auto here = device::thisMachine();
  const PreparedRun r = prepareRun(splitConfig({}), here);
  size_t gpus = 0;
  for (const auto& d : here.devices) gpus += d.isCpu() ? 0 : 1;
  if (gpus >= 2) {
    ASSERT_TRUE(r.ok()) << errors(r);
    EXPECT_EQ(r.devices.size(), gpus);
    for (const auto& d : r.devices) EXPECT_FALSE(d.simulated);
  } else {
    EXPECT_FALSE(r.ok());
    const std::string key = gpus == 0 ? "model.device" : "model.split_model_over_gpus";
    bool found = false;
    for (const auto& p : r.problems) found |= p.isError() && p.key == key;
    EXPECT_TRUE(found) << errors(r);
  }
}

TEST(PrepareRun, SimulatedDevicesAreTheConfigsDevices) {
  // A split over gpu_ids, the spec's cpu after the GPUs as an offload target.
  config::RunConfig c = splitConfig({});
  c.model.gpuIds = {2, 0};
  PreparedRun r = preview(c, "cpu:64GB,3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_EQ(r.devices[0].label(), "cuda:2");
  EXPECT_EQ(r.devices[1].label(), "cuda:0");
  EXPECT_TRUE(r.devices[2].isCpu());
  ASSERT_EQ(r.plan.devices.size(), 3u);
  EXPECT_EQ(r.plan.stemDevice, "cuda:2");
  EXPECT_EQ(r.input.input.devices[0].budgetBytes, 23 * kGB);  // 24 GB less the 1 GB reserve
  EXPECT_EQ(r.freeBytes, (std::vector<int64_t>{0, 0, 0}));    // simulated: no free-memory figure

  // Without the split: the first of gpu_ids, the cpu not used.
  c.model.splitModelOverGpus = false;
  r = preview(c, "cpu:64GB,3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].label(), "cuda:2");

  // model.device: cpu means the cpu whatever GPUs the spec lists (the old CLI
  // planned on the first GPU, the old plan view on the cpu).
  c = tinyConfig();
  c.model.device = config::ComputeDevice::Cpu;
  r = preview(c, "2x8GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_TRUE(r.devices[0].isCpu());
}

TEST(PrepareRun, OneCapForAllOrOnePerDevice) {
  PreparedRun r = preview(splitConfig({16}), "3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.capBytes, (std::vector<int64_t>{16 * kGB, 16 * kGB, 16 * kGB}));
  for (const auto& b : r.input.input.devices) EXPECT_EQ(b.budgetBytes, 15 * kGB);

  r = preview(splitConfig({10, 12, 14}), "3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.capBytes, (std::vector<int64_t>{10 * kGB, 12 * kGB, 14 * kGB}));
  EXPECT_EQ(r.input.input.devices[2].budgetBytes, 13 * kGB);

  // One per GPU: a cpu in the spec is never capped and does not count.
  r = preview(splitConfig({10, 12, 14}), "cpu:64GB,3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.capBytes, (std::vector<int64_t>{10 * kGB, 12 * kGB, 14 * kGB, 0}));
  EXPECT_EQ(r.input.input.devices[3].budgetBytes, 63 * kGB);

  // A cap above a simulated card is that card (a warning, not an error).
  r = preview(splitConfig({32}), "2x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.input.input.devices[0].budgetBytes, 23 * kGB);
}

TEST(PrepareRun, AWrongCapCountIsRefusedWithTheKeyAndLine) {
  const std::string yaml =
      "model:\n"                           // 1
      "  preset: tiny\n"                   // 2
      "  random_weights: true\n"           // 3
      "  device: cuda\n"                   // 4
      "  split_model_over_gpus: true\n"    // 5
      "  gpu_memory_limit_gb: [16, 16]\n"  // 6
      "datasets: [{type: shapes, resolution: [32]}]\n"
      "sample: {sample_every: 0}\n";
  const config::LoadedConfig loaded = config::parseRunConfig(yaml, "caps.yaml");
  ASSERT_TRUE(loaded.ok());
  const PreparedRun r = preview(loaded.config, "3x16GB", &loaded.where);
  ASSERT_FALSE(r.ok());
  bool found = false;
  for (const auto& p : r.problems) {
    if (!p.isError()) continue;
    EXPECT_EQ(p.key, "model.gpu_memory_limit_gb") << p.format();
    EXPECT_EQ(p.file, "caps.yaml");
    EXPECT_EQ(p.line, 6);
    EXPECT_NE(p.message.find("2 caps for 3 devices"), std::string::npos) << p.message;
    // The device layer's words, the config layer's key: no key inside the message.
    EXPECT_EQ(p.message.find("gpu_memory_limit_gb"), std::string::npos) << p.message;
    found = true;
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(r.devices.empty());
  // The same config over two devices is fine.
  EXPECT_TRUE(preview(loaded.config, "2x16GB", &loaded.where).ok());
}

TEST(PrepareRun, AGpuIdTheInventoryLacksIsRefusedWithTheKeyAndLine) {
  const std::string yaml =
      "model:\n"
      "  preset: tiny\n"
      "  random_weights: true\n"
      "  gpu_ids: [0, 5]\n"  // 4
      "  split_model_over_gpus: true\n"
      "datasets: [{type: shapes, resolution: [32]}]\n"
      "sample: {sample_every: 0}\n";
  const config::LoadedConfig loaded = config::parseRunConfig(yaml, "ids.yaml");
  const PreparedRun r = preview(loaded.config, "2x16GB", &loaded.where);
  ASSERT_FALSE(r.ok());
  ASSERT_FALSE(r.problems.empty());
  EXPECT_EQ(r.problems[0].key, "model.gpu_ids");
  EXPECT_EQ(r.problems[0].line, 4);
  EXPECT_NE(r.problems[0].message.find("gpu id 5 does not exist"), std::string::npos) << r.problems[0].message;
}

// FLUX.1-dev with random weights on an images dataset: the encoders are FLUX.1's presets.
config::RunConfig fluxImagesConfig() {
  config::RunConfig c;
  c.model.preset = "flux-dev";
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.model.splitModelOverGpus = true;
  c.model.placement = config::PlacementMode::Memory;
  c.train.dtype = config::DType::BF16;
  config::DatasetConfig d;
  d.type = config::DatasetType::Images;
  d.folderPath = "/data/photos";
  d.resolution = {512, 1024};
  c.datasets = {d};
  c.sample.sampleEvery = 250;
  c.sample.prompts = {"a photo of sks"};
  c.sample.width = 1024;
  c.sample.height = 768;
  return c;
}

const placement::OtherModule& moduleNamed(const PreparedRun& r, const std::string& name) {
  for (const auto& m : r.input.input.otherModules)
    if (m.name == name) return m;
  throw std::runtime_error("no other module " + name);
}

TEST(PrepareRun, AFluxImagesRunCountsT5ClipAndTheVaeOnTheFirstDevice) {
  const PreparedRun r = preview(fluxImagesConfig(), "4x16GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  ASSERT_EQ(r.input.input.otherModules.size(), 3u);
  const auto& t5 = moduleNamed(r, "T5");
  const auto& clip = moduleNamed(r, "CLIP");
  const auto& vae = moduleNamed(r, "VAE");
  // T5-XXL: 4,762,310,656 parameters in bf16 on a GPU; CLIP-L; the FLUX.1 VAE.
  EXPECT_EQ(t5.paramCount, 4762310656LL);
  EXPECT_EQ(t5.weightBytes, 2 * 4762310656LL);
  EXPECT_EQ(t5.dtype, "bf16");
  EXPECT_EQ(clip.paramCount, clip::clipParamPlan(clip::ClipTextConfig::clipL()).totalParams());
  EXPECT_EQ(clip.weightBytes, 2 * clip.paramCount);
  EXPECT_EQ(vae.paramCount, vae::vaeParamCount(vae::VaeConfig::flux1()));
  EXPECT_EQ(vae.weightBytes, 2 * vae.paramCount);  // bf16 is its compute dtype
  EXPECT_TRUE(t5.freedBeforeTraining);
  EXPECT_TRUE(clip.freedBeforeTraining);
  EXPECT_FALSE(vae.freedBeforeTraining);
  // Peaks: a cache batch at the largest resolution, 512 T5 tokens; one sample decoded at its size.
  EXPECT_EQ(t5.cachingPeakBytes, t5::t5EncodePeakBytes(t5::T5Config::t5Xxl(), kCacheBatchSize, 512, 2));
  EXPECT_EQ(vae.cachingPeakBytes, vae::vaeEncodePeakBytes(vae::VaeConfig::flux1(), kCacheBatchSize, 1024, 1024, 2));
  EXPECT_EQ(vae.trainingPeakBytes, vae::vaeDecodePeakBytes(vae::VaeConfig::flux1(), 1, 768, 1024, 2));

  // Training: the VAE beside the stem; caching: the VAE first, then T5 and CLIP, on cuda:0.
  EXPECT_EQ(r.plan.devices[0].otherBytes, vae.weightBytes);
  ASSERT_TRUE(r.plan.caching.needed);
  EXPECT_EQ(r.plan.caching.device, "cuda:0");
  EXPECT_EQ(r.plan.caching.totalBytes,
            std::max(vae.weightBytes + vae.cachingPeakBytes,
                     vae.weightBytes + t5.weightBytes + clip.weightBytes + t5.cachingPeakBytes));
  EXPECT_TRUE(r.plan.caching.fits) << r.plan.reason;  // 16 GB: T5-XXL fits before the transformer is placed
  EXPECT_TRUE(r.plan.fits) << r.plan.reason;
  const std::string text = describePlan(r);
  EXPECT_NE(text.find("T5 (preset t5-xxl, bf16, 9.5 GB) and CLIP (preset clip-l, bf16, 246.1 MB) load once the VAE "
                      "(preset flux1 VAE, bf16, 167.6 MB) has encoded the images"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("are freed before step 1"), std::string::npos) << text;
  EXPECT_NE(text.find("decode the samples (1024x768, one at a time)"), std::string::npos) << text;
  EXPECT_NE(text.find("Caching, before the transformer is placed, on cuda:0"), std::string::npos) << text;

  // The cpu: everything in float32.
  config::RunConfig cpu = fluxImagesConfig();
  cpu.model.device = config::ComputeDevice::Cpu;
  cpu.model.splitModelOverGpus = false;
  const PreparedRun onCpu = preview(cpu, "cpu:512GB");
  ASSERT_TRUE(onCpu.ok()) << errors(onCpu);
  EXPECT_EQ(moduleNamed(onCpu, "T5").weightBytes, 4 * 4762310656LL);
  EXPECT_EQ(moduleNamed(onCpu, "T5").dtype, "fp32");
  EXPECT_EQ(moduleNamed(onCpu, "VAE").weightBytes, 4 * vae.paramCount);
}

TEST(PrepareRun, AQuantizedT5CountsOneBytePerLinearWeightInTheCachingPhase) {
  config::RunConfig c = fluxImagesConfig();
  c.model.quantize = true;
  const PreparedRun plain = preview(c, "4x16GB");
  ASSERT_TRUE(plain.ok()) << errors(plain);
  c.model.quantizeTe = true;
  c.model.qtype = "int8";
  const PreparedRun q = preview(c, "4x16GB");
  ASSERT_TRUE(q.ok()) << errors(q);
  const auto& t5 = moduleNamed(q, "T5");
  const auto xxl = t5::T5Config::t5Xxl();
  const auto lin = t5::t5LinearCounts(xxl);
  // T5-XXL's block Linears: q, k, v, o (4096 x 4096) and wi_0, wi_1, wo (4096 x 10240), 24 blocks.
  EXPECT_EQ(lin.weights, 24LL * (4 * 4096 * 4096 + 3 * 4096 * 10240));
  EXPECT_EQ(lin.rows, 24LL * (5 * 4096 + 2 * 10240));  // one scale per output row
  EXPECT_EQ(lin.largest, 4096LL * 10240);
  // int8: 1 byte per Linear weight and a float32 scale per row; the rest in bf16.
  EXPECT_EQ(t5.weightBytes, (4762310656LL - lin.weights) * 2 + lin.weights + lin.rows * 4);
  EXPECT_EQ(t5.cachingPeakBytes, t5::t5EncodePeakBytes(xxl, kCacheBatchSize, 512, 2) + lin.largest * 2);
  EXPECT_EQ(t5.dtype, "bf16 + int8 Linears");
  EXPECT_EQ(moduleNamed(q, "CLIP").weightBytes, moduleNamed(plain, "CLIP").weightBytes) << "CLIP stays float";
  // The T5 stage shrinks by 4.6 GB; the caching peak is then the VAE's encode stage.
  EXPECT_LT(t5.weightBytes + 4'500'000'000LL, moduleNamed(plain, "T5").weightBytes);
  EXPECT_LT(q.plan.caching.totalBytes, plain.plan.caching.totalBytes);
  EXPECT_NE(describePlan(q).find("T5 (preset t5-xxl, bf16 + int8 Linears, 4.9 GB)"), std::string::npos)
      << describePlan(q);
  // float8_e4m3: one scale per Linear.
  c.model.qtype = "float8_e4m3";
  const PreparedRun f8 = preview(c, "4x16GB");
  EXPECT_EQ(moduleNamed(f8, "T5").weightBytes, (4762310656LL - lin.weights) * 2 + lin.weights + lin.count * 4);
}

TEST(PrepareRun, ParamCountChargesTheRealPartsScaled) {
  config::RunConfig c = fluxImagesConfig();
  c.model.placement = config::PlacementMode::ParamCount;
  const PreparedRun r = preview(c, "4x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  const int64_t parts = r.input.input.otherParamCount();
  EXPECT_EQ(parts,
            moduleNamed(r, "T5").paramCount + moduleNamed(r, "CLIP").paramCount + moduleNamed(r, "VAE").paramCount);
  EXPECT_NE(r.plan.reason.find("+ " + placement::formatParams(parts) + " in T5, CLIP and VAE x 0.3 = " +
                               placement::formatParams(static_cast<int64_t>(static_cast<double>(parts) * 0.3)) +
                               " charged to cuda:0"),
            std::string::npos)
      << r.plan.reason;
}

// adamw8bit's state is planned at two bytes a parameter plus a float32 maximum per
// block of each moment, against AdamW's two float32 moments.
TEST(PrepareRun, AdamW8bitPlansAQuarterOfTheOptimizerState) {
  config::RunConfig c = tinyConfig();
  c.network.linear = 4;
  const PreparedRun plain = preview(c, "cpu");
  c.train.optimizer = config::OptimizerType::AdamW8bit;
  const PreparedRun eight = preview(c, "cpu");
  ASSERT_TRUE(plain.ok() && eight.ok()) << errors(plain) << errors(eight);
  const int64_t a = plain.plan.devices.at(0).optimizerBytes, b = eight.plan.devices.at(0).optimizerBytes;
  const int64_t adapters = plain.plan.devices.at(0).adapterBytes;  // float32 LoRA: 4 bytes a parameter
  ASSERT_GT(a, 0);
  EXPECT_EQ(a, 2 * adapters);
  EXPECT_NEAR(static_cast<double>(b), static_cast<double>(adapters) / 4.0 * (2.0 + 8.0 / 256.0),
              64.0);  // each unit rounds down to whole bytes
  EXPECT_EQ(eight.plan.devices.at(0).adapterBytes, adapters);
}

// train.offload_optimizer_state, read by the FLUX family's planning: the card holds no
// optimizer state (only the staged chunk, inside the workspace), the plan names the host part.
TEST(PrepareRun, OffloadedOptimizerStatePlansLessOnTheCard) {
  config::RunConfig c = tinyConfig();
  c.model.device = config::ComputeDevice::Cuda;
  c.network.linear = 4;
  const PreparedRun plain = preview(c, "1x16GB");
  c.train.offloadOptimizerState = true;
  const PreparedRun off = preview(c, "1x16GB");
  ASSERT_TRUE(plain.ok() && off.ok()) << errors(plain) << errors(off);
  const auto &a = plain.plan.devices.at(0), &b = off.plan.devices.at(0);
  ASSERT_GT(a.optimizerBytes, 0);
  EXPECT_EQ(b.optimizerBytes, 0);
  EXPECT_EQ(b.hostBytes, a.optimizerBytes);
  EXPECT_LT(b.totalBytes, a.totalBytes);
  EXPECT_GE(b.totalBytes, a.totalBytes - a.optimizerBytes);  // the staged chunk is not free
  EXPECT_NE(placement::formatPlan(off.plan).find("in host memory"), std::string::npos);
}

// Issue 37: train.gradient_checkpointing and train.offload_optimizer_state: auto, chosen
// together, fastest first. FLUX.1-dev's shapes as configs/flux-dev-1gpu.yaml ships them, on one
// simulated card capped between the totals of the four plans (the reserve on top).
config::RunConfig shippedFluxDev() {
  const config::LoadedConfig loaded = config::loadRunConfig(test::sourceDir() / "configs" / "flux-dev-1gpu.yaml");
  for (const auto& p : loaded.problems) ADD_FAILURE() << p.format();
  return loaded.config;
}

config::RunConfig resolved(config::RunConfig c, bool ckpt, bool offload) {
  c.train.gradientCheckpointingAuto = false;
  c.train.gradientCheckpointing = ckpt;
  c.train.offloadOptimizerStateAuto = false;
  c.train.offloadOptimizerState = offload;
  return c;
}

int64_t plannedBytes(const config::RunConfig& c) {
  const PreparedRun r = preview(c, "1x80GB");
  EXPECT_TRUE(r.ok()) << errors(r);
  return r.ok() ? r.plan.devices.at(0).totalBytes : 0;
}

// A cap halfway between two plans' totals, so the larger does not fit and the smaller does.
std::vector<double> capBetween(const config::RunConfig& c, int64_t smaller, int64_t larger) {
  return {static_cast<double>(smaller + larger) / 2.0 / 1e9 + c.model.memoryReserveGb};
}

TEST(PrepareRun, AutoCheckpointingAndMomentsPickTheFastestPlanThatFits) {
  const config::RunConfig shipped = shippedFluxDev();
  ASSERT_TRUE(shipped.train.gradientCheckpointingAuto && shipped.train.offloadOptimizerStateAuto);
  const int64_t offCard = plannedBytes(resolved(shipped, false, false));
  const int64_t offHost = plannedBytes(resolved(shipped, false, true));
  const int64_t onCard = plannedBytes(resolved(shipped, true, false));
  const int64_t onHost = plannedBytes(resolved(shipped, true, true));
  ASSERT_GT(offCard, offHost);
  ASSERT_GT(offHost, onCard);
  ASSERT_GT(onCard, onHost);
  ASSERT_GT(onHost, 0);
  struct Case {
    std::string what;
    std::vector<double> cap;
    bool ckpt, offload, fits;
    std::string offloadNote;
  };
  const std::string host =
      "train.offload_optimizer_state: auto, in host memory: with the moments on the card "
      "the model does not fit";
  const std::vector<Case> cases = {
      {"room for all",
       {},
       false,
       false,
       true,
       "train.offload_optimizer_state: auto, on the card: the plan fits with the moments there"},
      {"only the moments in host memory", capBetween(shipped, offHost, offCard), false, true, true, host},
      {"only checkpointing", capBetween(shipped, onCard, offHost), true, false, true,
       "train.offload_optimizer_state: auto, on the card: the plan fits with the moments there"},
      {"only both", capBetween(shipped, onHost, onCard), true, true, true, host},
      {"nothing: the plan that saves the most", capBetween(shipped, 0, onHost), true, true, false, host},
  };
  for (const Case& k : cases) {
    config::RunConfig c = shipped;
    c.model.gpuMemoryLimitGb = k.cap;
    const PreparedRun r = preview(c, "1x80GB");
    ASSERT_TRUE(r.ok()) << k.what << "\n" << errors(r);
    EXPECT_EQ(r.gradientCheckpointing, k.ckpt) << k.what;
    EXPECT_EQ(r.offloadOptimizerState, k.offload) << k.what;
    EXPECT_EQ(r.plan.fits, k.fits) << k.what;
    EXPECT_EQ(r.plan.devices.at(0).optimizerBytes == 0, k.offload) << k.what;  // the plan is the chosen one's
    EXPECT_EQ(r.offloadNote.rfind(k.offloadNote, 0), 0u) << k.what << ": " << r.offloadNote;
    EXPECT_EQ(r.checkpointingNote.rfind(k.ckpt ? "train.gradient_checkpointing: auto, on: without it the model "
                                                 "does not fit"
                                               : "train.gradient_checkpointing: auto, off: the plan fits without it",
                                        0),
              0u)
        << k.what << ": " << r.checkpointingNote;
    EXPECT_NE(autoChoiceNotes(r).find(r.offloadNote), std::string::npos) << autoChoiceNotes(r);
  }
}

// A key said outright keeps its value: only the auto one varies.
TEST(PrepareRun, AFixedKeyKeepsItsValueWhileTheAutoOneVaries) {
  const config::RunConfig shipped = shippedFluxDev();
  const int64_t offCard = plannedBytes(resolved(shipped, false, false));
  const int64_t offHost = plannedBytes(resolved(shipped, false, true));
  const int64_t onCard = plannedBytes(resolved(shipped, true, false));
  config::RunConfig noCkpt = shipped;
  noCkpt.train.gradientCheckpointingAuto = false;
  noCkpt.train.gradientCheckpointing = false;
  noCkpt.model.gpuMemoryLimitGb = capBetween(shipped, offHost, offCard);
  PreparedRun r = preview(noCkpt, "1x80GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_FALSE(r.gradientCheckpointing);
  EXPECT_TRUE(r.offloadOptimizerState);
  EXPECT_TRUE(r.checkpointingNote.empty()) << r.checkpointingNote;
  noCkpt.model.gpuMemoryLimitGb = capBetween(shipped, onCard, offHost);  // refused, not switched on
  r = preview(noCkpt, "1x80GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_FALSE(r.gradientCheckpointing);
  EXPECT_TRUE(r.offloadOptimizerState);
  EXPECT_FALSE(r.plan.fits);
  // Moments said to be on the card: checkpointing goes on where they do not fit there.
  config::RunConfig onCardAlways = shipped;
  onCardAlways.train.offloadOptimizerStateAuto = false;
  onCardAlways.model.gpuMemoryLimitGb = capBetween(shipped, offHost, offCard);
  r = preview(onCardAlways, "1x80GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_TRUE(r.gradientCheckpointing);
  EXPECT_FALSE(r.offloadOptimizerState);
  EXPECT_TRUE(r.offloadNote.empty()) << r.offloadNote;
  // Moments said to be in host memory stay there on a card with room.
  config::RunConfig hostAlways = shipped;
  hostAlways.train.offloadOptimizerStateAuto = false;
  hostAlways.train.offloadOptimizerState = true;
  r = preview(hostAlways, "1x80GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_FALSE(r.gradientCheckpointing);
  EXPECT_TRUE(r.offloadOptimizerState);
}

// auto never stages what cannot be staged: adamw8bit's moments, a run on the cpu. No error,
// no warning (true gets one of each), the moments where the optimizer keeps them.
TEST(PrepareRun, AutoMomentsWithAdamw8bitOrOnTheCpuStayPut) {
  config::RunConfig eight = shippedFluxDev();
  eight.train.optimizer = config::OptimizerType::AdamW8bit;
  for (const std::vector<double>& cap : {std::vector<double>{}, std::vector<double>{12.0}}) {
    eight.model.gpuMemoryLimitGb = cap;
    const PreparedRun r = preview(eight, "1x80GB");
    ASSERT_TRUE(r.ok()) << errors(r);
    for (const auto& p : r.problems) EXPECT_NE(p.key, "train.offload_optimizer_state") << p.format();
    EXPECT_FALSE(r.offloadOptimizerState);
    EXPECT_EQ(r.offloadNote, "train.offload_optimizer_state: auto, on the card: it stages adamw's moments only");
    EXPECT_EQ(r.gradientCheckpointing, !cap.empty());
  }
  config::RunConfig cpu = tinyConfig();
  cpu.model.device = config::ComputeDevice::Cpu;
  cpu.train.offloadOptimizerStateAuto = true;
  cpu.train.gradientCheckpointingAuto = true;
  const PreparedRun r = preview(cpu, "1x16GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  for (const auto& p : r.problems) EXPECT_NE(p.key, "train.offload_optimizer_state") << p.format();
  EXPECT_FALSE(r.offloadOptimizerState);
  EXPECT_TRUE(r.offloadNote.empty()) << r.offloadNote;
  EXPECT_FALSE(r.gradientCheckpointing);
}

TEST(PrepareRun, ATextEncoderTooLargeForCachingSaysSo) {
  // T5-XXL in bf16 (9.5 GB) on 10 GB cards: the blocks split, the caching phase does not fit.
  config::RunConfig c = fluxImagesConfig();
  const PreparedRun r = preview(c, "8x10GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_FALSE(r.plan.caching.fits);
  EXPECT_FALSE(r.plan.fits);
  EXPECT_NE(describePlan(r).find("does not fit, " + formatBytes(r.plan.caching.missingBytes) + " missing."),
            std::string::npos)
      << describePlan(r);
}

TEST(PrepareRun, DatasetsWithTheirOwnEmbeddingsNeedNoEncoders) {
  for (const auto type : {config::DatasetType::Shapes, config::DatasetType::Synthetic, config::DatasetType::Latents}) {
    config::RunConfig c = fluxImagesConfig();
    c.datasets.front().type = type;
    const PreparedRun r = preview(c, "2x80GB");
    ASSERT_TRUE(r.ok()) << errors(r);
    EXPECT_TRUE(r.input.input.otherModules.empty());
    EXPECT_FALSE(r.plan.caching.needed);
    EXPECT_EQ(r.plan.devices[0].otherBytes, 0);
    EXPECT_EQ(r.otherModulesNote.rfind("No text encoders or VAE: the ", 0), 0u) << r.otherModulesNote;
  }
}

TEST(PrepareRun, TheDemoSplitOverFourSimulatedCardsLeavesNoCardUnexplained) {
  const config::LoadedConfig loaded = config::loadRunConfig(test::sourceDir() / "configs" / "demo.yaml");
  ASSERT_TRUE(loaded.ok());
  config::RunConfig c = loaded.config;
  // As the app's plan view with "4x16GB": first as the demo is (the cpu), then split.
  PreparedRun r = preview(c, "4x16GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_NE(describePlan(r).find("The run uses the cpu: model.device is cpu (the 4 GPU(s) of the device list are "
                                 "not used)."),
            std::string::npos)
      << describePlan(r);
  c.model.device = config::ComputeDevice::Auto;
  r = preview(c, "4x16GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_NE(describePlan(r).find("split_model_over_gpus is off: the model goes on cuda:0 alone"), std::string::npos);
  c.model.splitModelOverGpus = true;
  r = preview(c, "4x16GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  const std::string text = describePlan(r);
  EXPECT_EQ(text.find("5.00B"), std::string::npos) << text;
  EXPECT_EQ(text.find("0.00B"), std::string::npos) << text;
  EXPECT_NE(text.find("no other modules"), std::string::npos) << text;
  EXPECT_NE(text.find("No text encoders or VAE: the shapes dataset"), std::string::npos) << text;
  // Every card without blocks before a card with blocks is named in the text.
  size_t last = 0;
  for (size_t d = 0; d < r.plan.devices.size(); ++d)
    if (!r.plan.devices[d].blockIds.empty()) last = d;
  EXPECT_EQ(last, 3u);
  for (size_t d = 0; d < last; ++d)
    if (r.plan.devices[d].blockIds.empty())
      EXPECT_NE(text.find(r.plan.devices[d].device + " get"), std::string::npos) << text;
}

TEST(PrepareRun, SizesComeFromThePipelinesOwnFiles) {
  const auto fixtures = test::fixturesOfKind("flux_pipeline");
  ASSERT_FALSE(fixtures.empty()) << "no flux_pipeline fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    config::RunConfig c = fluxImagesConfig();
    c.model.randomWeights = false;
    c.model.preset = "";
    c.model.nameOrPath = (dir / "model").string();
    c.model.splitModelOverGpus = false;
    const PreparedRun r = preview(c, "1x16GB");
    ASSERT_TRUE(r.ok()) << errors(r);
    const auto t5 = t5::T5Config::fromTransformersJsonFile(dir / "model" / "text_encoder_2" / "config.json");
    const auto cl = clip::ClipTextConfig::fromTransformersJsonFile(dir / "model" / "text_encoder" / "config.json");
    const auto va = vae::VaeConfig::fromDiffusersJsonFile(dir / "model" / "vae" / "config.json");
    EXPECT_EQ(moduleNamed(r, "T5").paramCount, t5::t5ParamPlan(t5).totalParams());
    EXPECT_EQ(moduleNamed(r, "CLIP").paramCount, clip::clipParamPlan(cl).totalParams());
    EXPECT_EQ(moduleNamed(r, "VAE").paramCount, vae::vaeParamCount(va));
    EXPECT_NE(r.otherModulesNote.find("config.json of " + (dir / "model" / "text_encoder_2").string()),
              std::string::npos)
        << r.otherModulesNote;

    // The single files (ComfyUI layout): the same parts from their headers. What no
    // tensor says (CLIP's head count when the width is no multiple of 64) stops the
    // plan with the loader's own words, as it would stop the run.
    c.model.nameOrPath = (dir / "singles" / "flux1.safetensors").string();
    c.model.t5Path = (dir / "singles" / "t5xxl.safetensors").string();
    c.model.clipPath = (dir / "singles" / "clip_l.safetensors").string();
    c.model.vaePath = (dir / "singles" / "ae.safetensors").string();
    c.model.tokenizerPath = (dir / "model").string();
    const PreparedRun s = preview(c, "1x16GB");
    if (cl.hiddenSize % 64 == 0 && va.normNumGroups == 32) {
      ASSERT_TRUE(s.ok()) << errors(s);
      EXPECT_EQ(moduleNamed(s, "T5").paramCount, t5::t5ParamPlan(t5).totalParams());
      EXPECT_EQ(moduleNamed(s, "CLIP").paramCount, clip::clipParamPlan(cl).totalParams());
      EXPECT_EQ(moduleNamed(s, "VAE").paramCount, vae::vaeParamCount(va));
      EXPECT_NE(s.otherModulesNote.find("shapes of " + c.model.t5Path + " (headers only)"), std::string::npos)
          << s.otherModulesNote;
    } else {
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.problems.back().key, "model.name_or_path");
      EXPECT_NE(s.problems.back().message.find("singles/"), std::string::npos) << s.problems.back().message;
    }

    // A path that is not on this machine (a preview for another one): the preset, said so.
    c.model.nameOrPath = (dir / "model").string();
    c.model.clipPath = c.model.vaePath = c.model.tokenizerPath = "";
    c.model.t5Path = "/nowhere/t5xxl_fp16.safetensors";
    const PreparedRun m = preview(c, "1x16GB");
    ASSERT_TRUE(m.ok()) << errors(m);
    EXPECT_EQ(moduleNamed(m, "T5").paramCount, 4762310656LL);
    EXPECT_NE(m.otherModulesNote.find("preset t5-xxl (/nowhere/t5xxl_fp16.safetensors not found here)"),
              std::string::npos)
        << m.otherModulesNote;
  }
}

TEST(DeviceSelection, ReadsARequestOnce) {
  const auto inv = device::parseDeviceSpec("cpu:32GB,2x16GB");
  device::DeviceRequest r;
  r.kind = device::ComputeKind::Auto;
  auto s = device::selectDevices(r, inv);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s.devices.size(), 1u);  // no split: the first GPU
  EXPECT_EQ(s.devices[0].label(), "cuda:0");
  r.split = true;
  s = device::selectDevices(r, inv);
  ASSERT_EQ(s.devices.size(), 3u);  // every GPU, then the cpu
  EXPECT_TRUE(s.devices[2].isCpu());
  r.kind = device::ComputeKind::Cuda;
  s = device::selectDevices(r, {});
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].issue, device::SelectionIssue::NoCuda);
  r.kind = device::ComputeKind::Auto;
  s = device::selectDevices(r, device::parseDeviceSpec("16GB"));
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].issue, device::SelectionIssue::TooFewForSplit);
  r.split = false;
  s = device::selectDevices(r, {});  // auto without a GPU: this host
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s.devices[0].isCpu());
  EXPECT_FALSE(s.devices[0].simulated);
}

TEST(DeviceSelection, CapsAreOneForAllOrOnePerGpu) {
  const auto devs = device::parseDeviceSpec("2x16GB,cpu");
  EXPECT_EQ(device::resolveCaps(devs, {}).capBytes, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(device::resolveCaps(devs, {8}).capBytes, (std::vector<int64_t>{8 * kGB, 8 * kGB, 0}));
  EXPECT_EQ(device::resolveCaps(devs, {8, 12}).capBytes, (std::vector<int64_t>{8 * kGB, 12 * kGB, 0}));
  EXPECT_NE(device::resolveCaps(devs, {8, 12, 4}).problem.find("3 caps for 2 devices"), std::string::npos);
  auto real = devs;
  for (auto& d : real) d.simulated = false;
  EXPECT_NE(device::resolveCaps(real, {20}).problem.find("exceeds its memory"), std::string::npos);
  EXPECT_TRUE(device::resolveCaps(devs, {20}).ok());  // simulated: the card is the limit
}

}  // namespace
}  // namespace strata::train
