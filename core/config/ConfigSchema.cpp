#include "config/ConfigSchema.h"

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

// ---- conversion between a member type and Value -----------------------------

template <class T, class = void>
struct Conv;

[[noreturn]] void wrongType(const char* expected) { throw ConfigError(std::string("expected ") + expected); }

template <>
struct Conv<bool> {
  static constexpr KeyType kType = KeyType::Bool;
  static Value to(bool v) { return v; }
  static bool from(const Value& v) {
    if (auto* b = std::get_if<bool>(&v)) return *b;
    wrongType("a bool");
  }
};

template <>
struct Conv<int64_t> {
  static constexpr KeyType kType = KeyType::Int;
  static Value to(int64_t v) { return v; }
  static int64_t from(const Value& v) {
    if (auto* i = std::get_if<int64_t>(&v)) return *i;
    wrongType("an integer");
  }
};

template <>
struct Conv<double> {
  static constexpr KeyType kType = KeyType::Float;
  static Value to(double v) { return v; }
  static double from(const Value& v) {
    if (auto* d = std::get_if<double>(&v)) return *d;
    if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    wrongType("a number");
  }
};

template <>
struct Conv<std::string> {
  static constexpr KeyType kType = KeyType::String;
  static Value to(const std::string& v) { return v; }
  static std::string from(const Value& v) {
    if (auto* s = std::get_if<std::string>(&v)) return *s;
    wrongType("a string");
  }
};

template <class E>
struct Conv<E, std::enable_if_t<std::is_enum_v<E>>> {
  static constexpr KeyType kType = KeyType::Choice;
  static Value to(E v) { return enumName(v); }
  static E from(const Value& v) {
    auto* s = std::get_if<std::string>(&v);
    if (!s) wrongType("a string");
    if (auto e = parseEnum<E>(*s)) return *e;
    std::string msg = "expected one of:";
    for (const auto& c : enumChoices<E>()) msg += " " + (c.empty() ? std::string("\"\"") : c);
    throw ConfigError(msg);
  }
};

template <class T>
struct Conv<std::optional<T>> {
  static constexpr KeyType kType = Conv<T>::kType;
  static Value to(const std::optional<T>& v) { return v ? Conv<T>::to(*v) : Value{}; }
  static std::optional<T> from(const Value& v) {
    if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
    return Conv<T>::from(v);
  }
};

template <class I>
struct IntListConv {
  static constexpr KeyType kType = KeyType::IntList;
  static Value to(const std::vector<I>& v) { return std::vector<int64_t>(v.begin(), v.end()); }
  static std::vector<I> from(const Value& v) {
    if (auto* l = std::get_if<std::vector<int64_t>>(&v)) {
      std::vector<I> out;
      for (int64_t x : *l) {
        if (x < std::numeric_limits<I>::min() || x > std::numeric_limits<I>::max()) wrongType("smaller integers");
        out.push_back(static_cast<I>(x));
      }
      return out;
    }
    wrongType("a list of integers");
  }
};
template <>
struct Conv<std::vector<int64_t>> : IntListConv<int64_t> {};
template <>
struct Conv<std::vector<int>> : IntListConv<int> {};

template <>
struct Conv<std::vector<double>> {
  static constexpr KeyType kType = KeyType::FloatList;
  static Value to(const std::vector<double>& v) { return v; }
  static std::vector<double> from(const Value& v) {
    if (auto* l = std::get_if<std::vector<double>>(&v)) return *l;
    if (auto* l = std::get_if<std::vector<int64_t>>(&v)) return std::vector<double>(l->begin(), l->end());
    wrongType("a list of numbers");
  }
};

template <>
struct Conv<std::vector<std::string>> {
  static constexpr KeyType kType = KeyType::StringList;
  static Value to(const std::vector<std::string>& v) { return v; }
  static std::vector<std::string> from(const Value& v) {
    if (auto* l = std::get_if<std::vector<std::string>>(&v)) return *l;
    wrongType("a list of strings");
  }
};

template <class E>
struct Conv<std::vector<E>, std::enable_if_t<std::is_enum_v<E>>> {
  static constexpr KeyType kType = KeyType::ChoiceList;
  static Value to(const std::vector<E>& v) {
    std::vector<std::string> out;
    for (E e : v) out.push_back(enumName(e));
    return out;
  }
  static std::vector<E> from(const Value& v) {
    auto* l = std::get_if<std::vector<std::string>>(&v);
    if (!l) wrongType("a list of strings");
    std::vector<E> out;
    for (const auto& s : *l) out.push_back(Conv<E>::from(Value{s}));
    return out;
  }
};

template <class E>
std::vector<std::string> choicesFor() {
  if constexpr (std::is_enum_v<E>) {
    return enumChoices<E>();
  } else {
    return {};
  }
}
template <class T>
struct ElementOf {
  using type = T;
};
template <class T>
struct ElementOf<std::vector<T>> {
  using type = T;
};

// ---- building the table -----------------------------------------------------

