// Issue 16, item 10 (label gpu; skips without CUDA): an 8B-shaped Llama (Llama-3-8B's
// shape, random bf16 weights) trained through the one Trainer: LoRA r 8 on the seven
// projections, 2 x 512 tokens (a synthetic causal-LM dataset), activation
// checkpointing, one GPU capped at 20 GB. 30 steps, the audit clean, the peft
// adapter exported, the memory back to where it was after the run. Prints the
// median step time and the peak (compare with scripts/bench/peer_llama.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "common/TestSupport.h"
#include "device/DeviceInventory.h"
#include "events/EventBus.h"
#include "gpu/GpuStats.h"
#include "models/llama/LlamaConfig.h"
#include "train/RunFolder.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::test::gpu;

TEST(LlamaTrainGpu, EightBShapedThirtyStepsUnderA20GbCap) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  fs::create_directories(tmp / "model");
  std::ofstream(tmp / "model" / "config.json") << llama::LlamaConfig::llama3_8b().toJson().dump(2);

  config::RunConfig c;
  c.job.name = "llama8b";
  c.job.trainingFolder = tmp.path().string();
  c.model.arch = std::string("llama");
  c.model.nameOrPath = (tmp / "model").string();
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.model.gpuIds = {0};
  c.model.gpuMemoryLimitGb = {20.0};
  c.network.linear = 8;
  c.network.linearAlpha = 16;
  c.train.steps = 30;
  c.train.batchSize = 2;
  c.train.lr = 1e-4;
  c.train.dtype = config::DType::BF16;
  c.train.gradientCheckpointing = true;
  config::DatasetConfig d;
  d.type = config::DatasetType::Synthetic;
  d.numItems = 64;
  d.maxSeqLen = 512;
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  c.save.saveEvery = 0;
  c.save.dtype = config::DType::BF16;
  c.save.exportFormats = {config::ExportFormat::Peft};

  train::releaseDeviceCaches();
  const int64_t before = device::memoryFigures(0).allocatedBytes;
  resetPeak();
  events::EventBus bus;
  std::vector<events::StepEvent> steps;
  std::vector<events::PlacementEvent> placements;
  std::vector<std::string> problems;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* s = std::get_if<events::StepEvent>(&e)) steps.push_back(*s);
    if (auto* p = std::get_if<events::PlacementEvent>(&e)) placements.push_back(*p);
    if (auto* f = std::get_if<events::FailedEvent>(&e)) problems.push_back(f->message);
    if (auto* f = std::get_if<events::PreflightFailedEvent>(&e))
      problems.insert(problems.end(), f->problems.begin(), f->problems.end());
  });
  train::TrainerOptions o;
  o.runDir = tmp / "run";
  const auto outcome = train::Trainer(c, bus, o).run();
  std::string why;
  for (const auto& p : problems) why += p + "\n";
  ASSERT_EQ(outcome, train::RunOutcome::Finished) << why;

  // Before step 1, and again after it with the optimizer state step 1 made.
  ASSERT_EQ(placements.size(), 2u);
  for (const auto& p : placements) EXPECT_TRUE(p.audit.empty()) << p.audit.size() << " audit mismatches";
  EXPECT_GT(placements[1].checkedTensors, placements[0].checkedTensors);
  std::cout << "[llama train gpu] audit clean: " << placements[0].checkedTensors << " attachment tensors checked, "
            << placements[1].checkedTensors << " after step 1" << std::endl;
  ASSERT_EQ(steps.size(), 30u);
  std::vector<double> ms;
  for (size_t i = 3; i < steps.size(); ++i) ms.push_back(steps[i].stepTimeMs);  // after warm-up
  for (const auto& s : steps) EXPECT_TRUE(std::isfinite(s.loss));
  const int64_t peak = peakAllocatedBytes();
  std::cout << "[llama train gpu] 8B-shaped Llama, LoRA r 8 on the seven projections, batch 2 x 512, bf16, "
               "checkpointing, cap 20 GB: median step "
            << medianMs(ms) << " ms (steps 4-30), loss " << steps.front().loss << " -> " << steps.back().loss
            << "; peak allocated " << gib(peak) << " GiB, peak reserved " << gib(peakReservedBytes()) << " GiB"
            << std::endl;
  EXPECT_LE(peak, static_cast<int64_t>(20e9));
  EXPECT_TRUE(fs::exists(o.runDir / "exports" / "llama8b_peft" / "adapter_model.safetensors"));

  train::releaseDeviceCaches();
  const auto after = device::memoryFigures(0);
  EXPECT_EQ(after.allocatedBytes, before) << "bytes left allocated on cuda:0 after the run";
  std::cout << "[llama train gpu] after the run: allocated " << after.allocatedBytes << " bytes, reserved "
            << after.reservedBytes << " bytes" << std::endl;
}
