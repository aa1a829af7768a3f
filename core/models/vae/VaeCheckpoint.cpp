#include "models/vae/VaeCheckpoint.h"

#include <torch/autograd.h>

#include <algorithm>
#include <sstream>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/Text.h"
#include "io/SafetensorsCheckpoint.h"
#include "io/StrictLoad.h"
#include "models/vae/AutoencoderKL.h"

namespace fs = std::filesystem;

namespace strata::vae {

namespace {

constexpr const char* kDiffusersWeights = "diffusion_pytorch_model.safetensors";

// The weights file of a diffusers VAE folder: diffusers' own file name, else the
// only .safetensors file there.
fs::path weightsInFolder(const fs::path& dir) {
  if (fs::is_regular_file(dir / kDiffusersWeights)) return dir / kDiffusersWeights;
  std::vector<fs::path> found;
  bool index = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".safetensors") found.push_back(e.path());
    if (name.size() > 23 && name.substr(name.size() - 23) == ".safetensors.index.json") index = true;
  }
  if (found.size() == 1 && !index) return found[0];
  if (found.empty()) throw LoadError(dir.string() + ": no .safetensors file in this VAE folder");
  std::sort(found.begin(), found.end());
  std::string list;
  for (const auto& f : found) list += (list.empty() ? "" : ", ") + f.filename().string();
  throw LoadError(dir.string() + ": several weight files (" + list + ") and no " + kDiffusersWeights +
                  "; name the file to load");
}

// How the strict check's message names the weights: "(ldm names, under 'first_stage_model.')".
std::string label(const VaeCheckpoint& ckpt) {
  std::string s = std::string(toString(ckpt.format())) + " names";
  if (!ckpt.prefix().empty()) s += ", under '" + ckpt.prefix() + "'";
  return s;
}

}  // namespace

VaeCheckpoint VaeCheckpoint::open(const fs::path& path) {
  VaeCheckpoint ckpt;
  fs::path weights;
  if (fs::is_directory(path)) {
    const fs::path dir = fs::is_directory(path / "vae") ? path / "vae" : path;
    weights = weightsInFolder(dir);
    if (fs::is_regular_file(dir / "config.json")) ckpt.configJson_ = dir / "config.json";
  } else if (fs::is_regular_file(path)) {
    weights = path;
    // A diffusers weights file named directly still has its config.json beside it.
    const fs::path beside = path.parent_path() / "config.json";
    if (startsWith(path.filename().string(), "diffusion_pytorch_model") && fs::is_regular_file(beside))
      ckpt.configJson_ = beside;
  } else {
    throw IoError(path.string() + ": no such file or folder");
  }
  ckpt.file_ = std::make_shared<io::SafetensorsCheckpoint>(io::SafetensorsCheckpoint::open(weights));

  std::vector<std::string> names;
  for (const auto& [name, shape] : ckpt.file_->shapes()) names.push_back(name);
  for (const char* prefix : {"first_stage_model.", "vae."}) {
    if (std::any_of(names.begin(), names.end(), [&](const std::string& n) { return startsWith(n, prefix); })) {
      ckpt.prefix_ = prefix;
      break;
    }
  }
  std::vector<std::string> keys;
  for (const auto& name : names) {
    if (!startsWith(name, ckpt.prefix_)) continue;  // another component of a full checkpoint
    const std::string key = name.substr(ckpt.prefix_.size());
    ckpt.shapes_[key] = ckpt.file_->info(name).shape;
    keys.push_back(key);
  }
  if (keys.empty()) throw LoadError(weights.string() + ": no tensors");
  ckpt.format_ = names::detectFormat(keys);
  return ckpt;
}

const fs::path& VaeCheckpoint::path() const { return file_->path(); }

at::Tensor VaeCheckpoint::tensor(const std::string& name) const {
  if (!shapes_.count(name)) throw LoadError(path().string() + ": no tensor '" + prefix_ + name + "'");
  return file_->tensor(prefix_ + name);
}

