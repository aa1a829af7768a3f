#include "models/t5/T5Checkpoint.h"

#include "common/Error.h"
#include "common/Text.h"
#include "io/SafetensorsCheckpoint.h"
#include "io/StrictLoad.h"

namespace fs = std::filesystem;

namespace strata::t5 {

namespace {

constexpr const char* kAnchor = "encoder.final_layer_norm.weight";
constexpr const char* kShared = "shared.weight";
constexpr const char* kEmbedTokens = "encoder.embed_tokens.weight";

}  // namespace

T5Checkpoint T5Checkpoint::open(const fs::path& path) {
  T5Checkpoint ckpt;
  auto component = io::openComponentWeights(path, {"T5EncoderModel"});
  ckpt.files_ = std::move(component.weights);
  ckpt.configJson_ = std::move(component.configJson);
  const auto& raw = ckpt.files_->shapes();
  ckpt.prefix_ = io::uniqueKeyPrefix(*ckpt.files_, kAnchor, {}, "T5 encoder");

  const std::string& p = ckpt.prefix_;
  if (raw.count(p + kShared))
    ckpt.embeddingKey_ = p + kShared;
  else if (raw.count(p + kEmbedTokens))
    ckpt.embeddingKey_ = p + kEmbedTokens;
  else
    throw LoadError(ckpt.files_->describe() + ": no token embedding ('" + p + kShared + "' or '" + p + kEmbedTokens +
                    "')");
  for (const auto& [name, shape] : raw) {
    if (!startsWith(name, p)) continue;
    const std::string key = name.substr(p.size());
    if (key == kShared || key == kEmbedTokens) continue;
    ckpt.shapes_[key] = shape;
  }
  ckpt.shapes_[kShared] = raw.at(ckpt.embeddingKey_);
  return ckpt;
}

T5Config T5Checkpoint::config() const {
  if (!configJson_.empty()) return T5Config::fromTransformersJsonFile(configJson_);
  try {
    return T5Config::fromShapes(shapes_);
  } catch (const Error& e) {
    throw LoadError(files_->describe() + ": " + e.what());
  }
}

std::vector<std::string> loadT5Weights(T5Encoder& model, const T5Checkpoint& ckpt) {
  io::WeightPlan plan;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string key = item.key() == kShared ? ckpt.embeddingKey() : ckpt.prefix() + item.key();
    plan.slots.push_back({key, item.value()});
  }
  // Both spellings of the tied embedding: load one, accept the other if it has the same shape.
  const std::string copy = ckpt.prefix() + kEmbedTokens;
  const auto& raw = ckpt.files().shapes();
  if (ckpt.embeddingKey() != copy && raw.count(copy) && raw.at(copy) == raw.at(ckpt.embeddingKey()))
    plan.ignored[copy] = "the tied copy of " + ckpt.embeddingKey() + " (not loaded twice)";
  return io::loadStrict(
      ckpt.files(), plan,
      "T5 encoder, transformers names" + (ckpt.prefix().empty() ? std::string() : " under '" + ckpt.prefix() + "'"));
}

std::shared_ptr<T5Encoder> loadT5Encoder(const fs::path& path, const T5BuildOptions& options,
                                         const std::optional<T5Config>& config) {
  const T5Checkpoint ckpt = T5Checkpoint::open(path);
  auto model = std::make_shared<T5Encoder>(config ? *config : ckpt.config(), options);
  loadT5Weights(*model, ckpt);
  return model;
}

}  // namespace strata::t5
