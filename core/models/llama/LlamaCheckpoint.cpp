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
  if (stream.quantize != nn::QuantType::None) nn::requireQuantTypeAvailable(stream.quantize);
  io::StreamedFill fill(weights, params, "streamLlamaForCausalLM");
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
