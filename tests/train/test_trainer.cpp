// The Trainer end to end on CPU with the tiny FLUX-architecture model: the demo
// (loss falls, samples and a LoRA that loads back), resume equals straight,
// stop/pause, NaN loss, unreadable items, preflight problems.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <thread>

#include "config/RunConfigYaml.h"
#include "events/EventBus.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLoraRules.h"
#include "common/TestSupport.h"
#include "common/TrainTestSupport.h"
#include "train/Datasets.h"
#include "train/RunFolder.h"
#include "io/Image.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

config::RunConfig tinyConfig(const fs::path& folder, int64_t steps) {
  auto c = test::tinyCpuRun("tiny", folder, steps);
  c.train.gradientCheckpointing = true;
  c.train.captionDropoutRate = 0.2;
  c.train.seed = 5;
  c.datasets = {test::shapesDataset(16, 8)};
  c.save.saveEvery = 5;
  return c;
}

std::map<std::string, at::Tensor> loraOf(const fs::path& ckpt) {
  return io::loadSafetensors(ckpt / "lora.safetensors");
}

// `count` latents items (16 channels, 4x4; 3 text tokens of 64, pooled 32): item0.safetensors ...
fs::path writeLatentsFolder(const fs::path& folder, int count) {
  fs::create_directories(folder);
  for (int i = 0; i < count; ++i)
    io::writeSafetensors(
        folder / ("item" + std::to_string(i) + ".safetensors"),
        {{"latents", at::randn({16, 4, 4})}, {"txt", at::randn({3, 64})}, {"pooled", at::randn({32})}});
  return folder;
}

}  // namespace

TEST(Trainer, ResumeContinuesTheSameCurve) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 20);
  cfg.train.ema.useEma = true;
  cfg.train.ema.emaDecay = 0.9;
  cfg.train.lrScheduler = config::LrScheduler::Cosine;
  cfg.train.lrWarmupSteps = 3;
  cfg.train.gradientAccumulationSteps = 2;

  events::EventBus busA;
  TrainerOptions a;
  a.runDir = tmp / "straight";
  ASSERT_EQ(Trainer(cfg, busA, a).run(), RunOutcome::Finished);

  events::EventBus busB;
  test::EventRecorder rec;
  auto sub = busB.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions b;
  b.runDir = tmp / "split";
  b.stopAfterStep = 10;
  ASSERT_EQ(Trainer(cfg, busB, b).run(), RunOutcome::Stopped);
  ASSERT_EQ(rec.of<events::StoppedEvent>().size(), 1u);
  EXPECT_EQ(rec.of<events::StoppedEvent>()[0].step, 10);
  auto resumed = Trainer::resumeFrom(tmp / "split", busB);
  ASSERT_EQ(resumed->run(), RunOutcome::Finished);

  RunFolder fa(tmp / "straight"), fb(tmp / "split");
  ASSERT_EQ(fa.latestCheckpoint()->step, 20);
  ASSERT_EQ(fb.latestCheckpoint()->step, 20);
  const auto la = loraOf(fa.latestCheckpoint()->path), lb = loraOf(fb.latestCheckpoint()->path);
  ASSERT_EQ(la.size(), lb.size());
  double moved = 0;
  for (const auto& [k, t] : la) {
    EXPECT_TRUE(test::allClose(lb.at(k), t, 1e-6, 1e-5)) << k;
    if (k.find("lora_B") != std::string::npos) moved += t.abs().sum().item<double>();
  }
  EXPECT_GT(moved, 0.0);  // the LoRA did train
  const auto ea = io::loadSafetensors(fa.latestCheckpoint()->path / "ema.safetensors");
  const auto eb = io::loadSafetensors(fb.latestCheckpoint()->path / "ema.safetensors");
  for (const auto& [k, t] : ea) EXPECT_TRUE(test::allClose(eb.at(k), t, 1e-6, 1e-5)) << k;
  // The metrics log has one line per step, and the same losses.
  const auto ma = fa.readMetrics(), mb = fb.readMetrics();
  ASSERT_EQ(ma.size(), 20u);
  ASSERT_EQ(mb.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>(), 1e-5) << i;
}

