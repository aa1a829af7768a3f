#include "families/llama/LlamaFamily.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "device/DeviceInventory.h"
#include "events/Events.h"
#include "families/llama/LlamaLoraRules.h"
#include "families/llama/LmDataset.h"
#include "io/AtomicFile.h"
#include "io/FileBytes.h"
#include "lora/LoraTargets.h"
#include "lora/PeftAdapter.h"
#include "models/llama/LlamaCheckpoint.h"
#include "models/llama/LlamaModuleNames.h"
#include "nn/Quantize.h"
#include "placement/QuantScaleAttachment.h"
#include "train/AdamW8bit.h"
#include "text/TokenizerFactory.h"
#include "train/Ema.h"
#include "train/HostToDevice.h"
#include "train/RngState.h"
#include "train/TrainerSupport.h"

namespace strata::families {

namespace fs = std::filesystem;

llama::LlamaConfig llamaConfigOf(const config::ModelConfig& m) {
  if (m.nameOrPath.empty())
    throw ConfigError(
        "model.name_or_path: a llama model needs its folder (config.json; with random_weights that file alone)");
  return llama::LlamaConfig::fromFile(m.nameOrPath);
}

LlamaPlanOptions llamaPlanOptionsOf(const config::RunConfig& cfg) {
  LlamaPlanOptions o;
  o.weightElementBytes = config::elementBytes(cfg.train.dtype);
  o.activationElementBytes = o.weightElementBytes;
  o.loraRank = cfg.network.linear;
  o.loraTargets = cfg.network.targetModules;
  o.ema = cfg.train.ema.useEma;
  o.loraElementBytes = config::elementBytes(cfg.network.dtype);
  o.optimizerBytesPerParam =
      train::optimizerStateBytesPerParam(cfg.train.optimizer == config::OptimizerType::AdamW8bit, o.loraElementBytes);
  o.offloadOptimizerState = cfg.train.offloadOptimizerState;
  o.batchSize = cfg.train.batchSize;
  o.seqLen = 0;
  for (const auto& d : cfg.datasets) o.seqLen = std::max(o.seqLen, d.maxSeqLen);
  if (o.seqLen == 0) o.seqLen = config::DatasetConfig{}.maxSeqLen;
  o.gradientCheckpointing = cfg.train.gradientCheckpointing;
  o.quantize = cfg.model.quantize;
  o.perRowScales = !o.quantize || nn::perRowScale(nn::quantTypeFromName(cfg.model.qtype));
  o.keptTransposes = train::keepsFp8Transposes(cfg.model);
  return o;
}

std::vector<int> generateTokens(llama::LlamaForCausalLM& model, nn::BlockRunner* runner, const c10::Device& device,
                                const std::vector<int>& promptIds, const GenerateOptions& o, std::optional<int> eos) {
  at::NoGradGuard noGrad;
  auto gen = train::makeCpuGenerator(o.seed);
  std::vector<int64_t> ids(promptIds.begin(), promptIds.end());
  std::vector<int> out;
  for (int64_t t = 0; t < o.maxNewTokens; ++t) {
    llama::LlamaInputs in;
    in.inputIds = at::tensor(ids, at::kLong).unsqueeze(0).to(device);  // [1, L]
    const auto logits = model.forward(in, runner);                     // [1, L, V]
    auto last = logits[0][-1].to(at::kCPU, at::kFloat);                // [V]
    int next = 0;
    if (o.temperature <= 0.0) {
      next = static_cast<int>(last.argmax().item<int64_t>());
    } else {
      const auto p = at::softmax(last / o.temperature, 0);
      next = static_cast<int>(at::multinomial(p, 1, false, gen).item<int64_t>());
    }
    out.push_back(next);
    ids.push_back(next);
    if (eos && next == *eos) break;
  }
  return out;
}

namespace {

class LlamaRun : public train::FamilyRun {
 public:
  void prepareData(train::RunContext& run) override {
    const config::RunConfig& cfg = run.config();
    events::EventBus& bus = run.bus();
    config_ = llamaConfigOf(cfg.model);
    rules_ = std::make_unique<LlamaLoraRules>(config_);
    const bool needText =
        std::any_of(cfg.datasets.begin(), cfg.datasets.end(),
                    [](const config::DatasetConfig& d) { return d.type == config::DatasetType::Jsonl; }) ||
        (cfg.sample.sampleEvery > 0 && !cfg.sample.prompts.empty());
    if (needText) {
      const fs::path folder = cfg.model.tokenizerPath.empty() ? cfg.model.nameOrPath : cfg.model.tokenizerPath;
      try {
        tokenizer_ = text::openTokenizer(folder, text::TokenizerKind::kCausalLm).tokenizer;
      } catch (const std::exception& e) {
        throw ConfigError(std::string(cfg.model.tokenizerPath.empty() ? "model.name_or_path" : "model.tokenizer_path") +
                          ": the tokenizer: " + e.what());
      }
      const auto sp = tokenizer_->specialTokenIds();
      padId_ = sp.pad ? *sp.pad : sp.eos ? *sp.eos : 0;  // the seed's pad = eos when there is no pad token
      eos_ = sp.eos;
    }
    std::vector<LmDataset> parts;
    for (size_t i = 0; i < cfg.datasets.size(); ++i) {
      const auto& d = cfg.datasets[i];
      const std::string key = "datasets[" + std::to_string(i) + "]";
      if (d.type == config::DatasetType::Synthetic) {
        parts.push_back(LmDataset::synthetic(d.numItems, d.maxSeqLen, config_.vocabSize,
                                             static_cast<uint64_t>(cfg.train.seed) + i));
        continue;
      }
      if (d.type != config::DatasetType::Jsonl)
        throw ConfigError(key + ".type: a llama model trains on jsonl or synthetic data");
      run.stopPoint("reading the datasets (before " + key + ")");
      auto ds = LmDataset::fromJsonl(d.filePath, *tokenizer_, LmDataOptions::of(d));
      const auto& r = ds.reports().front();
      const size_t shown = std::min<size_t>(r.skipped.size(), 20);
      for (size_t k = 0; k < shown; ++k)
        bus.publish(events::WarningEvent{
            key + " " + d.filePath + ":" + std::to_string(r.skipped[k].line) + ": line skipped: " + r.skipped[k].reason,
            0});
      if (!r.skipped.empty() || r.truncated > 0)
        bus.publish(events::WarningEvent{
            key + " " + r.summary() +
                (r.skipped.size() > shown ? " (the first " + std::to_string(shown) + " skipped lines are listed)" : ""),
            0});
      parts.push_back(std::move(ds));
    }
    data_ = LmDataset::concat(std::move(parts));
    for (size_t i = 0; i < data_.size(); ++i)
      for (int64_t id : data_.row(i).ids)
        if (id < 0 || id >= config_.vocabSize)
          throw ConfigError("model.tokenizer_path: the tokenizer gives id " + std::to_string(id) +
                            ", outside the model's vocab_size " + std::to_string(config_.vocabSize));
    if (padId_ < 0 || padId_ >= config_.vocabSize)
      throw ConfigError("model.tokenizer_path: the tokenizer's padding id " + std::to_string(padId_) +
                        " is outside the model's vocab_size " + std::to_string(config_.vocabSize));
    // train.cuda_graph: true replays one shape: every batch is padded to the longest row.
    // auto graphs only rows of one length already (microBatchShapeChange): padding
    // costs compute the graph may not win back.
    padTo_ = 0;
    rowLengths_.clear();
    for (size_t i = 0; i < data_.size(); ++i) {
      const auto n = static_cast<int64_t>(data_.row(i).ids.size());
      rowLengths_.insert(n);
      if (cfg.train.cudaGraph == config::CudaGraphMode::On) padTo_ = std::max(padTo_, n);
    }
    paddingSide_ = cfg.datasets.empty() ? config::PaddingSide::Right : cfg.datasets.front().paddingSide;
  }