VaeConfig VaeCheckpoint::config(const VaeHints& hints) const {
  if (!configJson_.empty()) return VaeConfig::fromDiffusersJsonFile(configJson_);
  try {
    return vaeConfigFromShapes(shapes_, hints);
  } catch (const Error& e) {
    throw LoadError(path().string() + ": " + e.what());
  }
}

namespace {

// What a checkpoint fills: every parameter, and FLUX.2's batch-norm statistics
// (buffers), by diffusers key.
std::vector<std::pair<std::string, at::Tensor>> loadedTensors(AutoencoderKL& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  const auto buffers = model.named_buffers(/*recurse=*/true);
  for (const auto& [key, shape] : vaeBufferShapes(model.config())) {
    const auto* buffer = buffers.find(key);
    if (!buffer) throw Error("AutoencoderKL: no buffer '" + key + "' in a model of its config");
    out.emplace_back(key, *buffer);
  }
  return out;
}

}  // namespace

void loadVaeWeights(AutoencoderKL& model, const VaeCheckpoint& ckpt) {
  const VaeConfig& cfg = model.config();
  const VaeWeightFormat format = ckpt.format();
  const bool ldm = isLdm(format);

  struct Planned {
    at::Tensor param;
    std::string diffusersKey;
  };
  std::map<std::string, Planned> plan;  // file key -> parameter or buffer
  for (const auto& [key, tensor] : loadedTensors(model)) {
    const auto fileKey = names::fileKey(key, format, cfg.numBlocks());
    if (!fileKey) throw Error("loadVaeWeights: no " + std::string(toString(format)) + " name for '" + key + "'");
    plan[*fileKey] = {tensor, key};
  }

  // Checked by io::checkStrict in the file's naming; keys of the file's other
  // components (outside the prefix) are not the VAE's.
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const auto& [key, p] : plan) {
    auto shape = names::fileShape(p.diffusersKey, p.param.sizes().vec(), format);
    // ldm projections are 1x1 convs; a file that already squeezed them is fine too.
    const auto it = ckpt.shapes().find(key);
    if (ldm && names::isAttentionProjectionWeight(p.diffusersKey) && it != ckpt.shapes().end() &&
        it->second == p.param.sizes().vec())
      shape = it->second;
    expected.emplace_back(ckpt.prefix() + key, std::move(shape));
  }
  std::map<std::string, std::string> otherComponents;
  for (const auto& [name, shape] : ckpt.files().shapes())
    if (!startsWith(name, ckpt.prefix())) otherComponents[name] = "another component of this file";
  if (cfg.batchNormLatents())
    otherComponents[ckpt.prefix() + kVaeBatchNormCounterKey] = "the batch norm's training counter, not used";
  io::checkStrict(ckpt.files(), expected, otherComponents, label(ckpt));

  // Verified: copy, converting dtype and device into each parameter.
  at::NoGradGuard noGrad;
  for (auto& [key, p] : plan) p.param.copy_(ckpt.tensor(key).reshape(p.param.sizes()));
}

void loadVaeWeights(AutoencoderKL& model, const fs::path& path) { loadVaeWeights(model, VaeCheckpoint::open(path)); }

std::shared_ptr<AutoencoderKL> loadAutoencoderKL(const fs::path& path, const VaeBuildOptions& options,
                                                 const VaeHints& hints) {
  const VaeCheckpoint ckpt = VaeCheckpoint::open(path);
  const VaeConfig cfg = ckpt.config(hints);
  VaeBuildOptions o = options;
  o.dtype = vaeComputeDtype(cfg, options.dtype);
  auto model = std::make_shared<AutoencoderKL>(cfg, o);
  loadVaeWeights(*model, ckpt);
  return model;
}

std::vector<std::pair<std::string, at::Tensor>> vaeStateDict(AutoencoderKL& model, VaeWeightFormat format) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, tensor] : loadedTensors(model)) {
    const auto key = names::fileKey(name, format, model.config().numBlocks());
    if (!key) throw Error("vaeStateDict: no " + std::string(toString(format)) + " name for '" + name + "'");
    const auto shape = names::fileShape(name, tensor.sizes().vec(), format);
    out.emplace_back(*key, tensor.detach().cpu().reshape(shape));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace strata::vae