// Options of one entry beyond path/accessor/doc.
struct Opt {
  std::string unit_;
  std::optional<double> min_;
  std::optional<double> max_;
  bool minExclusive_ = false;
  PathKind pathKind_ = PathKind::None;  // a String that names a file or folder
  bool scalarAsList_ = false;
  bool commaString_ = false;
  std::optional<size_t> listSize_;
  std::function<std::string(const Value&)> check_;

  Opt& unit(std::string u) {
    unit_ = std::move(u);
    return *this;
  }
  Opt& check(std::function<std::string(const Value&)> f) {
    check_ = std::move(f);
    return *this;
  }
  Opt& min(double v) {
    min_ = v;
    return *this;
  }
  Opt& max(double v) {
    max_ = v;
    return *this;
  }
  Opt& minExclusive(bool v) {
    minExclusive_ = v;
    return *this;
  }
  Opt& file() {
    pathKind_ = PathKind::File;
    return *this;
  }
  Opt& folder() {
    pathKind_ = PathKind::Folder;
    return *this;
  }
  Opt& fileOrFolder() {
    pathKind_ = PathKind::FileOrFolder;
    return *this;
  }
  Opt& saveFile() {
    pathKind_ = PathKind::SaveFile;
    return *this;
  }
  Opt& scalarAsList(bool v) {
    scalarAsList_ = v;
    return *this;
  }
  Opt& commaString(bool v) {
    commaString_ = v;
    return *this;
  }
  Opt& listSize(size_t v) {
    listSize_ = v;
    return *this;
  }
};

template <class T>
using Accessor = T& (*)(RunConfig&, size_t);

class Builder {
 public:
  template <class T>
  Builder& add(std::string path, Accessor<T> ref, std::string doc, Opt opt = {}) {
    KeySpec k;
    k.path = std::move(path);
    k.type = Conv<T>::kType;
    if (opt.pathKind_ != PathKind::None && k.type == KeyType::String) {
      k.type = KeyType::Path;
      k.pathKind = opt.pathKind_;
    }
    k.unit = std::move(opt.unit_);
    k.doc = std::move(doc);
    k.min = opt.min_;
    k.max = opt.max_;
    k.minExclusive = opt.minExclusive_;
    k.choices = choicesFor<typename ElementOf<T>::type>();
    k.nullable = isOptional<T>();
    k.scalarAsList = opt.scalarAsList_;
    k.commaString = opt.commaString_;
    k.listSize = opt.listSize_;
    k.check = std::move(opt.check_);
    k.get = [ref](const RunConfig& c, size_t i) { return Conv<T>::to(ref(const_cast<RunConfig&>(c), i)); };
    k.set = [ref](RunConfig& c, size_t i, const Value& v) { ref(c, i) = Conv<T>::from(v); };
    RunConfig defaults;
    defaults.datasets.resize(1);
    k.defaultValue = k.get(defaults, 0);
    keys_.push_back(std::move(k));
    return *this;
  }
  std::vector<KeySpec> take() { return std::move(keys_); }

 private:
  template <class T>
  static constexpr bool isOptional() {
    if constexpr (std::is_same_v<T, std::optional<int64_t>> || std::is_same_v<T, std::optional<bool>>) {
      return true;
    } else {
      return false;
    }
  }
  std::vector<KeySpec> keys_;
};

#define M(member)                       \
  +[](RunConfig & c, size_t) -> auto& { \
    return c.member;                    \
  }
#define D(member)                         \
  +[](RunConfig & c, size_t i) -> auto& { \
    return c.datasets.at(i).member;       \
  }

