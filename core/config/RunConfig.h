#pragma once
// The typed run configuration. Sections and key names follow ai-toolkit's job
// config (model, network, train, datasets, sample, save) where it has them, so
// its YAML reads almost unchanged; Strata's additions are placement, memory caps,
// EMA settings, export formats and the built-in demo datasets.
//
// Defaults here are the one place defaults live: the schema (ConfigSchema.h)
// reads them from a default-constructed RunConfig. The YAML key of each member is
// in its comment.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace strata::config {

// A key's value in a type-neutral form: monostate = unset (optional keys only),
// Int keys hold int64_t, Float keys double, Choice keys their spelling.
using Value = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>,
                           std::vector<double>, std::vector<std::string>>;

// The values of keys a family contributes without a member below (config/KeyRows.h,
// rows::valueRow): by key path, only those set away from the row's default.
using FamilyValues = std::map<std::string, Value>;

// ---- choices ---------------------------------------------------------------

enum class ComputeDevice { Auto, Cpu, Cuda };                          // auto | cpu | cuda
enum class PlacementMode { ParamCount, Memory };                       // param_count | memory
enum class NetworkType { Lora };                                       // lora
enum class LrScheduler { Constant, Warmup, Cosine, Linear };           // constant | warmup | cosine | linear
enum class OptimizerType { AdamW, AdamW8bit };                         // adamw | adamw8bit
enum class DType { BF16, FP16, FP32 };                                 // bf16 | fp16 | fp32
enum class TimestepType { Sigmoid, Uniform, Shift };                   // sigmoid | uniform | shift
enum class DatasetType { Images, Latents, Synthetic, Shapes, Jsonl };  // images | latents | synthetic | shapes | jsonl
enum class ExportFormat { Diffusers, Kohya, Comfy, Peft };             // diffusers | kohya | comfy | peft (a folder)
enum class PaddingSide { Right, Left };                                // right | left
enum class AttentionBackend { Auto, Cudnn, Flash };                    // auto | cudnn | flash
// A switch that was a bool and may now be left to the run: auto | true | false.
enum class AutoSwitch { Auto, On, Off };
using CudaGraphMode = AutoSwitch;  // train.cuda_graph

// One spelling of an enum value. The first spelling of each value is the one
// Strata writes; later ones (alias = true) are accepted when reading, e.g.
// ai-toolkit's "float16" for fp16.
template <class E>
struct EnumName {
  E value;
  const char* name;
  bool alias;
};

template <class E>
struct EnumTraits;  // specialised below: static constexpr std::array<EnumName<E>, N> kNames

#define STRATA_ENUM_NAMES(E, N, ...)                                   \
  template <>                                                          \
  struct EnumTraits<E> {                                               \
    static constexpr std::array<EnumName<E>, N> kNames{{__VA_ARGS__}}; \
  }

STRATA_ENUM_NAMES(ComputeDevice, 3, {ComputeDevice::Auto, "auto", false}, {ComputeDevice::Cpu, "cpu", false},
                  {ComputeDevice::Cuda, "cuda", false});
STRATA_ENUM_NAMES(PlacementMode, 2, {PlacementMode::ParamCount, "param_count", false},
                  {PlacementMode::Memory, "memory", false});
STRATA_ENUM_NAMES(NetworkType, 1, {NetworkType::Lora, "lora", false});
STRATA_ENUM_NAMES(LrScheduler, 5, {LrScheduler::Constant, "constant", false}, {LrScheduler::Warmup, "warmup", false},
                  {LrScheduler::Cosine, "cosine", false}, {LrScheduler::Linear, "linear", false},
                  {LrScheduler::Warmup, "constant_with_warmup", true});
STRATA_ENUM_NAMES(OptimizerType, 4, {OptimizerType::AdamW, "adamw", false},
                  {OptimizerType::AdamW8bit, "adamw8bit", false}, {OptimizerType::AdamW, "AdamW", true},
                  {OptimizerType::AdamW8bit, "AdamW8bit", true});
STRATA_ENUM_NAMES(DType, 9, {DType::BF16, "bf16", false}, {DType::FP16, "fp16", false}, {DType::FP32, "fp32", false},
                  {DType::BF16, "bfloat16", true}, {DType::FP16, "float16", true}, {DType::FP32, "float32", true},
                  {DType::FP16, "half", true}, {DType::FP32, "float", true}, {DType::FP32, "full", true});
STRATA_ENUM_NAMES(TimestepType, 3, {TimestepType::Sigmoid, "sigmoid", false}, {TimestepType::Uniform, "uniform", false},
                  {TimestepType::Shift, "shift", false});