  train::PlacedModel buildAndPlace(train::RunContext& run) override {
    const config::RunConfig& cfg = run.config();
    events::EventBus& bus = run.bus();
    const auto& m = cfg.model;
    const train::DeviceSetup dev = train::setUpDevices(cfg, run.prepared());
    at::manual_seed(static_cast<uint64_t>(cfg.train.seed));  // the same random base on resume
    llama::LlamaBuildOptions bo;
    bo.device = dev.buildDevice;
    bo.dtype = train::scalarTypeOf(cfg.train.dtype);
    const auto qtype = m.quantize ? nn::quantTypeFromName(m.qtype) : nn::QuantType::None;
    // model.fp8_matmul (the validator allows it only with an fp8 qtype on a card that has it).
    const bool fp8Matmul = m.fp8Matmul && nn::isFloat8(qtype);
    if (!m.randomWeights) {
      // Each layer is built on its plan device, filled from the file and quantized
      // there before the next one exists: the base is never whole in bf16 anywhere.
      bo.layerDevice = train::planBlockDevice(dev);
      llama::LlamaStreamOptions so;
      so.quantize = qtype;
      so.onProgress = [&bus, &run](int64_t done, int64_t total) {
        bus.publish(events::LoadProgressEvent{events::kLoadLanguageModel, done, total});
        run.stopPoint("loading the model (" + std::to_string(done) + " of " + std::to_string(total) + ")");
      };
      model_ = llama::streamLlamaForCausalLM(llama::openLlamaWeights(m.nameOrPath), config_, bo, so);
    } else {
      // Random weights: each layer quantized and on its plan device as soon as it exists.
      bo.onLayerBuilt = train::randomBlockHook(qtype, dev);
      model_ = std::make_shared<llama::LlamaForCausalLM>(config_, bo);
    }
    nn::Fp8MatmulCount fp8;
    if (fp8Matmul)
      for (size_t i = 0; i < model_->layerCount(); ++i)
        fp8 += nn::enableFp8Matmul(*model_->layer(i), nn::fp8BackwardOf(m.fp8Backward, m.fp8KeepTranspose));
    for (auto& p : model_->parameters()) p.requires_grad_(false);
    train::PlacedModel placed = train::placeBlocks(model_->blockList(), dev);
    if (fp8Matmul) placed.reason += "; " + nn::fp8MatmulSummary(fp8);
    if (qtype != nn::QuantType::None) placed.placement->attachAll(placement::QuantScaleAttachment::forModel(*model_));
    placed.placement->apply();
    if (fp8Matmul) train::checkFp8MatmulRuns(model_->blockList(), bo.dtype);
    for (const auto& [path, l] : model_->linears()) linearPaths_.push_back(path);
    return placed;
  }
  torch::nn::Module& module() override { return *model_; }
  const nn::LoraNameRules& loraRules() const override { return *rules_; }