std::vector<KeySpec> buildSchema() {
  Builder b;
  const double kInf = std::numeric_limits<double>::infinity();
  (void)kInf;
  // job
  b.add("job.name", M(job.name), "Name of the run: run folder and LoRA file stem (a plain folder name)",
        Opt().check([](const Value& v) {
          const auto* s = std::get_if<std::string>(&v);
          return s ? runNameProblem(*s) : std::string();
        }))
      .add("job.training_folder", M(job.trainingFolder), "Folder that receives one sub-folder per run", Opt().folder());
  // model
  b.add("model.name_or_path", M(model.nameOrPath),
        "FLUX checkpoint: a diffusers folder or a BFL .safetensors file (local; ignored with random_weights)",
        Opt().fileOrFolder())
      .add("model.vae_path", M(model.vaePath),
           "With a single-file transformer: the VAE file (BFL's ae.safetensors); empty = the diffusers folder's vae/",
           Opt().file())
      .add("model.clip_path", M(model.clipPath),
           "With a single-file transformer: the CLIP-L text encoder file (clip_l.safetensors)", Opt().file())
      .add("model.t5_path", M(model.t5Path),
           "With a single-file transformer: the T5-XXL text encoder file (t5xxl_fp16.safetensors)", Opt().file())
      .add("model.tokenizer_path", M(model.tokenizerPath),
           "With single files: a folder holding tokenizer/ (CLIP) and tokenizer_2/ (T5), as in FLUX.1's diffusers "
           "folder",
           Opt().folder())
      .add("model.vae_norm_num_groups", M(model.vaeNormNumGroups),
           "With a single-file VAE: its GroupNorm group count (unset = 32, every released FLUX.1 / SD VAE)",
           Opt().min(1).max(4096))
      .add("model.clip_num_attention_heads", M(model.clipNumAttentionHeads),
           "With a single-file CLIP: its head count (unset = hidden size / 64, CLIP-L: 12)", Opt().min(1).max(4096))
      .add("model.is_flux", M(model.isFlux),
           "ai-toolkit's flag: the model is a FLUX.1 transformer (false is refused with arch flux: set model.arch)")
      .add("model.arch", M(model.arch),
           "Model family: flux (a FLUX.1 transformer), llama (a Llama, Mistral or Qwen2 causal LM folder) or flux2 "
           "(a FLUX.2 transformer, synthetic data only: docs/flux2.md)")
      .add("model.preset", M(model.preset),
           "Architecture: \"\" = detect from the weights (flux-dev, or flux2-dev for arch flux2, with random_weights), "
           "flux-dev, flux2-dev, tiny")
      .add("model.num_layers", M(model.numLayers), "Override: number of double (joint) blocks", Opt().min(1).max(1000))
      .add("model.num_single_layers", M(model.numSingleLayers), "Override: number of single blocks",
           Opt().min(0).max(1000))
      .add("model.num_attention_heads", M(model.numAttentionHeads), "Override: attention heads", Opt().min(1).max(1024))
      .add("model.attention_head_dim", M(model.attentionHeadDim),
           "Override: width of one head (must equal the sum of axes_dims_rope)", Opt().min(2).max(4096))
      .add("model.in_channels", M(model.inChannels), "Override: packed latent channels (64 = 16 x 2 x 2)",
           Opt().min(1).max(4096))
      .add("model.joint_attention_dim", M(model.jointAttentionDim), "Override: T5 embedding width",
           Opt().min(1).max(65536))
      .add("model.pooled_projection_dim", M(model.pooledProjectionDim), "Override: CLIP pooled embedding width",
           Opt().min(1).max(65536))
      .add("model.axes_dims_rope", M(model.axesDimsRope),
           "Override: rotary dims per position axis (empty = preset's, flux-dev: [16, 56, 56])", Opt().min(0).max(4096))
      .add("model.guidance_embeds", M(model.guidanceEmbeds), "Override: the model takes a guidance input (dev)")
      .add("model.random_weights", M(model.randomWeights),
           "Start from random weights instead of a checkpoint (demos and benchmarks)")
      .add("model.quantize", M(model.quantize),
           "Quantize the frozen transformer blocks' Linear weights (model.qtype; docs/quantization.md)")
      .add("model.quantize_te", M(model.quantizeTe),
           "Quantize T5's Linear weights with model.qtype while loading (CLIP stays float)")
      .add("model.qtype", M(model.qtype),
           "int8 (per output row), qfloat8 (fp8 e4m3, per output row), float8_e4m3 (fp8 e4m3, per tensor)")
      .add("model.fp8_matmul", M(model.fp8Matmul),
           "With an fp8 qtype: multiply on the fp8 tensor cores (inputs quantized per token; CUDA sm_89+, "
           "LibTorch 2.5+, bf16) instead of converting the weight to bf16 per matmul (docs/quantization.md)")
      .add("model.fp8_backward", M(model.fp8Backward),
           "With fp8_matmul: the input gradients on the fp8 tensor cores too (gradients quantized per token), "
           "instead of a bf16 matmul over the dequantized weight (docs/quantization.md)")
      .add("model.fp8_keep_transpose", M(model.fp8KeepTranspose),
           "With fp8_backward: keep each fp8 weight's transposed copy for the run instead of making it in every "
           "backward (faster; 1 byte more per weight on its card, which the planner counts)")
      .add("model.low_vram", M(model.lowVram),
           "ai-toolkit's quantize-on-CPU mode; refused when true (Strata quantizes block by block on the device)")
      .add("model.device", M(model.device), "Where to train: auto (CUDA when present), cpu, cuda")
      .add("model.attention_backend", M(model.attentionBackend),
           "FLUX's CUDA attention kernel: cudnn (the default: cuDNN's fused attention where LibTorch prefers it, "
           "Hopper and newer; flash attention elsewhere) or flash (cuDNN's off: flash attention, for a run that "
           "fails in cuDNN's); Llama never uses cuDNN's attention")
      .add("model.split_model_over_gpus", M(model.splitModelOverGpus),
           "Split the transformer's blocks over the GPUs in gpu_ids")
      .add("model.split_model_other_module_param_count_scale", M(model.splitModelOtherModuleParamCountScale),
           "param_count placement: share of the text encoders' and VAE's parameters charged to the first GPU",
           Opt().min(0).max(100))
      .add("model.gpu_ids", M(model.gpuIds), "CUDA devices to use: \"0,1,2,3\" or [0, 1, 2, 3]; empty = all",
           Opt().min(0).max(1023).scalarAsList(true).commaString(true))
      .add("model.placement", M(model.placement),
           "How blocks are assigned to GPUs: param_count (ai-toolkit) or memory (per-device budgets)")
      .add("model.gpu_memory_limit_gb", M(model.gpuMemoryLimitGb),
           "Memory cap per GPU: one value for all or one per gpu_ids entry; empty = no cap",
           Opt().unit("GB").min(0).max(100000).minExclusive(true).scalarAsList(true))
      .add("model.memory_reserve_gb", M(model.memoryReserveGb),
           "Memory kept free on each GPU for the CUDA context and workspaces", Opt().unit("GB").min(0).max(1000));
  // network
  b.add("network.type", M(network.type), "Adapter type")
      .add("network.linear", M(network.linear), "LoRA rank", Opt().min(1).max(1024))
      .add("network.linear_alpha", M(network.linearAlpha), "LoRA alpha: the update is scaled by alpha / rank",
           Opt().min(0).max(100000).minExclusive(true))
      .add("network.dropout", M(network.dropout), "Dropout on the LoRA input", Opt().min(0).max(1))
      .add("network.target_modules", M(network.targetModules),
           "Module path patterns (* and ?) to adapt; empty = every Linear in the blocks", Opt().scalarAsList(true));
  // train
  b.add("train.steps", M(train.steps), "Optimizer steps to train", Opt().unit("steps").min(1).max(1e8))
      .add("train.batch_size", M(train.batchSize), "Images per forward pass", Opt().min(1).max(1024))
      .add("train.gradient_accumulation_steps", M(train.gradientAccumulationSteps),
           "Forward/backward passes per optimizer step", Opt().min(1).max(1024))
      .add("train.lr", M(train.lr), "Learning rate", Opt().min(0).max(1).minExclusive(true))
      .add("train.lr_scheduler", M(train.lrScheduler), "Learning-rate schedule")
      .add("train.lr_warmup_steps", M(train.lrWarmupSteps), "Linear warm-up length (warmup, cosine, linear)",
           Opt().unit("steps").min(0).max(1e8))
      .add("train.optimizer", M(train.optimizer),
           "Optimizer: adamw (float32 moments) or adamw8bit (the same update with both moments stored in 8 bits: "
           "a quarter of the optimizer state's memory)")
      .add("train.weight_decay", M(train.weightDecay), "AdamW decoupled weight decay", Opt().min(0).max(1))
      .add("train.betas", M(train.betas), "AdamW beta1, beta2", Opt().min(0).max(1).listSize(2))
      .add("train.eps", M(train.eps), "AdamW epsilon", Opt().min(0).max(1).minExclusive(true))
      .add("train.max_grad_norm", M(train.maxGradNorm), "Clip the gradient norm to this; 0 = no clipping",
           Opt().min(0).max(1e6))
      .add("train.dtype", M(train.dtype), "Base weights and activations (bf16 needs compute capability 8.0+)")
      .add("train.gradient_checkpointing", M(train.gradientCheckpointing),
           "Recompute block activations in the backward pass (less memory, ~30% slower)")
      .add("train.offload_checkpoints", M(train.offloadCheckpoints),
           "With gradient checkpointing: keep each block's saved input in pinned host memory, not on the GPU "
           "(FLUX.1-dev at 1024 px: 1.5 GB less on the card, ~0.5 ms of copying per block each way)")
      .add("train.offload_optimizer_state", M(train.offloadOptimizerState),
           "adamw: keep the optimizer's moments in pinned host memory between steps, not on the GPU; each step "
           "copies them to the card in 64 MiB pieces and back (FLUX.1-dev LoRA rank 16: 0.49 GiB less on the "
           "card, ~1 GB over PCIe per step)")
      .add("train.cuda_graph", M(train.cudaGraph),
           "One CUDA card, no gradient checkpointing: record the step's forward and backward once (step 3) and "
           "replay it, so the CPU no longer launches every kernel (short steps are bound by those launches); "
           "keeps the step's activation memory reserved between steps")
      .add("train.timestep_type", M(train.timestepType),
           "Noise-level draw: sigmoid (logit-normal), uniform, shift (resolution-shifted sigmoid)")
      .add("train.guidance", M(train.guidance), "Guidance input while training a guidance-distilled model",
           Opt().min(0).max(100))
      .add("train.caption_dropout_rate", M(train.captionDropoutRate),
           "Probability of training a sample with an empty caption", Opt().min(0).max(1))
      .add("train.seed", M(train.seed), "Random seed (noise, timesteps, LoRA init, data order)",
           Opt().min(0).max(9.2e18))
      .add("train.ema_config.use_ema", M(train.ema.useEma), "Keep an exponential moving average of the LoRA weights")
      .add("train.ema_config.ema_decay", M(train.ema.emaDecay), "EMA decay per update",
           Opt().min(0).max(1).minExclusive(true))
      .add("train.ema_config.update_every", M(train.ema.updateEvery), "Update the EMA every N steps",
           Opt().unit("steps").min(1).max(1e6));
  // datasets
  b.add("datasets[].type", D(type),
        "images (folder of images + captions), latents (cached), synthetic or shapes (drawn by the trainer)")
      .add("datasets[].folder_path", D(folderPath), "Folder of the images or cached latents", Opt().folder())
      .add("datasets[].caption_ext", D(captionExt), "Caption file extension next to each image")
      .add("datasets[].default_caption", D(defaultCaption), "Caption for images without a caption file")
      .add("datasets[].trigger_word", D(triggerWord),
           "Word that replaces [trigger] in captions; prepended to captions without [trigger]")
      .add("datasets[].num_repeats", D(numRepeats), "Each image of the folder counts this many times per epoch",
           Opt().min(1).max(10000))
      .add("datasets[].flip_x", D(flipX), "Also train on each image mirrored left-right")
      .add("datasets[].resolution", D(resolution),
           "Training sizes (square, bucketed; multiples of 16, of 4 for shapes)",
           Opt().unit("pixels").min(8).max(8192).scalarAsList(true))
      .add("datasets[].num_items", D(numItems),
           "Items drawn by a synthetic or shapes dataset (a causal LM's: max_seq_len random tokens each)",
           Opt().min(1).max(1e7))
      .add("datasets[].cache_latents_to_disk", D(cacheLatentsToDisk),
           "Cache VAE latents and text embeddings in the folder's _strata_cache (else in memory for the run)")
      .add("datasets[].file_path", D(filePath), "jsonl: the file, one JSON object (one sample) per line", Opt().file())
      .add("datasets[].prompt_field", D(promptField), "jsonl: the field holding the prompt (no loss on it)")
      .add("datasets[].response_field", D(responseField), "jsonl: the field holding the response (the loss is on it)")
      .add("datasets[].text_field", D(textField),
           "jsonl: one field holding prompt, response_marker and response; empty = prompt_field + response_field")
      .add("datasets[].response_marker", D(responseMarker),
           "jsonl with text_field: the response starts after this text (it stays in the prompt part)")
      .add("datasets[].max_seq_len", D(maxSeqLen), "jsonl: tokens per sample; longer samples are cut (and counted)",
           Opt().unit("tokens").min(2).max(1048576))
      .add("datasets[].padding_side", D(paddingSide), "jsonl: where a shorter sample of a batch is padded")
      .add("datasets[].packing", D(packing), "jsonl: join several samples into each row of max_seq_len tokens");
  // sample
  b.add("sample.sample_every", M(sample.sampleEvery), "Sample images every N steps; 0 = never",
        Opt().unit("steps").min(0).max(1e8))
      .add("sample.prompts", M(sample.prompts), "Prompts to sample", Opt().scalarAsList(true))
      .add("sample.seed", M(sample.seed), "Sampling seed", Opt().min(0).max(9.2e18))
      .add("sample.walk_seed", M(sample.walkSeed), "Prompt i uses seed + i")
      .add("sample.width", M(sample.width), "Sample width (multiple of 16; of 4 with a shapes dataset)",
           Opt().unit("pixels").min(16).max(8192))
      .add("sample.height", M(sample.height), "Sample height (multiple of 16; of 4 with a shapes dataset)",
           Opt().unit("pixels").min(16).max(8192))
      .add("sample.sample_steps", M(sample.sampleSteps), "Denoising steps per sample", Opt().min(1).max(1000))
      .add("sample.guidance_scale", M(sample.guidanceScale), "Guidance input while sampling (3.5 typical)",
           Opt().min(0).max(100))
      .add("sample.max_new_tokens", M(sample.maxNewTokens), "Tokens generated per sample prompt (causal LM)",
           Opt().unit("tokens").min(1).max(1048576))
      .add("sample.temperature", M(sample.temperature),
           "Sampling temperature (causal LM): 0 = greedy, else drawn with sample.seed", Opt().min(0).max(100));
  // save
  b.add("save.save_every", M(save.saveEvery), "Save a checkpoint every N steps; 0 = only at the end",
        Opt().unit("steps").min(0).max(1e8))
      .add("save.max_step_saves_to_keep", M(save.maxStepSavesToKeep), "Older step checkpoints are deleted",
           Opt().min(1).max(100000))
      .add("save.export_every", M(save.exportEvery),
           "Also write the LoRA files every N steps into the run folder's exports/, named with the step "
           "(<job>_step<N>_<format>), to compare them; 0 = only at the end",
           Opt().unit("steps").min(0).max(1e8))
      .add("save.dtype", M(save.dtype), "dtype of the saved LoRA weights")
      .add("save.export_formats", M(save.exportFormats), "LoRA files written at each save", Opt().scalarAsList(true));
  return b.take();
}

