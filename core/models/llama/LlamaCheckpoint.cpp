#include "models/llama/LlamaCheckpoint.h"

#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <cstdio>
#include <map>
#include <sstream>

#include "common/Error.h"
#include "common/Text.h"
#include "io/AtomicFile.h"
#include "io/HostMemory.h"
#include "io/Safetensors.h"
#include "io/StrictLoad.h"
#include "nn/QuantizedWrite.h"

namespace fs = std::filesystem;

namespace strata::llama {

namespace {

// Keys transformers drops on load too (see the header): why, or empty.
std::string ignoredBecause(const std::string& key, const LlamaConfig& cfg) {
  if (endsWith(key, "rotary_emb.inv_freq")) return "recomputed from the config";
  if (cfg.tieWordEmbeddings && key == "lm_head.weight") return "the tied copy of model.embed_tokens.weight";
  return {};
}

// Builds `cfg` layer by layer from weights already checked (checkStrict): each
// layer is filled (file names through `fileKey`; unset: the same names) and
// quantized when asked before the next one exists.
std::shared_ptr<LlamaForCausalLM> streamChecked(const io::SafetensorsCheckpoint& weights, const LlamaConfig& cfg,
                                                std::function<std::string(const std::string&)> fileKey,
                                                LlamaBuildOptions options, const LlamaStreamOptions& stream,
                                                const char* who) {
  if (stream.quantize != nn::QuantType::None) nn::requireQuantTypeAvailable(stream.quantize);
  io::StreamedFill fill(weights, llamaParamShapes(cfg), who, std::move(fileKey));
  const int64_t units = cfg.numHiddenLayers + 1;  // the layers, then the embeddings, final norm and head
  auto userHook = options.onLayerBuilt;
  options.onLayerBuilt = [&](size_t i, torch::nn::Module& layer) {
    fill.fill(layer, "model.layers." + std::to_string(i) + ".");
    // Quantized on its device before the next layer exists.
    if (stream.quantize != nn::QuantType::None) {
      nn::quantizeLinears(layer, stream.quantize);
      io::releaseFreedHostMemory();
    }
    if (userHook) userHook(i, layer);
    if (stream.onProgress) stream.onProgress(static_cast<int64_t>(i) + 1, units);
  };
  auto model = std::make_shared<LlamaForCausalLM>(cfg, options);
  fill.fill(*model, "");  // embed_tokens, norm, lm_head
  fill.requireComplete();
  if (stream.onProgress) stream.onProgress(units, units);
  return model;
}

}  // namespace

io::SafetensorsCheckpoint openLlamaWeights(const fs::path& path) {
  if (fs::is_directory(path) && !fs::is_regular_file(path / "model.safetensors.index.json") &&
      !fs::is_regular_file(path / "model.safetensors")) {
    // transformers writes model.safetensors or shards with an index: several
    // files without one, or only pickle weights, are not a model we can trust.
    std::vector<fs::path> safetensors;
    bool pickle = false;
    for (const auto& e : fs::directory_iterator(path)) {
      if (!e.is_regular_file()) continue;
      const auto ext = e.path().extension().string();
      if (ext == ".safetensors") safetensors.push_back(e.path());
      if (ext == ".bin" || ext == ".pt" || ext == ".pth") pickle = true;
    }
    if (safetensors.size() > 1)
      throw LoadError(path.string() +
                      ": several .safetensors files and no model.safetensors.index.json to say "
                      "which hold the model");
    if (safetensors.empty())
      throw LoadError(path.string() + ": no model.safetensors or model.safetensors.index.json" +
                      std::string(pickle ? " (only pickle weights such as pytorch_model.bin, which Strata does not "
                                           "read: save the model with safe_serialization=True)"
                                         : ""));
  }
  return io::SafetensorsCheckpoint::open(path);  // shards, the index rules and duplicates
}

void loadLlamaWeights(LlamaForCausalLM& model, const io::SafetensorsCheckpoint& weights) {
  io::WeightPlan plan;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) plan.slots.push_back({item.key(), item.value()});
  for (const auto& [name, shape] : weights.shapes()) {
    const std::string why = ignoredBecause(name, model.config());
    if (!why.empty()) plan.ignored[name] = why;
  }
  io::loadStrict(weights, plan, "Llama-family causal LM");
}