// train.offload_optimizer_state: a run saved with it resumes without it and the other
// way round, as a run that never stopped. On the CPU the state is in host memory either
// way, so this is the config, checkpoint and placement path; tests/gpu has the card's.
TEST(Trainer, OffloadedOptimizerStateResumesAcrossTheSetting) {
  test::TempDir tmp;
  const auto cfg = tinyConfig(tmp.path(), 10);
  events::EventBus busA;
  TrainerOptions a;
  a.runDir = tmp / "straight";
  ASSERT_EQ(Trainer(cfg, busA, a).run(), RunOutcome::Finished);
  const auto straight = RunFolder(tmp / "straight").latestCheckpoint()->path;
  const auto optA = io::loadSafetensors(straight / "optimizer.safetensors");
  const auto loraA = loraOf(straight);
  for (const bool savedWithOffload : {true, false}) {
    SCOPED_TRACE(savedWithOffload ? "saved with offload, resumed without" : "saved without, resumed with");
    const auto dir = tmp / (savedWithOffload ? "from_offload" : "to_offload");
    auto first = cfg, second = cfg;
    first.train.offloadOptimizerState = savedWithOffload;
    second.train.offloadOptimizerState = !savedWithOffload;
    events::EventBus bus;
    test::EventRecorder rec;
    auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
    TrainerOptions b;
    b.runDir = dir;
    b.stopAfterStep = 5;
    ASSERT_EQ(Trainer(first, bus, b).run(), RunOutcome::Stopped) << rec.failures();
    TrainerOptions r;
    r.runDir = dir;
    r.resume = true;
    ASSERT_EQ(Trainer(second, bus, r).run(), RunOutcome::Finished) << rec.failures();
    // The first run: before step 1 and after it (the optimizer state step 1 made); the
    // resumed one loads that state before its audit, so it has one.
    const auto placements = rec.of<events::PlacementEvent>();
    ASSERT_EQ(placements.size(), 3u);
    EXPECT_GT(placements[1].checkedTensors, placements[0].checkedTensors);
    EXPECT_EQ(placements[2].checkedTensors, placements[1].checkedTensors);
    EXPECT_EQ(placements[0].afterStep, 0);
    EXPECT_EQ(placements[1].afterStep, 1);
    EXPECT_EQ(placements[2].afterStep, 0);
    for (const auto& pe : placements) EXPECT_TRUE(pe.audit.empty());
    const auto ckpt = RunFolder(dir).latestCheckpoint();
    ASSERT_EQ(ckpt->step, 10);
    const auto optB = io::loadSafetensors(ckpt->path / "optimizer.safetensors");
    ASSERT_EQ(optB.size(), optA.size());
    for (const auto& [k, t] : optA) {
      ASSERT_TRUE(optB.count(k)) << k;
      EXPECT_TRUE(test::allClose(optB.at(k), t, 1e-6, 1e-5)) << k;
    }
    const auto loraB = loraOf(ckpt->path);
    for (const auto& [k, t] : loraA) EXPECT_TRUE(test::allClose(loraB.at(k), t, 1e-6, 1e-5)) << k;
  }
}

// network.dtype bf16 beside a bf16 base: the LoRA, its gradients and AdamW moments are
// bfloat16 (half their memory), the EMA shadows float32; the run trains, a run
// stopped and resumed ends where the straight one does, and one resumed with float32
// weights reads its bf16 checkpoint into them.
TEST(Trainer, BfloatLoraTrainsAndResumesWithBfloatMomentsAndFloatEmaShadows) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 10);
  cfg.train.dtype = config::DType::BF16;
  cfg.network.dtype = config::DType::BF16;
  cfg.train.ema.useEma = true;
  cfg.train.ema.emaDecay = 0.9;
  events::EventBus busA;
  test::EventRecorder recA;
  auto subA = busA.subscribe([&](const events::Event& e) { recA(e); });
  TrainerOptions a;
  a.runDir = tmp / "straight";
  ASSERT_EQ(Trainer(cfg, busA, a).run(), RunOutcome::Finished) << recA.failures();
  const auto started = recA.of<events::StartedEvent>();
  ASSERT_FALSE(started.empty());
  EXPECT_NE(started[0].setup.find("LoRA bfloat16"), std::string::npos) << started[0].setup;

  events::EventBus busB;
  TrainerOptions b;
  b.runDir = tmp / "split";
  b.stopAfterStep = 5;
  ASSERT_EQ(Trainer(cfg, busB, b).run(), RunOutcome::Stopped);
  ASSERT_EQ(Trainer::resumeFrom(tmp / "split", busB)->run(), RunOutcome::Finished);

  const auto ca = RunFolder(tmp / "straight").latestCheckpoint(), cb = RunFolder(tmp / "split").latestCheckpoint();
  ASSERT_EQ(ca->step, 10);
  ASSERT_EQ(cb->step, 10);
  const auto la = loraOf(ca->path), lb = loraOf(cb->path);
  ASSERT_EQ(la.size(), lb.size());
  double moved = 0;
  for (const auto& [k, t] : la) {
    EXPECT_TRUE(test::allClose(lb.at(k), t, 0, 0)) << k;
    if (k.find("lora_B") != std::string::npos) moved += t.to(at::kFloat).abs().sum().item<double>();
  }
  EXPECT_GT(moved, 0.0);
  const auto moments = io::loadSafetensors(ca->path / "optimizer.safetensors");
  size_t bf16Moments = 0;
  for (const auto& [k, t] : moments)
    if (k.find(".exp_avg") != std::string::npos) {
      EXPECT_EQ(t.scalar_type(), at::kBFloat16) << k;
      ++bf16Moments;
    }
  EXPECT_EQ(bf16Moments, la.size() * 2);  // exp_avg and exp_avg_sq of each weight
  for (const auto& [k, t] : io::loadSafetensors(ca->path / "ema.safetensors"))
    EXPECT_EQ(t.scalar_type(), at::kFloat) << k;
  for (const auto& m : RunFolder(tmp / "straight").readMetrics()) EXPECT_TRUE(std::isfinite(m["loss"].get<double>()));

  // The stopped run resumed with float32 weights: its bf16 checkpoint reads into them.
  auto fp32 = cfg;
  fp32.network.dtype = config::DType::FP32;
  events::EventBus busC;
  test::EventRecorder recC;
  auto subC = busC.subscribe([&](const events::Event& e) { recC(e); });
  TrainerOptions b2;
  b2.runDir = tmp / "switched";
  b2.stopAfterStep = 5;
  ASSERT_EQ(Trainer(cfg, busC, b2).run(), RunOutcome::Stopped) << recC.failures();
  TrainerOptions r;
  r.runDir = tmp / "switched";
  r.resume = true;
  ASSERT_EQ(Trainer(fp32, busC, r).run(), RunOutcome::Finished) << recC.failures();
  const auto switched = RunFolder(tmp / "switched").latestCheckpoint();
  ASSERT_EQ(switched->step, 10);
  for (const auto& [k, t] : loraOf(switched->path)) EXPECT_EQ(t.scalar_type(), at::kFloat) << k;
  for (const auto& [k, t] : io::loadSafetensors(switched->path / "optimizer.safetensors"))
    if (k.find(".exp_avg") != std::string::npos) EXPECT_EQ(t.scalar_type(), at::kFloat) << k;
}