STRATA_ENUM_NAMES(DatasetType, 5, {DatasetType::Images, "images", false}, {DatasetType::Latents, "latents", false},
                  {DatasetType::Synthetic, "synthetic", false}, {DatasetType::Shapes, "shapes", false},
                  {DatasetType::Jsonl, "jsonl", false});
STRATA_ENUM_NAMES(ExportFormat, 4, {ExportFormat::Diffusers, "diffusers", false}, {ExportFormat::Kohya, "kohya", false},
                  {ExportFormat::Comfy, "comfy", false}, {ExportFormat::Peft, "peft", false});
STRATA_ENUM_NAMES(PaddingSide, 2, {PaddingSide::Right, "right", false}, {PaddingSide::Left, "left", false});
STRATA_ENUM_NAMES(AttentionBackend, 3, {AttentionBackend::Auto, "auto", false},
                  {AttentionBackend::Cudnn, "cudnn", false}, {AttentionBackend::Flash, "flash", false});
// train.cuda_graph and train.gradient_checkpointing were bools: the YAML 1.1 spellings
// of true and false read as before.
STRATA_ENUM_NAMES(AutoSwitch, 19, {AutoSwitch::Auto, "auto", false}, {AutoSwitch::On, "true", false},
                  {AutoSwitch::Off, "false", false}, {AutoSwitch::On, "True", true}, {AutoSwitch::On, "TRUE", true},
                  {AutoSwitch::On, "yes", true}, {AutoSwitch::On, "Yes", true}, {AutoSwitch::On, "YES", true},
                  {AutoSwitch::On, "on", true}, {AutoSwitch::On, "On", true}, {AutoSwitch::On, "ON", true},
                  {AutoSwitch::Off, "False", true}, {AutoSwitch::Off, "FALSE", true}, {AutoSwitch::Off, "no", true},
                  {AutoSwitch::Off, "No", true}, {AutoSwitch::Off, "NO", true}, {AutoSwitch::Off, "off", true},
                  {AutoSwitch::Off, "Off", true}, {AutoSwitch::Off, "OFF", true});

#undef STRATA_ENUM_NAMES

// Bytes per element of a tensor in `t`.
inline int64_t elementBytes(DType t) { return t == DType::FP32 ? 4 : 2; }

// The canonical spelling ("bf16").
template <class E>
std::string enumName(E value) {
  for (const auto& n : EnumTraits<E>::kNames)
    if (n.value == value && !n.alias) return n.name;
  return "?";
}

// Parses a spelling or an alias; nullopt when unknown (case-sensitive, as YAML is).
template <class E>
std::optional<E> parseEnum(std::string_view text) {
  for (const auto& n : EnumTraits<E>::kNames)
    if (text == n.name) return n.value;
  return std::nullopt;
}

// The canonical spellings, in declaration order (for schema choices and hints).
template <class E>
std::vector<std::string> enumChoices() {
  std::vector<std::string> out;
  for (const auto& n : EnumTraits<E>::kNames)
    if (!n.alias) out.emplace_back(n.name);
  return out;
}

// ---- sections --------------------------------------------------------------

struct JobConfig {
  std::string name = "strata_lora";       // job.name: run folder name and LoRA file stem
  std::string trainingFolder = "output";  // job.training_folder: parent folder of run folders
  bool operator==(const JobConfig& o) const;
};

