#include "families/flux/FluxImageModels.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "common/Error.h"
#include "events/EventBus.h"
#include "families/flux/FluxPipeline.h"
#include "families/flux/FluxTextEncoder.h"
#include "families/flux/FluxTextEncoders.h"
#include "families/flux/FluxVaeCodec.h"
#include "io/ContentHash.h"
#include "models/clip/ClipCheckpoint.h"
#include "models/clip/ClipTextConfig.h"
#include "models/t5/T5Config.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "nn/Quantize.h"

namespace fs = std::filesystem;

namespace strata::families {

namespace {

std::string dtypeName(at::ScalarType t) { return c10::toString(t); }

vae::VaeConfig randomVaeConfig(int64_t latentChannels) {
  vae::VaeConfig c = vae::VaeConfig::flux1();
  c.latentChannels = latentChannels;
  return c;
}

t5::T5Config randomT5Config(int64_t width) {
  t5::T5Config c = t5::T5Config::t5Xxl();
  c.dModel = width;
  return c;
}

clip::ClipTextConfig randomClipConfig(int64_t width) {
  clip::ClipTextConfig c = clip::ClipTextConfig::clipL();
  c.hiddenSize = width;
  c.intermediateSize = 4 * width;                          // CLIP-L: 3072 = 4 x 768
  c.numAttentionHeads = width % 64 == 0 ? width / 64 : 1;  // CLIP's head width 64
  return c;
}

// What an images run reads beside the transformer, and how.
struct RunModelsOptions {
  PipelineFiles files;  // its vae and text parts (the transformer is the trainer's); tokenizers only when random
  // Random weights at FLUX.1's shapes (VaeConfig::flux1, T5-XXL, CLIP-L) with the
  // widths the transformer implies below; nothing but the tokenizers is read.
  bool randomWeights = false;
  uint64_t seed = 0;                  // of the random weights
  int64_t latentChannels = 16;        // the transformer's (in_channels / 4)
  int64_t jointAttentionDim = 4096;   // T5's width
  int64_t pooledProjectionDim = 768;  // CLIP's width
  at::Device device = at::kCPU;
  at::ScalarType vaeDtype = at::kFloat;  // requested; the VAE runs in vae::vaeComputeDtype of it
  TextEncoderOptions text;               // dtypes, max_sequence_length, quantize_te, T5's progress
};

// The text encoders' and tokenizers' content hashes.
std::string textFilesStamp(const RunModelsOptions& o) {
  std::string s;
  if (!o.randomWeights)
    s = "t5 " + io::weightsStamp(o.files.text.t5) + " clip " + io::weightsStamp(o.files.text.clip) + " ";
  return s + "tokenizers " + io::weightsStamp(o.files.text.t5Tokenizer) + " " +
         io::weightsStamp(o.files.text.clipTokenizer);
}

std::unique_ptr<FluxVaeCodec> makeVaeCodec(const RunModelsOptions& o) {
  std::ostringstream vid;
  std::shared_ptr<vae::AutoencoderKL> vae;
  if (o.randomWeights) {
    const auto cfg = randomVaeConfig(o.latentChannels);
    at::manual_seed(o.seed);
    vae = std::make_shared<vae::AutoencoderKL>(cfg,
                                               vae::VaeBuildOptions{o.device, vae::vaeComputeDtype(cfg, o.vaeDtype)});
    vid << "random flux1 VAE, latent channels " << o.latentChannels << ", seed " << o.seed << ", "
        << c10::DeviceTypeName(o.device.type());
  } else {
    // Hashed before and after the load: the key then names the weights that were loaded.
    const std::string vaeStamp = io::weightsStamp(o.files.vae);
    vae = vae::loadAutoencoderKL(o.files.vae, {o.device, o.vaeDtype}, o.files.vaeHints);
    if (io::weightsStamp(o.files.vae) != vaeStamp)
      throw LoadError(o.files.vae.string() + ": changed while it was being loaded; start the run again");
    vid << "vae " << vaeStamp;
  }
  const auto& vc = vae->config();
  if (vc.latentChannels != o.latentChannels)
    throw LoadError(o.files.vae.string() + ": the VAE gives " + std::to_string(vc.latentChannels) +
                    " latent channels, the transformer takes " + std::to_string(o.latentChannels));
  vid << " (" << dtypeName(vae->dtype()) << "; training latents (mean - " << vc.shiftFactor << ") * "
      << vc.scalingFactor << ")";
  return std::make_unique<FluxVaeCodec>(std::move(vae), vid.str());
}

// T5 and CLIP, loaded on the first encode. Their key is made now, with the files'
// hashes as they are when the run starts.
std::unique_ptr<FluxTextEncoder> makeTextEncoder(const RunModelsOptions& o) {
  const std::string stamp = textFilesStamp(o);
  std::ostringstream tid;
  if (o.randomWeights)
    tid << "random T5-XXL width " << o.jointAttentionDim << " + CLIP-L width " << o.pooledProjectionDim << ", seed "
        << o.seed + 1 << ", " << c10::DeviceTypeName(o.device.type()) << " ";
  tid << stamp << " (" << dtypeName(o.text.t5Dtype) << ", " << dtypeName(o.text.clipDtype) << ", max_sequence_length "
      << o.text.maxSequenceLength
      // A quantized T5 gives other embeddings: its cache is not a float T5's.
      << (o.text.t5Quantize == nn::QuantType::None ? "" : std::string(", T5 ") + nn::quantTypeName(o.text.t5Quantize))
      << ")";
  auto load = [o, stamp]() {
    std::shared_ptr<FluxTextEncoders> enc;
    if (o.randomWeights) {
      at::manual_seed(o.seed + 1);
      enc = FluxTextEncoders::random(o.files.text, randomT5Config(o.jointAttentionDim),
                                     randomClipConfig(o.pooledProjectionDim), o.text);
    } else {
      enc = FluxTextEncoders::load(o.files.text, o.text);
    }
    if (enc->t5Width() != o.jointAttentionDim || enc->pooledWidth() != o.pooledProjectionDim)
      throw LoadError("text encoders " + o.files.text.t5.string() + " (d_model " + std::to_string(enc->t5Width()) +
                      ") / " + o.files.text.clip.string() + " (hidden " + std::to_string(enc->pooledWidth()) +
                      ") do not fit the transformer's joint_attention_dim " + std::to_string(o.jointAttentionDim) +
                      " / pooled_projection_dim " + std::to_string(o.pooledProjectionDim));
    // T5 and CLIP load long after the run started (only when something must be encoded): files
    // replaced since then would fill the cache under the old files' key.
    if (textFilesStamp(o) != stamp)
      throw LoadError("text encoders " + o.files.text.t5.string() + " / " + o.files.text.clip.string() +
                      " (or their tokenizers) changed since the run started; start the run again");
    return enc;
  };
  return std::make_unique<FluxTextEncoder>(std::move(load), tid.str(), o.text.maxSequenceLength);
}

// The tokenizers of a random-weights run: model.tokenizer_path, else a diffusers
// model.name_or_path.
TextEncoderFiles randomRunTokenizers(const config::ModelConfig& m) {
  const fs::path folder = !m.tokenizerPath.empty() ? fs::path(m.tokenizerPath) : fs::path(m.nameOrPath);
  if (folder.empty())
    throw ConfigError(
        "model.tokenizer_path: an images run with random_weights still needs the tokenizers: give a folder with "
        "tokenizer/ and tokenizer_2/ (a FLUX.1 diffusers folder works)");
  return TextEncoderFiles::fromSingleFiles({}, {}, folder);
}

}  // namespace

std::unique_ptr<diffusion::ImageModels> makeFluxImageModels(const config::RunConfig& cfg,
                                                            const train::DatasetContext& ctx,
                                                            const c10::Device& device) {
  const auto& m = cfg.model;
  RunModelsOptions o;
  o.randomWeights = m.randomWeights;
  o.seed = static_cast<uint64_t>(cfg.train.seed) + 2;  // the same random encoders on every run of this seed
  o.latentChannels = ctx.latentChannels;
  o.jointAttentionDim = ctx.textDim;
  o.pooledProjectionDim = ctx.pooledDim;
  o.text.maxSequenceLength = ctx.textTokens;
  o.device = device;
  o.text.device = device;
  // Per component: float32 on the CPU; on a GPU T5 and CLIP in bf16 whatever
  // train.dtype is (T5 overflows in fp16; the planner counts them so), the VAE in
  // train.dtype through vaeComputeDtype (a force_upcast VAE runs fp16 in float32).
  const bool gpu = device.is_cuda();
  o.vaeDtype = !gpu                                     ? at::kFloat
               : cfg.train.dtype == config::DType::BF16 ? at::kBFloat16
               : cfg.train.dtype == config::DType::FP16 ? at::kHalf
                                                        : at::kFloat;
  o.text.t5Dtype = gpu ? at::kBFloat16 : at::kFloat;
  o.text.clipDtype = o.text.t5Dtype;
  // model.quantize_te: T5's Linears quantized while loading, with model.qtype (CLIP stays float).
  if (m.quantizeTe) o.text.t5Quantize = nn::quantTypeFromName(m.qtype);
  // T5-XXL (9.5 GB in bf16) streams in block by block: said like the transformer's load.
  if (ctx.bus)
    o.text.onT5Progress = [bus = ctx.bus](int64_t done, int64_t total) {
      bus->publish(events::LoadProgressEvent{events::kLoadT5, done, total});
    };
  if (m.randomWeights) {
    o.files.text = randomRunTokenizers(m);
  } else {
    o.files = PipelineFiles::fromModelPaths(m.nameOrPath, m.vaePath, m.clipPath, m.t5Path, m.tokenizerPath);
    // What single files do not hold, as the config gives it.
    if (m.vaeNormNumGroups) o.files.vaeHints.normNumGroups = *m.vaeNormNumGroups;
    if (m.clipNumAttentionHeads && fs::is_regular_file(o.files.text.clip))
      o.files.text.clipConfig = clip::ClipCheckpoint::open(o.files.text.clip).config(*m.clipNumAttentionHeads);
  }
  // The VAE first: with random weights its values come first from the seed.
  auto codec = makeVaeCodec(o);
  auto text = makeTextEncoder(o);
  return std::make_unique<diffusion::ImageModels>(std::move(codec), std::move(text));
}

}  // namespace strata::families