#undef M
#undef D

// ---- how a form shows each key ------------------------------------------------

const std::vector<std::string> kGroups = {"Run",       "Model",           "Model shape", "Dataset", "LoRA",  "Training",
                                          "Optimizer", "Averaging (EMA)", "GPUs",        "Samples", "Saving"};

struct Look {
  const char* path;
  const char* label;  // user words; the YAML key goes in the tooltip
  const char* group;
  bool basic;
};

// Kept apart from the table above so the words a user reads sit together. Every
// key has one entry (tests/config checks it).
const Look kLooks[] = {
    {"job.name", "Run name", "Run", true},
    {"job.training_folder", "Output folder", "Run", true},
    {"model.name_or_path", "Base model", "Model", true},
    {"model.vae_path", "VAE file (single files)", "Model", false},
    {"model.clip_path", "CLIP-L file (single files)", "Model", false},
    {"model.t5_path", "T5-XXL file (single files)", "Model", false},
    {"model.tokenizer_path", "Tokenizer folder (single files)", "Model", false},
    {"model.vae_norm_num_groups", "VAE group count (single file)", "Model shape", false},
    {"model.clip_num_attention_heads", "CLIP head count (single file)", "Model shape", false},
    {"model.is_flux", "FLUX.1 model", "Model", false},
    {"model.arch", "Model family", "Model", true},
    {"model.preset", "Architecture", "Model", false},
    {"model.num_layers", "Double blocks", "Model shape", false},
    {"model.num_single_layers", "Single blocks", "Model shape", false},
    {"model.num_attention_heads", "Attention heads", "Model shape", false},
    {"model.attention_head_dim", "Width of one head", "Model shape", false},
    {"model.in_channels", "Latent channels (packed)", "Model shape", false},
    {"model.joint_attention_dim", "Text embedding width", "Model shape", false},
    {"model.pooled_projection_dim", "Pooled text embedding width", "Model shape", false},
    {"model.axes_dims_rope", "Rotary sizes per axis", "Model shape", false},
    {"model.guidance_embeds", "Takes a guidance input", "Model shape", false},
    {"model.random_weights", "Random weights (no download)", "Model", false},
    {"model.quantize", "Quantize the model", "Model", false},
    {"model.quantize_te", "Quantize the text encoders", "Model", false},
    {"model.qtype", "Quantization type", "Model", false},
    {"model.fp8_matmul", "fp8 matrix multiplies", "Model", false},
    {"model.fp8_backward", "fp8 matrix multiplies in the backward", "Model", false},
    {"model.fp8_keep_transpose", "Keep the transposed fp8 weights", "Model", false},
    {"model.low_vram", "ai-toolkit low-VRAM mode (refused)", "GPUs", false},
    {"model.device", "Train on", "GPUs", true},
    {"model.attention_backend", "Attention kernel (CUDA)", "GPUs", false},
    {"model.split_model_over_gpus", "Split the model over the GPUs", "GPUs", true},
    {"model.split_model_other_module_param_count_scale", "Weight of the other modules when splitting", "GPUs", false},
    {"model.gpu_ids", "GPUs to use", "GPUs", true},
    {"model.placement", "How to split", "GPUs", false},
    {"model.gpu_memory_limit_gb", "Memory cap per GPU", "GPUs", false},
    {"model.memory_reserve_gb", "Memory kept free per GPU", "GPUs", false},
    {"network.type", "Adapter type", "LoRA", false},
    {"network.linear", "Rank", "LoRA", true},
    {"network.linear_alpha", "Alpha", "LoRA", false},
    {"network.dropout", "Dropout", "LoRA", false},
    {"network.target_modules", "Layers to adapt", "LoRA", false},
    {"train.steps", "Steps", "Training", true},
    {"train.batch_size", "Batch size", "Training", false},
    {"train.gradient_accumulation_steps", "Passes per step (accumulation)", "Training", false},
    {"train.lr", "Learning rate", "Training", true},
    {"train.lr_scheduler", "Learning-rate schedule", "Optimizer", false},
    {"train.lr_warmup_steps", "Warm-up", "Optimizer", false},
    {"train.optimizer", "Optimizer", "Optimizer", false},
    {"train.weight_decay", "Weight decay", "Optimizer", false},
    {"train.betas", "Adam betas", "Optimizer", false},
    {"train.eps", "Adam epsilon", "Optimizer", false},
    {"train.max_grad_norm", "Gradient clipping", "Optimizer", false},
    {"train.dtype", "Precision", "Training", false},
    {"train.gradient_checkpointing", "Save memory (recompute activations)", "Training", false},
    {"train.offload_checkpoints", "Keep checkpoints in host memory", "Training", false},
    {"train.offload_optimizer_state", "Keep optimizer state in host memory", "Optimizer", false},
    {"train.cuda_graph", "Replay the step as a CUDA graph", "Training", false},
    {"train.timestep_type", "Noise levels", "Training", false},
    {"train.guidance", "Guidance while training", "Training", false},
    {"train.caption_dropout_rate", "Train without caption (share)", "Training", false},
    {"train.seed", "Seed", "Training", false},
    {"train.ema_config.use_ema", "Keep an average of the weights", "Averaging (EMA)", false},
    {"train.ema_config.ema_decay", "Decay", "Averaging (EMA)", false},
    {"train.ema_config.update_every", "Update every", "Averaging (EMA)", false},
    {"datasets[].type", "Kind of dataset", "Dataset", true},
    {"datasets[].folder_path", "Image folder", "Dataset", true},
    {"datasets[].caption_ext", "Caption file extension", "Dataset", false},
    {"datasets[].default_caption", "Caption for images without one", "Dataset", false},
    {"datasets[].trigger_word", "Trigger word", "Dataset", true},
    {"datasets[].num_repeats", "Repeats per image", "Dataset", false},
    {"datasets[].flip_x", "Also train on mirrored images", "Dataset", false},
    {"datasets[].resolution", "Resolution", "Dataset", true},
    {"datasets[].num_items", "Items to draw", "Dataset", false},
    {"datasets[].cache_latents_to_disk", "Cache encoded images on disk", "Dataset", false},
    {"datasets[].file_path", "JSONL file", "Dataset", true},
    {"datasets[].prompt_field", "Prompt field", "Dataset", false},
    {"datasets[].response_field", "Response field", "Dataset", false},
    {"datasets[].text_field", "Text field (prompt and response in one)", "Dataset", false},
    {"datasets[].response_marker", "Response marker", "Dataset", false},
    {"datasets[].max_seq_len", "Tokens per sample", "Dataset", true},
    {"datasets[].padding_side", "Pad on the", "Dataset", false},
    {"datasets[].packing", "Pack several samples per row", "Dataset", false},
    {"sample.sample_every", "Sample every", "Samples", true},
    {"sample.prompts", "Sample prompts", "Samples", true},
    {"sample.seed", "Sample seed", "Samples", false},
    {"sample.walk_seed", "A new seed per prompt", "Samples", false},
    {"sample.width", "Sample width", "Samples", false},
    {"sample.height", "Sample height", "Samples", false},
    {"sample.sample_steps", "Denoising steps", "Samples", false},
    {"sample.guidance_scale", "Guidance scale", "Samples", false},
    {"sample.max_new_tokens", "Tokens per sample", "Samples", false},
    {"sample.temperature", "Temperature (0 = greedy)", "Samples", false},
    {"save.save_every", "Save a checkpoint every", "Saving", false},
    {"save.max_step_saves_to_keep", "Checkpoints to keep", "Saving", false},
    {"save.export_every", "Write a LoRA file every", "Saving", false},
    {"save.dtype", "LoRA file precision", "Saving", false},
    {"save.export_formats", "LoRA file formats", "Saving", false},
};

