#include "models/flux2/Flux2Checkpoint.h"

#include "common/Error.h"
#include "io/JsonFields.h"
#include "io/SafetensorsCheckpoint.h"
#include "models/flux2/Flux2Layout.h"
#include "models/flux2/Flux2Names.h"

namespace fs = std::filesystem;

namespace strata::flux2 {

namespace {

constexpr const char* kLabel = "FLUX.2 transformer, ";

Flux2Config configOf(const dit::DitCheckpoint& ckpt, const Flux2Config& base) {
  if (ckpt.configJsonPath().empty()) return Flux2Config::fromShapes(ckpt.shapes(), base);
  const Flux2Config b = Flux2Config::fromDiffusersJsonFile(ckpt.configJsonPath());  // bounded as it is read
  const Flux2Config c = Flux2Config::fromShapes(ckpt.shapes(), b);
  // Where config.json says another shape than the weights, say so instead of training the weights' one.
  io::requireAgreement(b.toDiffusersJson(), c.toDiffusersJson(), ckpt.configJsonPath().string(),
                       ckpt.weights().path().string(), {"axes_dims_rope"});
  return c;
}

}  // namespace

dit::DitCheckpoint openFlux2Checkpoint(const fs::path& path) {
  return dit::DitCheckpoint::open(io::openComponentWeights(path, {"Flux2Transformer2DModel"}), path);
}

void loadFlux2Weights(Flux2Transformer& model, const fs::path& path) {
  const Flux2Names names(model.config());
  dit::loadWeights(model, openFlux2Checkpoint(path), {names, kLabel, "loadFlux2Weights"});
}

Flux2Config flux2ConfigFromCheckpoint(const fs::path& path, const Flux2Config& base) {
  return configOf(openFlux2Checkpoint(path), base);
}

std::shared_ptr<Flux2Transformer> streamFlux2Transformer(const dit::DitCheckpoint& ckpt, const Flux2Config& cfg,
                                                         Flux2BuildOptions options, const Flux2StreamOptions& stream) {
  const Flux2Names names(cfg);
  return dit::streamModelOf<Flux2Transformer, Flux2DoubleBlock>(
      ckpt, cfg, flux2Layout(cfg), {names, kLabel, "streamFlux2Transformer"}, std::move(options), stream);
}

std::shared_ptr<Flux2Transformer> loadFlux2Transformer(const fs::path& path, const Flux2BuildOptions& options,
                                                       const Flux2Config& base) {
  const auto ckpt = openFlux2Checkpoint(path);
  return streamFlux2Transformer(ckpt, configOf(ckpt, base), options);
}

std::vector<std::pair<std::string, at::Tensor>> flux2BflStateDict(Flux2Transformer& model) {
  return dit::bflStateDict(model, Flux2Names(model.config()), "flux2BflStateDict");
}

}  // namespace strata::flux2