// A step's loss is read once the next step is queued (Trainer::settleReport): a NaN
// still stops the run naming its own step, before a checkpoint of it or any step after
// it is told, whether checkpoints come every step or only at the end.
TEST(Trainer, NanLossStopsNamingTheStepAndKeepsTheLastCheckpoint) {
  for (const int64_t saveEvery : {1, 100}) {
    SCOPED_TRACE("save_every " + std::to_string(saveEvery));
    test::TempDir tmp;
    const auto data = tmp / "latents";
    fs::create_directories(data);
    for (int i = 0; i < 4; ++i) {
      auto lat = at::randn({16, 4, 4});
      if (i == 3) lat[0][0][0] = NAN;
      io::writeSafetensors(data / ("item" + std::to_string(i) + ".safetensors"),
                           {{"latents", lat}, {"txt", at::randn({3, 64})}, {"pooled", at::randn({32})}});
    }
    auto cfg = tinyConfig(tmp.path(), 12);
    cfg.datasets[0].type = config::DatasetType::Latents;
    cfg.datasets[0].folderPath = data.string();
    cfg.datasets[0].numItems = config::DatasetConfig{}.numItems;  // a latents dataset refuses num_items
    cfg.save.saveEvery = saveEvery;
    events::EventBus bus;
    test::EventRecorder rec;
    auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
    TrainerOptions o;
    o.runDir = tmp / "run";
    ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Failed);
    const auto failed = rec.of<events::FailedEvent>();
    ASSERT_EQ(failed.size(), 1u);
    const int64_t step = failed[0].step;
    EXPECT_NE(failed[0].message.find("NaN at step " + std::to_string(step)), std::string::npos) << failed[0].message;
    RunFolder f(tmp / "run");
    // Every step before it told, in order, and none from it on.
    const auto metrics = f.readMetrics();
    ASSERT_EQ(static_cast<int64_t>(metrics.size()), step - 1);
    for (size_t i = 0; i < metrics.size(); ++i) EXPECT_EQ(metrics[i]["step"].get<int64_t>(), int64_t(i) + 1);
    const auto steps = rec.of<events::StepEvent>();
    ASSERT_EQ(static_cast<int64_t>(steps.size()), step - 1);
    if (saveEvery == 1 && step > 1) {
      ASSERT_TRUE(f.latestCheckpoint());
      EXPECT_EQ(f.latestCheckpoint()->step, step - 1);
      EXPECT_EQ(failed[0].lastGoodCheckpoint, f.latestCheckpoint()->path.string());
    } else if (saveEvery == 100) {
      EXPECT_FALSE(f.latestCheckpoint()) << "no checkpoint before the end";
      EXPECT_EQ(failed[0].lastGoodCheckpoint, "");
    }
  }
}

// A failed CUDA run with cuDNN attention allowed (auto, the default, or cudnn) is told to try flash
// when its message points at cuDNN, a fault or non-finite values; not otherwise, not
// on the CPU, not with flash and not for Llama (which runs flash).
TEST(Trainer, FailureMessagesPointAtFlashWhenCudnnMayBeTheCause) {
  config::RunConfig cfg;
  ASSERT_EQ(cfg.model.attentionBackend, config::AttentionBackend::Auto);
  auto cudnn = cfg;
  cudnn.model.attentionBackend = config::AttentionBackend::Cudnn;
  const std::string cudnnError = "Expected mha_graph.execute(handle, variant_pack, workspace_ptr).is_good() to be true";
  EXPECT_NE(
      attentionBackendHint(cudnnError, cfg, true).find("cuDNN's attention failed (model.attention_backend: auto)"),
      std::string::npos);
  EXPECT_NE(attentionBackendHint(cudnnError, cudnn, true).find("(model.attention_backend: cudnn)"), std::string::npos);
  // Hedged where the message could have another cause.
  for (const std::string what : {"CUDA error: an illegal memory access was encountered",
                                 "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED (convolution)"})
    EXPECT_NE(attentionBackendHint(what, cfg, true).find("this may be cuDNN's attention"), std::string::npos) << what;
  for (const std::string what : {"gradient norm is not finite at step 3", "loss is NaN at step 3"})
    EXPECT_NE(attentionBackendHint(what, cfg, true).find("if the learning rate and the data are not the cause"),
              std::string::npos)
        << what;
  EXPECT_EQ(attentionBackendHint("maintenance: disk full while writing", cfg, true), "");
  EXPECT_EQ(attentionBackendHint(cudnnError, cfg, false), "");  // a CPU run
  auto flash = cfg;
  flash.model.attentionBackend = config::AttentionBackend::Flash;
  EXPECT_EQ(attentionBackendHint(cudnnError, flash, true), "");
  auto llama = cfg;
  llama.model.arch = std::string("llama");
  EXPECT_EQ(attentionBackendHint(cudnnError, llama, true), "");
}