// Keys that only one model family reads (a form shows them for that family
// only); every key not listed applies to every family.
struct FamilyOnly {
  const char* path;
  std::vector<ModelArch> arches;
};
// FLUX.2 (synthetic data, no VAE or text encoders yet) reads the shape keys and the flow-matching ones.
const FamilyOnly kFamilyOnly[] = {
    {"model.vae_path", {ModelArch::Flux}},
    {"model.clip_path", {ModelArch::Flux}},
    {"model.t5_path", {ModelArch::Flux}},
    {"model.vae_norm_num_groups", {ModelArch::Flux}},
    {"model.clip_num_attention_heads", {ModelArch::Flux}},
    {"model.is_flux", {ModelArch::Flux}},
    {"model.preset", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.num_layers", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.num_single_layers", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.num_attention_heads", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.attention_head_dim", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.in_channels", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.joint_attention_dim", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.pooled_projection_dim", {ModelArch::Flux}},
    {"model.axes_dims_rope", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.guidance_embeds", {ModelArch::Flux, ModelArch::Flux2}},
    {"model.quantize_te", {ModelArch::Flux}},
    // The text encoders' and VAE's share: a causal LM has no other modules.
    {"model.split_model_other_module_param_count_scale", {ModelArch::Flux}},
    {"train.timestep_type", {ModelArch::Flux, ModelArch::Flux2}},
    {"train.guidance", {ModelArch::Flux, ModelArch::Flux2}},
    {"train.caption_dropout_rate", {ModelArch::Flux, ModelArch::Flux2}},
    {"datasets[].folder_path", {ModelArch::Flux}},
    {"datasets[].caption_ext", {ModelArch::Flux}},
    {"datasets[].default_caption", {ModelArch::Flux}},
    {"datasets[].trigger_word", {ModelArch::Flux}},
    {"datasets[].num_repeats", {ModelArch::Flux}},
    {"datasets[].flip_x", {ModelArch::Flux}},
    {"datasets[].resolution", {ModelArch::Flux, ModelArch::Flux2}},
    {"datasets[].cache_latents_to_disk", {ModelArch::Flux}},
    {"sample.width", {ModelArch::Flux}},
    {"sample.height", {ModelArch::Flux}},
    {"sample.sample_steps", {ModelArch::Flux}},
    {"sample.guidance_scale", {ModelArch::Flux}},
    {"datasets[].file_path", {ModelArch::Llama}},
    {"datasets[].prompt_field", {ModelArch::Llama}},
    {"datasets[].response_field", {ModelArch::Llama}},
    {"datasets[].text_field", {ModelArch::Llama}},
    {"datasets[].response_marker", {ModelArch::Llama}},
    {"datasets[].max_seq_len", {ModelArch::Llama}},
    {"datasets[].padding_side", {ModelArch::Llama}},
    {"datasets[].packing", {ModelArch::Llama}},
    {"sample.max_new_tokens", {ModelArch::Llama}},
    {"sample.temperature", {ModelArch::Llama}},
};

// The words of a shared key for a family other than FLUX.1 (KeySpec::familyDocs).
struct FamilyDoc {
  const char* path;
  ModelArch arch;
  const char* doc;
};
const FamilyDoc kFamilyDocs[] = {
    {"model.name_or_path", ModelArch::Llama,
     "Causal LM folder as transformers writes it: config.json and the .safetensors (local; with random_weights "
     "config.json alone)"},
    {"model.tokenizer_path", ModelArch::Llama,
     "The tokenizer's folder (tokenizer.json or tokenizer.model); empty = model.name_or_path"},
    {"train.batch_size", ModelArch::Llama, "Token rows (samples of max_seq_len tokens) per forward pass"},
    {"train.offload_checkpoints", ModelArch::Llama,
     "With gradient checkpointing: keep each decoder layer's saved input in pinned host memory, not on the GPU"},
    {"train.offload_optimizer_state", ModelArch::Llama,
     "adamw: keep the optimizer's moments in pinned host memory between steps, not on the GPU; each step copies "
     "them to the card in 64 MiB pieces and back (8 bytes per LoRA parameter less on the card)"},
    {"datasets[].type", ModelArch::Llama, "jsonl (one JSON object per line) or synthetic (random tokens)"},
    {"sample.sample_every", ModelArch::Llama, "Generate text for sample.prompts every N steps; 0 = never"},
    {"sample.prompts", ModelArch::Llama, "Prompts the model continues at each sample"},
    {"save.export_formats", ModelArch::Llama, "LoRA written at each save: peft (an adapter folder)"},
};

// Dataset keys that only some dataset types read (the validator refuses them on
// the others, or says they are ignored); the rest apply to every type.
struct DatasetTypeOnly {
  const char* path;
  std::vector<DatasetType> types;
};
const DatasetTypeOnly kDatasetTypeOnly[] = {
    {"datasets[].folder_path", {DatasetType::Images, DatasetType::Latents}},
    {"datasets[].caption_ext", {DatasetType::Images}},
    {"datasets[].default_caption", {DatasetType::Images}},
    {"datasets[].trigger_word", {DatasetType::Images}},
    {"datasets[].num_repeats", {DatasetType::Images}},
    {"datasets[].flip_x", {DatasetType::Images}},
    {"datasets[].cache_latents_to_disk", {DatasetType::Images}},
    {"datasets[].resolution", {DatasetType::Images, DatasetType::Shapes, DatasetType::Synthetic}},
    {"datasets[].num_items", {DatasetType::Synthetic, DatasetType::Shapes}},
    {"datasets[].file_path", {DatasetType::Jsonl}},
    {"datasets[].prompt_field", {DatasetType::Jsonl}},
    {"datasets[].response_field", {DatasetType::Jsonl}},
    {"datasets[].text_field", {DatasetType::Jsonl}},
    {"datasets[].response_marker", {DatasetType::Jsonl}},
    {"datasets[].max_seq_len", {DatasetType::Jsonl, DatasetType::Synthetic}},
    {"datasets[].padding_side", {DatasetType::Jsonl}},
    {"datasets[].packing", {DatasetType::Jsonl}},
};

void applyLooks(std::vector<KeySpec>& keys) {
  for (KeySpec& k : keys) {
    for (const Look& l : kLooks)
      if (k.path == l.path) {
        k.label = l.label;
        k.group = l.group;
        k.basic = l.basic;
        k.modelShape = k.group == "Model shape";
      }
    for (const FamilyOnly& f : kFamilyOnly)
      if (k.path == f.path) k.families = f.arches;
    for (const DatasetTypeOnly& t : kDatasetTypeOnly)
      if (k.path == t.path) k.datasetTypes = t.types;
    for (const FamilyDoc& d : kFamilyDocs)
      if (k.path == d.path) k.familyDocs.emplace_back(d.arch, d.doc);
  }
}

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

bool KeySpec::appliesTo(ModelArch arch) const {
  return families.empty() || std::find(families.begin(), families.end(), arch) != families.end();
}

bool KeySpec::appliesToDataset(DatasetType type) const {
  return datasetTypes.empty() || std::find(datasetTypes.begin(), datasetTypes.end(), type) != datasetTypes.end();
}

const std::string& KeySpec::docFor(ModelArch arch) const {
  for (const auto& [a, d] : familyDocs)
    if (a == arch) return d;
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

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> kSchema = [] {
    std::vector<KeySpec> keys = buildSchema();
    applyLooks(keys);
    return keys;
  }();
  return kSchema;
}

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
