#include "models/clip/ClipCheckpoint.h"

#include "common/Error.h"
#include "common/Text.h"
#include "io/SafetensorsCheckpoint.h"
#include "io/StrictLoad.h"

namespace fs = std::filesystem;

namespace strata::clip {

namespace {

constexpr const char* kAnchor = "final_layer_norm.weight";
constexpr const char* kTokenEmbedding = "embeddings.token_embedding.weight";
constexpr const char* kTextModel = "text_model.";

}  // namespace

ClipCheckpoint ClipCheckpoint::open(const fs::path& path) {
  ClipCheckpoint ckpt;
  auto component = io::openComponentWeights(path, {"CLIPTextModel"});
  ckpt.files_ = std::move(component.weights);
  ckpt.configJson_ = std::move(component.configJson);
  const auto& raw = ckpt.files_->shapes();
  ckpt.prefix_ = io::uniqueKeyPrefix(*ckpt.files_, kAnchor, {kTokenEmbedding}, "CLIP text encoder");
  for (const auto& [name, shape] : raw)
    if (startsWith(name, ckpt.prefix_)) ckpt.shapes_[name.substr(ckpt.prefix_.size())] = shape;
  return ckpt;
}

ClipTextConfig ClipCheckpoint::config(std::optional<int64_t> numAttentionHeads) const {
  if (!configJson_.empty()) return ClipTextConfig::fromTransformersJsonFile(configJson_);
  try {
    return ClipTextConfig::fromShapes(shapes_, numAttentionHeads);
  } catch (const Error& e) {
    throw LoadError(files_->describe() + ": " + e.what());
  }
}

std::vector<std::string> loadClipTextWeights(ClipTextModel& model, const ClipCheckpoint& ckpt) {
  io::WeightPlan plan;
  const std::string& p = ckpt.prefix();
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    plan.slots.push_back({p + item.key(), item.value()});
  // The full CLIP model's heads sit next to text_model.
  const std::string outer =
      endsWith(p, kTextModel) ? p.substr(0, p.size() - std::char_traits<char>::length(kTextModel)) : p;
  plan.ignored[p + "embeddings.position_ids"] = "a buffer older transformers saved; positions are 0..L-1";
  plan.ignored[outer + "text_projection.weight"] =
      "the projection of CLIPTextModelWithProjection; FLUX pools without it";
  plan.ignored[outer + "logit_scale"] = "the image-text logit scale of the full CLIP model";
  return io::loadStrict(ckpt.files(), plan,
                        "CLIP text encoder, transformers names" + (p.empty() ? std::string() : " under '" + p + "'"));
}

std::shared_ptr<ClipTextModel> loadClipTextModel(const fs::path& path, const ClipBuildOptions& options,
                                                 const std::optional<ClipTextConfig>& config) {
  const ClipCheckpoint ckpt = ClipCheckpoint::open(path);
  auto model = std::make_shared<ClipTextModel>(config ? *config : ckpt.config(), options);
  loadClipTextWeights(*model, ckpt);
  return model;
}

}  // namespace strata::clip
