#include "models/llama/LlamaCheckpoint.h"

#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <cstdio>
#include <map>
#include <sstream>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "io/AtomicFile.h"
#include "io/Safetensors.h"

namespace fs = std::filesystem;

namespace strata::llama {

namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Keys transformers drops on load too (see the header).
bool ignoredKey(const std::string& key, const LlamaConfig& cfg) {
  if (endsWith(key, "rotary_emb.inv_freq")) return true;
  return cfg.tieWordEmbeddings && key == "lm_head.weight";
}

[[noreturn]] void throwProblems(const std::string& where, const std::vector<std::string>& problems) {
  std::ostringstream os;
  os << where << ": " << problems.size() << " problem(s), nothing loaded";
  for (const auto& p : problems) os << "\n  " << p;
  throw LoadError(os.str());
}

}  // namespace

io::ShardedSafetensors openLlamaWeights(const fs::path& path) {
  if (fs::is_regular_file(path)) {
    if (endsWith(path.filename().string(), ".index.json")) return io::ShardedSafetensors::openIndex(path);
    return io::ShardedSafetensors::openFile(path);
  }
  if (!fs::is_directory(path)) throw IoError(path.string() + ": no such file or folder");
  if (fs::is_regular_file(path / "model.safetensors.index.json"))
    return io::ShardedSafetensors::openIndex(path / "model.safetensors.index.json");
  if (fs::is_regular_file(path / "model.safetensors")) return io::ShardedSafetensors::openFile(path / "model.safetensors");
  std::vector<fs::path> safetensors;
  bool pickle = false;
  for (const auto& e : fs::directory_iterator(path)) {
    if (!e.is_regular_file()) continue;
    const auto ext = e.path().extension().string();
    if (ext == ".safetensors") safetensors.push_back(e.path());
    if (ext == ".bin" || ext == ".pt" || ext == ".pth") pickle = true;
  }
  if (safetensors.size() == 1) return io::ShardedSafetensors::openFile(safetensors.front());
  if (safetensors.size() > 1)
    throw LoadError(path.string() + ": several .safetensors files and no model.safetensors.index.json to say "
                                    "which hold the model");
  throw LoadError(path.string() + ": no model.safetensors or model.safetensors.index.json" +
                  std::string(pickle ? " (only pickle weights such as pytorch_model.bin, which Strata does not read: "
                                       "save the model with safe_serialization=True)"
                                     : ""));
}

void loadLlamaWeights(LlamaForCausalLM& model, const io::ShardedSafetensors& weights) {
  const LlamaConfig& cfg = model.config();
  const std::string where = weights.source().string();
  const auto params = model.named_parameters(/*recurse=*/true);
  std::vector<std::string> problems;
  for (const auto& item : params) {
    const std::string& key = item.key();
    const auto shape = item.value().sizes().vec();
    if (!weights.contains(key)) {
      problems.push_back("missing: " + key + " " + shapeText(shape));
      continue;
    }
    const auto& info = weights.info(key);
    if (info.shape != shape) {
      problems.push_back("mis-shaped: " + key + " expected " + shapeText(shape) + ", got " + shapeText(info.shape) +
                         " (in " + weights.fileOf(key).filename().string() + ")");
    } else if (!at::isFloatingType(io::toScalarType(info.dtype))) {
      problems.push_back("not floating point: " + key + " (" + std::string(io::dtypeName(info.dtype)) + ", in " +
                         weights.fileOf(key).filename().string() + ")");
    }
  }
  for (const auto& name : weights.names()) {
    if (params.contains(name) || ignoredKey(name, cfg)) continue;
    problems.push_back("unexpected: " + name + " " + shapeText(weights.info(name).shape) + " (in " +
                       weights.fileOf(name).filename().string() + ")");
  }
  if (!problems.empty()) throwProblems(where, problems);

  // Verified: copy, converting dtype and device into each parameter.
  at::NoGradGuard noGrad;
  for (const auto& item : params) item.value().copy_(weights.tensor(item.key()));
}

void loadLlamaWeights(LlamaForCausalLM& model, const fs::path& path) { loadLlamaWeights(model, openLlamaWeights(path)); }

std::shared_ptr<LlamaForCausalLM> loadLlamaForCausalLM(const fs::path& folder, const LlamaBuildOptions& options) {
  const LlamaConfig cfg = LlamaConfig::fromFile(folder);
  const io::ShardedSafetensors weights = openLlamaWeights(folder);  // before building: fail fast
  auto model = std::make_shared<LlamaForCausalLM>(cfg, options);
  loadLlamaWeights(*model, weights);
  return model;
}

void saveLlamaFolder(LlamaForCausalLM& model, const fs::path& folder, int64_t maxShardBytes) {
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