// The run header's one line on how the base is held: each setting that changes
// what runs is named, and what does not apply (cuDNN on a CPU run) is not claimed.
TEST(Trainer, RunSetupSaysHowTheBaseIsHeld) {
  config::RunConfig cfg;
  cfg.train.dtype = config::DType::BF16;
  cfg.train.gradientCheckpointing = true;
  const std::string plain = describeRunSetup(cfg, true, false);
  EXPECT_EQ(plain.rfind("base bf16; LoRA float32", 0), 0u) << plain;
  auto bf16Lora = cfg;
  bf16Lora.network.dtype = config::DType::BF16;
  EXPECT_EQ(describeRunSetup(bf16Lora, true, false).rfind("base bf16; LoRA bfloat16;", 0), 0u);
  EXPECT_NE(plain.find("attention: per shape, the faster of cuDNN and flash"), std::string::npos) << plain;
  auto cudnn = cfg;
  cudnn.model.attentionBackend = config::AttentionBackend::Cudnn;
  EXPECT_NE(describeRunSetup(cudnn, true, false).find("attention: cuDNN where LibTorch picks it"), std::string::npos);
  EXPECT_NE(plain.find("eager steps"), std::string::npos) << plain;
  EXPECT_NE(plain.find("; gradient checkpointing"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("quantized"), std::string::npos) << plain;

  auto q = cfg;
  q.model.quantize = true;
  q.model.qtype = "int8";
  q.model.attentionBackend = config::AttentionBackend::Flash;
  q.train.gradientCheckpointing = false;
  q.train.offloadOptimizerState = true;
  const std::string int8 = describeRunSetup(q, true, true);
  EXPECT_NE(int8.find("base bf16, quantized int8;"), std::string::npos) << int8;
  EXPECT_NE(int8.find("attention: flash (cuDNN off)"), std::string::npos) << int8;
  EXPECT_NE(int8.find("the step as a CUDA graph"), std::string::npos) << int8;
  EXPECT_NE(int8.find("no gradient checkpointing"), std::string::npos) << int8;
  EXPECT_NE(int8.find("AdamW moments in host memory"), std::string::npos) << int8;
  EXPECT_EQ(int8.find("fp8 matmuls"), std::string::npos) << int8;  // int8 has none

  auto fp8 = q;
  fp8.model.qtype = "float8_e4m3";
  fp8.model.fp8Matmul = true;
  EXPECT_NE(describeRunSetup(fp8, true, false).find("quantized float8_e4m3 with fp8 matmuls (forward)"),
            std::string::npos);
  // On the CPU: no cuDNN, no fp8 matmul is claimed.
  const std::string cpu = describeRunSetup(fp8, false, false);
  EXPECT_NE(cpu.find("on the CPU"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find("fp8 matmuls"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find("cuDNN"), std::string::npos) << cpu;
}

TEST(Trainer, UnreadableItemsAreSkippedCountedAndReported) {
  test::TempDir tmp;
  const auto data = writeLatentsFolder(tmp / "latents", 3);
  std::ofstream(data / "broken.safetensors") << "garbage";
  auto cfg = tinyConfig(tmp.path(), 6);
  cfg.datasets[0].type = config::DatasetType::Latents;
  cfg.datasets[0].folderPath = data.string();
  cfg.datasets[0].numItems = config::DatasetConfig{}.numItems;  // a latents dataset refuses num_items
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp / "run";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished);
  const auto fin = rec.of<events::FinishedEvent>();
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_GE(fin[0].skippedItems, 1);
  bool warned = false;
  for (const auto& w : rec.of<events::WarningEvent>())
    warned |= w.message.find("broken.safetensors") != std::string::npos;
  EXPECT_TRUE(warned);
}

// makeDatasets' datasets read the hinted next item on another thread: the items are the
// ones a plain read gives, whatever was hinted; a hinted item that cannot be read throws
// from item() as the read would; a pending read is waited for on destruction.
TEST(Trainer, DatasetsReadAheadGiveTheItemsAPlainReadGives) {
  test::TempDir tmp;
  const auto data = writeLatentsFolder(tmp / "latents", 4);
  config::DatasetConfig d;
  d.type = config::DatasetType::Latents;
  d.folderPath = data.string();
  DatasetContext ctx;
  ctx.textTokens = 3;
  ctx.textDim = 64;
  ctx.pooledDim = 32;
  const auto plain = makeDataset(d, ctx, 0);
  const auto ahead = makeDatasets({d}, ctx);
  ASSERT_EQ(ahead->size(), 4u);
  auto same = [&](size_t i) {
    const TrainItem a = ahead->item(i), p = plain->item(i);
    return a.latents.equal(p.latents) && a.txt.equal(p.txt) && a.pooled.equal(p.pooled) && a.caption == p.caption;
  };
  ahead->readAhead(2);
  EXPECT_TRUE(same(2));  // the hinted item
  ahead->readAhead(1);
  EXPECT_TRUE(same(3));  // another than hinted
  ahead->readAhead(0);
  ahead->readAhead(0);  // hinted twice
  EXPECT_TRUE(same(0));
  EXPECT_TRUE(same(1));  // nothing hinted
  // An item that breaks after the scan: hinted, it throws from item() naming the file.
  std::ofstream(data / "item3.safetensors", std::ios::trunc) << "garbage";
  ahead->readAhead(3);
  try {
    ahead->item(3);
    ADD_FAILURE() << "a broken hinted item was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("item3.safetensors"), std::string::npos) << e.what();
  }
  ahead->readAhead(1);  // left pending: the destructor waits for it
}

TEST(Trainer, PreflightListsEveryProblem) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 0);
  cfg.network.linear = 0;
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  ASSERT_EQ(Trainer(cfg, bus).run(), RunOutcome::PreflightFailed);
  const auto pf = rec.of<events::PreflightFailedEvent>();
  ASSERT_EQ(pf.size(), 1u);
  EXPECT_GE(pf[0].problems.size(), 2u);
  EXPECT_EQ(exitCodeOf(RunOutcome::PreflightFailed), 2);
}

