#include "families/flux/FluxImageModels.h"

#include <filesystem>

#include "common/Error.h"
#include "events/EventBus.h"
#include "models/clip/ClipCheckpoint.h"
#include "nn/Quantize.h"
#include "pipeline/FluxPipeline.h"
#include "pipeline/FluxRunModels.h"

namespace fs = std::filesystem;

namespace strata::families {

namespace {

class FluxImageModels final : public train::ImageModels {
 public:
  explicit FluxImageModels(pipeline::RunModelsOptions o) : m_(std::move(o)) {}
  at::Tensor encodeImages(const at::Tensor& pixels) override { return m_.encodeImages(pixels); }
  std::vector<train::TextEmbedding> encodeTexts(const std::vector<std::string>& texts) override {
    const auto e = m_.encodeTexts(texts);  // t5 [B, L, D], pooled [B, P]
    std::vector<train::TextEmbedding> out;
    for (int64_t b = 0; b < e.t5.size(0); ++b) out.push_back({e.t5[b].contiguous(), e.pooled[b].contiguous()});
    return out;
  }
  at::Tensor decode(const at::Tensor& latents) override { return m_.decode(latents); }
  void releaseTextEncoders() override { m_.releaseTextEncoders(); }
  void releaseDecoder() override { m_.releaseVae(); }
  bool textEncodersLoaded() const override { return m_.textEncodersLoaded(); }
  std::string imageModelId() const override { return m_.vaeIdentity(); }
  std::string textModelId() const override { return m_.textIdentity(); }
  int64_t downscaleFactor() const override { return m_.downscaleFactor(); }
  std::string describe() const override { return m_.describe(); }

 private:
  pipeline::FluxRunModels m_;
};

// The tokenizers of a random-weights run: model.tokenizer_path, else a diffusers
// model.name_or_path.
pipeline::TextEncoderFiles randomRunTokenizers(const config::ModelConfig& m) {
  const fs::path folder = !m.tokenizerPath.empty() ? fs::path(m.tokenizerPath) : fs::path(m.nameOrPath);
  if (folder.empty())
    throw ConfigError(
        "model.tokenizer_path: an images run with random_weights still needs the tokenizers: give a folder with "
        "tokenizer/ and tokenizer_2/ (a FLUX.1 diffusers folder works)");
  return pipeline::TextEncoderFiles::fromSingleFiles({}, {}, folder);
}

}  // namespace

std::unique_ptr<train::ImageModels> makeFluxImageModels(const config::RunConfig& cfg, const train::DatasetContext& ctx,
                                                        const c10::Device& device) {
  const auto& m = cfg.model;
  pipeline::RunModelsOptions o;
  o.randomWeights = m.randomWeights;
  o.seed = static_cast<uint64_t>(cfg.train.seed) + 2;  // the same random encoders on every run of this seed
  o.latentChannels = ctx.latentChannels;
  o.jointAttentionDim = ctx.textDim;
  o.pooledProjectionDim = ctx.pooledDim;
  o.maxSequenceLength = ctx.textTokens;
  o.device = device;
  // Per component: float32 on the CPU; on a GPU T5 and CLIP in bf16 whatever
  // train.dtype is (T5 overflows in fp16; the planner counts them so), the VAE in
  // train.dtype through vaeComputeDtype (a force_upcast VAE runs fp16 in float32).
  const bool gpu = device.is_cuda();
  o.vaeDtype = !gpu                                        ? at::kFloat
               : cfg.train.dtype == config::DType::BF16 ? at::kBFloat16
               : cfg.train.dtype == config::DType::FP16 ? at::kHalf
                                                        : at::kFloat;
  o.t5Dtype = gpu ? at::kBFloat16 : at::kFloat;
  o.clipDtype = o.t5Dtype;
  // model.quantize_te: T5's Linears quantized while loading, with model.qtype (CLIP stays float).
  if (m.quantizeTe) o.t5Quantize = nn::quantTypeFromName(m.qtype);
  // T5-XXL (9.5 GB in bf16) streams in block by block: said like the transformer's load.
  if (ctx.bus)
    o.onT5Progress = [bus = ctx.bus](int64_t done, int64_t total) {
      bus->publish(events::LoadProgressEvent{events::kLoadT5, done, total});
    };
  if (m.randomWeights) {
    o.files.text = randomRunTokenizers(m);
  } else {
    o.files = pipeline::PipelineFiles::fromModelPaths(m.nameOrPath, m.vaePath, m.clipPath, m.t5Path, m.tokenizerPath);
    // What single files do not hold, as the config gives it.
    if (m.vaeNormNumGroups) o.files.vaeHints.normNumGroups = *m.vaeNormNumGroups;
    if (m.clipNumAttentionHeads && fs::is_regular_file(o.files.text.clip))
      o.files.text.clipConfig = clip::ClipCheckpoint::open(o.files.text.clip).config(*m.clipNumAttentionHeads);
  }
  return std::make_unique<FluxImageModels>(std::move(o));
}

}  // namespace strata::families
