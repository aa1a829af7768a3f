#include "config/Validator.h"

#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"

#include "common/TorchCompat.h"
#include "config/ConfigSchema.h"
#include "config/FamilyRegistry.h"
#include "io/FileBytes.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

namespace strata::config {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::string withArticle(const std::string& word) {
  const bool vowel = !word.empty() && std::string("aeiouAEIOU").find(word.front()) != std::string::npos;
  return (vowel ? "an " : "a ") + word;
}

namespace {

// What a family that is not registered says: nothing of its own.
const FamilyDescription kNoFamily{};

class Checker : public RuleContext {
 public:
  Checker(const RunConfig& cfg, const ValidateOptions& opt)
      : cfg_(cfg), opt_(opt), known_(findFamily(cfg.model.arch)), fam_(known_ ? *known_ : kNoFamily) {}

  const RunConfig& config() const override { return cfg_; }
  const ValidateOptions& options() const override { return opt_; }

  void add(Severity s, const std::string& key, std::string message, std::string hint = "") {
    problems_.push_back(problemAt(s, key, std::move(message), std::move(hint), opt_.where));
  }
  void error(const std::string& key, std::string message, std::string hint = "") override {
    add(Severity::Error, key, std::move(message), std::move(hint));
  }
  void warning(const std::string& key, std::string message, std::string hint = "") override {
    add(Severity::Warning, key, std::move(message), std::move(hint));
  }

  bool hasImages() const override {
    for (const DatasetConfig& d : cfg_.datasets)
      if (d.type == DatasetType::Images) return true;
    return false;
  }

  // " (line 12)" when the key was written in the file.
  std::string lineOf(const std::string& key) const override {
    if (!opt_.where || !opt_.where->has(key)) return "";
    const SourcePos pos = opt_.where->find(key);
    if (!pos.origin.empty()) return " (" + pos.origin + ")";
    return pos.line > 0 ? " (line " + std::to_string(pos.line) + ")" : "";
  }

  std::vector<Problem> run() {
    ranges();
    model();
    devices();
    quantization();  // needs no paths: a plan with an unknown qtype is refused too
    if (opt_.placementOnly) return std::move(problems_);
    paths();
    training();
    datasets();
    sampling();
    saving();
    return std::move(problems_);
  }

 private:
  // Every number against the schema's range; lists element by element.
  void ranges() {
    for (const KeySpec& spec : schema()) {
      // A key the family does not read is said to be ignored (familyKeys), not held to FLUX's ranges.
      if (!spec.appliesTo(cfg_.model.arch)) continue;
      const size_t count = spec.isDatasetKey() ? cfg_.datasets.size() : 1;
      for (size_t i = 0; i < count; ++i) {
        const std::string key =
            spec.isDatasetKey() ? "datasets[" + std::to_string(i) + "]" + spec.path.substr(10) : spec.path;
        const Value v = spec.get(cfg_, i);
        std::vector<double> numbers;
        if (auto* x = std::get_if<int64_t>(&v)) numbers.push_back(static_cast<double>(*x));
        if (auto* x = std::get_if<double>(&v)) numbers.push_back(*x);
        if (auto* l = std::get_if<std::vector<int64_t>>(&v)) numbers.assign(l->begin(), l->end());
        if (auto* l = std::get_if<std::vector<double>>(&v)) numbers = *l;
        if (spec.listSize) {
          size_t n = numbers.size();
          if (auto* l = std::get_if<std::vector<std::string>>(&v)) n = l->size();
          if (n != *spec.listSize) {
            error(key, "expected " + std::to_string(*spec.listSize) + " values, got " + std::to_string(n),
                  "e.g. " + formatValue(spec.defaultValue));
            continue;
          }
        }
        // "~/runs" is a shell's shorthand: unexpanded, it would make a folder named "~" here.
        if (spec.type == KeyType::Path)
          if (auto* text = std::get_if<std::string>(&v); text && !text->empty() && (*text)[0] == '~') {
            const char* home = std::getenv("HOME");
            const bool mine = text->size() == 1 || (*text)[1] == '/';
            error(key, "'" + *text + "' starts with '~', which only a shell expands",
                  mine && home && *home ? "write the full path: " + std::string(home) + text->substr(1)
                                        : std::string("write the full path"));
            continue;
          }
        if (spec.check) {
          const std::string why = spec.check(v);
          if (!why.empty()) {
            error(key, why, "e.g. " + formatValue(spec.defaultValue));
            continue;
          }
        }
        for (double x : numbers) {
          const bool low = spec.min && (spec.minExclusive ? !(x > *spec.min) : !(x >= *spec.min));
          const bool high = spec.max && !(x <= *spec.max);
          if (low || high || std::isnan(x)) {
            error(key, formatNumber(x) + " is out of range",
                  "allowed: " + spec.rangeText() + (spec.unit.empty() ? "" : " " + spec.unit));
            break;
          }
        }
      }
    }
  }

