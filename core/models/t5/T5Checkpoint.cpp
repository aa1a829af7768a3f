#include "models/t5/T5Checkpoint.h"

#include <torch/autograd.h>

#include "common/Error.h"
#include "common/Text.h"
#include "io/HostMemory.h"
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

namespace {

// The encoder's parameters (transformers names) and shapes, in build order, from
// the layout it is built from (t5UnitLayout), without building it: what a streamed
// load checks the file against up front.
std::vector<std::pair<std::string, std::vector<int64_t>>> t5ParamShapes(const T5Config& cfg) {
  auto out = nn::paramShapes("", t5UnitLayout(T5Unit::Stem, cfg));
  for (int64_t i = 0; i < cfg.numLayers; ++i) {
    const auto block = nn::paramShapes("encoder.block." + std::to_string(i) + ".",
                                       t5UnitLayout(i == 0 ? T5Unit::FirstBlock : T5Unit::Block, cfg));
    out.insert(out.end(), block.begin(), block.end());
  }
  const auto head = nn::paramShapes("", t5UnitLayout(T5Unit::Head, cfg));
  out.insert(out.end(), head.begin(), head.end());
  return out;
}

}  // namespace

std::shared_ptr<T5Encoder> streamT5Encoder(const T5Checkpoint& ckpt, const T5Config& cfg, T5BuildOptions options,
                                           const T5StreamOptions& stream) {
  cfg.validate();
  const auto params = t5ParamShapes(cfg);
  auto fileKey = [&ckpt](const std::string& name) {
    return name == kShared ? ckpt.embeddingKey() : ckpt.prefix() + name;
  };
  {
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
    for (const auto& [name, shape] : params) expected.emplace_back(fileKey(name), shape);
    std::map<std::string, std::string> ignored;
    const std::string copy = ckpt.prefix() + kEmbedTokens;
    const auto& raw = ckpt.files().shapes();
    if (ckpt.embeddingKey() != copy && raw.count(copy) && raw.at(copy) == raw.at(ckpt.embeddingKey()))
      ignored[copy] = "the tied copy of " + ckpt.embeddingKey() + " (not loaded twice)";
    io::checkStrict(
        ckpt.files(), expected, ignored,
        "T5 encoder, transformers names" + (ckpt.prefix().empty() ? std::string() : " under '" + ckpt.prefix() + "'"));
  }
  if (stream.quantize != nn::QuantType::None) nn::requireQuantTypeAvailable(stream.quantize);

  io::StreamedFill fill(ckpt.files(), params, "streamT5Encoder", fileKey);
  const int64_t units = cfg.numLayers + 1;  // the blocks, then the embedding and final norm
  int64_t built = 0;
  auto userHook = options.onBlockBuilt;
  options.onBlockBuilt = [&](torch::nn::Module& block) {
    const int64_t i = built++;
    fill.fill(block, "encoder.block." + std::to_string(i) + ".");
    // Quantized on its device before the next block exists.
    if (stream.quantize != nn::QuantType::None) {
      nn::quantizeLinears(block, stream.quantize);
      io::releaseFreedHostMemory();
    }
    if (userHook) userHook(block);
    if (stream.onProgress) stream.onProgress(i + 1, units);
  };
  auto model = std::make_shared<T5Encoder>(cfg, options);
  fill.fill(*model, "");  // the embedding and the final norm
  fill.requireComplete();
  if (stream.onProgress) stream.onProgress(units, units);
  return model;
}

std::shared_ptr<T5Encoder> loadT5Encoder(const fs::path& path, const T5BuildOptions& options,
                                         const std::optional<T5Config>& config, const T5StreamOptions& stream) {
  const T5Checkpoint ckpt = T5Checkpoint::open(path);
  return streamT5Encoder(ckpt, config ? *config : ckpt.config(), options, stream);
}

}  // namespace strata::t5
