#include "models/flux/FluxCheckpoint.h"

#include <torch/autograd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/Text.h"
#include "io/HostMemory.h"
#include "io/JsonFields.h"
#include "io/Safetensors.h"
#include "io/SafetensorsCheckpoint.h"
#include "models/flux/FluxLayout.h"
#include "models/flux/FluxNames.h"
#include "models/flux/FluxTransformer.h"
#include "nn/QuantizedWrite.h"

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

void FluxCheckpoint::releasePages(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw LoadError(path_.string() + ": no tensor '" + name + "'");
  files_->releasePages(it->second);
}

std::vector<fs::path> FluxCheckpoint::files() const { return files_->files(); }

namespace {

// The config from the shapes, with a diffusers folder's rotary axes from its config.json.
FluxConfig configOf(const FluxCheckpoint& ckpt, const std::vector<int64_t>& axesDimsRope) {
  FluxConfig c;
  try {
    c = FluxConfig::fromShapes(ckpt.shapes(), axesDimsRope);
  } catch (const LoadError& e) {
    throw LoadError(ckpt.path().string() + ": " + e.what());  // the message names the weights
  }
  if (!ckpt.configJsonPath().empty()) {
    // config.json is bounded as it is read; where it says another shape than the
    // weights, say so (joint_attention_dim 64 against 4096 weights trained without a word).
    const FluxConfig fromJson = FluxConfig::fromDiffusersJsonFile(ckpt.configJsonPath());
    io::requireAgreement(fromJson.toDiffusersJson(), c.toDiffusersJson(), ckpt.configJsonPath().string(),
                         ckpt.path().string(), {"axes_dims_rope"});
    if (axesDimsRope.empty()) c.axesDimsRope = fromJson.axesDimsRope;
  }
  return c;
}

}  // namespace

FluxConfig FluxConfig::fromCheckpoint(const fs::path& path, const std::vector<int64_t>& axesDimsRope) {
  return configOf(FluxCheckpoint::open(path), axesDimsRope);
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

using ShapeMap = std::map<std::string, std::vector<int64_t>>;

// The source of model parameter `name` of `shape`; records the checkpoint key's
// full shape (all rows of a fused BFL tensor) in `expected`.
Source sourceOf(const std::string& name, const std::vector<int64_t>& shape, const FluxConfig& cfg, bool bfl,
                ShapeMap& expected) {
  Source src;
  if (!bfl) {
    src.key = name;
    expected[name] = shape;
    return src;
  }
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
  return src;
}

[[noreturn]] void failLoad(const FluxCheckpoint& ckpt, const std::vector<std::string>& problems) {
  std::ostringstream os;
  os << ckpt.path().string() << " (" << toString(ckpt.format()) << " names): " << problems.size()
     << " problem(s), nothing loaded";
  for (const auto& p : problems) os << "\n  " << p;
  throw LoadError(os.str());
}

// Every expected key present with its shape, nothing unexpected, floating point
// only; throws LoadError naming the file and every problem.
void checkKeys(const FluxCheckpoint& ckpt, const ShapeMap& expected) {
  std::vector<std::string> problems;
  for (const auto& [key, shape] : expected) {
    auto it = ckpt.shapes().find(key);
    if (it == ckpt.shapes().end())
      problems.push_back("missing: " + key + " " + shapeText(shape));
    else if (it->second != shape)
      problems.push_back("mis-shaped: " + key + " expected " + shapeText(shape) + ", got " + shapeText(it->second));
  }
  for (const auto& [key, shape] : ckpt.shapes())
    if (!expected.count(key)) problems.push_back("unexpected: " + key + " " + shapeText(shape));
  if (!problems.empty()) failLoad(ckpt, problems);
  for (const auto& [key, _] : expected) {
    const auto type = ckpt.tensor(key).scalar_type();
    if (!at::isFloatingType(type))
      problems.push_back("not floating point: " + key + " (" + std::string(c10::toString(type)) + ")");
  }
  if (!problems.empty()) failLoad(ckpt, problems);
}

// Copies the checkpoint tensor of `src` into `param`, converting dtype and device.
void fill(at::Tensor& param, const FluxCheckpoint& ckpt, const Source& src) {
  at::Tensor t = ckpt.tensor(src.key);
  if (src.rows >= 0) t = t.narrow(0, src.rowOffset, src.rows);
  if (src.swapHalves) {
    const auto halves = t.chunk(2, 0);
    t = at::cat({halves[1], halves[0]}, 0);
  }
  param.copy_(t);
}

// The model's parameters (diffusers names) and shapes from its layout, without
// building it: what the streaming loader checks the file against up front.
ShapeMap layoutParams(const FluxConfig& cfg) {
  ShapeMap out;
  auto add = [&out](const std::string& prefix, const std::vector<FluxModuleSpec>& layout) {
    for (const auto& m : layout) {
      const std::string p = prefix + m.path + ".";
      if (m.type == FluxModuleSpec::Type::RmsNorm) {
        out[p + "weight"] = {m.outFeatures};
        continue;
      }
      out[p + "weight"] = {m.outFeatures, m.inFeatures};
      if (m.bias) out[p + "bias"] = {m.outFeatures};
    }
  };
  add("", fluxUnitLayout(FluxUnit::Stem, cfg));
  for (int64_t i = 0; i < cfg.numLayers; ++i)
    add("transformer_blocks." + std::to_string(i) + ".", fluxUnitLayout(FluxUnit::Double, cfg));
  for (int64_t i = 0; i < cfg.numSingleLayers; ++i)
    add("single_transformer_blocks." + std::to_string(i) + ".", fluxUnitLayout(FluxUnit::Single, cfg));
  add("", fluxUnitLayout(FluxUnit::Head, cfg));
  return out;
}

}  // namespace