  void model() {
    if (!known_)
      error("model.arch", "'" + cfg_.model.arch + "' is not a model family of this program",
            "use one of: " + familyIdList());
    if (fam_.rules.arch) fam_.rules.arch(*this);
    preset();
    familyKeys();
    if (fam_.rules.model) fam_.rules.model(*this);
  }

  // model.preset names one of the chosen family's shapes.
  void preset() {
    const std::string& p = cfg_.model.preset;
    if (p.empty() || !known_ || fam_.presets.empty()) return;  // a family without presets: keysNotRead says it
    if (std::find(fam_.presets.begin(), fam_.presets.end(), p) != fam_.presets.end()) return;
    std::string mine;
    for (const auto& n : fam_.presets) mine += (mine.empty() ? "" : ", ") + n;
    const FamilyDescription* other = familyOfPreset(p);
    if (other)
      error("model.preset", p + " is a " + other->displayName + " shape, and model.arch is " + cfg_.model.arch,
            "set model.arch: " + other->id + ", or use " + mine);
    else
      error("model.preset", "'" + p + "' is not a " + fam_.displayName + " shape", "use " + mine);
  }

  // A key set away from its default that the chosen family does not read: said,
  // not ignored in silence.
  void familyKeys() {
    for (const UnreadKey& k : keysNotRead(cfg_, cfg_.model.arch))
      warning(k.key, "ignored: a " + cfg_.model.arch + " model does not read it" + lineOf("model.arch"));
  }
  // The CUDA devices the run will use; empty when on the CPU or when unknown.
  std::vector<device::DeviceInfo> gpus() const {
    std::vector<device::DeviceInfo> out;
    if (opt_.devices)
      for (const auto& d : *opt_.devices)
        if (!d.isCpu()) out.push_back(d);
    return out;
  }

