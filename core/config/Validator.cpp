#include "config/Validator.h"

#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"

#include "common/TorchCompat.h"
#include "config/ConfigSchema.h"
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

// "an images", "a shapes": the article for a word in a message.
std::string withArticle(const std::string& word) {
  const bool vowel = !word.empty() && std::string("aeiouAEIOU").find(word.front()) != std::string::npos;
  return (vowel ? "an " : "a ") + word;
}

class Checker {
 public:
  Checker(const RunConfig& cfg, const ValidateOptions& opt) : cfg_(cfg), opt_(opt) {}

  void add(Severity s, const std::string& key, std::string message, std::string hint = "") {
    problems_.push_back(problemAt(s, key, std::move(message), std::move(hint), opt_.where));
  }
  void error(const std::string& key, std::string message, std::string hint = "") {
    add(Severity::Error, key, std::move(message), std::move(hint));
  }
  void warning(const std::string& key, std::string message, std::string hint = "") {
    add(Severity::Warning, key, std::move(message), std::move(hint));
  }

  bool hasImages() const {
    for (const DatasetConfig& d : cfg_.datasets)
      if (d.type == DatasetType::Images) return true;
    return false;
  }

  // " (line 12)" when the key was written in the file.
  std::string lineOf(const std::string& key) const {
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
    const ModelConfig& m = cfg_.model;
    if (!m.isFlux && m.arch == ModelArch::Flux)
      error("model.is_flux", "is_flux is false but model.arch is flux",
            "set model.arch: llama for a Llama-family causal LM, or is_flux: true with a FLUX checkpoint");
    familyKeys();
    flux2Model();
    if (!flux() && !flux2()) return;  // the rest are FLUX's shape and single-file keys (familyKeys: ignored elsewhere)
    if (m.attentionHeadDim && !m.axesDimsRope.empty()) {
      int64_t sum = 0;
      for (int64_t a : m.axesDimsRope) sum += a;
      if (sum != *m.attentionHeadDim)
        error("model.axes_dims_rope",
              "the rotary axes add up to " + std::to_string(sum) + " but attention_head_dim is " +
                  std::to_string(*m.attentionHeadDim) + lineOf("model.attention_head_dim"),
              "their sum must equal the head width (flux-dev: 16 + 56 + 56 = 128)");
    }
    for (int64_t a : m.axesDimsRope)
      if (a % 2 != 0) {
        error("model.axes_dims_rope", "rotary dims must be even, got " + std::to_string(a));
        break;
      }
    // An images run with random weights still reads its tokenizers: model.tokenizer_path, else this folder.
    // (Weights there with random_weights are an error for every family: randomWeights().)
    const bool tokenizersHere = hasImages() && m.tokenizerPath.empty();
    if (m.randomWeights && !m.nameOrPath.empty() && !tokenizersHere && !(opt_.checkPaths && holdsWeights(m.nameOrPath)))
      warning("model.name_or_path", "ignored: random_weights is true" + lineOf("model.random_weights"),
              "set random_weights: false to train on these weights");
    if (!flux()) return;  // FLUX.1's single-file keys follow (FLUX.2 ignores them: familyKeys)
    // What single files do not hold: read only with a single-file component.
    if (m.vaeNormNumGroups && (m.randomWeights || m.vaePath.empty()))
      error("model.vae_norm_num_groups", "read only with a single-file VAE (model.vae_path)",
            m.randomWeights ? "random weights use FLUX.1's VAE shape" : "a diffusers folder's vae/config.json says it");
    if (m.clipNumAttentionHeads && (m.randomWeights || m.clipPath.empty()))
      error("model.clip_num_attention_heads", "read only with a single-file CLIP (model.clip_path)",
            m.randomWeights ? "random weights use CLIP-L's head width 64"
                            : "a diffusers folder's text_encoder/config.json says it");
  }

  bool flux() const { return cfg_.model.arch == ModelArch::Flux; }
  bool flux2() const { return cfg_.model.arch == ModelArch::Flux2; }
  bool llama() const { return cfg_.model.arch == ModelArch::Llama; }

  // FLUX.2 trains its transformer only: Strata has no FLUX.2 VAE or text encoder yet.
  void flux2Model() {
    const ModelConfig& m = cfg_.model;
    if (flux() && m.preset == ModelPreset::Flux2Dev)
      error("model.preset", "flux2-dev is a FLUX.2 shape, and model.arch is flux", "set model.arch: flux2");
    if (!flux2()) return;
    if (m.preset == ModelPreset::FluxDev)
      error("model.preset", "flux-dev is FLUX.1's shape, and model.arch is flux2", "use preset flux2-dev or tiny");
    if (m.pooledProjectionDim)
      error("model.pooled_projection_dim", "FLUX.2 has no pooled text embedding", "remove the key");
  }