  // [inputIds [B, L], attentionMask [B, L], labels [B, L]]
  std::vector<at::Tensor> microBatch(train::RunContext& run, int64_t batch, int64_t step) override {
    std::vector<const LmSample*> rows;
    for (int64_t i = 0; i < batch; ++i) rows.push_back(&data_.row(nextRow(run)));
    const LmBatch b = collateLm(rows, padId_, paddingSide_, padTo_);
    const auto dev = run.placement().stemDevice();
    (void)step;
    // Queued copies (toDeviceAsync): the CPU goes on to launch the forward.
    return {train::toDeviceAsync(b.inputIds, dev), train::toDeviceAsync(b.attentionMask, dev),
            train::toDeviceAsync(b.labels, run.placement().headDevice())};
  }

  std::string microBatchShapeChange() const override {
    if (padTo_ > 0 || rowLengths_.size() <= 1) return "";
    return "the dataset's rows have " + std::to_string(rowLengths_.size()) + " different lengths (" +
           std::to_string(*rowLengths_.begin()) + " to " + std::to_string(*rowLengths_.rbegin()) +
           " tokens; cuda_graph: true pads every batch to the longest)";
  }

  at::Tensor microLoss(train::RunContext& run, const std::vector<at::Tensor>& batch) override {
    llama::LlamaInputs in;
    in.inputIds = batch.at(0);
    in.attentionMask = batch.at(1);
    in.idsChecked = true;                             // prepareData checked every row's ids against the vocabulary
    auto logits = model_->forward(in, run.runner());  // [B, L, V]
    return llama::causalLmLoss(logits, batch.at(2));
  }

  train::Sample sample(train::RunContext& run, int64_t step, size_t promptIndex) override {
    (void)step;
    const config::RunConfig& cfg = run.config();
    train::Sample out;
    out.prompt = cfg.sample.prompts[promptIndex];
    out.seed = cfg.sample.seed + (cfg.sample.walkSeed ? static_cast<int64_t>(promptIndex) : 0);
    GenerateOptions go;
    go.maxNewTokens = cfg.sample.maxNewTokens;
    go.temperature = cfg.sample.temperature;
    go.seed = static_cast<uint64_t>(out.seed);
    const auto ids = tokenizer_->encode(out.prompt, true);
    const auto newIds = generateTokens(*model_, &run.placement(), run.placement().stemDevice(), ids, go, eos_);
    const std::string completion = tokenizer_->decode(newIds, true);
    out.text = out.prompt + completion + "\n";
    out.indexFields = {{"temperature", cfg.sample.temperature}, {"completion", completion}};
    return out;
  }