  void devices() {
    const ModelConfig& m = cfg_.model;
    const bool onCpu = m.device == ComputeDevice::Cpu;

    // Accepted for ai-toolkit's files, but refused: its low_vram quantizes on the
    // CPU to save GPU memory; Strata quantizes block by block on the target
    // device already, so there is nothing for it to switch (docs/quantization.md).
    if (m.lowVram && m.splitModelOverGpus)
      error("model.low_vram",
            "low_vram cannot be combined with split_model_over_gpus" + lineOf("model.split_model_over_gpus"),
            "set low_vram: false; the split already spreads the weights over the GPUs");
    else if (m.lowVram)
      error("model.low_vram",
            "Strata has no low-VRAM mode (ai-toolkit's low_vram quantizes on the CPU; Strata quantizes block by "
            "block on the training device already)",
            "set low_vram: false; gradient_checkpointing and split_model_over_gpus are how Strata saves GPU memory");

    // Duplicates make no sense in any mode.
    std::set<int> seen;
    for (int id : m.gpuIds)
      if (!seen.insert(id).second) {
        error("model.gpu_ids", "gpu id " + std::to_string(id) + " is listed twice");
        break;
      }

    if (onCpu && !m.gpuIds.empty()) warning("model.gpu_ids", "ignored: model.device is cpu" + lineOf("model.device"));

    // On the CPU, fp16 needs a LibTorch with fp16 CPU kernels (a property of this
    // build, not of the config); without them step 1 would fail in the first Linear.
    const bool cpuRun = onCpu || (m.device == ComputeDevice::Auto && opt_.devices && gpus().empty());
    if (cpuRun && cfg_.train.dtype == DType::FP16 && !device::cpuHasHalfMatmul())
      error("train.dtype",
            "fp16 on the CPU: this LibTorch (" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                std::to_string(TORCH_VERSION_MINOR) + ") has no fp16 matrix multiply on the CPU" +
                lineOf(onCpu ? "model.device" : ""),
            "use dtype: fp32 (or bf16) on the CPU");

    if (m.splitModelOverGpus) {
      if (onCpu) {
        error("model.split_model_over_gpus",
              "a split needs CUDA devices, but model.device is cpu" + lineOf("model.device"),
              "set device: auto or cuda, or split_model_over_gpus: false");
      } else if (seen.size() == 1) {
        error("model.gpu_ids", "split_model_over_gpus needs at least two GPUs, gpu_ids lists one",
              "list two or more devices, e.g. gpu_ids: \"0,1\", or set split_model_over_gpus: false");
      }
    }

    if (!opt_.devices || onCpu) return;
    const device::DeviceSelection sel = device::selectDevices(deviceRequestOf(m), *opt_.devices);
    for (const auto& p : sel.problems) {
      switch (p.issue) {
        case device::SelectionIssue::NoCuda:
          error("model.device", p.message, "set device: cpu or auto");
          break;
        case device::SelectionIssue::UnknownGpu:
          error("model.gpu_ids", p.message,
                gpus().empty() ? "this machine has no GPU: set device: cpu"
                               : "use ids between 0 and " + std::to_string(gpus().size() - 1));
          break;
        case device::SelectionIssue::TooFewForSplit:
          // One listed id is the rule above; here the machine has too few.
          if (m.gpuIds.empty()) error("model.split_model_over_gpus", p.message, "set split_model_over_gpus: false");
          break;
      }
    }
    if (!sel.ok()) return;

    if (cfg_.train.dtype == DType::BF16) {
      for (const auto& d : sel.devices)
        if (d.ccMajor > 0 && !d.supportsBf16()) {  // ccMajor 0: architecture unknown (and the cpu)
          error("train.dtype",
                "bf16 needs compute capability 8.0 or newer; " + d.label() + " (" + d.name + ") is " +
                    std::to_string(d.ccMajor) + "." + std::to_string(d.ccMinor),
                "use dtype: fp16 on this card");
          break;
        }
    }

    const device::DeviceCaps caps = device::resolveCaps(sel.devices, m.gpuMemoryLimitGb);
    if (!caps.ok()) {
      error("model.gpu_memory_limit_gb", caps.problem, "give one value for all devices or one per gpu_ids entry");
      return;
    }
    for (size_t i = 0; i < sel.devices.size(); ++i) {
      const auto& d = sel.devices[i];
      if (d.simulated && d.totalBytes > 0 && caps.capBytes[i] > d.totalBytes) {
        warning("model.gpu_memory_limit_gb", "cap " + device::formatBytes(caps.capBytes[i]) + " is above " + d.label() +
                                                 "'s " + device::formatBytes(d.totalBytes) +
                                                 "; the device's memory is the limit");
        break;
      }
    }
  }

