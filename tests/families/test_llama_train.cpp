// The causal-LM family through the one Trainer (issue 16, item 9): the causal_lm_a
// reference model trains 30 steps on a small JSONL dataset written here, the loss
// on the response falls, text samples are written, the peft adapter folder is
// exported and loads back through Strata equal to the checkpoint's LoRA, and a
// stopped-and-resumed run ends where a straight one does.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>

#include "common/TestSupport.h"
#include "common/TrainTestSupport.h"
#include "events/EventBus.h"
#include "families/llama/LmDataset.h"
#include "io/Safetensors.h"
#include "LmTestSupport.h"
#include "lora/LoraNetwork.h"
#include "models/llama/LlamaCheckpoint.h"
#include "lora/PeftAdapter.h"
#include "train/RunFolder.h"
#include "text/TokenizerFactory.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

fs::path modelDir() { return test::referenceDir() / "causal_lm_a" / "model"; }

class LlamaTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(modelDir() / "config.json")) GTEST_SKIP() << "no causal_lm_a fixture at " << modelDir();
    const auto lc = llama::LlamaConfig::fromFile(modelDir());
    vocab_ = static_cast<int>(lc.vocabSize);
    adapters_ = 7 * lc.numHiddenLayers;  // peft's seven projections per layer
    test::writeCharTokenizer(tmp_ / "tok", vocab_);
    // Question -> answer pairs in one template (" It is <colour>."), as SFT data has them: a LoRA
    // learns the template in a few steps. Two bad lines.
    std::string jsonl;
    const std::vector<std::pair<std::string, std::string>> qa = {
        {"sky?", " blue"},   {"grass?", " green"}, {"snow?", " white"}, {"coal?", " black"},
        {"sun?", " yellow"}, {"rose?", " red"},    {"sea?", " blue"},   {"night?", " dark"}};
    for (size_t i = 0; i < qa.size(); ++i) {
      jsonl += "{\"question\": \"Colour of the " + qa[i].first + "\", \"answer\": \" It is" + qa[i].second + ".\"}\n";
      if (i == 2) jsonl += "{\"question\": broken\n";
      if (i == 5) jsonl += "{\"question\": \"no answer\"}\n";
    }
    test::writeText(tmp_ / "data.jsonl", jsonl);
  }

  config::RunConfig config(const std::string& name, int64_t steps) const {
    config::RunConfig c;
    c.job.name = name;
    c.job.trainingFolder = tmp_.path().string();
    c.model.arch = std::string("llama");
    c.model.nameOrPath = modelDir().string();
    c.model.tokenizerPath = (tmp_ / "tok").string();
    c.model.device = config::ComputeDevice::Cpu;
    c.network.linear = 4;
    c.network.linearAlpha = 16;
    c.train.steps = steps;
    c.train.lr = 1e-2;
    c.train.batchSize = 2;
    c.train.dtype = config::DType::FP32;
    c.train.gradientCheckpointing = true;
    c.train.seed = 3;
    c.train.ema.useEma = true;
    c.train.ema.emaDecay = 0.8;
    config::DatasetConfig d;
    d.type = config::DatasetType::Jsonl;
    d.filePath = (tmp_ / "data.jsonl").string();
    d.promptField = "question";
    d.responseField = "answer";
    d.maxSeqLen = 48;
    d.paddingSide = config::PaddingSide::Left;
    c.datasets = {d};
    c.sample.sampleEvery = steps;
    c.sample.prompts = {"Colour of the sky?"};
    c.sample.maxNewTokens = 6;
    c.save.saveEvery = 10;
    c.save.maxStepSavesToKeep = 10;
    c.save.dtype = config::DType::FP32;
    c.save.exportFormats = {config::ExportFormat::Peft};
    return c;
  }

  test::TempDir tmp_;
  int vocab_ = 0;
  int64_t adapters_ = 0;
};