TEST(Trainer, StopFromAnotherThreadKeepsACheckpoint) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 100000);
  cfg.save.saveEvery = 0;
  events::EventBus bus;
  TrainerOptions o;
  o.runDir = tmp / "run";
  Trainer t(cfg, bus, o);
  std::atomic<int> steps{0};
  std::atomic<bool> sawPause{false};
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (std::holds_alternative<events::StepEvent>(e)) ++steps;
    if (std::holds_alternative<events::PausedEvent>(e)) sawPause = true;
  });
  t.start();
  while (steps < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  t.setPaused(true);
  while (!sawPause) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int atPause = steps.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(steps.load(), atPause);  // paused: no steps
  t.requestSave();
  t.requestStop();
  EXPECT_EQ(t.wait(), RunOutcome::Stopped);
  RunFolder f(tmp / "run");
  ASSERT_TRUE(f.latestCheckpoint());
  EXPECT_EQ(f.latestCheckpoint()->step, t.currentStep());
  EXPECT_FALSE(t.running());
}

// train.cuda_graph where no graph can be recorded (a CPU run): true says so once, auto
// (the default) says nothing, and both train exactly as false does.
TEST(Trainer, CudaGraphOnTheCpuSaysSoOnceAndTrainsAsWithout) {
  test::TempDir tmp;
  struct Seen {
    std::vector<double> losses;
    std::vector<std::string> warnings;
    std::vector<events::StartedEvent> started;
  };
  auto runWith = [&](config::CudaGraphMode mode) {
    const std::string name = config::enumName(mode);
    auto cfg = tinyConfig(tmp / name, 4);
    cfg.train.gradientCheckpointing = true;
    cfg.train.cudaGraph = mode;
    events::EventBus bus;
    test::EventRecorder rec;
    auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
    Trainer t(cfg, bus);
    EXPECT_EQ(t.run(), RunOutcome::Finished) << rec.text();
    Seen seen;
    for (const auto& s : rec.of<events::StepEvent>()) {
      EXPECT_FALSE(s.graphReplayed);
      seen.losses.push_back(s.loss);
    }
    for (const auto& w : rec.of<events::WarningEvent>())
      if (w.message.find("cuda_graph") != std::string::npos) seen.warnings.push_back(w.message);
    seen.started = rec.of<events::StartedEvent>();
    return seen;
  };
  const Seen off = runWith(config::CudaGraphMode::Off);
  const Seen on = runWith(config::CudaGraphMode::On);
  const Seen automatic = runWith(config::CudaGraphMode::Auto);
  EXPECT_TRUE(off.warnings.empty());
  ASSERT_EQ(on.warnings.size(), 1u) << "said once";
  // The validator's words (model.device: cpu), or the trainer's where the validator did not say it.
  EXPECT_TRUE(on.warnings.front().find("on the CPU") != std::string::npos ||
              on.warnings.front().find("not on a CUDA card") != std::string::npos)
      << on.warnings.front();
  EXPECT_TRUE(automatic.warnings.empty()) << automatic.warnings.front();
  for (const Seen* s : {&off, &on, &automatic}) {
    ASSERT_EQ(s->started.size(), 1u);
    EXPECT_EQ(s->started.front().graphOff, "");
    EXPECT_NE(s->started.front().setup.find("; eager steps"), std::string::npos) << s->started.front().setup;
  }
  EXPECT_EQ(on.losses, off.losses);
  EXPECT_EQ(automatic.losses, off.losses);
}

namespace {

config::RunConfig graphConfig(config::CudaGraphMode mode) {
  config::RunConfig c;
  c.train.cudaGraph = mode;
  c.train.gradientCheckpointing = true;
  return c;
}

StepGraphSituation oneCard() {
  StepGraphSituation s;
  s.cudaBuild = true;
  s.devices = {c10::Device(c10::kCUDA, 0)};
  return s;
}

}  // namespace