  // model.fp8_matmul: fp8 weights multiplied on fp8 tensor cores (at::_scaled_mm),
  // which exist on CUDA sm_89+ with LibTorch 2.5+ and write bf16. Every reason that
  // applies is said, each with what works instead.
  void fp8Matmul() {
    const ModelConfig& m = cfg_.model;
    if (m.fp8Backward && !m.fp8Matmul)
      error("model.fp8_backward",
            "fp8 input gradients belong to the fp8 matmul, but model.fp8_matmul is false" + lineOf("model.fp8_matmul"),
            "set fp8_matmul: true (with an fp8 qtype), or fp8_backward: false");
    if (m.fp8KeepTranspose && !m.fp8Backward)
      error("model.fp8_keep_transpose",
            "the kept transposed weights serve the fp8 backward, but model.fp8_backward is false" +
                lineOf("model.fp8_backward"),
            "set fp8_backward: true (with fp8_matmul: true), or fp8_keep_transpose: false");
    if (!m.fp8Matmul) return;
    const std::string key = "model.fp8_matmul";
    if (!m.quantize) {
      error(key, "fp8 matmuls multiply a quantized base, but model.quantize is false" + lineOf("model.quantize"),
            "set quantize: true with qtype: qfloat8, or fp8_matmul: false");
      return;
    }
    const bool int8 = m.qtype == "int8";
    if (int8)
      error(key, "fp8 matmuls need fp8 weights; qtype int8 stores int8" + lineOf("model.qtype"),
            "set qtype: qfloat8 (or float8_e4m3), or fp8_matmul: false: int8 with the dequantizing matmul works "
            "everywhere");
    const std::string instead = int8 || !compat::kHasFloat8 ? "int8" : m.qtype;
    const bool cpuRun =
        m.device == ComputeDevice::Cpu || (m.device == ComputeDevice::Auto && opt_.devices && gpus().empty());
    if (cpuRun) {
      error(key, "fp8 matmuls run on CUDA cards only, and this run is on the CPU" + lineOf("model.device"),
            "set fp8_matmul: false; " + instead + " with the default dequantizing matmul works on the CPU");
    } else if (opt_.devices) {
      const device::DeviceSelection sel = device::selectDevices(deviceRequestOf(m), *opt_.devices);
      for (const auto& d : sel.devices) {
        if (d.isCpu() || d.ccMajor == 0) continue;  // ccMajor 0: architecture unknown
        if (d.ccMajor * 10 + d.ccMinor >= 89) continue;
        error(key,
              "fp8 tensor cores need compute capability 8.9 (Ada) or newer; " + d.label() + " (" + d.name + ") is " +
                  std::to_string(d.ccMajor) + "." + std::to_string(d.ccMinor),
              "set fp8_matmul: false; " + instead + " with the default dequantizing matmul works on this card");
        break;
      }
    }
    if (!compat::kHasScaledMm && !opt_.placementOnly)
      error(key,
            "this LibTorch (" + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                ") has no fp8 matmul with row-wise scales (at::_scaled_mm, 2.5 on)",
            "set fp8_matmul: false; " + instead + " with the default dequantizing matmul works on this build");
    if (cfg_.train.dtype != DType::BF16)
      error("train.dtype", "fp8 matmuls (model.fp8_matmul) write bf16; train.dtype is " + enumName(cfg_.train.dtype),
            "set dtype: bf16, or fp8_matmul: false");
  }

  void quantization() {
    const ModelConfig& m = cfg_.model;
    fp8Matmul();
    if (!m.quantize && !m.quantizeTe) return;
    const auto& known = knownQtypes();
    if (std::find(known.begin(), known.end(), m.qtype) == known.end()) {
      std::string list;
      for (const auto& q : known) list += (list.empty() ? "" : ", ") + q;
      error("model.qtype", "quantization type '" + m.qtype + "' is not supported by Strata",
            "Strata knows only: " + list);
      return;
    }
    // A preview may be for another machine's build: what this LibTorch has is a run's check.
    if (!opt_.placementOnly && !qtypeAvailable(m.qtype)) {
      error("model.qtype",
            "'" + m.qtype + "' needs float8 tensors, which this LibTorch (" + std::to_string(TORCH_VERSION_MAJOR) +
                "." + std::to_string(TORCH_VERSION_MINOR) + ") does not have (they exist from 2.1 on)",
            "set qtype: int8 (weight-only, per output row; works on every build and card)");
      return;
    }
    // fp8 weights are dequantized per matmul, so any card with float8 dtypes runs
    // them; only fp8 matmuls (model.fp8_matmul, above) need sm_89+. quantize_te uses
    // the same qtype for T5, so the checks above cover it too.
  }

  // random_weights with a model path that holds weights: the run would train a LoRA on
  // random values and name the user's model as its base. Said for every family (a
  // family may read a weightless folder with random weights: a causal LM's config.json).
  void randomWeights() {
    const ModelConfig& m = cfg_.model;
    if (!m.randomWeights || m.nameOrPath.empty() || !holdsWeights(m.nameOrPath)) return;
    error("model.random_weights",
          "random_weights is true, so the weights in " + m.nameOrPath + lineOf("model.name_or_path") +
              " are not read: the LoRA would be trained on a random model",
          "set random_weights: false to train on these weights, or clear model.name_or_path for a random model "
          "(its tokenizers, where it reads text, come from model.tokenizer_path)");
  }

