#include "models/flux/FluxCheckpoint.h"

#include "common/Error.h"
#include "io/JsonFields.h"
#include "io/SafetensorsCheckpoint.h"
#include "models/flux/FluxLayout.h"
#include "models/flux/FluxNames.h"

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

FluxCheckpoint FluxCheckpoint::open(const fs::path& path) {
  // Shards, the index JSON and duplicate tensors are io::SafetensorsCheckpoint's business.
  io::ComponentWeights weights;
  const fs::path source = fs::is_directory(path) ? transformerFolder(path) : path;
  weights.weights = std::make_shared<io::SafetensorsCheckpoint>(io::SafetensorsCheckpoint::open(source));
  if (fs::is_directory(path) && fs::is_regular_file(source / "config.json"))
    weights.configJson = source / "config.json";
  return FluxCheckpoint(dit::DitCheckpoint::open(std::move(weights), path));
}

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

dit::LoadTarget targetOf(const dit::BflNames& n, const std::string& who) { return {n, "", who}; }

}  // namespace

void loadFluxWeights(FluxTransformer& model, const FluxCheckpoint& ckpt) {
  const auto n = names::bflNames(model.config());
  dit::loadWeights(model, ckpt, targetOf(n, "loadFluxWeights"));
}

std::shared_ptr<FluxTransformer> streamFluxTransformer(const FluxCheckpoint& ckpt, const FluxConfig& cfg,
                                                       FluxBuildOptions options, const FluxStreamOptions& stream) {
  const auto n = names::bflNames(cfg);
  return dit::streamModelOf<FluxTransformer, FluxDoubleBlock>(
      ckpt, cfg, fluxLayout(cfg), targetOf(n, "streamFluxTransformer"), std::move(options), stream);
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
  return dit::diffusersStateDict(model, "diffusersStateDict");
}

std::vector<std::pair<std::string, at::Tensor>> bflStateDict(FluxTransformer& model) {
  return dit::bflStateDict(model, names::bflNames(model.config()), "bflStateDict");
}

}  // namespace strata::flux
