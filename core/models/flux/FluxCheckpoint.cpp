#include "models/flux/FluxCheckpoint.h"

#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "common/Error.h"
#include "io/FileBytes.h"
#include "common/ShapeText.h"
#include "io/Safetensors.h"
#include "models/flux/FluxNames.h"
#include "models/flux/FluxTransformer.h"

namespace fs = std::filesystem;

namespace strata::flux {

namespace {

bool startsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// A folder that holds the transformer's safetensors: `dir` itself or dir/transformer.
fs::path transformerFolder(const fs::path& dir) {
  const fs::path sub = dir / "transformer";
  if (fs::is_directory(sub)) return sub;
  return dir;
}

}  // namespace

const char* toString(FluxWeightFormat format) {
  return format == FluxWeightFormat::Bfl ? "BFL" : "diffusers";
}

FluxCheckpoint FluxCheckpoint::open(const fs::path& path) {
  FluxCheckpoint ckpt;
  ckpt.path_ = path;
  std::vector<fs::path> files;
  std::map<std::string, std::string> indexMap;  // tensor -> file name, from the index JSON
  if (fs::is_directory(path)) {
    const fs::path dir = transformerFolder(path);
    fs::path index;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && name.size() > 17 && name.substr(name.size() - 17) == ".safetensors.index.json")
        index = e.path();
    }
    if (!index.empty()) {
      nlohmann::json j;
      try {
        std::ifstream in(index);
        j = nlohmann::json::parse(in);
      } catch (const std::exception& ex) {
        throw IoError(index.string() + ": not valid JSON: " + ex.what());
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw IoError(index.string() + ": no 'weight_map' object");
      std::set<std::string> shardNames;
      for (const auto& [tensor, file] : j["weight_map"].items()) {
        if (!file.is_string()) throw IoError(index.string() + ": weight_map['" + tensor + "'] is not a file name");
        indexMap[tensor] = file.get<std::string>();
        shardNames.insert(file.get<std::string>());
      }
      for (const auto& s : shardNames) files.push_back(dir / s);
    } else {
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
      std::sort(files.begin(), files.end());
    }
    if (files.empty()) throw LoadError(dir.string() + ": no .safetensors file in this folder");
    if (fs::is_regular_file(dir / "config.json")) ckpt.configJson_ = dir / "config.json";
  } else if (fs::is_regular_file(path)) {
    files.push_back(path);
  } else {
    const std::string why = io::pathProblem(path);
    throw IoError(path.string() + ": " + (why.empty() ? "not a file or folder" : why));
  }

  // Names as stored, then with a common ComfyUI prefix removed.
  std::map<std::string, Entry> raw;
  for (size_t i = 0; i < files.size(); ++i) {
    auto file = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(files[i]));
    const std::string fileName = files[i].filename().string();
    for (const auto& name : file->names()) {
      if (!indexMap.empty()) {
        auto it = indexMap.find(name);
        if (it == indexMap.end() || it->second != fileName) continue;  // the index decides
      }
      if (raw.count(name))
        throw LoadError(files[i].string() + ": tensor '" + name + "' is also in " +
                        ckpt.files_[raw[name].file]->path().string());
      raw[name] = {i, name};
    }
    ckpt.files_.push_back(std::move(file));
  }
  for (const auto& [tensor, file] : indexMap)
    if (!raw.count(tensor))
      throw LoadError(path.string() + ": the index names '" + tensor + "' in " + file + ", which does not hold it");

  std::string strip;
  for (const char* prefix : {"model.diffusion_model.", "diffusion_model."}) {
    if (!raw.empty() && std::all_of(raw.begin(), raw.end(), [&](const auto& kv) { return startsWith(kv.first, prefix); })) {
      strip = prefix;
      break;
    }
  }
  for (auto& [name, entry] : raw) {
    const std::string key = name.substr(strip.size());
    ckpt.shapes_[key] = ckpt.files_[entry.file]->info(name).shape;
    ckpt.entries_[key] = entry;
  }
  const bool bfl = std::any_of(ckpt.shapes_.begin(), ckpt.shapes_.end(), [](const auto& kv) {
    return startsWith(kv.first, "double_blocks.") || startsWith(kv.first, "single_blocks.") ||
           startsWith(kv.first, "img_in.");
  });
  ckpt.format_ = bfl ? FluxWeightFormat::Bfl : FluxWeightFormat::Diffusers;
  return ckpt;
}

at::Tensor FluxCheckpoint::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw LoadError(path_.string() + ": no tensor '" + name + "'");
  return files_[it->second.file]->tensor(it->second.nameInFile);
}

