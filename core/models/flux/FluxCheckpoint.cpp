#include "models/flux/FluxCheckpoint.h"

#include <torch/autograd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "common/Error.h"
#include "io/FileBytes.h"
#include "common/ShapeText.h"
#include "common/Text.h"
#include "io/Safetensors.h"
#include "io/SafetensorsCheckpoint.h"
#include "models/flux/FluxNames.h"
#include "models/flux/FluxTransformer.h"

namespace fs = std::filesystem;

namespace strata::flux {

namespace {

// A folder that holds the transformer's safetensors: `dir` itself or dir/transformer.
fs::path transformerFolder(const fs::path& dir) {
  const fs::path sub = dir / "transformer";
  if (fs::is_directory(sub)) return sub;
  return dir;
}

}  // namespace

const char* toString(FluxWeightFormat format) { return format == FluxWeightFormat::Bfl ? "BFL" : "diffusers"; }

FluxCheckpoint FluxCheckpoint::open(const fs::path& path) {
  FluxCheckpoint ckpt;
  ckpt.path_ = path;
  // Shards, the index JSON and duplicate tensors are io::SafetensorsCheckpoint's business.
  const fs::path source = fs::is_directory(path) ? transformerFolder(path) : path;
  ckpt.files_ = std::make_shared<io::SafetensorsCheckpoint>(io::SafetensorsCheckpoint::open(source));
  if (fs::is_directory(path) && fs::is_regular_file(source / "config.json")) ckpt.configJson_ = source / "config.json";

  // Names as stored, then with a common ComfyUI prefix removed.
  const auto& raw = ckpt.files_->shapes();
  std::string strip;
  for (const char* prefix : {"model.diffusion_model.", "diffusion_model."}) {
    if (!raw.empty() &&
        std::all_of(raw.begin(), raw.end(), [&](const auto& kv) { return startsWith(kv.first, prefix); })) {
      strip = prefix;
      break;
    }
  }
  for (const auto& [name, shape] : raw) {
    const std::string key = name.substr(strip.size());
    ckpt.shapes_[key] = shape;
    ckpt.entries_[key] = name;
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
  return files_->tensor(it->second);
}

std::vector<fs::path> FluxCheckpoint::files() const { return files_->files(); }

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
    if (it == ckpt.shapes().end())
      problems.push_back("missing: " + key + " " + shapeText(shape));
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