  void paths() {
    if (!opt_.checkPaths) return;
    const ModelConfig& m = cfg_.model;
    randomWeights();
    if (fam_.rules.paths) fam_.rules.paths(*this);
    // A causal LM reads its shape from config.json even with random weights.
    const bool readsModel = fam_.readsModelWithRandomWeights;
    if (m.nameOrPath.empty() && (!m.randomWeights || readsModel)) {
      error("model.name_or_path",
            !readsModel
                ? std::string("no model given")
                : "no model given: a " + cfg_.model.arch + " model reads its config.json there" + lineOf("model.arch"),
            fam_.hints.modelFolder);
    } else if (!m.randomWeights) {
      const std::string why = io::pathProblem(m.nameOrPath);
      if (!why.empty() && why != "no such file or folder") {
        error("model.name_or_path", m.nameOrPath + ": " + why);
      } else if (!why.empty()) {
        const bool looksLikeRepo = looksLikeHubId(m.nameOrPath);
        if (looksLikeRepo)
          error("model.name_or_path",
                m.nameOrPath +
                    " is not a folder here; it looks like a Hugging Face hub id, and Strata reads "
                    "local files only",
                hubDownloadHint(m.nameOrPath));
        else
          error("model.name_or_path", "not found: " + m.nameOrPath, fam_.hints.modelNotFound);
      }
    }
    if (fam_.rules.modelPath) fam_.rules.modelPath(*this);
    for (size_t i = 0; i < cfg_.datasets.size(); ++i) {
      const DatasetConfig& d = cfg_.datasets[i];
      if (d.type == DatasetType::Jsonl) {
        const std::string key = "datasets[" + std::to_string(i) + "].file_path";
        std::error_code ec;
        if (d.filePath.empty())
          error(key, "a jsonl dataset needs its file", "set file_path to the .jsonl file");
        else if (const std::string why = io::pathProblem(d.filePath); !why.empty())
          error(key, why == "no such file or folder" ? "file not found: " + d.filePath : d.filePath + ": " + why);
        else if (!fs::is_regular_file(d.filePath, ec))
          error(key, "not a file: " + d.filePath);
        continue;
      }
      if (d.type != DatasetType::Images && d.type != DatasetType::Latents) continue;
      const std::string key = "datasets[" + std::to_string(i) + "].folder_path";
      std::error_code ec;
      if (d.folderPath.empty()) {
        error(key, withArticle(enumName(d.type)) + " dataset needs a folder",
              "set folder_path to the folder of the " +
                  std::string(d.type == DatasetType::Images ? "images and captions" : "cached latents"));
      } else if (const std::string why = io::pathProblem(d.folderPath); !why.empty()) {
        error(key, why == "no such file or folder" ? "folder not found: " + d.folderPath : d.folderPath + ": " + why);
      } else if (!fs::is_directory(d.folderPath, ec)) {
        error(key, "not a folder: " + d.folderPath);
      }
    }
  }

  void training() {
    const TrainConfig& t = cfg_.train;
    if (t.lr > 1e-2 && t.lr <= 1)
      warning("train.lr", "a learning rate of " + formatNumber(t.lr) + " is very high for LoRA", fam_.hints.lr);
    if (t.lrScheduler != LrScheduler::Constant && t.lrWarmupSteps >= t.steps)
      warning("train.lr_warmup_steps", "the warm-up (" + std::to_string(t.lrWarmupSteps) +
                                           " steps) is not shorter than the run (" + std::to_string(t.steps) + ")");
    if (t.lrScheduler == LrScheduler::Constant && t.lrWarmupSteps > 0)
      warning("train.lr_warmup_steps", "ignored: lr_scheduler is constant" + lineOf("train.lr_scheduler"),
              "use lr_scheduler: warmup");
    if (t.ema.useEma && t.ema.updateEvery > t.steps)
      warning("train.ema_config.update_every", "the EMA is never updated: update_every is above train.steps");
    if (t.offloadCheckpoints && !t.gradientCheckpointing)
      warning("train.offload_checkpoints",
              "has no effect: it keeps checkpointed block inputs in host memory, and gradient_checkpointing is off" +
                  lineOf("train.gradient_checkpointing"),
              "set gradient_checkpointing: true, or offload_checkpoints: false");
    if (t.offloadOptimizerState) offloadOptimizerState();
    if (t.cudaGraph == CudaGraphMode::On) cudaGraph();
    networkDtype();
  }

  // network.dtype: bf16 LoRA weights are computed with the activations as they are,
  // so only beside a bf16 base; fp16 weights without float32 masters lose small
  // updates and gradients (no loss scaler reaches them).
  void networkDtype() {
    const DType d = cfg_.network.dtype;
    if (d == DType::FP16)
      error("network.dtype", "fp16 LoRA weights are not supported: updates and gradients below fp16's range are lost",
            "use dtype: fp32 (the default), or bf16 with train.dtype bf16");
    else if (d == DType::BF16 && cfg_.train.dtype != DType::BF16)
      error("network.dtype",
            "bf16 LoRA weights need a bf16 base, and train.dtype is " + enumName(cfg_.train.dtype) +
                lineOf("train.dtype"),
            "set network.dtype: fp32, or train.dtype: bf16");
  }

