#include "config/ConfigSchema.h"

#include "config/FamilyRegistry.h"
#include "config/KeyRows.h"

#include "common/Error.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>

namespace strata::config {
namespace {

// ---- building the table -----------------------------------------------------

using rows::Opt;

class Builder {
 public:
  template <class T>
  Builder& add(std::string path, rows::Accessor<T> ref, std::string doc, Opt opt = {}) {
    keys_.push_back(rows::keyRow(std::move(path), ref, std::move(doc), std::move(opt)));
    return *this;
  }
  Builder& addKey(KeySpec k) {
    keys_.push_back(std::move(k));
    return *this;
  }
  std::vector<KeySpec> take() { return std::move(keys_); }

 private:
  std::vector<KeySpec> keys_;
};

// A train key of true, false or auto (AutoSwitch), kept as two bools: its value and
// whether auto left the choice to prepareRun; until prepareRun chooses, the value
// reads `whileAuto`. A YAML boolean arrives as its text; a Value built in code may
// be a bool.
KeySpec autoSwitchRow(std::string path, std::string doc, Opt opt, bool TrainConfig::*value, bool TrainConfig::*isAuto,
                      bool whileAuto) {
  return rows::rowOf<AutoSwitch>(
      std::move(path), std::move(doc), std::move(opt),
      [value, isAuto](const RunConfig& c, size_t) {
        return rows::Conv<AutoSwitch>::to(c.train.*isAuto  ? AutoSwitch::Auto
                                          : c.train.*value ? AutoSwitch::On
                                                           : AutoSwitch::Off);
      },
      [value, isAuto, whileAuto](RunConfig& c, size_t, const Value& v) {
        const AutoSwitch mode = std::holds_alternative<bool>(v) ? (std::get<bool>(v) ? AutoSwitch::On : AutoSwitch::Off)
                                                                : rows::Conv<AutoSwitch>::from(v);
        c.train.*isAuto = mode == AutoSwitch::Auto;
        c.train.*value = mode == AutoSwitch::Auto ? whileAuto : mode == AutoSwitch::On;
      });
}

#define M(member) STRATA_KEY_MEMBER(member)
#define D(member) STRATA_KEY_DATASET(member)

std::vector<KeySpec> buildSchema() {
  Builder b;
  const double kInf = std::numeric_limits<double>::infinity();
  (void)kInf;
  // job
  b.add("job.name", M(job.name), "Name of the run: run folder and LoRA file stem (a plain folder name)",
        Opt()
            .check([](const Value& v) {
              const auto* s = std::get_if<std::string>(&v);
              return s ? runNameProblem(*s) : std::string();
            })
            .look("Run name", "Run", true))
      .add("job.training_folder", M(job.trainingFolder), "Folder that receives one sub-folder per run",
           Opt().folder().look("Output folder", "Run", true));
  // model
  b.add("model.name_or_path", M(model.nameOrPath),
        "FLUX checkpoint: a diffusers folder or a BFL .safetensors file (local; ignored with random_weights)",
        Opt().fileOrFolder().look("Base model", "Model", true))
      .add("model.tokenizer_path", M(model.tokenizerPath),
           "With single files: a folder holding tokenizer/ (CLIP) and tokenizer_2/ (T5), as in FLUX.1's diffusers "
           "folder",
           Opt().folder().look("Tokenizer folder (single files)", "Model"))
      .add("model.arch", M(model.arch),
           "Model family: flux (a FLUX.1 transformer), llama (a Llama, Mistral or Qwen2 causal LM folder) or flux2 "
           "(a FLUX.2 transformer: docs/flux2.md)",
           Opt().look("Model family", "Model", true).familyId())
      .add("model.random_weights", M(model.randomWeights),
           "Start from random weights instead of a checkpoint (demos and benchmarks)",
           Opt().look("Random weights (no download)", "Model"))
      .add("model.quantize", M(model.quantize),
           "Quantize the frozen transformer blocks' Linear weights (model.qtype; docs/quantization.md)",
           Opt().look("Quantize the model", "Model"))
      .add("model.qtype", M(model.qtype),
           "int8 (per output row), qfloat8 (fp8 e4m3, per output row), float8_e4m3 (fp8 e4m3, per tensor)",
           Opt().look("Quantization type", "Model"))
      .add("model.fp8_matmul", M(model.fp8Matmul),
           "With an fp8 qtype: multiply on the fp8 tensor cores (inputs quantized per token; CUDA sm_89+, "
           "LibTorch 2.5+, bf16) instead of converting the weight to bf16 per matmul (docs/quantization.md)",
           Opt().look("fp8 matrix multiplies", "Model"))
      .add("model.fp8_backward", M(model.fp8Backward),
           "With fp8_matmul: the input gradients on the fp8 tensor cores too (gradients quantized per token), "
           "instead of a bf16 matmul over the dequantized weight (docs/quantization.md)",
           Opt().look("fp8 matrix multiplies in the backward", "Model"))
      .add("model.fp8_keep_transpose", M(model.fp8KeepTranspose),
           "With fp8_backward: keep each fp8 weight's transposed copy for the run instead of making it in every "
           "backward (faster; 1 byte more per weight on its card, which the planner counts)",
           Opt().look("Keep the transposed fp8 weights", "Model"))
      .add("model.low_vram", M(model.lowVram),
           "ai-toolkit's quantize-on-CPU mode; refused when true (Strata quantizes block by block on the device)",
           Opt().look("ai-toolkit low-VRAM mode (refused)", "GPUs"))
      .add("model.device", M(model.device), "Where to train: auto (CUDA when present), cpu, cuda",
           Opt().look("Train on", "GPUs", true))
      .add("model.attention_backend", M(model.attentionBackend),
           "FLUX's CUDA attention kernel: auto (the default: for each attention shape, cuDNN's fused attention "
           "and flash are timed once on the card and the faster one whose numbers match flash's is kept; the "
           "choice is printed), cudnn (cuDNN where LibTorch prefers it, Hopper and newer; flash elsewhere) or "
           "flash (cuDNN off); Llama never uses cuDNN's attention",
           Opt().look("Attention kernel (CUDA)", "GPUs"))
      .add("model.split_model_over_gpus", M(model.splitModelOverGpus),
           "Split the transformer's blocks over the GPUs in gpu_ids",
           Opt().look("Split the model over the GPUs", "GPUs", true))
      .add("model.gpu_ids", M(model.gpuIds), "CUDA devices to use: \"0,1,2,3\" or [0, 1, 2, 3]; empty = all",
           Opt().min(0).max(1023).scalarAsList(true).commaString(true).look("GPUs to use", "GPUs", true))
      .add("model.replicas", M(model.replicas),
           "Data parallel on this machine: this many replicas of the device set above, one process each on its own "
           "group of cards (`run` starts them as --nproc would; --nproc on the command line wins); 1 = one process",
           Opt().min(1).max(1024).look("Replicas (data parallel)", "GPUs"))
      .add("model.placement", M(model.placement),
           "How blocks are assigned to GPUs: param_count (ai-toolkit) or memory (per-device budgets)",
           Opt().look("How to split", "GPUs"))
      .add("model.gpu_memory_limit_gb", M(model.gpuMemoryLimitGb),
           "Memory cap per GPU: one value for all or one per gpu_ids entry; empty = no cap",
           Opt().unit("GB").min(0).max(100000).minExclusive(true).scalarAsList(true).look("Memory cap per GPU", "GPUs"))
      .add("model.memory_reserve_gb", M(model.memoryReserveGb),
           "Memory kept free on each GPU for the CUDA context and workspaces",
           Opt().unit("GB").min(0).max(1000).look("Memory kept free per GPU", "GPUs"));
  // network
  b.add("network.type", M(network.type), "Adapter type", Opt().look("Adapter type", "LoRA"))
      .add("network.linear", M(network.linear), "LoRA rank", Opt().min(1).max(1024).look("Rank", "LoRA", true))
      .add("network.linear_alpha", M(network.linearAlpha), "LoRA alpha: the update is scaled by alpha / rank",
           Opt().min(0).max(100000).minExclusive(true).look("Alpha", "LoRA"))
      .add("network.dropout", M(network.dropout), "Dropout on the LoRA input",
           Opt().min(0).max(1).look("Dropout", "LoRA"))
      .add("network.target_modules", M(network.targetModules),
           "Module path patterns (* and ?) to adapt; empty = every Linear in the blocks",
           Opt().scalarAsList(true).look("Layers to adapt", "LoRA"))
      .add("network.dtype", M(network.dtype),
           "The LoRA weights, their gradients and AdamW moments: fp32 (precise) or bf16 (half their memory, as peft "
           "trains on a bf16 model; an update below a weight's bf16 step is rounded away); bf16 needs "
           "train.dtype bf16",
           Opt().look("LoRA precision", "LoRA"));
  // train
  b.add("train.steps", M(train.steps), "Optimizer steps to train",
        Opt().unit("steps").min(1).max(1e8).look("Steps", "Training", true))
      .add("train.batch_size", M(train.batchSize), "Images per forward pass",
           Opt().min(1).max(1024).look("Batch size", "Training"))
      .add("train.gradient_accumulation_steps", M(train.gradientAccumulationSteps),
           "Forward/backward passes per optimizer step",
           Opt().min(1).max(1024).look("Passes per step (accumulation)", "Training"))
      .add("train.lr", M(train.lr), "Learning rate",
           Opt().min(0).max(1).minExclusive(true).look("Learning rate", "Training", true))
      .add("train.lr_scheduler", M(train.lrScheduler), "Learning-rate schedule",
           Opt().look("Learning-rate schedule", "Optimizer"))
      .add("train.lr_warmup_steps", M(train.lrWarmupSteps), "Linear warm-up length (warmup, cosine, linear)",
           Opt().unit("steps").min(0).max(1e8).look("Warm-up", "Optimizer"))
      .add("train.optimizer", M(train.optimizer),
           "Optimizer: adamw (float32 moments) or adamw8bit (the same update with both moments stored in 8 bits: "
           "a quarter of the optimizer state's memory)",
           Opt().look("Optimizer", "Optimizer"))
      .add("train.weight_decay", M(train.weightDecay), "AdamW decoupled weight decay",
           Opt().min(0).max(1).look("Weight decay", "Optimizer"))
      .add("train.betas", M(train.betas), "AdamW beta1, beta2",
           Opt().min(0).max(1).listSize(2).look("Adam betas", "Optimizer"))
      .add("train.eps", M(train.eps), "AdamW epsilon",
           Opt().min(0).max(1).minExclusive(true).look("Adam epsilon", "Optimizer"))
      .add("train.max_grad_norm", M(train.maxGradNorm), "Clip the gradient norm to this; 0 = no clipping",
           Opt().min(0).max(1e6).look("Gradient clipping", "Optimizer"))
      .add("train.dtype", M(train.dtype), "Base weights and activations (bf16 needs compute capability 8.0+)",
           Opt().look("Precision", "Training"))
      // Auto reads true until prepareRun chooses (RunConfig.h).
      .addKey(autoSwitchRow(
          "train.gradient_checkpointing",
          "Recompute block activations in the backward pass (less memory, ~30% slower): true, false, or auto "
          "(off where the plan fits the cards without it, on elsewhere; the run says which)",
          Opt().look("Save memory (recompute activations)", "Training"), &TrainConfig::gradientCheckpointing,
          &TrainConfig::gradientCheckpointingAuto, /*whileAuto=*/true))
      .add("train.offload_checkpoints", M(train.offloadCheckpoints),
           "With gradient checkpointing: keep each block's saved input in pinned host memory, not on the GPU "
           "(FLUX.1-dev at 1024 px: 1.5 GB less on the card, ~0.5 ms of copying per block each way)",
           Opt().look("Keep checkpoints in host memory", "Training"))
      // Auto reads false until prepareRun chooses: no rule for `true` fires on it.
      .addKey(autoSwitchRow(
          "train.offload_optimizer_state",
          "adamw: keep the optimizer's moments in pinned host memory between steps, not on the GPU; each step "
          "copies them to the card in 64 MiB pieces and back (FLUX.1-dev LoRA rank 16: 0.49 GiB less on the "
          "card, ~1 GB over PCIe per step): true, false, or auto (on the card where the plan fits with them "
          "there, in host memory elsewhere; the run says which)",
          Opt().look("Keep optimizer state in host memory", "Optimizer"), &TrainConfig::offloadOptimizerState,
          &TrainConfig::offloadOptimizerStateAuto, /*whileAuto=*/false))
      .add("train.cuda_graph", M(train.cudaGraph),
           "Record the step's forward and backward once (step 3) and replay it, so the CPU no longer launches "
           "every kernel (short steps are bound by those launches); keeps the step's activation memory reserved "
           "between steps. auto: where it applies (one CUDA card per rank, micro-batches of one shape, not fp16, "
           "no LoRA dropout with checkpointing), else eager with the reason said once; "
           "true: always (the validator refuses what cannot work); false: never",
           Opt().look("Replay the step as a CUDA graph", "Training"))
      .add("train.seed", M(train.seed), "Random seed (noise, timesteps, LoRA init, data order)",
           Opt().min(0).max(9.2e18).look("Seed", "Training"))
      .add("train.ema_config.use_ema", M(train.ema.useEma), "Keep an exponential moving average of the LoRA weights",
           Opt().look("Keep an average of the weights", "Averaging (EMA)"))
      .add("train.ema_config.ema_decay", M(train.ema.emaDecay), "EMA decay per update",
           Opt().min(0).max(1).minExclusive(true).look("Decay", "Averaging (EMA)"))
      .add("train.ema_config.update_every", M(train.ema.updateEvery), "Update the EMA every N steps",
           Opt().unit("steps").min(1).max(1e6).look("Update every", "Averaging (EMA)"));
  // datasets
  b.add("datasets[].type", D(type),
        "images (folder of images + captions), latents (cached), synthetic or shapes (drawn by the trainer)",
        Opt().look("Kind of dataset", "Dataset", true))
      .add("datasets[].num_items", D(numItems),
           "Items drawn by a synthetic or shapes dataset (a causal LM's: max_seq_len random tokens each)",
           Opt()
               .min(1)
               .max(1e7)
               .look("Items to draw", "Dataset")
               .datasetTypes({DatasetType::Synthetic, DatasetType::Shapes}));
  // sample
  b.add("sample.sample_every", M(sample.sampleEvery), "Sample images every N steps; 0 = never",
        Opt().unit("steps").min(0).max(1e8).look("Sample every", "Samples", true))
      .add("sample.prompts", M(sample.prompts), "Prompts to sample",
           Opt().scalarAsList(true).look("Sample prompts", "Samples", true))
      .add("sample.seed", M(sample.seed), "Sampling seed", Opt().min(0).max(9.2e18).look("Sample seed", "Samples"))
      .add("sample.walk_seed", M(sample.walkSeed), "Prompt i uses seed + i",
           Opt().look("A new seed per prompt", "Samples"));
  // save
  b.add("save.save_every", M(save.saveEvery), "Save a checkpoint every N steps; 0 = only at the end",
        Opt().unit("steps").min(0).max(1e8).look("Save a checkpoint every", "Saving"))
      .add("save.max_step_saves_to_keep", M(save.maxStepSavesToKeep), "Older step checkpoints are deleted",
           Opt().min(1).max(100000).look("Checkpoints to keep", "Saving"))
      .add("save.export_every", M(save.exportEvery),
           "Also write the LoRA files every N steps into the run folder's exports/, named with the step "
           "(<job>_step<N>_<format>), to compare them; 0 = only at the end",
           Opt().unit("steps").min(0).max(1e8).look("Write a LoRA file every", "Saving"))
      .add("save.dtype", M(save.dtype), "dtype of the saved LoRA weights", Opt().look("LoRA file precision", "Saving"))
      .add("save.export_formats", M(save.exportFormats), "LoRA files written at each save",
           Opt().scalarAsList(true).look("LoRA file formats", "Saving"));
  return b.take();
}

#undef M
#undef D

// ---- how a form shows each key ------------------------------------------------

const std::vector<std::string> kGroups = {"Run",       "Model",           "Model shape", "Dataset", "LoRA",  "Training",
                                          "Optimizer", "Averaging (EMA)", "GPUs",        "Samples", "Saving"};

// The groups of the keys of every family are the ones above (tests/config checks it).

}  // namespace

const std::vector<std::string>& keyGroups() { return kGroups; }

std::string keyTypeName(KeyType type) {
  switch (type) {
    case KeyType::Bool:
      return "bool";
    case KeyType::Int:
      return "int";
    case KeyType::Float:
      return "float";
    case KeyType::String:
      return "string";
    case KeyType::Path:
      return "path";
    case KeyType::Choice:
      return "choice";
    case KeyType::IntList:
      return "int list";
    case KeyType::FloatList:
      return "float list";
    case KeyType::StringList:
      return "string list";
    case KeyType::ChoiceList:
      return "choice list";
  }
  return "?";
}

bool KeySpec::appliesTo(const std::string& family) const {
  return families.empty() || std::find(families.begin(), families.end(), family) != families.end();
}

bool KeySpec::appliesToDataset(DatasetType type) const {
  return datasetTypes.empty() || std::find(datasetTypes.begin(), datasetTypes.end(), type) != datasetTypes.end();
}

const std::string& KeySpec::docFor(const std::string& family) const {
  for (const auto& [f, d] : familyDocs)
    if (f == family) return d;
  return doc;
}

std::string KeySpec::rangeText() const {
  if (!choices.empty()) {
    std::string s = "one of:";
    for (const auto& c : choices) s += " " + (c.empty() ? std::string("\"\"") : c);
    return s;
  }
  if (!min && !max) return "";
  std::string s = minExclusive ? "(" : "[";
  s += min ? formatNumber(*min) : "-inf";
  s += ", ";
  s += max ? formatNumber(*max) : "inf";
  s += "]";
  return s;
}

std::vector<KeySpec> sharedKeyRows() { return buildSchema(); }

std::pair<std::string, size_t> splitDatasetPath(std::string_view path) {
  const std::string_view prefix = "datasets[";
  if (path.substr(0, prefix.size()) != prefix) return {std::string(path), 0};
  const size_t close = path.find(']');
  if (close == std::string_view::npos) return {std::string(path), 0};
  const std::string_view digits = path.substr(prefix.size(), close - prefix.size());
  size_t index = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return {std::string(path), 0};
    index = index * 10 + static_cast<size_t>(ch - '0');
    if (index > 1000000) return {std::string(path), 0};
  }
  return {"datasets[]" + std::string(path.substr(close + 1)), index};
}

