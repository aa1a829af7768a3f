#include "families/flux/describe/FluxDescription.h"

#include "config/ImageFamilyRules.h"
#include "config/KeyRows.h"
#include "config/Validator.h"

namespace strata::families {

using config::DatasetType;
using config::ExportFormat;
namespace rows = config::rows;

namespace {

// FLUX.1's keys: the single-file components, the transformer's shape, the
// flow-matching training and the image datasets and samples (FLUX.2 reads some:
// Flux2Description.cpp's alsoReads).
std::vector<config::KeyRow> fluxKeys() {
  return {
      {rows::keyRow(
           "model.vae_path", STRATA_KEY_MEMBER(model.vaePath),
           "With a single-file transformer: the VAE file (BFL's ae.safetensors); empty = the diffusers folder's vae/",
           rows::Opt().file().look("VAE file (single files)", "Model")),
       "model.name_or_path"},
      {rows::keyRow("model.clip_path", STRATA_KEY_MEMBER(model.clipPath),
                    "With a single-file transformer: the CLIP-L text encoder file (clip_l.safetensors)",
                    rows::Opt().file().look("CLIP-L file (single files)", "Model")),
       "model.vae_path"},
      {rows::keyRow("model.t5_path", STRATA_KEY_MEMBER(model.t5Path),
                    "With a single-file transformer: the T5-XXL text encoder file (t5xxl_fp16.safetensors)",
                    rows::Opt().file().look("T5-XXL file (single files)", "Model")),
       "model.clip_path"},
      {rows::keyRow("model.vae_norm_num_groups", STRATA_KEY_MEMBER(model.vaeNormNumGroups),
                    "With a single-file VAE: its GroupNorm group count (unset = 32, every released FLUX.1 / SD VAE)",
                    rows::Opt().min(1).max(4096).look("VAE group count (single file)", "Model shape")),
       "model.tokenizer_path"},
      {rows::keyRow("model.clip_num_attention_heads", STRATA_KEY_MEMBER(model.clipNumAttentionHeads),
                    "With a single-file CLIP: its head count (unset = hidden size / 64, CLIP-L: 12)",
                    rows::Opt().min(1).max(4096).look("CLIP head count (single file)", "Model shape")),
       "model.vae_norm_num_groups"},
      {rows::keyRow(
           "model.is_flux", STRATA_KEY_MEMBER(model.isFlux),
           "ai-toolkit's flag: the model is a FLUX.1 transformer (false is refused with arch flux: set model.arch)",
           rows::Opt().look("FLUX.1 model", "Model").quietElsewhere()),
       "model.clip_num_attention_heads"},
      {rows::keyRow(
           "model.preset", STRATA_KEY_MEMBER(model.preset),
           "Architecture: \"\" = detect from the weights (with random_weights: the family's first preset, flux-dev "
           "or flux2-dev), or a preset of model.arch's family: flux-dev, tiny; flux2-dev, flux2-klein-9b, "
           "flux2-klein-4b, tiny",
           rows::Opt().look("Architecture", "Model").presetName()),
       "model.arch"},
      {rows::keyRow("model.num_layers", STRATA_KEY_MEMBER(model.numLayers), "Override: number of double (joint) blocks",
                    rows::Opt().min(1).max(1000).look("Double blocks", "Model shape")),
       "model.preset"},
      {rows::keyRow("model.num_single_layers", STRATA_KEY_MEMBER(model.numSingleLayers),
                    "Override: number of single blocks",
                    rows::Opt().min(0).max(1000).look("Single blocks", "Model shape")),
       "model.num_layers"},
      {rows::keyRow("model.num_attention_heads", STRATA_KEY_MEMBER(model.numAttentionHeads),
                    "Override: attention heads", rows::Opt().min(1).max(1024).look("Attention heads", "Model shape")),
       "model.num_single_layers"},
      {rows::keyRow("model.attention_head_dim", STRATA_KEY_MEMBER(model.attentionHeadDim),
                    "Override: width of one head (must equal the sum of axes_dims_rope)",
                    rows::Opt().min(2).max(4096).look("Width of one head", "Model shape")),
       "model.num_attention_heads"},
      {rows::keyRow("model.in_channels", STRATA_KEY_MEMBER(model.inChannels),
                    "Override: packed latent channels (64 = 16 x 2 x 2)",
                    rows::Opt().min(1).max(4096).look("Latent channels (packed)", "Model shape")),
       "model.attention_head_dim"},
      {rows::keyRow("model.joint_attention_dim", STRATA_KEY_MEMBER(model.jointAttentionDim),
                    "Override: T5 embedding width",
                    rows::Opt().min(1).max(65536).look("Text embedding width", "Model shape")),
       "model.in_channels"},
      {rows::keyRow("model.pooled_projection_dim", STRATA_KEY_MEMBER(model.pooledProjectionDim),
                    "Override: CLIP pooled embedding width",
                    rows::Opt().min(1).max(65536).look("Pooled text embedding width", "Model shape")),
       "model.joint_attention_dim"},
      {rows::keyRow("model.axes_dims_rope", STRATA_KEY_MEMBER(model.axesDimsRope),
                    "Override: rotary dims per position axis (empty = preset's, flux-dev: [16, 56, 56])",
                    rows::Opt().min(0).max(4096).look("Rotary sizes per axis", "Model shape")),
       "model.pooled_projection_dim"},
      {rows::keyRow("model.guidance_embeds", STRATA_KEY_MEMBER(model.guidanceEmbeds),
                    "Override: the model takes a guidance input (dev)",
                    rows::Opt().look("Takes a guidance input", "Model shape")),
       "model.axes_dims_rope"},
      {rows::keyRow("model.quantize_te", STRATA_KEY_MEMBER(model.quantizeTe),
                    "Quantize T5's Linear weights with model.qtype while loading (CLIP stays float)",
                    rows::Opt().look("Quantize the text encoders", "Model")),
       "model.quantize"},
      {rows::keyRow("model.split_model_other_module_param_count_scale",
                    STRATA_KEY_MEMBER(model.splitModelOtherModuleParamCountScale),
                    "param_count placement: share of the text encoders' and VAE's parameters charged to the first GPU",
                    rows::Opt().min(0).max(100).look("Weight of the other modules when splitting", "GPUs")),
       "model.split_model_over_gpus"},
      {rows::keyRow("train.timestep_type", STRATA_KEY_MEMBER(train.timestepType),
                    "Noise-level draw: sigmoid (logit-normal), uniform, shift (resolution-shifted sigmoid)",
                    rows::Opt().look("Noise levels", "Training")),
       "train.cuda_graph"},
      {rows::keyRow("train.guidance", STRATA_KEY_MEMBER(train.guidance),
                    "Guidance input while training a guidance-distilled model",
                    rows::Opt().min(0).max(100).look("Guidance while training", "Training")),
       "train.timestep_type"},
      {rows::keyRow("train.caption_dropout_rate", STRATA_KEY_MEMBER(train.captionDropoutRate),
                    "Probability of training a sample with an empty caption",
                    rows::Opt().min(0).max(1).look("Train without caption (share)", "Training")),
       "train.guidance"},
      {rows::keyRow("datasets[].folder_path", STRATA_KEY_DATASET(folderPath), "Folder of the images or cached latents",
                    rows::Opt()
                        .folder()
                        .look("Image folder", "Dataset", true)
                        .datasetTypes({DatasetType::Images, DatasetType::Latents})),
       "datasets[].type"},
      {rows::keyRow("datasets[].caption_ext", STRATA_KEY_DATASET(captionExt),
                    "Caption file extension next to each image",
                    rows::Opt().look("Caption file extension", "Dataset").datasetTypes({DatasetType::Images})),
       "datasets[].folder_path"},
      {rows::keyRow("datasets[].default_caption", STRATA_KEY_DATASET(defaultCaption),
                    "Caption for images without a caption file",
                    rows::Opt().look("Caption for images without one", "Dataset").datasetTypes({DatasetType::Images})),
       "datasets[].caption_ext"},
      {rows::keyRow("datasets[].trigger_word", STRATA_KEY_DATASET(triggerWord),
                    "Word that replaces [trigger] in captions; prepended to captions without [trigger]",
                    rows::Opt().look("Trigger word", "Dataset", true).datasetTypes({DatasetType::Images})),
       "datasets[].default_caption"},
      {rows::keyRow(
           "datasets[].num_repeats", STRATA_KEY_DATASET(numRepeats),
           "Each image of the folder counts this many times per epoch",
           rows::Opt().min(1).max(10000).look("Repeats per image", "Dataset").datasetTypes({DatasetType::Images})),
       "datasets[].trigger_word"},
      {rows::keyRow("datasets[].flip_x", STRATA_KEY_DATASET(flipX), "Also train on each image mirrored left-right",
                    rows::Opt().look("Also train on mirrored images", "Dataset").datasetTypes({DatasetType::Images})),
       "datasets[].num_repeats"},
      {rows::keyRow("datasets[].resolution", STRATA_KEY_DATASET(resolution),
                    "Training sizes (square, bucketed; multiples of 16, of 4 for shapes)",
                    rows::Opt()
                        .unit("pixels")
                        .min(8)
                        .max(8192)
                        .scalarAsList(true)
                        .look("Resolution", "Dataset", true)
                        .datasetTypes({DatasetType::Images, DatasetType::Shapes, DatasetType::Synthetic})),
       "datasets[].flip_x"},
      {rows::keyRow("datasets[].cache_latents_to_disk", STRATA_KEY_DATASET(cacheLatentsToDisk),
                    "Cache VAE latents and text embeddings in the folder's _strata_cache (else in memory for the run)",
                    rows::Opt().look("Cache encoded images on disk", "Dataset").datasetTypes({DatasetType::Images})),
       "datasets[].num_items"},
      {rows::keyRow("sample.width", STRATA_KEY_MEMBER(sample.width),
                    "Sample width (multiple of 16; of 4 with a shapes dataset)",
                    rows::Opt().unit("pixels").min(16).max(8192).look("Sample width", "Samples")),
       "sample.walk_seed"},
      {rows::keyRow("sample.height", STRATA_KEY_MEMBER(sample.height),
                    "Sample height (multiple of 16; of 4 with a shapes dataset)",
                    rows::Opt().unit("pixels").min(16).max(8192).look("Sample height", "Samples")),
       "sample.width"},
      {rows::keyRow("sample.sample_steps", STRATA_KEY_MEMBER(sample.sampleSteps), "Denoising steps per sample",
                    rows::Opt().min(1).max(1000).look("Denoising steps", "Samples")),
       "sample.height"},
      {rows::keyRow("sample.guidance_scale", STRATA_KEY_MEMBER(sample.guidanceScale),
                    "Guidance input while sampling (3.5 typical)",
                    rows::Opt().min(0).max(100).look("Guidance scale", "Samples")),
       "sample.sample_steps"},
  };
}

void arch(config::RuleContext& ctx) {
  if (!ctx.config().model.isFlux)
    ctx.error("model.is_flux", "is_flux is false but model.arch is flux",
              "set model.arch: llama for a Llama-family causal LM, or is_flux: true with a FLUX checkpoint");
}

void model(config::RuleContext& ctx) {
  const config::ModelConfig& m = ctx.config().model;
  config::checkTransformerShape(ctx);
  // What single files do not hold: read only with a single-file component.
  if (m.vaeNormNumGroups && (m.randomWeights || m.vaePath.empty()))
    ctx.error(
        "model.vae_norm_num_groups", "read only with a single-file VAE (model.vae_path)",
        m.randomWeights ? "random weights use FLUX.1's VAE shape" : "a diffusers folder's vae/config.json says it");
  if (m.clipNumAttentionHeads && (m.randomWeights || m.clipPath.empty()))
    ctx.error("model.clip_num_attention_heads", "read only with a single-file CLIP (model.clip_path)",
              m.randomWeights ? "random weights use CLIP-L's head width 64"
                              : "a diffusers folder's text_encoder/config.json says it");
}

void paths(config::RuleContext& ctx) {
  const config::ModelConfig& m = ctx.config().model;
  if (m.randomWeights && ctx.hasImages() && m.nameOrPath.empty() && m.tokenizerPath.empty())
    ctx.error("model.tokenizer_path", "an images run with random_weights still needs the tokenizers",
              "give a folder holding tokenizer/ and tokenizer_2/ (a FLUX.1 diffusers folder works)");
}

void sampling(config::RuleContext& ctx) {
  const config::RunConfig& cfg = ctx.config();
  const config::SampleConfig& s = cfg.sample;
  const bool shapes = !cfg.datasets.empty() && cfg.datasets.front().type == DatasetType::Shapes;
  const int64_t multiple = shapes ? 4 : 16;
  for (const char* key : {"sample.width", "sample.height"}) {
    const int64_t v = key == std::string("sample.width") ? s.width : s.height;
    if (v > 0 && v % multiple != 0)
      ctx.error(key, std::to_string(v) + " is not a multiple of " + std::to_string(multiple),
                "use " + std::to_string((v + multiple / 2) / multiple * multiple));
  }
}

}  // namespace

config::FamilyDescription describeFlux() {
  config::FamilyDescription d;
  d.id = "flux";
  d.presets = {"flux-dev", "tiny"};  // flux/FluxPlanning.cpp builds them
  d.displayName = "FLUX.1";
  d.title = "FLUX.1 image LoRA";
  d.keys = fluxKeys();
  d.datasetTypes = {DatasetType::Images, DatasetType::Latents, DatasetType::Synthetic, DatasetType::Shapes};
  d.exportFormats = {ExportFormat::Diffusers, ExportFormat::Kohya, ExportFormat::Comfy};
  d.hints.modelFolder =
      "point it at a local FLUX.1-dev diffusers folder or flux1-dev.safetensors, or set random_weights: true";
  d.hints.modelNotFound = "give a diffusers folder or a .safetensors file";
  d.hints.lr = "1e-4 is the usual FLUX LoRA rate";
  d.hints.noDataset = "add one, e.g. datasets: [{type: images, folder_path: /data/my_set}]";
  d.hints.noExport = "add diffusers, kohya or comfy";
  d.hints.foreignFormat = "peft (an adapter folder) is the causal-LM form; a FLUX LoRA is one file";
  d.hints.foreignFormatHint = "use diffusers (the same tensor names, in one .safetensors file)";
  // The double and single blocks by kind; the stem and the head by their slots' names.
  d.mapParts = {{"stem", "stem", "stem", "stem"},
                {"double", "double", "double", "double block"},
                {"single", "single", "single", "single block"},
                {"head", "head", "head", "head"}};
  d.rules.arch = arch;
  d.rules.model = model;
  d.rules.paths = paths;
  d.rules.dataset = config::checkImageDataset;
  d.rules.sampling = sampling;
  return d;
}

}  // namespace strata::families