  // What model.name_or_path takes for the config's family, for hints.
  std::string modelFolderHint() const {
    if (flux())
      return "point it at a local FLUX.1-dev diffusers folder or flux1-dev.safetensors, or set random_weights: true";
    if (flux2())
      return "point it at a local FLUX.2 transformer (a diffusers folder or a BFL .safetensors file), or set "
             "random_weights: true";
    return "point it at a local " + enumName(cfg_.model.arch) +
           "-family model folder (config.json and its .safetensors, as transformers' save_pretrained writes it; "
           "with random_weights: true, a folder holding only config.json)";
  }

  // A key set away from its default that the chosen family does not read: said,
  // not ignored in silence.
  void familyKeys() {
    RunConfig defaults;
    defaults.datasets.resize(1);
    const std::string arch = enumName(cfg_.model.arch);
    for (const KeySpec& spec : schema()) {
      if (spec.appliesTo(cfg_.model.arch) || spec.path == "model.is_flux") continue;
      const size_t count = spec.isDatasetKey() ? cfg_.datasets.size() : 1;
      for (size_t i = 0; i < count; ++i) {
        if (spec.get(cfg_, i) == spec.get(defaults, 0)) continue;
        const std::string key =
            spec.isDatasetKey() ? "datasets[" + std::to_string(i) + "]" + spec.path.substr(10) : spec.path;
        warning(key, "ignored: a " + arch + " model does not read it" + lineOf("model.arch"));
      }
    }
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
    if (flux() && m.randomWeights && hasImages() && m.nameOrPath.empty() && m.tokenizerPath.empty())
      error("model.tokenizer_path", "an images run with random_weights still needs the tokenizers",
            "give a folder holding tokenizer/ and tokenizer_2/ (a FLUX.1 diffusers folder works)");
    // A causal LM reads its shape from config.json even with random weights.
    if (m.nameOrPath.empty() && (!m.randomWeights || llama())) {
      error("model.name_or_path",
            !llama() ? std::string("no model given")
                     : "no model given: a " + enumName(cfg_.model.arch) + " model reads its config.json there" +
                           lineOf("model.arch"),
            modelFolderHint());
    } else if (!m.randomWeights) {
      const std::string why = io::pathProblem(m.nameOrPath);
      if (!why.empty() && why != "no such file or folder") {
        error("model.name_or_path", m.nameOrPath + ": " + why);
      } else if (!why.empty()) {
        const bool looksLikeRepo = looksLikeHubId(m.nameOrPath);
        if (looksLikeRepo)
          error("model.name_or_path",
                m.nameOrPath + " is not a folder here; it looks like a Hugging Face hub id, and Strata reads "
                               "local files only",
                hubDownloadHint(m.nameOrPath));
        else
          error("model.name_or_path", "not found: " + m.nameOrPath,
                flux() ? "give a diffusers folder or a .safetensors file"
                       : "give the model folder (config.json and its .safetensors)");
      }
    }
    // (A missing folder is said once, above.)
    const bool missing = !m.randomWeights && !io::pathProblem(m.nameOrPath).empty();
    if (llama() && !m.nameOrPath.empty() && !missing && !fs::exists(fs::path(m.nameOrPath) / "config.json"))
      error("model.name_or_path", m.nameOrPath + ": no config.json there",
            looksLikeHubId(m.nameOrPath) && !fs::exists(m.nameOrPath)
                ? hubDownloadHint(m.nameOrPath)
                : "give the model folder that transformers' save_pretrained writes (with random_weights: a "
                  "folder holding only config.json is enough)");
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
      warning("train.lr", "a learning rate of " + formatNumber(t.lr) + " is very high for LoRA",
              flux() ? "1e-4 is the usual FLUX LoRA rate" : "1e-4 to 3e-4 is the usual rate for a LoRA on a causal LM");
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
    if (t.cudaGraph) cudaGraph();
  }