const KeySpec* findKey(std::string_view path) {
  const std::string pattern = splitDatasetPath(path).first;
  for (const auto& k : schema())
    if (k.path == pattern) return &k;
  return nullptr;
}

namespace {
const KeySpec& requireKey(std::string_view path) {
  const KeySpec* k = findKey(path);
  if (!k) throw ConfigError("unknown config key '" + std::string(path) + "'");
  return *k;
}
}  // namespace

Value getValue(const RunConfig& cfg, std::string_view path) {
  const KeySpec& k = requireKey(path);
  const size_t index = splitDatasetPath(path).second;
  if (k.isDatasetKey() && index >= cfg.datasets.size())
    throw ConfigError(std::string(path) + ": there are only " + std::to_string(cfg.datasets.size()) + " datasets");
  return k.get(cfg, index);
}

void setValue(RunConfig& cfg, std::string_view path, const Value& value) {
  const KeySpec& k = requireKey(path);
  const size_t index = splitDatasetPath(path).second;
  if (k.isDatasetKey()) {
    if (index > cfg.datasets.size())
      throw ConfigError(std::string(path) + ": datasets can only grow by one entry at a time (there are " +
                        std::to_string(cfg.datasets.size()) + ")");
    if (index == cfg.datasets.size()) cfg.datasets.emplace_back();
  }
  if (std::holds_alternative<std::monostate>(value) && !k.nullable)
    throw ConfigError(std::string(path) + ": a value is required");
  try {
    k.set(cfg, index, value);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(path) + ": " + e.what());
  }
}