  // train.cuda_graph: true records one micro-batch's forward and backward and replays
  // it: what changes between steps must be a tensor the graph reads, not a value the
  // host decided while recording (cudaGraphConflicts). auto needs no rule: the
  // trainer runs eager where it cannot apply and says why.
  void cudaGraph() {
    const std::string key = "train.cuda_graph";
    for (const auto& c : cudaGraphConflicts(cfg_))
      error(key, "does not work with " + c.setting + lineOf(c.key) + ": " + c.why,
            c.hint + ", or cuda_graph: auto (the graph where it applies) or false");
    if (cfg_.model.device == ComputeDevice::Cpu)
      warning(key, "has no effect: the run is on the CPU" + lineOf("model.device"), "set cuda_graph: auto or false");
  }

  // train.offload_optimizer_state stages adamw's float moments to the card each
  // step; the 8-bit moments are not staged (a quarter of the size already).
  void offloadOptimizerState() {
    const std::string key = "train.offload_optimizer_state";
    if (cfg_.train.optimizer == OptimizerType::AdamW8bit) {
      error(key, "works with optimizer adamw only, and train.optimizer is adamw8bit" + lineOf("train.optimizer"),
            "set optimizer: adamw (its moments then go to host memory), or offload_optimizer_state: false "
            "(adamw8bit's moments are a quarter of adamw's already)");
      return;
    }
    const ModelConfig& m = cfg_.model;
    bool cpuRun = m.device == ComputeDevice::Cpu || (m.device == ComputeDevice::Auto && opt_.devices && gpus().empty());
    if (!cpuRun && opt_.devices) {
      const device::DeviceSelection sel = device::selectDevices(deviceRequestOf(m), *opt_.devices);
      cpuRun = !sel.devices.empty() &&
               std::all_of(sel.devices.begin(), sel.devices.end(), [](const auto& d) { return d.isCpu(); });
    }
    if (cpuRun)
      warning(key,
              "has no effect: no CUDA device is in this run" + lineOf("model.device") +
                  ", so the optimizer state already is in host memory",
              "set offload_optimizer_state: false");
  }

  void datasets() {
    if (cfg_.datasets.empty()) error("datasets", "no dataset", fam_.hints.noDataset);
    if (fam_.rules.dataset)
      for (size_t i = 0; i < cfg_.datasets.size(); ++i) fam_.rules.dataset(*this, i);
  }

  void sampling() {
    const SampleConfig& s = cfg_.sample;
    if (s.sampleEvery > 0 && s.prompts.empty())
      error("sample.sample_every",
            "sampling every " + std::to_string(s.sampleEvery) + " steps but there are no prompts",
            "add sample.prompts, or set sample_every: 0");
    if (fam_.rules.sampling) fam_.rules.sampling(*this);
  }

  void saving() {
    if (cfg_.job.name.empty()) error("job.name", "must not be empty", "it names the run folder and the LoRA files");
    if (cfg_.save.exportFormats.empty())
      warning("save.export_formats", "no export format: only Strata's own checkpoints are written",
              fam_.hints.noExport);
    const std::vector<ExportFormat>& writes = fam_.exportFormats;
    for (ExportFormat f : cfg_.save.exportFormats)
      if (known_ && std::find(writes.begin(), writes.end(), f) == writes.end() &&
          std::find(fam_.acceptedFormats.begin(), fam_.acceptedFormats.end(), f) == fam_.acceptedFormats.end()) {
        std::string message = fam_.hints.foreignFormat;
        if (const size_t at = message.find("{format}"); at != std::string::npos) message.replace(at, 8, enumName(f));
        error("save.export_formats", message, fam_.hints.foreignFormatHint);
      }
    std::set<ExportFormat> seen;
    for (ExportFormat f : cfg_.save.exportFormats)
      if (!seen.insert(f).second) {
        warning("save.export_formats", enumName(f) + " is listed twice");
        break;
      }
  }