  void exportLora(train::RunContext& run, config::ExportFormat format, const fs::path& path, int64_t step,
                  const std::string& runYaml, const std::string& softwareVersion) override {
    const config::RunConfig& cfg = run.config();
    lora::PeftWriteOptions po;
    po.baseModelNameOrPath = cfg.model.nameOrPath;
    po.dropout = cfg.network.dropout;
    po.dtype = train::scalarTypeOf(cfg.save.dtype);
    po.modelLinearPaths = linearPaths_;
    lora::writePeftAdapter(path, run.network().moduleWeights(), po);
    (void)format;
    (void)step;
    (void)runYaml;
    (void)softwareVersion;
  }

  void release() override {
    model_.reset();
    tokenizer_.reset();
  }

 private:
  // The next row of the run's data order (train::nextDrawIndex, as for every family).
  size_t nextRow(train::RunContext& run) { return run.nextDrawIndex(data_.size()); }

  llama::LlamaConfig config_;
  std::unique_ptr<LlamaLoraRules> rules_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  int64_t padId_ = 0;
  int64_t padTo_ = 0;             // the length every batch is padded to at least (train.cuda_graph: true)
  std::set<int64_t> rowLengths_;  // the dataset's row lengths (train.cuda_graph: auto)
  std::optional<int> eos_;
  config::PaddingSide paddingSide_ = config::PaddingSide::Right;
  LmDataset data_;
  std::shared_ptr<llama::LlamaForCausalLM> model_;
  std::vector<std::string> linearPaths_;
};

class LlamaFamily : public train::ModelFamily {
 public:
  std::string arch() const override { return "llama"; }
  std::unique_ptr<train::FamilyRun> newRun() const override { return std::make_unique<LlamaRun>(); }

  // A jsonl file with no line that gives a sample, and a tokenizer folder without a
  // tokenizer, as prepareData would find them (no tokenizing: a line is counted when
  // it has its fields).
  std::vector<config::Problem> dataProblems(const config::RunConfig& cfg,
                                            const config::SourceMap* where) const override {
    std::vector<config::Problem> out = ModelFamily::dataProblems(cfg, where);
    auto error = [&](const std::string& key, std::string message, std::string hint) {
      out.push_back(config::problemAt(config::Severity::Error, key, std::move(message), std::move(hint), where));
    };
    bool jsonl = false;
    for (size_t i = 0; i < cfg.datasets.size(); ++i) {
      const config::DatasetConfig& d = cfg.datasets[i];
      if (d.type != config::DatasetType::Jsonl) continue;
      jsonl = true;
      std::error_code ec;
      if (d.filePath.empty() || !fs::is_regular_file(d.filePath, ec)) continue;  // the validator's
      std::string text;
      try {
        // The check runs on every edit in the app: the head of a large file answers it.
        constexpr size_t kCheckedBytes = size_t{64} << 20;
        text = io::readFileBytes(d.filePath, kCheckedBytes);
        if (text.size() == kCheckedBytes) text.erase(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
      } catch (const std::exception& e) {
        error("datasets[" + std::to_string(i) + "].file_path", e.what(), "");
        continue;
      }
      std::vector<SkippedLine> skipped;
      bool any = false;
      const int64_t lines = readJsonlRecords(text, LmDataOptions::of(d), [&](const LmTextRecord& rec) {
        if (rec.skipReason.empty())
          any = true;
        else if (rec.skipReason != "blank line")
          skipped.push_back({rec.line, rec.skipReason});
        return !any;  // one sample is enough to know the file yields some
      });
      if (any) continue;
      // The reasons once each, with their lines: "lines 1, 2, 5: no field 'prompt' (...)".
      std::vector<std::pair<std::string, std::vector<int64_t>>> reasons;
      for (const SkippedLine& k : skipped) {
        auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == k.reason; });
        if (it == reasons.end()) it = reasons.insert(reasons.end(), {k.reason, {}});
        it->second.push_back(k.line);
      }
      std::string why;
      for (size_t r = 0; r < reasons.size() && r < 3; ++r) {
        const auto& lineNos = reasons[r].second;
        why += std::string("; line") + (lineNos.size() > 1 ? "s " : " ");
        for (size_t k = 0; k < lineNos.size() && k < 5; ++k) why += (k ? ", " : "") + std::to_string(lineNos[k]);
        if (lineNos.size() > 5) why += " and " + std::to_string(lineNos.size() - 5) + " more";
        why += ": " + reasons[r].first;
      }
      if (reasons.size() > 3) why += "; and other reasons";
      error("datasets[" + std::to_string(i) + "].file_path",
            "no usable sample in " + d.filePath + " (" + std::to_string(lines) + " lines" +
                (lines > 0 && skipped.empty() ? ", all blank" : "") + ")" + why,
            d.textField.empty() ? "one JSON object per line with the prompt and the response (prompt/response, "
                                  "prompt/completion, instruction/input/output or chat messages), or set "
                                  "prompt_field and response_field to its fields"
                                : "each line's " + d.textField +
                                      " holds the prompt, then response_marker, then "
                                      "the response");
    }
    const bool needText = jsonl || (cfg.sample.sampleEvery > 0 && !cfg.sample.prompts.empty());
    const std::string folder = cfg.model.tokenizerPath.empty() ? cfg.model.nameOrPath : cfg.model.tokenizerPath;
    std::error_code ec;
    if (needText && !folder.empty() && fs::is_directory(folder, ec) &&
        !fs::exists(fs::path(folder) / "tokenizer.json") && !fs::exists(fs::path(folder) / "tokenizer.model"))
      error(cfg.model.tokenizerPath.empty() ? "model.name_or_path" : "model.tokenizer_path",
            "no tokenizer in " + folder + " (neither tokenizer.json nor tokenizer.model), and the run reads text (" +
                (jsonl ? "a jsonl dataset" : "sample prompts") + ")",
            cfg.model.tokenizerPath.empty()
                ? "set model.tokenizer_path to the model's folder that holds tokenizer.json (a folder with only "
                  "config.json gives the shape, not the tokenizer)"
                : "give the folder that holds the model's tokenizer.json or tokenizer.model");
    return out;
  }