  // train.cuda_graph records one micro-batch's forward and backward and replays it:
  // what changes between steps must be a tensor the graph reads, not a value the
  // host decided while recording.
  void cudaGraph() {
    const std::string key = "train.cuda_graph";
    const TrainConfig& t = cfg_.train;
    if (t.gradientCheckpointing)
      error(key,
            "needs gradient_checkpointing: false" + lineOf("train.gradient_checkpointing") +
                ": a checkpointed block saves and restores the random state on the host for its recompute, "
                "which a replayed graph cannot",
            "set gradient_checkpointing: false (more activation memory; `strata-train plan` says whether it fits), "
            "or cuda_graph: false");
    if (t.gradientAccumulationSteps > 1)
      error(key,
            "needs gradient_accumulation_steps: 1" + lineOf("train.gradient_accumulation_steps") +
                ": the graph is one micro-batch whose backward sets the gradients instead of adding to them",
            "set gradient_accumulation_steps: 1 (a larger batch_size does the same work in one pass), or "
            "cuda_graph: false");
    if (t.dtype == DType::FP16)
      error(key,
            "does not work with dtype fp16" + lineOf("train.dtype") +
                ": its loss scale changes between steps, and the graph would keep the first one",
            "set dtype: bf16, or cuda_graph: false");
    if (cfg_.model.device == ComputeDevice::Cpu)
      warning(key, "has no effect: the run is on the CPU" + lineOf("model.device"), "set cuda_graph: false");
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
    if (cfg_.datasets.empty())
      error("datasets", "no dataset",
            flux() ? "add one, e.g. datasets: [{type: images, folder_path: /data/my_set}]"
                   : "add one, e.g. datasets: [{type: jsonl, file_path: /data/train.jsonl}]");
    for (size_t i = 0; i < cfg_.datasets.size(); ++i) {
      const DatasetConfig& d = cfg_.datasets[i];
      if (llama()) {
        llamaDataset(i);
        continue;
      }
      if (flux2() && d.type != DatasetType::Synthetic) {
        error("datasets[" + std::to_string(i) + "].type",
              "a flux2 model trains on a synthetic dataset only, not " + enumName(d.type) +
                  ": Strata has no FLUX.2 VAE or Mistral text encoder yet, so images cannot be encoded and there "
                  "are no FLUX.2 latents to read",
              "use type: synthetic (random latents and text embeddings of the model's shapes; docs/flux2.md)");
        continue;
      }
      const std::string at = "datasets[" + std::to_string(i) + "].";
      if (d.type == DatasetType::Jsonl) {
        error(at + "type", "a jsonl dataset trains a causal LM, not FLUX",
              "set model.arch: llama, or use a FLUX dataset type (latents, shapes, synthetic)");
        continue;
      }
      const DatasetConfig defaults;
      // Every key a dataset accepts is read by its type or refused, never ignored.
      if (d.type != DatasetType::Images) {
        const std::string why = "only an images dataset reads it (this one is " + enumName(d.type) + ")";
        if (!d.triggerWord.empty()) error(at + "trigger_word", why);
        if (d.numRepeats != 1) error(at + "num_repeats", why);
        if (d.flipX) error(at + "flip_x", why);
        if (!d.defaultCaption.empty()) error(at + "default_caption", why);
        if (d.captionExt != defaults.captionExt) error(at + "caption_ext", why);
        if (d.cacheLatentsToDisk != defaults.cacheLatentsToDisk) error(at + "cache_latents_to_disk", why);
      } else {
        if (d.captionExt.empty() || d.captionExt == "." || d.captionExt.find('/') != std::string::npos)
          error(at + "caption_ext", "'" + d.captionExt + "' is not a file extension", "e.g. caption_ext: txt");
      }
      if (d.type == DatasetType::Shapes && hasImages())
        error(at + "type", "the shapes demo cannot be trained with an images dataset",
              "the demo's latents are a pixel code, not the VAE's: use one or the other");
      if ((d.type == DatasetType::Images || d.type == DatasetType::Latents) && d.numItems != defaults.numItems)
        error(at + "num_items", "only synthetic and shapes datasets read it (this one is " + enumName(d.type) + ")");
      if ((d.type == DatasetType::Shapes || d.type == DatasetType::Synthetic) && d.resolution.size() > 1)
        error(at + "resolution",
              withArticle(enumName(d.type)) + " dataset uses one resolution, " + std::to_string(d.resolution.size()) +
                  " are given",
              "several resolutions (one set of buckets each) are for images datasets");
      const std::string key = "datasets[" + std::to_string(i) + "].resolution";
      // A latents item's size is its file's; `strata-train plan` reads it from the
      // headers and falls back to resolution only where the folder is not readable.
      const bool written = opt_.where ? opt_.where->has(key) : d.resolution != defaults.resolution;
      if (d.type == DatasetType::Latents && written)
        warning(key, "a latents dataset does not read resolution: each item's size is its file's latents",
                "remove it; a plan made where the folder cannot be read uses it as the size");
      if (d.resolution.empty()) error(key, "no resolution given", "e.g. resolution: [512]");
      // Shapes are drawn at pixel size and packed 2x2 twice (multiple of 4);
      // real images go through the 8x VAE and 2x2 packing (multiple of 16).
      const int64_t multiple = d.type == DatasetType::Shapes ? 4 : 16;
      for (int64_t r : d.resolution)
        if (r > 0 && r % multiple != 0) {
          error(key, std::to_string(r) + " is not a multiple of " + std::to_string(multiple),
                "use " + std::to_string((r + multiple / 2) / multiple * multiple));
          break;
        }
    }
  }

