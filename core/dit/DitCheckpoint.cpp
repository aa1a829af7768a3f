#include "dit/DitCheckpoint.h"

#include <torch/autograd.h>

#include <algorithm>
#include <set>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/Text.h"
#include "io/HostMemory.h"
#include "io/StrictLoad.h"
#include "nn/QuantizedWrite.h"

namespace fs = std::filesystem;

namespace strata::dit {

const char* toString(WeightFormat format) { return format == WeightFormat::Bfl ? "BFL" : "diffusers"; }

DitCheckpoint DitCheckpoint::open(io::ComponentWeights weights, const fs::path& path) {
  DitCheckpoint ckpt;
  ckpt.path_ = path;
  ckpt.weights_ = std::move(weights);
  // Names as stored, then with a common ComfyUI wrapper removed.
  const auto& raw = ckpt.weights_.weights->shapes();
  for (const char* prefix : {"model.diffusion_model.", "diffusion_model."}) {
    if (!raw.empty() &&
        std::all_of(raw.begin(), raw.end(), [&](const auto& kv) { return startsWith(kv.first, prefix); })) {
      ckpt.prefix_ = prefix;
      break;
    }
  }
  for (const auto& [name, shape] : raw) ckpt.shapes_[name.substr(ckpt.prefix_.size())] = shape;
  const bool bfl = std::any_of(ckpt.shapes_.begin(), ckpt.shapes_.end(), [](const auto& kv) {
    return startsWith(kv.first, "img_in.") || startsWith(kv.first, "double_blocks.") ||
           startsWith(kv.first, "single_blocks.") || startsWith(kv.first, "final_layer.");
  });
  ckpt.format_ = bfl ? WeightFormat::Bfl : WeightFormat::Diffusers;
  return ckpt;
}

at::Tensor DitCheckpoint::tensor(const std::string& name) const {
  if (!contains(name)) throw LoadError(path_.string() + ": no tensor '" + name + "'");
  return weights_.weights->tensor(fileKey(name));
}

void DitCheckpoint::releasePages(const std::string& name) const {
  if (!contains(name)) throw LoadError(path_.string() + ": no tensor '" + name + "'");
  weights_.weights->releasePages(fileKey(name));
}

namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Where one model parameter comes from: a file key (wrapper stripped) and, inside a
// fused BFL tensor, its rows.
struct Source {
  std::string key;
  int64_t rowOffset = 0;
  int64_t rows = -1;  // -1: the whole tensor
  bool swapHalves = false;
};

// The sources of model parameters `params`, and the file keys (as stored) with
// their full shapes (all rows of a fused BFL tensor) once each, in order.
struct Sources {
  std::map<std::string, Source> of;  // model parameter -> its source
  Shapes expected;
};

Sources sourcesOf(const DitCheckpoint& ckpt, const Shapes& params, const LoadTarget& target) {
  const bool bfl = ckpt.format() == WeightFormat::Bfl;
  Sources out;
  std::set<std::string> listed;
  for (const auto& [name, shape] : params) {
    Source src;
    auto full = shape;
    if (!bfl) {
      src.key = name;
    } else {
      const auto ref = target.names.bflParamForKey(name);
      if (!ref) throw Error(target.who + ": no BFL name for model parameter '" + name + "'");
      src.key = ref->key;
      if (ref->slot.fused() || ref->slot.swapHalves) {
        src.rowOffset = ref->slot.rowOffset;
        src.rows = ref->slot.rows;
        src.swapHalves = ref->slot.swapHalves;
      }
      if (!full.empty()) full[0] = ref->slot.totalRows;  // the whole fused tensor
    }
    if (listed.insert(src.key).second) out.expected.emplace_back(ckpt.fileKey(src.key), full);
    out.of.emplace(name, src);
  }
  return out;
}

// Every key there with its shape, floating point, nothing unknown: LoadError naming
// the file and each key, before anything is copied.
void check(const DitCheckpoint& ckpt, const Sources& sources, const LoadTarget& target) {
  io::checkStrict(ckpt.weights(), sources.expected, {}, target.labelPrefix + toString(ckpt.format()) + " names");
}

// Copies the checkpoint tensor of `src` into `param`, converting dtype and device.
void fill(at::Tensor& param, const DitCheckpoint& ckpt, const Source& src) {
  at::Tensor t = ckpt.tensor(src.key);
  if (src.rows >= 0) t = t.narrow(0, src.rowOffset, src.rows);
  if (src.swapHalves) {
    const auto halves = t.chunk(2, 0);  // BFL (shift, scale) <-> diffusers (scale, shift)
    t = at::cat({halves[1], halves[0]}, 0);
  }
  param.copy_(t);
}

}  // namespace

void loadWeights(torch::nn::Module& model, const DitCheckpoint& ckpt, const LoadTarget& target) {
  Shapes params;
  std::vector<at::Tensor> tensors;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    params.emplace_back(item.key(), item.value().sizes().vec());
    tensors.push_back(item.value());
  }
  const Sources sources = sourcesOf(ckpt, params, target);
  check(ckpt, sources, target);
  // Verified: copy, converting dtype and device into each parameter.
  at::NoGradGuard noGrad;
  for (size_t i = 0; i < params.size(); ++i) fill(tensors[i], ckpt, sources.of.at(params[i].first));
}