// decideStepGraph, case by case: auto records where the graph applies and says why not
// where it does not (in the run's setup line; nothing on a CPU run), true warns where it
// cannot apply, false never records.
TEST(StepGraphDecision, AutoGraphsWhereItAppliesAndSaysWhyNotElsewhere) {
  using Mode = config::CudaGraphMode;
  using Say = StepGraphDecision::Say;
  auto decide = [](const config::RunConfig& c, const StepGraphSituation& s) { return decideStepGraph(c, s); };
  // Checkpointing without dropout, accumulation: recorded.
  auto ckpt = graphConfig(Mode::Auto);
  EXPECT_TRUE(decide(ckpt, oneCard()).record);
  EXPECT_EQ(decide(ckpt, oneCard()).say, Say::Nothing);
  auto accumulated = graphConfig(Mode::Auto);
  accumulated.train.gradientAccumulationSteps = 4;
  EXPECT_TRUE(decide(accumulated, oneCard()).record);
  // Checkpointing with dropout: off, with the reason in the setup line; true warns.
  auto dropout = graphConfig(Mode::Auto);
  dropout.network.dropout = 0.1;
  auto d = decide(dropout, oneCard());
  EXPECT_FALSE(d.record);
  EXPECT_EQ(d.say, Say::SetupLine);
  EXPECT_NE(d.why.find("network.dropout 0.1"), std::string::npos) << d.why;
  dropout.train.cudaGraph = Mode::On;
  EXPECT_EQ(decide(dropout, oneCard()).say, Say::Warning);
  dropout.train.gradientCheckpointing = false;  // dropout alone draws on the card: replayed
  EXPECT_TRUE(decide(dropout, oneCard()).record);
  // Checkpoint offload: recorded (its host copies go to slots the runner keeps).
  auto offload = graphConfig(Mode::Auto);
  offload.train.offloadCheckpoints = true;
  EXPECT_TRUE(decide(offload, oneCard()).record);
  // fp16: off.
  auto fp16 = graphConfig(Mode::Auto);
  fp16.train.dtype = config::DType::FP16;
  d = decide(fp16, oneCard());
  EXPECT_FALSE(d.record);
  EXPECT_NE(d.why.find("fp16"), std::string::npos) << d.why;
  // A split over two cards: off, said; a data-parallel rank has one card.
  auto split = oneCard();
  split.devices.push_back(c10::Device(c10::kCUDA, 1));
  d = decide(ckpt, split);
  EXPECT_FALSE(d.record);
  EXPECT_EQ(d.say, Say::SetupLine);
  EXPECT_NE(d.why.find("split over 2 devices"), std::string::npos) << d.why;
  // The CPU, a build without CUDA: off without a word; true warns.
  StepGraphSituation cpu;
  cpu.cudaBuild = true;
  cpu.devices = {c10::Device(c10::kCPU)};
  d = decide(ckpt, cpu);
  EXPECT_FALSE(d.record);
  EXPECT_EQ(d.say, Say::Nothing);
  auto noCuda = oneCard();
  noCuda.cudaBuild = false;
  EXPECT_EQ(decide(ckpt, noCuda).say, Say::Nothing);
  EXPECT_FALSE(decide(ckpt, noCuda).record);
  EXPECT_EQ(decide(graphConfig(Mode::On), cpu).say, Say::Warning);
  // Micro-batches that change shape: auto stays off; true records (and drops the graph
  // at the first other shape).
  auto buckets = oneCard();
  buckets.shapeChange = "the datasets' items may differ in shape";
  d = decide(ckpt, buckets);
  EXPECT_FALSE(d.record);
  EXPECT_NE(d.why.find("may differ in shape"), std::string::npos) << d.why;
  EXPECT_TRUE(decide(graphConfig(Mode::On), buckets).record);
  // false: never, and silent.
  d = decide(graphConfig(Mode::Off), oneCard());
  EXPECT_FALSE(d.record);
  EXPECT_EQ(d.say, Say::Nothing);
  EXPECT_EQ(d.why, "");
}

// The run's setup line names why auto left the graph off, once.
TEST(StepGraphDecision, TheSetupLineSaysWhyTheGraphIsOff) {
  config::RunConfig c;
  const std::string why = "the datasets' items may differ in shape";
  const std::string line = describeRunSetup(c, true, false, why);
  EXPECT_NE(line.find("eager steps (no CUDA graph: " + why + ")"), std::string::npos) << line;
  EXPECT_EQ(line.find(why), line.rfind(why));
  EXPECT_EQ(describeRunSetup(c, true, false).find("no CUDA graph"), std::string::npos);
  EXPECT_NE(describeRunSetup(c, true, true).find("the step as a CUDA graph"), std::string::npos);
}

// skipSaves (strata-train bench): a finished run and a stopped one write no
// checkpoint and no export, and make no checkpoints/ or exports/ folder.
TEST(Trainer, SkipSavesWritesNoCheckpointOrExport) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 3);
  cfg.save.saveEvery = 1;  // would save every step
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp / "run";
  o.skipSaves = true;
  Trainer t(cfg, bus, o);
  ASSERT_EQ(t.run(), RunOutcome::Finished) << rec.text();
  const RunFolder f(tmp / "run");
  EXPECT_TRUE(fs::exists(f.metricsPath()));
  EXPECT_FALSE(fs::exists(f.checkpointsDir()));
  EXPECT_FALSE(fs::exists(f.exportsDir()));
  EXPECT_TRUE(rec.of<events::CheckpointEvent>().empty());
  EXPECT_TRUE(rec.of<events::ExportEvent>().empty());

  Trainer stopped(tinyConfig(tmp.path(), 100000), bus, [&] {
    TrainerOptions s = o;
    s.runDir = tmp / "stopped";
    s.stopAfterStep = 2;
    return s;
  }());
  EXPECT_EQ(stopped.run(), RunOutcome::Stopped) << rec.text();
  EXPECT_FALSE(fs::exists(RunFolder(tmp / "stopped").checkpointsDir()));
}

// Mean brightness (0..1) of a sample PNG.
double meanBrightness(const fs::path& png) {
  return io::readImage(png).pixels.to(at::kFloat).mean().item<double>() / 255.0;
}

