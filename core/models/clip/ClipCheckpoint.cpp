#include "models/clip/ClipCheckpoint.h"

#include "common/Error.h"
#include "common/Text.h"
#include "io/DiffusersFolder.h"
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
  fs::path source = path;
  if (fs::is_directory(path)) {
    if (io::isDiffusersPipelineFolder(path)) source = io::diffusersComponentFolder(path, {"CLIPTextModel"});
    if (fs::is_regular_file(source / "config.json")) ckpt.configJson_ = source / "config.json";
  }
  ckpt.files_ = std::make_shared<io::SafetensorsCheckpoint>(io::SafetensorsCheckpoint::open(source));
  const auto& raw = ckpt.files_->shapes();

  std::vector<std::string> prefixes;
  for (const auto& [name, _] : raw) {
    if (!endsWith(name, kAnchor)) continue;
    const std::string p = name.substr(0, name.size() - std::char_traits<char>::length(kAnchor));
    if ((p.empty() || p.back() == '.') && raw.count(p + kTokenEmbedding)) prefixes.push_back(p);
  }
  if (prefixes.empty())
    throw LoadError(ckpt.files_->describe() + ": not a CLIP text encoder checkpoint (no '" + kAnchor + "' next to '" +
                    kTokenEmbedding + "' under any prefix)");
  if (prefixes.size() > 1)
    throw LoadError(ckpt.files_->describe() + ": holds more than one CLIP text encoder (under '" + prefixes[0] +
                    "' and '" + prefixes[1] + "')");
  ckpt.prefix_ = prefixes[0];
  for (const auto& [name, shape] : raw)
    if (startsWith(name, ckpt.prefix_)) ckpt.shapes_[name.substr(ckpt.prefix_.size())] = shape;
  return ckpt;
}

ClipTextConfig ClipCheckpoint::config() const {
  if (!configJson_.empty()) return ClipTextConfig::fromTransformersJsonFile(configJson_);
  try {
    return ClipTextConfig::fromShapes(shapes_);
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