std::vector<fs::path> FluxCheckpoint::files() const {
  std::vector<fs::path> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

FluxConfig FluxConfig::fromCheckpoint(const fs::path& path, const std::vector<int64_t>& axesDimsRope) {
  const FluxCheckpoint ckpt = FluxCheckpoint::open(path);
  FluxConfig c = fromShapes(ckpt.shapes(), axesDimsRope);
  // A diffusers folder's config.json knows the rotary axes; the shapes know the rest.
  if (axesDimsRope.empty() && !ckpt.configJsonPath().empty()) {
    const FluxConfig fromJson = fromDiffusersJsonFile(ckpt.configJsonPath());
    if (fromJson.attentionHeadDim == c.attentionHeadDim) c.axesDimsRope = fromJson.axesDimsRope;
  }
  return c;
}

// ---- loading -------------------------------------------------------------------

namespace {

// Where one model parameter comes from in the checkpoint.
struct Source {
  std::string key;
  int64_t rowOffset = 0;
  int64_t rows = -1;  // -1: the whole tensor
  bool swapHalves = false;
};

}  // namespace

void loadFluxWeights(FluxTransformer& model, const FluxCheckpoint& ckpt) {
  const FluxConfig& cfg = model.config();
  const bool bfl = ckpt.format() == FluxWeightFormat::Bfl;
  const auto params = model.named_parameters(/*recurse=*/true);

  std::vector<std::pair<at::Tensor, Source>> plan;
  std::map<std::string, std::vector<int64_t>> expected;  // checkpoint key -> shape
  std::vector<std::string> problems;
  for (const auto& item : params) {
    const std::string& name = item.key();
    const auto shape = item.value().sizes().vec();
    Source src;
    if (!bfl) {
      src.key = name;
      expected[name] = shape;
    } else {
      auto ref = names::bflParamForKey(name, cfg);
      if (!ref) throw Error("FluxCheckpoint: no BFL name for model parameter '" + name + "'");
      src.key = ref->key;
      if (ref->slot.fused() || ref->slot.swapHalves) {
        src.rowOffset = ref->slot.rowOffset;
        src.rows = ref->slot.rows;
        src.swapHalves = ref->slot.swapHalves;
      }
      auto full = shape;
      if (!full.empty()) full[0] = ref->slot.totalRows;
      expected[src.key] = full;
    }
    plan.emplace_back(item.value(), src);
  }

  const std::string where = ckpt.path().string() + " (" + toString(ckpt.format()) + " names)";
  for (const auto& [key, shape] : expected) {
    auto it = ckpt.shapes().find(key);
    if (it == ckpt.shapes().end()) problems.push_back("missing: " + key + " " + shapeText(shape));
    else if (it->second != shape)
      problems.push_back("mis-shaped: " + key + " expected " + shapeText(shape) + ", got " + shapeText(it->second));
  }
  for (const auto& [key, shape] : ckpt.shapes())
    if (!expected.count(key)) problems.push_back("unexpected: " + key + " " + shapeText(shape));
  if (!problems.empty()) {
    std::ostringstream os;
    os << where << ": " << problems.size() << " problem(s), nothing loaded";
    for (const auto& p : problems) os << "\n  " << p;
    throw LoadError(os.str());
  }
  for (const auto& [key, _] : expected) {
    const auto type = ckpt.tensor(key).scalar_type();
    if (!at::isFloatingType(type))
      problems.push_back("not floating point: " + key + " (" + std::string(c10::toString(type)) + ")");
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << where << ": " << problems.size() << " problem(s), nothing loaded";
    for (const auto& p : problems) os << "\n  " << p;
    throw LoadError(os.str());
  }

  // Verified: copy, converting dtype and device into each parameter.
  at::NoGradGuard noGrad;
  for (auto& [param, src] : plan) {
    at::Tensor t = ckpt.tensor(src.key);
    if (src.rows >= 0) t = t.narrow(0, src.rowOffset, src.rows);
    if (src.swapHalves) {
      const auto halves = t.chunk(2, 0);
      t = at::cat({halves[1], halves[0]}, 0);
    }
    param.copy_(t);
  }
}

void loadFluxWeights(FluxTransformer& model, const fs::path& path) {
  loadFluxWeights(model, FluxCheckpoint::open(path));
}

std::shared_ptr<FluxTransformer> loadFluxTransformer(const fs::path& path, const FluxBuildOptions& options,
                                                     const std::vector<int64_t>& axesDimsRope) {
  const FluxCheckpoint ckpt = FluxCheckpoint::open(path);
  FluxConfig cfg = FluxConfig::fromShapes(ckpt.shapes(), axesDimsRope);
  if (axesDimsRope.empty() && !ckpt.configJsonPath().empty()) {
    const FluxConfig fromJson = FluxConfig::fromDiffusersJsonFile(ckpt.configJsonPath());
    if (fromJson.attentionHeadDim == cfg.attentionHeadDim) cfg.axesDimsRope = fromJson.axesDimsRope;
  }
  auto model = std::make_shared<FluxTransformer>(cfg, options);
  loadFluxWeights(*model, ckpt);
  return model;
}

std::vector<std::pair<std::string, at::Tensor>> diffusersStateDict(FluxTransformer& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(true)) out.emplace_back(item.key(), item.value().detach().cpu());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> bflStateDict(FluxTransformer& model) {
  const FluxConfig& cfg = model.config();
  // BFL key -> its parts (row offset, tensor), assembled once every part is seen.
  std::map<std::string, std::vector<std::pair<int64_t, at::Tensor>>> parts;
  std::vector<std::string> order;
  for (const auto& item : model.named_parameters(true)) {
    auto ref = names::bflParamForKey(item.key(), cfg);
    if (!ref) throw Error("bflStateDict: no BFL name for model parameter '" + item.key() + "'");
    at::Tensor t = item.value().detach().cpu();
    if (ref->slot.swapHalves) {
      const auto halves = t.chunk(2, 0);
      t = at::cat({halves[1], halves[0]}, 0);
    }
    if (!parts.count(ref->key)) order.push_back(ref->key);
    parts[ref->key].emplace_back(ref->slot.rowOffset, t);
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& key : order) {
    auto& p = parts[key];
    std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<at::Tensor> ts;
    for (auto& [_, t] : p) ts.push_back(t);
    out.emplace_back(key, ts.size() == 1 ? ts[0] : at::cat(ts, 0));
  }
  return out;
}

}  // namespace strata::flux