std::string getValueText(const RunConfig& cfg, std::string_view path) { return formatValue(getValue(cfg, path)); }

std::string formatDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // Keep a float looking like a float in YAML ("1" -> "1.0").
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string formatNumber(double v) {
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  std::string s = formatDouble(v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

namespace {
std::string scalarText(const std::string& s) {
  YAML::Emitter out;
  out << s;
  return out.c_str();
}
}  // namespace

namespace {
struct FormatVisitor {
  std::string operator()(std::monostate) const { return ""; }
  std::string operator()(bool b) const { return b ? "true" : "false"; }
  std::string operator()(int64_t i) const { return std::to_string(i); }
  std::string operator()(double d) const { return formatDouble(d); }
  std::string operator()(const std::string& s) const { return scalarText(s); }
  template <class T>
  std::string operator()(const std::vector<T>& l) const {
    std::string s = "[";
    for (size_t i = 0; i < l.size(); ++i) {
      if (i) s += ", ";
      s += (*this)(l[i]);
    }
    return s + "]";
  }
};
}  // namespace

std::string formatValue(const Value& value) { return std::visit(FormatVisitor{}, value); }

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {

// Length of the UTF-8 sequence at `s[i]` and its code point; 0 when malformed
// (bad lead or continuation byte, overlong form, surrogate, beyond U+10FFFF).
size_t utf8At(const std::string& s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if ((c & 0xE0) == 0xC0)
    n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0)
    n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static const uint32_t kMinOf[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinOf[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string runNameProblem(const std::string& name) {
  if (name.empty()) return "must not be empty: it names the run's folder and its LoRA files";
  if (name == "." || name == "..") return "'" + name + "' is not a folder name";
  if (name.find('/') != std::string::npos)
    return "must be one folder name, without '/' (put folders in job.training_folder)";
  if (name.size() > kMaxRunNameBytes)
    return "is " + std::to_string(name.size()) + " bytes long; at most " + std::to_string(kMaxRunNameBytes);
  for (size_t i = 0; i < name.size();) {
    uint32_t cp = 0;
    const size_t n = utf8At(name, i, cp);
    if (n == 0) return "is not valid UTF-8 (byte " + std::to_string(i) + ")";
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0))
      return "holds a control character (byte " + std::to_string(i) + ")";
    i += n;
  }
  return "";
}

}  // namespace strata::config