void loadLlamaWeights(LlamaForCausalLM& model, const fs::path& path) {
  loadLlamaWeights(model, openLlamaWeights(path));
}

std::shared_ptr<LlamaForCausalLM> streamLlamaForCausalLM(const io::SafetensorsCheckpoint& weights,
                                                         const LlamaConfig& cfg, LlamaBuildOptions options,
                                                         const LlamaStreamOptions& stream) {
  cfg.validate();
  const auto params = llamaParamShapes(cfg);
  {
    std::map<std::string, std::string> ignored;
    for (const auto& [name, shape] : weights.shapes()) {
      const std::string why = ignoredBecause(name, cfg);
      if (!why.empty()) ignored[name] = why;
    }
    io::checkStrict(weights, params, ignored, "Llama-family causal LM");
  }
  return streamChecked(weights, cfg, {}, std::move(options), stream, "streamLlamaForCausalLM");
}

const char* toString(LlamaKeyLayout layout) {
  switch (layout) {
    case LlamaKeyLayout::kMistral3Legacy:
      return "mistral3 (language_model.model.*)";
    case LlamaKeyLayout::kMistral3:
      return "mistral3 (model.language_model.*)";
    case LlamaKeyLayout::kCausalLm:
      break;
  }
  return "causal_lm (model.*)";
}