// The demo config as shipped (about 2.5 minutes on two cores): the CI check of
// the README's demo. Besides a falling loss, the samples must learn the prompt: the
// "light background" prompt's sample must come out much brighter than the two
// "dark background" ones, which it is not at step 0. Measured here: the gap is
// about 0 at step 0, still mixed at 400 steps, and 0.6 from step 1000 on.
// Fewer steps would not test what the README promises.
TEST(Demo, ShippedConfigLossFallsSamplesFollowThePromptAndLoraLoads) {
  const auto demo = test::sourceDir() / "configs" / "demo.yaml";
  if (!fs::exists(demo)) GTEST_SKIP() << "configs/demo.yaml not found";
  test::TempDir tmp;
  auto loaded = config::loadRunConfig(demo);
  config::applyOverrides(loaded, {"job.training_folder=" + tmp.path().string()});
  const int64_t totalSteps = loaded.config.train.steps;
  ASSERT_GE(totalSteps, 1000);
  loaded.config.sample.sampleEvery = totalSteps;  // samples at step 0 and at the end only
  for (const auto& p : loaded.problems) ASSERT_FALSE(p.isError()) << p.format();
  ASSERT_EQ(loaded.config.sample.prompts.size(), 3u);
  ASSERT_NE(loaded.config.sample.prompts[1].find("light background"), std::string::npos);
  ASSERT_NE(loaded.config.sample.prompts[0].find("dark background"), std::string::npos);
  ASSERT_NE(loaded.config.sample.prompts[2].find("dark background"), std::string::npos);
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  const auto t0 = std::chrono::steady_clock::now();
  Trainer trainer(loaded.config, bus);
  ASSERT_EQ(trainer.run(), RunOutcome::Finished);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("seconds", std::to_string(secs));
  const auto steps = rec.of<events::StepEvent>();
  ASSERT_EQ(static_cast<int64_t>(steps.size()), totalSteps);
  double first = 0, last = 0;
  for (int i = 0; i < 20; ++i) {
    first += steps[static_cast<size_t>(i)].loss / 20;
    last += steps[steps.size() - 1 - static_cast<size_t>(i)].loss / 20;
  }
  EXPECT_LT(last, first * 0.5) << "first 20 steps " << first << ", last 20 " << last;

  const auto samples = rec.of<events::SampleEvent>();
  ASSERT_EQ(samples.size(), 6u);                      // 3 prompts at step 0 and at the end
  std::map<int64_t, std::vector<double>> brightness;  // step -> per prompt
  for (const auto& s : samples) {
    ASSERT_TRUE(fs::exists(s.path)) << s.path;
    EXPECT_EQ(io::readImage(s.path).text.at("prompt"), s.prompt);
    brightness[s.step].push_back(meanBrightness(s.path));
  }
  auto gap = [&](int64_t step) {
    const auto& b = brightness.at(step);
    return b.at(1) - std::max(b.at(0), b.at(2));  // light minus the brighter dark one
  };
  std::cout << "[demo] " << secs << " s; loss " << first << " -> " << last << "; brightness light - dark: step 0 "
            << gap(0) << ", step " << totalSteps << " " << gap(totalSteps) << "\n";
  EXPECT_LT(std::abs(gap(0)), 0.1) << "at step 0 the prompts should not matter yet";
  EXPECT_GT(gap(totalSteps), 0.3) << "at the end the light-background prompt should give a much brighter sample";

  const auto exports = rec.of<events::ExportEvent>();
  ASSERT_FALSE(exports.empty());
  const auto fcfg = flux::FluxConfig::tiny();
  for (const auto& e : exports) {
    const auto content = lora::readLoraFile(e.path, flux::FluxLoraRules(fcfg));
    EXPECT_FALSE(content.modules.empty()) << e.path;
    double up = 0;
    for (const auto& m : content.modules) up += m.up.abs().sum().item<double>();
    EXPECT_GT(up, 0.0) << e.path;
  }
}

// save.export_every: a LoRA file at every N steps, named with the step, beside the final one.
TEST(Trainer, ExportEveryWritesALoraFileNamedWithTheStep) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 4);
  cfg.save.exportEvery = 2;
  cfg.save.saveEvery = 0;
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp / "run";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.text();
  const fs::path exports = RunFolder(tmp / "run").exportsDir();
  EXPECT_TRUE(fs::exists(exports / "tiny_step2_diffusers.safetensors"));
  EXPECT_FALSE(fs::exists(exports / "tiny_step4_diffusers.safetensors"));  // the last step is the final file
  EXPECT_TRUE(fs::exists(exports / "tiny_diffusers.safetensors"));
  const auto step2 =
      lora::readLoraFile(exports / "tiny_step2_diffusers.safetensors", flux::FluxLoraRules(flux::FluxConfig::tiny()));
  EXPECT_FALSE(step2.modules.empty());
}