  train::FamilyPlan plan(const config::RunConfig& cfg) const override {
    const auto lc = llamaConfigOf(cfg.model);
    const auto params = llama::llamaParamPlan(lc);
    char size[32];
    std::snprintf(size, sizeof size, "%.2fB", static_cast<double>(params.totalParams()) / 1e9);
    train::FamilyPlan fp;
    std::string& source = fp.source;
    source = "Llama-family " + lc.modelType + " (" + cfg.model.nameOrPath + "/config.json" +
             (cfg.model.randomWeights ? ", random weights" : "") + "), " + std::to_string(lc.numHiddenLayers) +
             " layers, hidden " + std::to_string(lc.hiddenSize) + ", " + std::to_string(lc.numAttentionHeads) +
             " heads / " + std::to_string(lc.numKeyValueHeads) + " kv heads, vocab " + std::to_string(lc.vocabSize) +
             ", " + size + " parameters";
    fp.summary = source;  // already the model in one line
    const LlamaPlanOptions o = llamaPlanOptionsOf(cfg);
    fp.tokens = o.seqLen;
    train::RunPlanInput& out = fp.input;
    out.input = llamaPlannerInput(lc, o);
    out.input.mode = cfg.model.placement == config::PlacementMode::Memory ? placement::PlanMode::Memory
                                                                          : placement::PlanMode::ParamCount;
    out.input.otherModuleParamCountScale = cfg.model.splitModelOtherModuleParamCountScale;
    const lora::LoraTargets targets(o.loraTargets.empty() ? llama::peftDefaultTargets() : o.loraTargets);
    auto count = [&](const llama::LlamaUnitParams& u) {
      int n = 0;
      for (const auto& l : u.linears) n += targets.matches(l.path);
      out.adapters[u.id] = n;
    };
    count(params.stem);
    for (const auto& b : params.blocks) count(b);
    count(params.head);
    return fp;
  }