namespace {

struct LayoutPrefixes {
  const char* body;  // where model.* is
  const char* head;  // where lm_head.* is
};

LayoutPrefixes prefixesOf(LlamaKeyLayout layout) {
  switch (layout) {
    case LlamaKeyLayout::kMistral3Legacy:
      return {"language_model.model.", "language_model.lm_head."};
    case LlamaKeyLayout::kMistral3:
      return {"model.language_model.", "lm_head."};
    case LlamaKeyLayout::kCausalLm:
      break;
  }
  return {"model.", "lm_head."};
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// model.layers.N.* -> N; -1 for any other name.
int64_t layerIndexOf(const std::string& modelKey) {
  static const std::string kLayers = "model.layers.";
  if (!startsWith(modelKey, kLayers)) return -1;
  const size_t end = modelKey.find('.', kLayers.size());
  const std::string digits = modelKey.substr(kLayers.size(), end - kLayers.size());
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

}  // namespace

LlamaKeyLayout detectLlamaKeyLayout(const io::SafetensorsCheckpoint& weights) {
  std::vector<LlamaKeyLayout> found;
  for (const auto layout : {LlamaKeyLayout::kCausalLm, LlamaKeyLayout::kMistral3Legacy, LlamaKeyLayout::kMistral3})
    if (weights.contains(llamaFileKey("model.embed_tokens.weight", layout))) found.push_back(layout);
  if (found.size() == 1) return found[0];
  throw LoadError(weights.describe() + ": " +
                  (found.empty() ? std::string("no language model's embeddings (model.embed_tokens.weight, "
                                               "language_model.model.embed_tokens.weight or "
                                               "model.language_model.embed_tokens.weight)")
                                 : std::string("the embeddings of several language models (") +
                                       llamaFileKey("model.embed_tokens.weight", found[0]) + ", " +
                                       llamaFileKey("model.embed_tokens.weight", found[1]) + "): which one is meant?"));
}

std::string llamaFileKey(const std::string& modelKey, LlamaKeyLayout layout) {
  const LayoutPrefixes p = prefixesOf(layout);
  if (startsWith(modelKey, "model.")) return p.body + modelKey.substr(6);
  if (startsWith(modelKey, "lm_head.")) return p.head + modelKey.substr(8);
  return modelKey;
}

std::optional<std::string> llamaModelKey(const std::string& fileKey, LlamaKeyLayout layout) {
  const LayoutPrefixes p = prefixesOf(layout);
  if (!llamaSkippedPart(fileKey, layout).empty()) return std::nullopt;
  if (startsWith(fileKey, p.body)) return "model." + fileKey.substr(std::string(p.body).size());
  if (startsWith(fileKey, p.head)) return "lm_head." + fileKey.substr(std::string(p.head).size());
  return std::nullopt;
}

std::string llamaSkippedPart(const std::string& fileKey, LlamaKeyLayout layout) {
  const char* base = layout == LlamaKeyLayout::kMistral3 ? "model." : "";
  if (layout == LlamaKeyLayout::kCausalLm) return {};
  if (startsWith(fileKey, std::string(base) + "vision_tower."))
    return "the vision tower of Mistral3ForConditionalGeneration (not used for text)";
  if (startsWith(fileKey, std::string(base) + "multi_modal_projector."))
    return "the image projector of Mistral3ForConditionalGeneration (not used for text)";
  return {};
}

LlamaConfig llamaTextModelConfig(const LlamaConfig& cfg, int64_t layers) {
  cfg.validate();
  if (layers < 1 || layers > cfg.numHiddenLayers)
    throw ConfigError("text encoder: " + std::to_string(layers) + " decoder layers asked of a model with " +
                      std::to_string(cfg.numHiddenLayers) + " (num_hidden_layers)");
  LlamaConfig built = cfg;
  built.numHiddenLayers = layers;
  built.tieWordEmbeddings = true;  // no lm_head module: hidden states only
  return built;
}

std::shared_ptr<LlamaForCausalLM> streamLlamaTextModel(const io::SafetensorsCheckpoint& weights, const LlamaConfig& cfg,
                                                       int64_t layers, LlamaBuildOptions options,
                                                       const LlamaStreamOptions& stream) {
  const LlamaConfig built = llamaTextModelConfig(cfg, layers);
  const LlamaKeyLayout layout = detectLlamaKeyLayout(weights);
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const auto& [name, shape] : llamaParamShapes(built)) expected.emplace_back(llamaFileKey(name, layout), shape);
  std::map<std::string, std::string> ignored;
  for (const auto& [fileKey, shape] : weights.shapes()) {
    std::string why = llamaSkippedPart(fileKey, layout);
    if (why.empty()) {
      const auto modelKey = llamaModelKey(fileKey, layout);
      if (!modelKey) continue;  // outside the language model: unexpected, named by checkStrict
      const int64_t layer = layerIndexOf(*modelKey);
      if (endsWith(*modelKey, "rotary_emb.inv_freq"))
        why = "recomputed from the config";
      else if (startsWith(*modelKey, "lm_head."))
        why = "the LM head, which hidden states do not use";
      else if (layer >= layers && layer < cfg.numHiddenLayers)
        why = "decoder layer " + std::to_string(layer) + ": past the last hidden state used (" +
              std::to_string(layers) + ")";
    }
    if (!why.empty()) ignored[fileKey] = why;
  }
  const std::string label = std::string("Llama-family language model, ") + toString(layout);
  io::checkStrict(weights, expected, ignored, label);
  return streamChecked(
      weights, built, [layout](const std::string& key) { return llamaFileKey(key, layout); }, std::move(options),
      stream, "streamLlamaTextModel");
}

std::shared_ptr<LlamaForCausalLM> loadLlamaForCausalLM(const fs::path& folder, const LlamaBuildOptions& options) {
  const LlamaConfig cfg = LlamaConfig::fromFile(folder);
  const io::SafetensorsCheckpoint weights = openLlamaWeights(folder);  // before building: fail fast
  return streamLlamaForCausalLM(weights, cfg, options);
}

void saveLlamaFolder(LlamaForCausalLM& model, const fs::path& folder, int64_t maxShardBytes) {
  nn::requireUnquantized(model, "saveLlamaFolder");  // before anything is written
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw IoError(folder.string() + ": cannot create the folder: " + ec.message());
  io::writeFileAtomic(folder / "config.json", model.config().toJson().dump(2) + "\n");

  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t shardBytes = 0, totalBytes = 0;
  for (const auto& item : model.named_parameters(true)) {
    at::Tensor t = item.value().detach().cpu().contiguous();
    const int64_t bytes = static_cast<int64_t>(t.numel() * t.element_size());
    if (maxShardBytes > 0 && shardBytes > 0 && shardBytes + bytes > maxShardBytes) {
      shards.emplace_back();
      shardBytes = 0;
    }
    shards.back().emplace_back(item.key(), std::move(t));
    shardBytes += bytes;
    totalBytes += bytes;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  if (shards.size() == 1) {
    io::writeSafetensors(folder / "model.safetensors", shards[0], metadata);
    return;
  }
  nlohmann::json index;
  index["metadata"]["total_size"] = totalBytes;
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    io::writeSafetensors(folder / name, shards[i], metadata);
    for (const auto& [key, _] : shards[i]) index["weight_map"][key] = name;
  }
  io::writeFileAtomic(folder / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace strata::llama
