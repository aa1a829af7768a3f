#include "families/flux2/describe/Flux2Description.h"

#include <filesystem>

#include "config/ImageFamilyRules.h"
#include "config/KeyRows.h"

namespace strata::families {

using config::DatasetType;
using config::ExportFormat;
namespace fs = std::filesystem;
namespace rows = config::rows;

namespace {

// FLUX.2's own keys: what its single files do not hold. The rest it reads from
// FLUX.1's rows (alsoReads below).
std::vector<config::KeyRow> flux2Keys() {
  return {
      {rows::keyRow("model.text_encoder_path", STRATA_KEY_MEMBER(model.textEncoderPath),
                    "FLUX.2 with a single-file transformer: the text encoder's folder as transformers saves it "
                    "(config.json, weights, tokenizer.json); empty = the diffusers folder's text_encoder/",
                    rows::Opt().folder().look("Text encoder folder (single files)", "Model")),
       "model.vae_path"},
      {rows::keyRow("model.distilled", STRATA_KEY_MEMBER(model.distilled),
                    "FLUX.2 [klein] with a single-file transformer: the step-distilled model (samples in one pass, "
                    "no CFG); a diffusers folder says it in model_index.json",
                    rows::Opt().look("Step-distilled [klein] (single file)", "Model")),
       "model.text_encoder_path"},
  };
}

bool isFolder(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool isFile(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

void model(config::RuleContext& ctx) {
  const config::ModelConfig& m = ctx.config().model;
  if (m.pooledProjectionDim)
    ctx.error("model.pooled_projection_dim", "FLUX.2 has no pooled text embedding", "remove the key");
  config::checkTransformerShape(ctx);
  if (m.vaeNormNumGroups && (m.randomWeights || m.vaePath.empty()))
    ctx.error(
        "model.vae_norm_num_groups", "read only with a single-file VAE (model.vae_path)",
        m.randomWeights ? "random weights use FLUX.2's VAE shape" : "a diffusers folder's vae/config.json says it");
}

// The files an images run reads beside the transformer; each key named.
void paths(config::RuleContext& ctx) {
  const config::ModelConfig& m = ctx.config().model;
  auto folderKey = [&](const char* key, const std::string& value) {
    if (!value.empty() && !isFolder(value)) ctx.error(key, "folder not found: " + value);
  };
  if (!m.vaePath.empty() && !isFile(m.vaePath))
    ctx.error("model.vae_path", "file not found: " + m.vaePath, "give flux2-vae.safetensors");
  folderKey("model.tokenizer_path", m.tokenizerPath);
  folderKey("model.text_encoder_path", m.textEncoderPath);
  if (!m.textEncoderPath.empty() && isFolder(m.textEncoderPath) &&
      !isFile((fs::path(m.textEncoderPath) / "config.json").string()))
    ctx.error("model.text_encoder_path", m.textEncoderPath + " holds no config.json",
              "give the text encoder's folder as transformers saves it (config.json, weights, tokenizer.json)");
  // A diffusers pipeline folder holds the VAE and the text encoder; a transformer alone does not.
  const bool folder =
      !m.randomWeights && isFolder(m.nameOrPath) && isFile((fs::path(m.nameOrPath) / "model_index.json").string());
  if (folder) {
    if (m.distilled)
      ctx.error("model.distilled", m.nameOrPath + " is a diffusers folder: its model_index.json says (is_distilled)",
                "remove model.distilled");
    for (const auto& [key, value] : {std::pair<const char*, std::string>{"model.vae_path", m.vaePath},
                                     {"model.text_encoder_path", m.textEncoderPath}})
      if (!value.empty())
        ctx.error(key,
                  m.nameOrPath +
                      " is a diffusers folder, which holds its own; the key is read with a single "
                      "transformer file",
                  "remove the key");
  }
  if (!ctx.hasImages()) return;
  if (m.randomWeights) {
    if (m.tokenizerPath.empty() && m.textEncoderPath.empty() && !isFolder(m.nameOrPath))
      ctx.error("model.tokenizer_path", "an images run with random_weights still needs FLUX.2's tokenizer",
                "give a folder holding tokenizer.json (model.tokenizer_path) or the text encoder's folder "
                "(model.text_encoder_path)");
    return;
  }
  if (folder || m.nameOrPath.empty()) return;  // the validator says an empty one
  if (m.vaePath.empty())
    ctx.error("model.vae_path", "an images run from a transformer alone (no model_index.json) needs the VAE file",
              "give flux2-vae.safetensors, or a diffusers FLUX.2 folder as model.name_or_path");
  if (m.textEncoderPath.empty())
    ctx.error("model.text_encoder_path",
              "an images run from a transformer alone (no model_index.json) needs the text encoder",
              "give its folder as transformers saves it (config.json, weights, tokenizer.json)");
}

void dataset(config::RuleContext& ctx, size_t i) {
  const config::DatasetConfig& d = ctx.config().datasets[i];
  const std::string key = "datasets[" + std::to_string(i) + "].type";
  switch (d.type) {
    case DatasetType::Images:
    case DatasetType::Synthetic:
      config::checkImageDataset(ctx, i);
      return;
    case DatasetType::Latents:
      ctx.error(key,
                "a latents folder holds FLUX.1's tensors (a pooled vector, no FLUX.2 normalisation); a flux2 run "
                "encodes its own",
                "use type: images: the VAE's latents and the text embeddings are cached once in the folder");
      return;
    case DatasetType::Shapes:
      ctx.error(key, "the shapes demo's pixel code is FLUX.1's 16-channel latent space, not FLUX.2's VAE latents",
                "use type: images, or synthetic for a run without data");
      return;
    default:
      ctx.error(key, "a flux2 model trains on images or synthetic data, not " + config::enumName(d.type),
                "use type: images (docs/flux2.md)");
  }
}

void sampling(config::RuleContext& ctx) {
  const config::SampleConfig& s = ctx.config().sample;
  if (s.sampleEvery > 0 && !s.prompts.empty() && !ctx.hasImages())
    ctx.error("sample.sample_every",
              "a flux2 run samples only with an images dataset: on synthetic data there is no VAE or text encoder to "
              "encode the prompts and decode the latents",
              "set sample_every: 0, or train on type: images (docs/flux2.md)");
  for (const char* k : {"sample.width", "sample.height"}) {
    const int64_t v = std::string(k) == "sample.width" ? s.width : s.height;
    if (v > 0 && v % 16 != 0)
      ctx.error(k, std::to_string(v) + " is not a multiple of 16 (the VAE's 8, then 2x2 patches)",
                "use " + std::to_string((v + 8) / 16 * 16));
  }
}

}  // namespace

config::FamilyDescription describeFlux2() {
  config::FamilyDescription d;
  d.id = "flux2";
  // flux2::Flux2Config::presetNames() (tests/families checks the two agree).
  d.presets = {"flux2-dev", "flux2-klein-9b", "flux2-klein-4b", "tiny"};
  d.displayName = "FLUX.2";
  d.title = "FLUX.2-dev and FLUX.2 [klein] image LoRA";
  d.keys = flux2Keys();
  // FLUX.1's keys that FLUX.2 reads too: the shape, the single-file VAE, the text
  // encoder's quantization, flow-matching training, the image datasets and samples.
  d.alsoReads = {"model.preset",
                 "model.num_layers",
                 "model.num_single_layers",
                 "model.num_attention_heads",
                 "model.attention_head_dim",
                 "model.in_channels",
                 "model.joint_attention_dim",
                 "model.axes_dims_rope",
                 "model.guidance_embeds",
                 "model.vae_path",
                 "model.vae_norm_num_groups",
                 "model.quantize_te",
                 "train.timestep_type",
                 "train.guidance",
                 "train.caption_dropout_rate",
                 "datasets[].folder_path",
                 "datasets[].caption_ext",
                 "datasets[].default_caption",
                 "datasets[].trigger_word",
                 "datasets[].num_repeats",
                 "datasets[].flip_x",
                 "datasets[].resolution",
                 "datasets[].cache_latents_to_disk",
                 "sample.width",
                 "sample.height",
                 "sample.sample_steps",
                 "sample.guidance_scale"};
  // FLUX.1's words where they do not hold for FLUX.2 (its VAE file, text encoder, latent and text widths, guidance).
  d.keyDocs = {
      {"model.tokenizer_path",
       "FLUX.2 with random_weights: a folder holding tokenizer.json (or tokenizer/), for an images run"},
      {"model.vae_path",
       "With a single-file transformer: the VAE file (BFL's flux2-vae.safetensors); empty = the diffusers folder's "
       "vae/"},
      {"model.quantize_te",
       "Quantize the text encoder's Linear weights (FLUX.2-dev: Mistral-3, [klein]: Qwen3) with model.qtype while "
       "the captions are encoded; it is freed before the first step"},
      {"model.in_channels", "Override: packed latent channels (FLUX.2: 128 = 32 x 2 x 2)"},
      {"model.joint_attention_dim",
       "Override: text embedding width, three of the text encoder's layers stacked (flux2-dev: 15360 = 3 x 5120)"},
      {"model.axes_dims_rope",
       "Override: rotary dims per position axis, four for FLUX.2 (empty = preset's, flux2-dev: [32, 32, 32, 32])"},
      {"model.guidance_embeds", "Override: the model takes a guidance input (FLUX.2-dev; [klein] does not)"},
      {"sample.guidance_scale",
       "FLUX.2-dev: its guidance input (4 typical); [klein] base: the CFG scale against the empty prompt (above 1: "
       "two passes per step); a step-distilled [klein] ignores it"}};
  // Images first: the editor offers them first and a switch to FLUX.2 sets them (synthetic data is for benchmarks).
  d.datasetTypes = {DatasetType::Images, DatasetType::Synthetic};
  d.exportFormats = {ExportFormat::Diffusers, ExportFormat::Kohya, ExportFormat::Comfy};
  d.hints.modelFolder =
      "point it at a local FLUX.2 diffusers folder (or a BFL transformer .safetensors file with model.vae_path and "
      "model.text_encoder_path), or set random_weights: true";
  d.hints.modelNotFound = "give a FLUX.2 model: a diffusers folder or a BFL .safetensors file";
  d.hints.lr = "1e-4 is the usual FLUX LoRA rate";
  d.hints.noDataset = "add one, e.g. datasets: [{type: images, folder_path: /data/my_set, resolution: [512]}]";
  d.hints.noExport = "add diffusers, kohya or comfy";
  d.hints.foreignFormat = "peft (an adapter folder) is the causal-LM form; a FLUX.2 LoRA is one file";
  d.hints.foreignFormatHint = "use diffusers (the same tensor names, in one .safetensors file)";
  // FLUX.2's double blocks (image and text streams apart), then its single blocks (one joint stream).
  d.mapParts = {{"stem", "stem", "stem", "stem"},
                {"double", "double", "double", "double block"},
                {"single", "single", "single", "single block"},
                {"head", "head", "head", "head"}};
  d.rules.model = model;
  d.rules.paths = paths;
  d.rules.dataset = dataset;
  d.rules.sampling = sampling;
  return d;
}

}  // namespace strata::families
