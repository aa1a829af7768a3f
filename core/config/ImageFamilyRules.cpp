#include "config/ImageFamilyRules.h"

#include "config/Validator.h"

#include <string>

namespace strata::config {

void checkTransformerShape(RuleContext& ctx) {
  const ModelConfig& m = ctx.config().model;
  if (m.attentionHeadDim && !m.axesDimsRope.empty()) {
    int64_t sum = 0;
    for (int64_t a : m.axesDimsRope) sum += a;
    if (sum != *m.attentionHeadDim)
      ctx.error("model.axes_dims_rope",
                "the rotary axes add up to " + std::to_string(sum) + " but attention_head_dim is " +
                    std::to_string(*m.attentionHeadDim) + ctx.lineOf("model.attention_head_dim"),
                "their sum must equal the head width (flux-dev: 16 + 56 + 56 = 128)");
  }
  for (int64_t a : m.axesDimsRope)
    if (a % 2 != 0) {
      ctx.error("model.axes_dims_rope", "rotary dims must be even, got " + std::to_string(a));
      break;
    }
  // An images run with random weights still reads its tokenizers: model.tokenizer_path, else this folder.
  // (Weights there with random_weights are an error for every family: the validator's randomWeights().)
  const bool tokenizersHere = ctx.hasImages() && m.tokenizerPath.empty();
  if (m.randomWeights && !m.nameOrPath.empty() && !tokenizersHere &&
      !(ctx.options().checkPaths && holdsWeights(m.nameOrPath)))
    ctx.warning("model.name_or_path", "ignored: random_weights is true" + ctx.lineOf("model.random_weights"),
                "set random_weights: false to train on these weights");
}

void checkImageDataset(RuleContext& ctx, size_t i) {
  const RunConfig& cfg = ctx.config();
  const DatasetConfig& d = cfg.datasets[i];
  const std::string at = "datasets[" + std::to_string(i) + "].";
  if (d.type == DatasetType::Jsonl) {
    ctx.error(at + "type", "a jsonl dataset trains a causal LM, not FLUX",
              "set model.arch: llama, or use a FLUX dataset type (latents, shapes, synthetic)");
    return;
  }
  const DatasetConfig defaults;
  // Every key a dataset accepts is read by its type or refused, never ignored.
  if (d.type != DatasetType::Images) {
    const std::string why = "only an images dataset reads it (this one is " + enumName(d.type) + ")";
    if (!d.triggerWord.empty()) ctx.error(at + "trigger_word", why);
    if (d.numRepeats != 1) ctx.error(at + "num_repeats", why);
    if (d.flipX) ctx.error(at + "flip_x", why);
    if (!d.defaultCaption.empty()) ctx.error(at + "default_caption", why);
    if (d.captionExt != defaults.captionExt) ctx.error(at + "caption_ext", why);
    if (d.cacheLatentsToDisk != defaults.cacheLatentsToDisk) ctx.error(at + "cache_latents_to_disk", why);
  } else {
    if (d.captionExt.empty() || d.captionExt == "." || d.captionExt.find('/') != std::string::npos)
      ctx.error(at + "caption_ext", "'" + d.captionExt + "' is not a file extension", "e.g. caption_ext: txt");
  }
  if (d.type == DatasetType::Shapes && ctx.hasImages())
    ctx.error(at + "type", "the shapes demo cannot be trained with an images dataset",
              "the demo's latents are a pixel code, not the VAE's: use one or the other");
  if ((d.type == DatasetType::Images || d.type == DatasetType::Latents) && d.numItems != defaults.numItems)
    ctx.error(at + "num_items", "only synthetic and shapes datasets read it (this one is " + enumName(d.type) + ")");
  if ((d.type == DatasetType::Shapes || d.type == DatasetType::Synthetic) && d.resolution.size() > 1)
    ctx.error(at + "resolution",
              withArticle(enumName(d.type)) + " dataset uses one resolution, " + std::to_string(d.resolution.size()) +
                  " are given",
              "several resolutions (one set of buckets each) are for images datasets");
  const std::string key = "datasets[" + std::to_string(i) + "].resolution";
  // A latents item's size is its file's; `strata-train plan` reads it from the
  // headers and falls back to resolution only where the folder is not readable.
  const SourceMap* where = ctx.options().where;
  const bool written = where ? where->has(key) : d.resolution != defaults.resolution;
  if (d.type == DatasetType::Latents && written)
    ctx.warning(key, "a latents dataset does not read resolution: each item's size is its file's latents",
                "remove it; a plan made where the folder cannot be read uses it as the size");
  if (d.resolution.empty()) ctx.error(key, "no resolution given", "e.g. resolution: [512]");
  // Shapes are drawn at pixel size and packed 2x2 twice (multiple of 4);
  // real images go through the 8x VAE and 2x2 packing (multiple of 16).
  const int64_t multiple = d.type == DatasetType::Shapes ? 4 : 16;
  for (int64_t r : d.resolution)
    if (r > 0 && r % multiple != 0) {
      ctx.error(key, std::to_string(r) + " is not a multiple of " + std::to_string(multiple),
                "use " + std::to_string((r + multiple / 2) / multiple * multiple));
      break;
    }
}

}  // namespace strata::config