TEST_F(LlamaTrain, ThirtyStepsLowerTheResponseLossAndTheAdapterLoadsBack) {
  const auto cfg = config("lm", 30);
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp_ / "lm";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.failures();

  // The bad lines were reported with their numbers (4 and 8 of the file).
  std::string warnings;
  for (const auto& w : rec.of<events::WarningEvent>()) warnings += w.message + "\n";
  EXPECT_NE(warnings.find("data.jsonl:4: line skipped"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("data.jsonl:8: line skipped"), std::string::npos) << warnings;

  // The loss on the response falls.
  const auto steps = rec.of<events::StepEvent>();
  ASSERT_EQ(steps.size(), 30u);
  auto mean = [&](size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += steps[i].loss;
    return s / static_cast<double>(to - from);
  };
  const double first = mean(0, 5), last = mean(25, 30);
  std::string curve;
  for (const auto& s : steps) curve += " " + std::to_string(s.loss);
  // A steady fall on this tiny random base (hidden 32): by more than a quarter, far above the batch noise.
  EXPECT_LT(last, 0.75 * first) << "first 5 steps " << first << ", last 5 " << last << "; losses:" << curve;

  // Text samples at step 0 and 30: a file each and the index.
  const auto samples = rec.of<events::SampleEvent>();
  ASSERT_EQ(samples.size(), 2u);
  for (const auto& s : samples) {
    EXPECT_TRUE(fs::exists(s.path)) << s.path;
    EXPECT_EQ(fs::path(s.path).extension(), ".txt");
  }
  std::ifstream index(RunFolder(o.runDir).samplesIndexPath());
  std::string line;
  int lines = 0;
  while (std::getline(index, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(j.contains("completion"));
    EXPECT_EQ(j["prompt"], "Colour of the sky?");
    ++lines;
  }
  EXPECT_EQ(lines, 2);

  // The peft folder loads back through Strata and equals the EMA LoRA of the last checkpoint.
  const fs::path adapter = o.runDir / "exports" / "lm_peft";
  ASSERT_TRUE(fs::exists(adapter / "adapter_config.json"));
  ASSERT_TRUE(fs::exists(adapter / "adapter_model.safetensors"));
  const auto exported = io::loadSafetensors(adapter / "adapter_model.safetensors");
  const auto ckpt = RunFolder(o.runDir).latestCheckpoint();
  ASSERT_TRUE(ckpt);
  EXPECT_EQ(ckpt->step, 30);
  const auto ema = io::loadSafetensors(ckpt->path / "ema.safetensors");
  const auto live = io::loadSafetensors(ckpt->path / "lora.safetensors");
  ASSERT_EQ(exported.size(), live.size());
  EXPECT_EQ(static_cast<int64_t>(exported.size()), 2 * adapters_);  // lora_A and lora_B of each
  for (const auto& [key, t] : live) {
    ASSERT_TRUE(exported.count(key)) << key;  // same names: base_model.model.<path>.lora_A.weight
    const std::string bare = key.substr(std::string("base_model.model.").size());
    ASSERT_TRUE(ema.count(bare)) << bare;
    EXPECT_TRUE(test::allClose(exported.at(key), ema.at(bare), 0, 0)) << key;
  }
  auto model = llama::loadLlamaForCausalLM(modelDir());
  auto network = lora::loadPeftAdapter(*model, adapter);
  EXPECT_EQ(static_cast<int64_t>(network->adapters().size()), adapters_);
  // Its forward differs from the base model's: the adapter is applied. The batch is
  // left padded, as the training batches were.
  llama::LlamaInputs in;
  in.inputIds = (at::arange(0, 16, at::kLong).reshape({2, 8}) % (vocab_ - 3)) + 3;  // [2, 8]
  in.attentionMask = at::ones({2, 8}, at::kLong);
  in.attentionMask[0].narrow(0, 0, 3).zero_();
  in.inputIds[0].narrow(0, 0, 3).fill_(0);
  const auto withLora = model->forward(in);  // [2, 8, V]
  // The whole dataset in one batch: the response loss with the exported adapter is
  // well below the base model's.
  auto tok = text::openTokenizer(tmp_ / "tok", text::TokenizerKind::kCausalLm).tokenizer;
  families::LmDataOptions lo;
  lo.promptField = "question";
  lo.responseField = "answer";
  const auto data = families::LmDataset::fromJsonl(tmp_ / "data.jsonl", *tok, lo);
  std::vector<const families::LmSample*> rows;
  for (size_t i = 0; i < data.size(); ++i) rows.push_back(&data.row(i));
  const auto all = families::collateLm(rows, 0, config::PaddingSide::Left);
  llama::LlamaInputs allIn;
  allIn.inputIds = all.inputIds;
  allIn.attentionMask = all.attentionMask;
  const double adapted = llama::causalLmLoss(model->forward(allIn), all.labels).item<double>();
  network->detach();
  const auto base = model->forward(in);
  EXPECT_GT((withLora - base).abs().max().item<double>(), 1e-4);
  const double baseLoss = llama::causalLmLoss(model->forward(allIn), all.labels).item<double>();
  std::cout << "[llama train] response loss over the dataset: base " << baseLoss << ", with the exported adapter "
            << adapted << std::endl;
  EXPECT_LT(adapted, 0.75 * baseLoss);

  // For the transformers + peft check (scripts/bench/peft_roundtrip.py): the
  // adapter and Strata's logits with it, where STRATA_PEFT_OUT says.
  if (const char* out = std::getenv("STRATA_PEFT_OUT")) {
    const fs::path dir(out);
    fs::create_directories(dir / "adapter");
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
      fs::copy_file(adapter / f, dir / "adapter" / f, fs::copy_options::overwrite_existing);
    io::writeSafetensors(dir / "strata_logits.safetensors",
                         {{"input_ids", in.inputIds}, {"attention_mask", in.attentionMask}, {"logits", withLora}});
    std::cout << "[llama train] wrote the adapter and Strata's logits to " << dir << std::endl;
  }
}

// network.dtype bf16 on a bf16 Llama (the family goes through the same adapters): the
// LoRA and its moments are bfloat16, the response loss falls, and the peft export loads.
TEST_F(LlamaTrain, ABfloatLoraOnABfloatBaseTrainsAndItsPeftExportLoads) {
  auto cfg = config("lmb", 30);
  cfg.train.dtype = config::DType::BF16;
  cfg.network.dtype = config::DType::BF16;
  cfg.sample.sampleEvery = 0;
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp_ / "lmb";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.failures();
  const auto steps = rec.of<events::StepEvent>();
  ASSERT_EQ(steps.size(), 30u);
  double first = 0, last = 0;
  for (size_t i = 0; i < 5; ++i) first += steps[i].loss / 5, last += steps[25 + i].loss / 5;
  EXPECT_LT(last, 0.75 * first) << "first 5 steps " << first << ", last 5 " << last;
  const auto ckpt = RunFolder(o.runDir).latestCheckpoint();
  ASSERT_TRUE(ckpt);
  for (const auto& [k, t] : io::loadSafetensors(ckpt->path / "lora.safetensors"))
    EXPECT_EQ(t.scalar_type(), at::kBFloat16) << k;
  auto model = llama::loadLlamaForCausalLM(modelDir());
  const auto network = lora::loadPeftAdapter(*model, o.runDir / "exports" / "lmb_peft");
  EXPECT_EQ(static_cast<int64_t>(network->adapters().size()), adapters_);
}

TEST_F(LlamaTrain, StopAndResumeEndWhereAStraightRunEnds) {
  auto cfg = config("lmr", 16);
  cfg.sample.sampleEvery = 0;
  cfg.sample.prompts.clear();
  cfg.save.saveEvery = 4;
  events::EventBus bus;
  TrainerOptions a;
  a.runDir = tmp_ / "straight";
  ASSERT_EQ(Trainer(cfg, bus, a).run(), RunOutcome::Finished);
  TrainerOptions b;
  b.runDir = tmp_ / "split";
  b.stopAfterStep = 7;
  ASSERT_EQ(Trainer(cfg, bus, b).run(), RunOutcome::Stopped);
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  ASSERT_EQ(Trainer::resumeFrom(tmp_ / "split", bus)->run(), RunOutcome::Finished) << rec.failures();
  const auto la = io::loadSafetensors(RunFolder(a.runDir).latestCheckpoint()->path / "lora.safetensors");
  const auto lb = io::loadSafetensors(RunFolder(b.runDir).latestCheckpoint()->path / "lora.safetensors");
  ASSERT_EQ(la.size(), lb.size());
  for (const auto& [k, t] : la) EXPECT_TRUE(test::allClose(lb.at(k), t, 1e-6, 1e-5)) << k;
  const auto ma = RunFolder(a.runDir).readMetrics(), mb = RunFolder(b.runDir).readMetrics();
  ASSERT_EQ(ma.size(), 16u);
  ASSERT_EQ(mb.size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>(), 1e-5) << i;
  // strata-train export writes the same peft folder from the checkpoint.
  const auto written = exportRun(b.runDir, {config::ExportFormat::Peft}, {std::nullopt, tmp_ / "out"});
  ASSERT_EQ(written.size(), 1u);
  EXPECT_TRUE(fs::exists(written[0] / "adapter_config.json")) << written[0];
  auto model = llama::loadLlamaForCausalLM(modelDir());
  EXPECT_EQ(static_cast<int64_t>(lora::loadPeftAdapter(*model, written[0])->adapters().size()), adapters_);
}

}  // namespace

// model.quantize with the reference folder: the model streams in layer by layer (one
// load-progress event per layer, then one for the rest), each layer int8 once built,
// and the run still learns the template.
TEST_F(LlamaTrain, AnInt8BaseStreamsInLayerByLayerAndTrains) {
  auto cfg = config("lmq", 20);
  cfg.model.quantize = true;
  cfg.model.qtype = "int8";
  cfg.train.ema.useEma = false;
  cfg.sample.sampleEvery = 0;
  cfg.save.saveEvery = 0;
  cfg.save.exportFormats = {};
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp_ / "lmq";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.failures();

  // Quantized: each of the 7 Linears per layer has its scale attached to its layer.
  // Before step 1, and after it with the optimizer state step 1 made.
  const auto placements = rec.of<events::PlacementEvent>();
  ASSERT_EQ(placements.size(), 2u);
  EXPECT_EQ(placements[1].afterStep, 1);
  EXPECT_GT(placements[1].checkedTensors, placements[0].checkedTensors);
  int64_t scales = 0;
  for (const auto& b : placements[0].blocks)
    for (const auto& a : b.attachments)
      if (a.kind == "quant_scale") scales += a.count;

  const int64_t layers = llama::LlamaConfig::fromFile(modelDir()).numHiddenLayers;
  EXPECT_EQ(scales, 7 * layers);
  std::vector<int64_t> done;
  for (const auto& e : rec.of<events::LoadProgressEvent>()) {
    EXPECT_EQ(e.what, events::kLoadLanguageModel);
    EXPECT_EQ(e.total, layers + 1);
    done.push_back(e.done);
  }
  std::vector<int64_t> expected(static_cast<size_t>(layers + 1));
  std::iota(expected.begin(), expected.end(), int64_t{1});
  EXPECT_EQ(done, expected);

  const auto steps = rec.of<events::StepEvent>();
  ASSERT_EQ(steps.size(), 20u);
  double first = 0, last = 0;
  for (size_t i = 0; i < 5; ++i) first += steps[i].loss / 5;
  for (size_t i = 15; i < 20; ++i) last += steps[i].loss / 5;
  EXPECT_LT(last, 0.85 * first) << "int8 base: first 5 steps " << first << ", last 5 " << last;
}