  // A causal LM's dataset: jsonl (the fields it reads) or synthetic (random tokens).
  void llamaDataset(size_t i) {
    const DatasetConfig& d = cfg_.datasets[i];
    const std::string at = "datasets[" + std::to_string(i) + "].";
    if (d.type != DatasetType::Jsonl && d.type != DatasetType::Synthetic) {
      error(at + "type", "a " + enumName(cfg_.model.arch) + " model trains on a jsonl or synthetic dataset, not " +
                             enumName(d.type),
            "use type: jsonl with file_path (one JSON object per line)");
      return;
    }
    if (d.type != DatasetType::Jsonl) return;
    if (d.textField.empty()) {
      if (d.promptField.empty()) error(at + "prompt_field", "must not be empty", "e.g. prompt (or set text_field)");
      if (d.responseField.empty()) error(at + "response_field", "must not be empty", "e.g. response");
      if (!d.promptField.empty() && d.promptField == d.responseField)
        error(at + "response_field", "is the same field as prompt_field (" + d.promptField + ")");
    } else if (d.responseMarker.empty()) {
      error(at + "response_marker", "a text_field dataset needs the marker where the response starts",
            "e.g. \"### OUTPUT:\"");
    }
  }

  void sampling() {
    const SampleConfig& s = cfg_.sample;
    if (s.sampleEvery > 0 && s.prompts.empty())
      error("sample.sample_every",
            "sampling every " + std::to_string(s.sampleEvery) + " steps but there are no prompts",
            "add sample.prompts, or set sample_every: 0");
    if (flux2() && s.sampleEvery > 0 && !s.prompts.empty())
      error("sample.sample_every", "a flux2 run cannot sample yet: there is no FLUX.2 VAE to decode the latents",
            "set sample_every: 0 (docs/flux2.md)");
    if (!flux()) return;  // width, height: image samples only
    const bool shapes = !cfg_.datasets.empty() && cfg_.datasets.front().type == DatasetType::Shapes;
    const int64_t multiple = shapes ? 4 : 16;
    for (const char* key : {"sample.width", "sample.height"}) {
      const int64_t v = key == std::string("sample.width") ? s.width : s.height;
      if (v > 0 && v % multiple != 0)
        error(key, std::to_string(v) + " is not a multiple of " + std::to_string(multiple),
              "use " + std::to_string((v + multiple / 2) / multiple * multiple));
    }
  }

  void saving() {
    if (cfg_.job.name.empty()) error("job.name", "must not be empty", "it names the run folder and the LoRA files");
    if (cfg_.save.exportFormats.empty())
      warning("save.export_formats", "no export format: only Strata's own checkpoints are written",
              flux() ? "add diffusers, kohya or comfy" : "add peft");
    for (ExportFormat f : cfg_.save.exportFormats) {
      if (llama() && (f == ExportFormat::Kohya || f == ExportFormat::Comfy))
        error("save.export_formats", enumName(f) + " is a FLUX file form; a " + enumName(cfg_.model.arch) +
                                         " model's LoRA is written as a peft adapter folder",
              "use export_formats: [peft]");
      if (!llama() && f == ExportFormat::Peft)
        error("save.export_formats", "peft (an adapter folder) is the causal-LM form; a FLUX LoRA is one file",
              "use diffusers (the same tensor names, in one .safetensors file)");
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
    return ext == ".safetensors" || ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" ||
           ext == ".gguf";
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
         " --local-dir /data/models/" + folder + " (a gated model such as FLUX.1-dev needs `huggingface-cli login` "
         "and its licence accepted on huggingface.co first), then set name_or_path: /data/models/" + folder;
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