void loadFluxWeights(FluxTransformer& model, const FluxCheckpoint& ckpt) {
  const FluxConfig& cfg = model.config();
  const bool bfl = ckpt.format() == FluxWeightFormat::Bfl;
  std::vector<std::pair<at::Tensor, Source>> plan;
  ShapeMap expected;  // checkpoint key -> shape
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    plan.emplace_back(item.value(), sourceOf(item.key(), item.value().sizes().vec(), cfg, bfl, expected));
  checkKeys(ckpt, expected);
  // Verified: copy, converting dtype and device into each parameter.
  at::NoGradGuard noGrad;
  for (auto& [param, src] : plan) fill(param, ckpt, src);
}

std::shared_ptr<FluxTransformer> streamFluxTransformer(const FluxCheckpoint& ckpt, const FluxConfig& cfg,
                                                       FluxBuildOptions options, const FluxStreamOptions& stream) {
  const bool bfl = ckpt.format() == FluxWeightFormat::Bfl;
  // Checked against the layout before the first block exists.
  const ShapeMap params = layoutParams(cfg);
  {
    ShapeMap expected;
    for (const auto& [name, shape] : params) (void)sourceOf(name, shape, cfg, bfl, expected);
    checkKeys(ckpt, expected);
  }
  if (stream.quantize != nn::QuantType::None) nn::requireQuantTypeAvailable(stream.quantize);

  const int64_t blocks = cfg.numLayers + cfg.numSingleLayers;
  const int64_t units = blocks + 1;  // the blocks, then the stem and head together
  std::set<std::string> filled;
  // Fills every parameter of `module` (model paths under `prefix`) through its
  // own named parameters, so the loader follows however the module names them.
  auto fillModule = [&](torch::nn::Module& module, const std::string& prefix) {
    ShapeMap scratch;
    std::vector<std::pair<at::Tensor, Source>> todo;
    std::map<std::string, int> uses;  // a fused BFL tensor feeds several parameters
    for (auto& item : module.named_parameters(/*recurse=*/true)) {
      const std::string name = prefix + item.key();
      if (filled.count(name)) continue;
      auto it = params.find(name);
      if (it == params.end() || it->second != item.value().sizes().vec())
        throw Error("streamFluxTransformer: model parameter '" + name + "' " + shapeText(item.value().sizes().vec()) +
                    " is not in the FLUX layout");
      todo.emplace_back(item.value(), sourceOf(name, it->second, cfg, bfl, scratch));
      ++uses[todo.back().second.key];
      filled.insert(name);
    }
    at::NoGradGuard noGrad;
    for (auto& [param, src] : todo) {
      fill(param, ckpt, src);
      // Copied out (by every parameter it feeds): its file pages need not stay resident.
      if (--uses[src.key] == 0) ckpt.releasePages(src.key);
    }
  };

  int64_t built = 0;
  auto userHook = options.onBlockBuilt;
  options.onBlockBuilt = [&](torch::nn::Module& block) {
    const int64_t i = built++;
    const bool isDouble = i < cfg.numLayers;
    if (i >= blocks || isDouble != (dynamic_cast<FluxDoubleBlock*>(&block) != nullptr))
      throw Error("streamFluxTransformer: block " + std::to_string(i) + " was not built in layout order");
    const std::string prefix = isDouble ? "transformer_blocks." + std::to_string(i) + "."
                                        : "single_transformer_blocks." + std::to_string(i - cfg.numLayers) + ".";
    fillModule(block, prefix);
    // Quantized here, on the block's device, before the next block exists.
    if (stream.quantize != nn::QuantType::None) {
      nn::quantizeLinears(block, stream.quantize);
      io::releaseFreedHostMemory();
    }
    if (userHook) userHook(block);
    if (stream.onProgress) stream.onProgress(i + 1, units);
  };
  auto model = std::make_shared<FluxTransformer>(cfg, options);
  fillModule(*model, "");  // the stem and head: what the blocks did not fill
  if (filled.size() != params.size())
    throw Error("streamFluxTransformer: the model has " + std::to_string(filled.size()) + " of the layout's " +
                std::to_string(params.size()) + " parameters");
  if (stream.onProgress) stream.onProgress(units, units);
  return model;
}

std::shared_ptr<FluxTransformer> streamFluxTransformer(const fs::path& path, const FluxBuildOptions& options,
                                                       const FluxStreamOptions& stream,
                                                       const std::vector<int64_t>& axesDimsRope) {
  const FluxCheckpoint ckpt = FluxCheckpoint::open(path);
  return streamFluxTransformer(ckpt, configOf(ckpt, axesDimsRope), options, stream);
}

void loadFluxWeights(FluxTransformer& model, const fs::path& path) {
  loadFluxWeights(model, FluxCheckpoint::open(path));
}

std::shared_ptr<FluxTransformer> loadFluxTransformer(const fs::path& path, const FluxBuildOptions& options,
                                                     const std::vector<int64_t>& axesDimsRope) {
  // Streamed (block by block, file pages released): the same model as building and loadFluxWeights.
  const FluxCheckpoint ckpt = FluxCheckpoint::open(path);
  return streamFluxTransformer(ckpt, configOf(ckpt, axesDimsRope), options);
}

std::vector<std::pair<std::string, at::Tensor>> diffusersStateDict(FluxTransformer& model) {
  nn::requireUnquantized(model, "diffusersStateDict");
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(true)) out.emplace_back(item.key(), item.value().detach().cpu());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> bflStateDict(FluxTransformer& model) {
  nn::requireUnquantized(model, "bflStateDict");
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