  // Per Linear 4 x tokens x in x out (forward and input gradient; the base is
  // frozen), per adapter 6 x tokens x rank x (in + out), per layer 12 x B x L^2 x
  // q width for attention (two matmuls, forward and backward), lm_head included.
  double trainStepFlops(const config::RunConfig& cfg) const override {
    const auto lc = llamaConfigOf(cfg.model);
    const auto o = llamaPlanOptionsOf(cfg);
    const lora::LoraTargets targets(o.loraTargets.empty() ? llama::peftDefaultTargets() : o.loraTargets);
    const double tokens = static_cast<double>(o.batchSize * o.seqLen);
    const auto params = llama::llamaParamPlan(lc);
    double f = 0;
    auto add = [&](const llama::LlamaUnitParams& u) {
      for (const auto& l : u.linears) {
        const double in = static_cast<double>(l.inFeatures), out = static_cast<double>(l.outFeatures);
        f += 4 * tokens * in * out;
        if (targets.matches(l.path)) f += 6 * tokens * static_cast<double>(o.loraRank) * (in + out);
      }
    };
    for (const auto& b : params.blocks) add(b);
    add(params.head);
    if (lc.tieWordEmbeddings) f += 4 * tokens * static_cast<double>(lc.hiddenSize * lc.vocabSize);
    f += 12.0 * static_cast<double>(lc.numHiddenLayers) * static_cast<double>(o.batchSize) *
         static_cast<double>(o.seqLen) * static_cast<double>(o.seqLen) * static_cast<double>(lc.qDim());
    return f;
  }
  std::string checkpointPrefix() const override { return LlamaLoraRules::kPeftPrefix; }
  // The tiny model's config.json is written to <folder>/tiny-llama.
  config::RunConfig tinyRun(const std::filesystem::path& folder) const override {
    config::RunConfig c = train::tinyRunSettings("llama", folder);
    const fs::path model = folder / "tiny-llama";
    fs::create_directories(model);
    io::writeFileAtomic(model / "config.json", llama::LlamaConfig::tiny().toJson().dump(2));
    c.model.nameOrPath = model.string();
    config::DatasetConfig d;
    d.type = config::DatasetType::Synthetic;
    d.numItems = 4;
    d.maxSeqLen = 12;
    c.datasets = {d};
    c.save.exportFormats = {config::ExportFormat::Peft};
    return c;
  }
  std::vector<train::ConfigTemplate> templates() const override {
    return {
        {"llama-my-jsonl", "llama-my-jsonl.yaml", "My Llama-family model on my jsonl file, one GPU",
         "A LoRA of your own model (Llama, Mistral, Qwen2/3: a folder with config.json, the weights and "
         "tokenizer.json) on your own .jsonl file (a prompt and a response per line). You pick both; a peft "
         "adapter every 250 steps.",
         "datasets[0].file_path", false, "Your .jsonl file (one prompt and response per line)",
         "The model folder (config.json, the .safetensors weights, tokenizer.json; cancel to set it later)"},
    };
  }
  std::string formatProblem(config::ExportFormat format) const override {
    if (format == config::ExportFormat::Kohya || format == config::ExportFormat::Comfy)
      return config::enumName(format) + " is a FLUX file form; a Llama-family LoRA is written as a peft folder (peft)";
    return "";
  }

  // A folder: <job>[_step<N>]_peft (diffusers means the same form for this family).
  fs::path exportPathIn(const fs::path& dir, const config::RunConfig& cfg, config::ExportFormat format,
                        std::optional<int64_t> step) const override {
    (void)format;
    return dir / (cfg.job.name + (step ? "_step" + std::to_string(*step) : "") + "_peft");
  }

  void exportModules(const std::vector<lora::LoraModuleWeights>& modules, const config::RunConfig& cfg,
                     config::ExportFormat format, const fs::path& path, int64_t step,
                     const std::string& softwareVersion) const override {
    lora::PeftWriteOptions po;
    po.baseModelNameOrPath = cfg.model.nameOrPath;
    po.dropout = cfg.network.dropout;
    po.dtype = train::scalarTypeOf(cfg.save.dtype);
    try {
      for (const auto& l : LlamaLoraRules(llamaConfigOf(cfg.model)).linears()) po.modelLinearPaths.push_back(l.path);
    } catch (const std::exception&) {
      // The model folder is not here: target_modules then names the layers by their names.
    }
    lora::writePeftAdapter(path, modules, po);
    (void)format;
    (void)step;
    (void)softwareVersion;
  }
};

}  // namespace

std::shared_ptr<const train::ModelFamily> makeLlamaFamily() { return std::make_shared<LlamaFamily>(); }

}  // namespace strata::families
