#include "models/flux2/Flux2Checkpoint.h"

#include <torch/autograd.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/Error.h"
#include "common/Text.h"
#include "io/JsonFields.h"
#include "io/SafetensorsCheckpoint.h"
#include "io/StrictLoad.h"
#include "models/flux2/Flux2Names.h"

namespace fs = std::filesystem;

namespace strata::flux2 {

const char* toString(Flux2WeightFormat format) { return format == Flux2WeightFormat::Bfl ? "BFL" : "diffusers"; }

namespace {

struct OpenedWeights {
  io::ComponentWeights component;
  std::string prefix;  // a ComfyUI wrapper every key carries, else ""
  Flux2WeightFormat format = Flux2WeightFormat::Diffusers;
  std::map<std::string, std::vector<int64_t>> shapes;  // prefix stripped
};

OpenedWeights openWeights(const fs::path& path) {
  OpenedWeights w;
  w.component = io::openComponentWeights(path, {"Flux2Transformer2DModel"});
  const auto& raw = w.component.weights->shapes();
  for (const char* prefix : {"model.diffusion_model.", "diffusion_model."}) {
    if (!raw.empty() &&
        std::all_of(raw.begin(), raw.end(), [&](const auto& kv) { return startsWith(kv.first, prefix); })) {
      w.prefix = prefix;
      break;
    }
  }
  for (const auto& [name, shape] : raw) w.shapes[name.substr(w.prefix.size())] = shape;
  const bool bfl = std::any_of(w.shapes.begin(), w.shapes.end(), [](const auto& kv) {
    return startsWith(kv.first, "img_in.") || startsWith(kv.first, "double_blocks.") ||
           startsWith(kv.first, "single_blocks.") || startsWith(kv.first, "final_layer.");
  });
  w.format = bfl ? Flux2WeightFormat::Bfl : Flux2WeightFormat::Diffusers;
  return w;
}

Flux2Config configOf(const OpenedWeights& w, const Flux2Config& base) {
  Flux2Config b = base;
  if (w.component.configJson.empty()) return Flux2Config::fromShapes(w.shapes, b);
  b = Flux2Config::fromDiffusersJsonFile(w.component.configJson);  // bounded as it is read
  const Flux2Config c = Flux2Config::fromShapes(w.shapes, b);
  // Where config.json says another shape than the weights, say so instead of training the weights' one.
  io::requireAgreement(b.toDiffusersJson(), c.toDiffusersJson(), w.component.configJson.string(),
                       w.component.weights->path().string(),
                       {"axes_dims_rope"});
  return c;
}

// Where one model parameter comes from: a file key and, inside a fused BFL tensor, its rows.
struct Source {
  std::string key;  // as stored (with the prefix)
  int64_t rowOffset = 0;
  int64_t rows = -1;  // -1: the whole tensor
  bool swapHalves = false;
};

}  // namespace

void loadFlux2Weights(Flux2Transformer& model, const fs::path& path) {
  const auto w = openWeights(path);
  const bool bfl = w.format == Flux2WeightFormat::Bfl;
  const Flux2Names names(model.config());
  std::vector<std::pair<at::Tensor, Source>> plan;
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  std::set<std::string> listed;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    Source src;
    auto full = p.value().sizes().vec();
    if (!bfl) {
      src.key = w.prefix + p.key();
    } else {
      const auto ref = names.bflParamForKey(p.key());
      if (!ref) throw Error("Flux2Checkpoint: no BFL name for model parameter '" + p.key() + "'");
      src.key = w.prefix + ref->key;
      if (ref->slot.fused() || ref->slot.swapHalves) {
        src.rowOffset = ref->slot.rowOffset;
        src.rows = ref->slot.rows;
        src.swapHalves = ref->slot.swapHalves;
      }
      full[0] = ref->slot.totalRows;  // the whole fused tensor
    }
    if (listed.insert(src.key).second) expected.emplace_back(src.key, full);
    plan.emplace_back(p.value(), src);
  }
  // Every key there with its shape, nothing unknown: LoadError naming the file and each key.
  io::checkStrict(*w.component.weights, expected, {},
                  std::string("FLUX.2 transformer, ") + toString(w.format) + " names");
  at::NoGradGuard noGrad;
  for (auto& [param, src] : plan) {
    at::Tensor t = w.component.weights->tensor(src.key);
    if (src.rows >= 0) t = t.narrow(0, src.rowOffset, src.rows);
    if (src.swapHalves) {
      const auto halves = t.chunk(2, 0);  // BFL (shift, scale) -> diffusers (scale, shift)
      t = at::cat({halves[1], halves[0]}, 0);
    }
    param.copy_(t);
  }
}

Flux2Config flux2ConfigFromCheckpoint(const fs::path& path, const Flux2Config& base) {
  return configOf(openWeights(path), base);
}

std::shared_ptr<Flux2Transformer> loadFlux2Transformer(const fs::path& path, const Flux2BuildOptions& options,
                                                       const Flux2Config& base) {
  auto model = std::make_shared<Flux2Transformer>(flux2ConfigFromCheckpoint(path, base), options);
  loadFlux2Weights(*model, path);
  return model;
}

std::vector<std::pair<std::string, at::Tensor>> flux2BflStateDict(Flux2Transformer& model) {
  const Flux2Names names(model.config());
  std::map<std::string, std::vector<std::pair<int, at::Tensor>>> parts;  // BFL key -> (part, rows)
  std::vector<std::string> order;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    const auto ref = names.bflParamForKey(p.key());
    if (!ref) throw Error("Flux2Checkpoint: no BFL name for model parameter '" + p.key() + "'");
    at::Tensor t = p.value().detach().cpu();
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
    out.emplace_back(key, rows.size() == 1 ? rows[0].contiguous() : at::cat(rows, 0));  // q, k, v stacked on dim 0
  }
  return out;
}

}  // namespace strata::flux2
