#include "families/flux2/describe/Flux2Description.h"

#include "config/ImageFamilyRules.h"

namespace strata::families {

using config::DatasetType;
using config::ExportFormat;

namespace {

// FLUX.2 trains its transformer only: Strata has no FLUX.2 VAE or text encoder yet.
void model(config::RuleContext& ctx) {
  const config::ModelConfig& m = ctx.config().model;
  if (m.pooledProjectionDim)
    ctx.error("model.pooled_projection_dim", "FLUX.2 has no pooled text embedding", "remove the key");
  config::checkTransformerShape(ctx);
}

void dataset(config::RuleContext& ctx, size_t i) {
  const config::DatasetConfig& d = ctx.config().datasets[i];
  if (d.type != DatasetType::Synthetic) {
    ctx.error("datasets[" + std::to_string(i) + "].type",
              "a flux2 model trains on a synthetic dataset only, not " + config::enumName(d.type) +
                  ": Strata has no FLUX.2 VAE or Mistral text encoder yet, so images cannot be encoded and there "
                  "are no FLUX.2 latents to read",
              "use type: synthetic (random latents and text embeddings of the model's shapes; docs/flux2.md)");
    return;
  }
  config::checkImageDataset(ctx, i);
}

void sampling(config::RuleContext& ctx) {
  const config::SampleConfig& s = ctx.config().sample;
  if (s.sampleEvery > 0 && !s.prompts.empty())
    ctx.error("sample.sample_every", "a flux2 run cannot sample yet: there is no FLUX.2 VAE to decode the latents",
              "set sample_every: 0 (docs/flux2.md)");
}

}  // namespace

config::FamilyDescription describeFlux2() {
  config::FamilyDescription d;
  d.id = "flux2";
  // flux2::Flux2Config::presetNames() (tests/families checks the two agree).
  d.presets = {"flux2-dev", "flux2-klein-9b", "flux2-klein-4b", "tiny"};
  d.displayName = "FLUX.2";
  d.title = "FLUX.2 image LoRA (synthetic data only)";
  // FLUX.1's shape keys and flow-matching keys (synthetic data, no VAE or text encoders yet).
  d.alsoReads = {"model.preset",
                 "model.num_layers",
                 "model.num_single_layers",
                 "model.num_attention_heads",
                 "model.attention_head_dim",
                 "model.in_channels",
                 "model.joint_attention_dim",
                 "model.axes_dims_rope",
                 "model.guidance_embeds",
                 "train.timestep_type",
                 "train.guidance",
                 "train.caption_dropout_rate",
                 "datasets[].resolution"};
  d.datasetTypes = {DatasetType::Synthetic};
  d.exportFormats = {ExportFormat::Diffusers, ExportFormat::Kohya, ExportFormat::Comfy};
  d.hints.modelFolder =
      "point it at a local FLUX.2 transformer (a diffusers folder or a BFL .safetensors file), or set "
      "random_weights: true";
  d.hints.modelNotFound = "give a FLUX.2 transformer: a diffusers folder or a BFL .safetensors file";
  d.hints.lr = "1e-4 is the usual FLUX LoRA rate";
  d.hints.noDataset =
      "add one, e.g. datasets: [{type: synthetic, resolution: [512]}] (a flux2 run trains on synthetic data only)";
  d.hints.noExport = "add diffusers, kohya or comfy";
  d.hints.foreignFormat = "peft (an adapter folder) is the causal-LM form; a FLUX.2 LoRA is one file";
  d.hints.foreignFormatHint = "use diffusers (the same tensor names, in one .safetensors file)";
  // FLUX.2's double blocks (image and text streams apart), then its single blocks (one joint stream).
  d.mapParts = {{"stem", "stem", "stem", "stem"},
                {"double", "double", "double", "double block"},
                {"single", "single", "single", "single block"},
                {"head", "head", "head", "head"}};
  d.rules.model = model;
  d.rules.dataset = dataset;
  d.rules.sampling = sampling;
  return d;
}

}  // namespace strata::families