std::shared_ptr<torch::nn::Module> streamModel(const DitCheckpoint& ckpt, const StreamedModel& m,
                                               const LoadTarget& target, BuildOptions options,
                                               const StreamOptions& stream) {
  // Checked against the layout before the first block exists.
  const Shapes layout = layoutParams(m.layout, m.numLayers, m.numSingleLayers);
  const std::map<std::string, std::vector<int64_t>> params(layout.begin(), layout.end());
  const Sources sources = sourcesOf(ckpt, layout, target);
  check(ckpt, sources, target);
  if (stream.quantize != nn::QuantType::None) nn::requireQuantTypeAvailable(stream.quantize);

  const int64_t blocks = m.numLayers + m.numSingleLayers;
  const int64_t units = blocks + 1;  // the blocks, then the stem and head together
  std::set<std::string> filled;
  // Fills every parameter of `module` (model paths under `prefix`) through its own
  // named parameters, so the loader follows however the module names them.
  auto fillModule = [&](torch::nn::Module& module, const std::string& prefix) {
    std::vector<std::pair<at::Tensor, const Source*>> todo;
    std::map<std::string, int> uses;  // a fused BFL tensor feeds several parameters
    for (auto& item : module.named_parameters(/*recurse=*/true)) {
      const std::string name = prefix + item.key();
      if (filled.count(name)) continue;
      auto it = params.find(name);
      if (it == params.end() || it->second != item.value().sizes().vec())
        throw Error(target.who + ": model parameter '" + name + "' " + shapeText(item.value().sizes().vec()) +
                    " is not in the layout");
      todo.emplace_back(item.value(), &sources.of.at(name));
      ++uses[todo.back().second->key];
      filled.insert(name);
    }
    at::NoGradGuard noGrad;
    for (auto& [param, src] : todo) {
      fill(param, ckpt, *src);
      // Copied out (by every parameter it feeds): its file pages need not stay resident.
      if (--uses[src->key] == 0) ckpt.releasePages(src->key);
    }
  };

  int64_t built = 0;
  auto userHook = options.onBlockBuilt;
  options.onBlockBuilt = [&](torch::nn::Module& block) {
    const int64_t i = built++;
    const bool isDouble = i < m.numLayers;
    if (i >= blocks || isDouble != m.isDoubleBlock(block))
      throw Error(target.who + ": block " + std::to_string(i) + " was not built in layout order");
    const std::string prefix = (isDouble ? blockId(Unit::Double, i) : blockId(Unit::Single, i - m.numLayers)) + ".";
    fillModule(block, prefix);
    // Quantized here, on the block's device, before the next block exists.
    if (stream.quantize != nn::QuantType::None) {
      nn::quantizeLinears(block, stream.quantize);
      io::releaseFreedHostMemory();
    }
    if (userHook) userHook(block);
    if (stream.onProgress) stream.onProgress(i + 1, units);
  };
  auto model = m.build(options);
  fillModule(*model, "");  // the stem and head: what the blocks did not fill
  if (filled.size() != params.size())
    throw Error(target.who + ": the model has " + std::to_string(filled.size()) + " of the layout's " +
                std::to_string(params.size()) + " parameters");
  if (stream.onProgress) stream.onProgress(units, units);
  return model;
}

std::vector<std::pair<std::string, at::Tensor>> bflStateDict(torch::nn::Module& model, const BflNames& names,
                                                             const std::string& writer) {
  nn::requireUnquantized(model, writer);
  // BFL key -> its parts (part, rows), assembled once every part is seen.
  std::map<std::string, std::vector<std::pair<int, at::Tensor>>> parts;
  std::vector<std::string> order;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const auto ref = names.bflParamForKey(item.key());
    if (!ref) throw Error(writer + ": no BFL name for model parameter '" + item.key() + "'");
    at::Tensor t = item.value().detach().cpu();
    if (ref->slot.swapHalves) {
      const auto halves = t.chunk(2, 0);  // diffusers (scale, shift) -> BFL (shift, scale)
      t = at::cat({halves[1], halves[0]}, 0);
    }
    if (!parts.count(ref->key)) order.push_back(ref->key);
    parts[ref->key].emplace_back(ref->slot.part, t);
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& key : order) {
    auto& ps = parts[key];
    std::sort(ps.begin(), ps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<at::Tensor> rows;
    for (const auto& [_, t] : ps) rows.push_back(t);
    out.emplace_back(key, rows.size() == 1 ? rows[0].contiguous() : at::cat(rows, 0));  // parts stacked on dim 0
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> diffusersStateDict(torch::nn::Module& model,
                                                                   const std::string& writer) {
  nn::requireUnquantized(model, writer);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(true)) out.emplace_back(item.key(), item.value().detach().cpu());
  return out;
}

}  // namespace strata::dit