struct ModelConfig {
  std::string nameOrPath;  // model.name_or_path: diffusers folder or BFL .safetensors
  // With a BFL single file: the rest of the pipeline as single files (ComfyUI layout).
  std::string vaePath;        // model.vae_path: ae.safetensors
  std::string clipPath;       // model.clip_path: clip_l.safetensors
  std::string t5Path;         // model.t5_path: t5xxl_fp16.safetensors
  std::string tokenizerPath;  // model.tokenizer_path: folder with tokenizer/ and tokenizer_2/
  // FLUX.2 with a single transformer file: the text encoder's folder (config.json, weights,
  // tokenizer), and whether it is a step-distilled [klein] (a diffusers folder says so itself).
  std::string textEncoderPath;  // model.text_encoder_path
  bool distilled = false;       // model.distilled
  // What single files do not hold (docs/pipeline.md); unset = FLUX.1's.
  std::optional<int64_t> vaeNormNumGroups;       // model.vae_norm_num_groups: with vae_path
  std::optional<int64_t> clipNumAttentionHeads;  // model.clip_num_attention_heads: with clip_path
  bool isFlux = true;                            // model.is_flux (false with arch flux is refused: set model.arch)
  // model.arch: the id a model family registers under (config/FamilyRegistry.h), as YAML spells it.
  std::string arch = "flux";
  // model.preset: a shape the family names (FamilyDescription::presets: flux-dev, flux2-klein-9b, tiny);
  // "" = from the weights, or with random weights the family's first preset.
  std::string preset;
  // Architecture overrides on top of the preset (model.num_layers, ...); unset = preset's value.
  std::optional<int64_t> numLayers;        // double blocks
  std::optional<int64_t> numSingleLayers;  // single blocks
  std::optional<int64_t> numAttentionHeads;
  std::optional<int64_t> attentionHeadDim;
  std::optional<int64_t> inChannels;
  std::optional<int64_t> jointAttentionDim;
  std::optional<int64_t> pooledProjectionDim;
  std::vector<int64_t> axesDimsRope;  // model.axes_dims_rope; empty = preset's
  std::optional<bool> guidanceEmbeds;
  bool randomWeights = false;                         // model.random_weights: random init, no checkpoint read
  bool quantize = false;                              // model.quantize: base transformer weights
  bool quantizeTe = false;                            // model.quantize_te: text encoders
  std::string qtype = "qfloat8";                      // model.qtype
  bool fp8Matmul = false;                             // model.fp8_matmul: fp8 tensor-core matmuls (sm_89+)
  bool fp8Backward = false;                           // model.fp8_backward: the input gradients in fp8 too
  bool fp8KeepTranspose = false;                      // model.fp8_keep_transpose: transposed fp8 weights kept
  bool lowVram = false;                               // model.low_vram
  ComputeDevice device = ComputeDevice::Auto;         // model.device
  bool splitModelOverGpus = false;                    // model.split_model_over_gpus
  double splitModelOtherModuleParamCountScale = 0.3;  // model.split_model_other_module_param_count_scale
  std::vector<int> gpuIds;                            // model.gpu_ids: "0,1,2,3" or [0, 1, 2, 3]; empty = all visible
  // model.replicas: data-parallel ranks on this machine, each a replica of the device set above
  // (`run` starts them as --nproc would; docs/data-parallel.md). 1 = one process.
  int64_t replicas = 1;
  PlacementMode placement = PlacementMode::ParamCount;  // model.placement
  std::vector<double> gpuMemoryLimitGb;  // model.gpu_memory_limit_gb: one value = every device; empty = no cap
  double memoryReserveGb = 1.0;          // model.memory_reserve_gb: kept free per device (context, workspace)
  // model.attention_backend: the CUDA scaled-dot-product attention kernel (docs/speed.md).
  AttentionBackend attentionBackend =
      AttentionBackend::Auto;  // per shape, the faster correct kernel (docs/training.md)
  bool operator==(const ModelConfig& o) const;
};

struct NetworkConfig {
  NetworkType type = NetworkType::Lora;    // network.type
  int64_t linear = 16;                     // network.linear: LoRA rank
  double linearAlpha = 16.0;               // network.linear_alpha: scale = alpha / rank
  double dropout = 0.0;                    // network.dropout
  std::vector<std::string> targetModules;  // network.target_modules: glob patterns; empty = all block Linears
  // network.dtype: the LoRA weights, their gradients and AdamW moments (fp32 or bf16;
  // the EMA shadows stay fp32).
  DType dtype = DType::FP32;
  bool operator==(const NetworkConfig& o) const;
};

struct EmaConfig {
  bool useEma = false;      // train.ema_config.use_ema
  double emaDecay = 0.99;   // train.ema_config.ema_decay
  int64_t updateEvery = 1;  // train.ema_config.update_every (steps)
  bool operator==(const EmaConfig& o) const;
};