  const RunConfig& cfg_;
  const ValidateOptions& opt_;
  const FamilyDescription* known_;  // nullptr: model.arch names no registered family
  const FamilyDescription& fam_;
  std::vector<Problem> problems_;
};

}  // namespace

device::DeviceRequest deviceRequestOf(const ModelConfig& m) {
  device::DeviceRequest r;
  r.kind = m.device == ComputeDevice::Cpu    ? device::ComputeKind::Cpu
           : m.device == ComputeDevice::Cuda ? device::ComputeKind::Cuda
                                             : device::ComputeKind::Auto;
  r.gpuIds = m.gpuIds;
  r.split = m.splitModelOverGpus;
  return r;
}

const std::vector<std::string>& knownQtypes() {
  // ai-toolkit's default name (optimum-quanto's float8 e4m3) and the plain dtype name.
  static const std::vector<std::string> k = {"int8", "qfloat8", "float8_e4m3", "float8", "float8_e4m3fn"};
  return k;
}

bool qtypeAvailable(const std::string& qtype) {
  const auto& k = knownQtypes();
  if (std::find(k.begin(), k.end(), qtype) == k.end()) return false;
  return qtype == "int8" || compat::kHasFloat8;
}

bool holdsWeights(const std::string& path) {
  if (path.empty()) return false;
  auto isWeights = [](const fs::path& p) {
    const std::string ext = p.extension().string();
    return ext == ".safetensors" || ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" || ext == ".gguf";
  };
  std::error_code ec;
  const fs::path root(path);
  if (fs::is_regular_file(root, ec)) return isWeights(root);
  if (!fs::is_directory(root, ec)) return false;
  // The folder itself (transformers, a BFL file beside others) or a diffusers transformer/.
  for (const fs::path& dir : {root, root / "transformer"}) {
    if (!fs::is_directory(dir, ec)) continue;
    int seen = 0;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen < 10000; it.increment(ec), ++seen)
      if (isWeights(it->path()) && it->is_regular_file(ec)) return true;
  }
  return false;
}

std::vector<CudaGraphConflict> cudaGraphConflicts(const RunConfig& cfg) {
  const TrainConfig& t = cfg.train;
  std::vector<CudaGraphConflict> out;
  // A checkpointed block saves the random state and restores it for its recompute
  // (CheckpointedRunner) only where something in it draws: LoRA dropout.
  if (t.gradientCheckpointing && cfg.network.dropout > 0)
    out.push_back({"network.dropout",
                   "network.dropout " + formatNumber(cfg.network.dropout) + " and gradient_checkpointing",
                   "a checkpointed block sets the random state on the host before its recompute, so that it draws "
                   "the forward's dropout masks again, and a replayed graph cannot",
                   "set network.dropout: 0, or gradient_checkpointing: false (more activation memory; "
                   "`strata-train plan` says whether it fits)"});
  if (t.dtype == DType::FP16)
    out.push_back({"train.dtype", "dtype fp16",
                   "its loss scale changes between steps, and the graph would keep the first one", "set dtype: bf16"});
  return out;
}

bool looksLikeHubId(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.front() == '.' || path.front() == '~') return false;
  if (std::count(path.begin(), path.end(), '/') != 1 || path.back() == '/' || path.front() == '/') return false;
  for (char c : path)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

std::string hubDownloadHint(const std::string& repoId) {
  const std::string folder = repoId.substr(repoId.find('/') + 1);
  return "download the repository's folder and give its path: huggingface-cli download " + repoId +
         " --local-dir /data/models/" + folder +
         " (a gated model such as FLUX.1-dev needs `huggingface-cli login` "
         "and its licence accepted on huggingface.co first), then set name_or_path: /data/models/" +
         folder;
}

std::vector<Problem> validate(const RunConfig& cfg, const ValidateOptions& options) {
  return Checker(cfg, options).run();
}

std::vector<Problem> validateLoaded(const LoadedConfig& loaded, std::optional<std::vector<device::DeviceInfo>> devices,
                                    bool checkPaths) {
  std::vector<Problem> out = loaded.problems;
  if (!loaded.readable) return out;  // the rules would only complain about defaults
  ValidateOptions opt;
  opt.where = &loaded.where;
  opt.devices = std::move(devices);
  opt.checkPaths = checkPaths;
  std::vector<Problem> more = validate(loaded.config, opt);
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

}  // namespace strata::config
