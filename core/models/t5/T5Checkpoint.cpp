#include "models/t5/T5Checkpoint.h"

#include "common/Error.h"
#include "common/Text.h"
#include "io/DiffusersFolder.h"
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
  fs::path source = path;
  if (fs::is_directory(path)) {
    if (io::isDiffusersPipelineFolder(path)) source = io::diffusersComponentFolder(path, {"T5EncoderModel"});
    if (fs::is_regular_file(source / "config.json")) ckpt.configJson_ = source / "config.json";
  }
  ckpt.files_ = std::make_shared<io::SafetensorsCheckpoint>(io::SafetensorsCheckpoint::open(source));
  const auto& raw = ckpt.files_->shapes();

  // The prefix: whatever stands before encoder.final_layer_norm.weight.
  std::vector<std::string> prefixes;
  for (const auto& [name, _] : raw) {
    if (!endsWith(name, kAnchor)) continue;
    const std::string p = name.substr(0, name.size() - std::char_traits<char>::length(kAnchor));
    if (p.empty() || p.back() == '.') prefixes.push_back(p);
  }
  if (prefixes.empty())
    throw LoadError(ckpt.files_->describe() + ": not a T5 encoder checkpoint (no '" + kAnchor + "' under any prefix)");
  if (prefixes.size() > 1)
    throw LoadError(ckpt.files_->describe() + ": holds more than one T5 encoder ('" + prefixes[0] + kAnchor + "', '" +
                    prefixes[1] + kAnchor + "')");
  ckpt.prefix_ = prefixes[0];

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