struct TrainConfig {
  int64_t steps = 2000;                             // train.steps
  int64_t batchSize = 1;                            // train.batch_size
  int64_t gradientAccumulationSteps = 1;            // train.gradient_accumulation_steps
  double lr = 1e-4;                                 // train.lr
  LrScheduler lrScheduler = LrScheduler::Constant;  // train.lr_scheduler
  int64_t lrWarmupSteps = 0;                        // train.lr_warmup_steps
  OptimizerType optimizer = OptimizerType::AdamW;   // train.optimizer
  double weightDecay = 1e-4;                        // train.weight_decay
  std::vector<double> betas{0.9, 0.999};            // train.betas
  double eps = 1e-8;                                // train.eps
  double maxGradNorm = 1.0;                         // train.max_grad_norm; 0 = no clipping
  DType dtype = DType::BF16;                        // train.dtype: base weights and activations (LoRA stays fp32)
  // train.gradient_checkpointing: whether the run recomputes block activations. With
  // `auto` (gradientCheckpointingAuto) prepareRun decides: off where the plan fits the
  // cards without it, on elsewhere; until then it reads true.
  bool gradientCheckpointing = true;
  bool gradientCheckpointingAuto = false;
  bool offloadCheckpoints = false;  // train.offload_checkpoints: block inputs in host memory
  // train.offload_optimizer_state: AdamW's moments in pinned host memory, staged to the
  // card each step. With `auto` (offloadOptimizerStateAuto) prepareRun decides: on the
  // card where the plan fits with them there, in host memory elsewhere; until then it
  // reads false (so no rule of the key's `true` applies to auto).
  bool offloadOptimizerState = false;
  bool offloadOptimizerStateAuto = false;
  CudaGraphMode cudaGraph = CudaGraphMode::Auto;      // train.cuda_graph: the step's forward and backward replayed
  TimestepType timestepType = TimestepType::Sigmoid;  // train.timestep_type
  double guidance = 1.0;                              // train.guidance: guidance input while training (dev)
  double captionDropoutRate = 0.05;                   // train.caption_dropout_rate
  int64_t seed = 42;                                  // train.seed
  EmaConfig ema;                                      // train.ema_config
  bool operator==(const TrainConfig& o) const;
};

struct DatasetConfig {
  DatasetType type = DatasetType::Images;  // datasets[].type
  std::string folderPath;                  // datasets[].folder_path (images, latents)
  std::string captionExt = "txt";          // datasets[].caption_ext
  std::string defaultCaption;              // datasets[].default_caption: for images without a caption file
  std::string triggerWord;                 // datasets[].trigger_word: replaces [trigger], else prepended
  int64_t numRepeats = 1;                  // datasets[].num_repeats: each image counts this many times
  bool flipX = false;                      // datasets[].flip_x: also train on the mirrored image
  std::vector<int64_t> resolution{512};    // datasets[].resolution: square sizes, bucketed (pixels)
  int64_t numItems = 64;                   // datasets[].num_items (synthetic, shapes)
  bool cacheLatentsToDisk = true;          // datasets[].cache_latents_to_disk
  // A jsonl dataset (causal LM): one JSON object per line.
  std::string filePath;                          // datasets[].file_path: the .jsonl file
  std::string promptField = "prompt";            // datasets[].prompt_field
  std::string responseField = "response";        // datasets[].response_field
  std::string textField;                         // datasets[].text_field: one field holding prompt + marker + response
  std::string responseMarker = "### OUTPUT:";    // datasets[].response_marker: the response starts after it
  int64_t maxSeqLen = 512;                       // datasets[].max_seq_len (tokens): longer samples are cut
  PaddingSide paddingSide = PaddingSide::Right;  // datasets[].padding_side
  bool packing = false;                          // datasets[].packing: several samples per row of max_seq_len
  FamilyValues familyValues;                     // datasets[].<a family's key without a member>
  bool operator==(const DatasetConfig& o) const;
};

struct SampleConfig {
  int64_t sampleEvery = 250;         // sample.sample_every (steps); 0 = never
  std::vector<std::string> prompts;  // sample.prompts
  int64_t seed = 42;                 // sample.seed
  bool walkSeed = true;              // sample.walk_seed: prompt i uses seed + i
  int64_t width = 1024;              // sample.width (pixels)
  int64_t height = 1024;             // sample.height (pixels)
  int64_t sampleSteps = 20;          // sample.sample_steps
  double guidanceScale = 4.0;        // sample.guidance_scale
  int64_t maxNewTokens = 64;         // sample.max_new_tokens (causal LM)
  double temperature = 0.0;          // sample.temperature (causal LM): 0 = greedy
  bool operator==(const SampleConfig& o) const;
};

struct SaveConfig {
  int64_t saveEvery = 250;         // save.save_every (steps); 0 = only at the end
  int64_t maxStepSavesToKeep = 4;  // save.max_step_saves_to_keep
  int64_t exportEvery = 0;         // save.export_every (steps): LoRA files named with the step; 0 = only at the end
  DType dtype = DType::FP16;       // save.dtype of the exported LoRA
  std::vector<ExportFormat> exportFormats{ExportFormat::Diffusers};  // save.export_formats
  bool operator==(const SaveConfig& o) const;
};

struct RunConfig {
  JobConfig job;
  ModelConfig model;
  NetworkConfig network;
  TrainConfig train;
  std::vector<DatasetConfig> datasets;
  SampleConfig sample;
  SaveConfig save;
  FamilyValues familyValues;  // <section>.<a family's key without a member>
  bool operator==(const RunConfig& o) const;
  bool operator!=(const RunConfig& o) const { return !(*this == o); }
};

}  // namespace strata::config