// Any checkpoint exports, named with its step; what is there is never replaced unasked.
TEST(Trainer, ExportRunTakesAnyCheckpointAndReplacesNothingUnasked) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 3);
  cfg.save.saveEvery = 1;
  events::EventBus bus;
  TrainerOptions o;
  o.runDir = tmp / "run";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished);
  const fs::path out = tmp / "out";
  ExportOptions opts;
  opts.step = 2;
  opts.outDir = out;
  const auto first = exportRun(tmp / "run", {config::ExportFormat::Diffusers}, opts);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0], out / "tiny_step2_diffusers.safetensors");
  EXPECT_EQ(exportPaths(tmp / "run", {config::ExportFormat::Diffusers}, 2, out), first);
  // The step's own LoRA, not the latest one's.
  ExportOptions latest;
  latest.outDir = tmp / "latest";
  const auto last = exportRun(tmp / "run", {config::ExportFormat::Diffusers}, latest);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].filename(), "tiny_step3_diffusers.safetensors");
  const flux::FluxLoraRules rules(flux::FluxConfig::tiny());
  const auto a2 = lora::readLoraFile(first[0], rules), a3 = lora::readLoraFile(last[0], rules);
  ASSERT_FALSE(a2.modules.empty());
  ASSERT_EQ(a2.modules.size(), a3.modules.size());
  double diff = 0;
  for (size_t i = 0; i < a2.modules.size(); ++i)
    diff += (a2.modules[i].up - a3.modules[i].up).abs().sum().item<double>();
  EXPECT_GT(diff, 0.0);
  const auto bytes = fs::file_size(first[0]);
  const auto written = fs::last_write_time(first[0]);

  // Again: refused, naming the file; it stays as it was.
  try {
    exportRun(tmp / "run", {config::ExportFormat::Diffusers}, opts);
    FAIL() << "an export replaced a file unasked";
  } catch (const ExportExists& e) {
    ASSERT_EQ(e.paths.size(), 1u);
    EXPECT_EQ(e.paths[0], first[0]);
    EXPECT_NE(std::string(e.what()).find("tiny_step2_diffusers.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fs::last_write_time(first[0]), written);
  // A new name beside it, said so.
  opts.existing = ExistingExport::NewName;
  std::vector<std::string> notes;
  const auto beside = exportRun(tmp / "run", {config::ExportFormat::Diffusers}, opts, &notes);
  ASSERT_EQ(beside.size(), 1u);
  EXPECT_EQ(beside[0], out / "tiny_step2_diffusers-2.safetensors");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("tiny_step2_diffusers-2.safetensors"), std::string::npos) << notes[0];
  EXPECT_EQ(fs::file_size(beside[0]), bytes);
  // Replaced when asked.
  opts.existing = ExistingExport::Overwrite;
  EXPECT_EQ(exportRun(tmp / "run", {config::ExportFormat::Diffusers}, opts), first);
  // A step with no checkpoint is refused, naming the steps there are.
  opts.step = 7;
  try {
    exportRun(tmp / "run", {config::ExportFormat::Diffusers}, opts);
    FAIL() << "step 7 has no checkpoint";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("1, 2, 3"), std::string::npos) << e.what();
  }
}

TEST(Trainer, ExportRunWritesEveryFormatWithTheEmaWeights) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 4);
  cfg.train.ema.useEma = true;
  cfg.train.ema.emaDecay = 0.5;
  cfg.save.dtype = config::DType::FP32;
  events::EventBus bus;
  TrainerOptions o;
  o.runDir = tmp / "run";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished);
  const auto files = exportRun(
      tmp / "run", {config::ExportFormat::Diffusers, config::ExportFormat::Kohya, config::ExportFormat::Comfy},
      {std::nullopt, tmp / "out"});
  ASSERT_EQ(files.size(), 3u);
  const auto fcfg = flux::FluxConfig::tiny();
  const auto ema = io::loadSafetensors(RunFolder(tmp / "run").latestCheckpoint()->path / "ema.safetensors");
  const auto diffusers = lora::readLoraFile(files[0], flux::FluxLoraRules(fcfg));
  ASSERT_FALSE(diffusers.modules.empty());
  for (const auto& m : diffusers.modules) {
    // alpha = rank, so the diffusers file holds the EMA weights unscaled.
    EXPECT_TRUE(test::allClose(m.up * (m.alpha / m.down.size(0)), ema.at(m.modulePath + ".lora_B.weight"), 1e-6, 1e-5))
        << m.modulePath;
  }
  for (size_t i = 1; i < files.size(); ++i) {
    const auto content = lora::readLoraFile(files[i], flux::FluxLoraRules(fcfg));
    EXPECT_FALSE(content.modules.empty()) << files[i];
  }
}

// Data-parallel ranks seeded alike for the LoRA initialisation: ranks > 0 draw their
// LoRA-dropout masks from streams of their own (not rank 0's, not each other's, the
// same again for the same rank), and rank 0's default generator is left as it was.
TEST(Trainer, EachDataParallelRankDrawsDropoutMasksOfItsOwn) {
  const at::Tensor ones = at::ones({4096});
  auto maskAfter = [&](int rank) {
    at::manual_seed(43);  // what every rank's LoRA initialisation leaves
    train::seedRankDropout(42, 0, rank);
    return at::dropout(ones, 0.5, true).ne(0);
  };
  const at::Tensor rank0 = maskAfter(0), rank1 = maskAfter(1), rank2 = maskAfter(2);
  at::manual_seed(43);
  EXPECT_TRUE(at::equal(rank0, at::dropout(ones, 0.5, true).ne(0))) << "rank 0's generator was reseeded";
  EXPECT_FALSE(at::equal(rank1, rank0));
  EXPECT_FALSE(at::equal(rank2, rank0));
  EXPECT_FALSE(at::equal(rank2, rank1));
  EXPECT_TRUE(at::equal(rank1, maskAfter(1)))
      << "a rank's stream depends on the seed, the start step and the rank only";
  at::manual_seed(43);
  train::seedRankDropout(42, 100, 1);  // a resumed run's rank 1: another stream than at step 0
  EXPECT_FALSE(at::equal(rank1, at::dropout(ones, 0.5, true).ne(0)));
}
