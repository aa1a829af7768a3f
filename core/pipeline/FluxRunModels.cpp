#include "pipeline/FluxRunModels.h"

#include <torch/autograd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "common/Error.h"
#include "io/ContentHash.h"
#include "models/clip/ClipTextConfig.h"
#include "models/t5/T5Config.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"

namespace fs = std::filesystem;

namespace strata::pipeline {

namespace {

// What identifies weights in a cache key: the content hash of a file, or of every
// file directly in a folder (with its name), so replaced weights change it even
// when their size and date were kept; moving or touching them does not. Hashes
// are remembered by inode, size, mtime and ctime (io::fileContentHash), so a
// multi-GB file is read once, not at every run.
std::string stampOf(const fs::path& p) {
  std::error_code ec;
  std::vector<fs::path> files;
  const bool folder = fs::is_directory(p, ec);
  if (folder) {
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(p);
  }
  std::ostringstream s;
  s << "[";
  for (const auto& f : files) {
    if (folder) s << f.filename().string() << ":";
    try {
      s << io::fileContentHash(f) << ";";
    } catch (const Error&) {
      s << "unreadable " << f.string() << ";";  // the load that needs it says why
    }
  }
  s << "]";
  return s.str();
}

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

}  // namespace

FluxRunModels::FluxRunModels(RunModelsOptions options) : opt_(std::move(options)) {
  std::ostringstream vid, tid;
  if (opt_.randomWeights) {
    const auto cfg = randomVaeConfig(opt_.latentChannels);
    at::manual_seed(opt_.seed);
    vae_ = std::make_shared<vae::AutoencoderKL>(
        cfg, vae::VaeBuildOptions{opt_.device, vae::vaeComputeDtype(cfg, opt_.vaeDtype)});
    vid << "random flux1 VAE, latent channels " << opt_.latentChannels << ", seed " << opt_.seed << ", "
        << c10::DeviceTypeName(opt_.device.type());
    tid << "random T5-XXL width " << opt_.jointAttentionDim << " + CLIP-L width " << opt_.pooledProjectionDim
        << ", seed " << opt_.seed + 1 << ", " << c10::DeviceTypeName(opt_.device.type());
  } else {
    // Hashed before and after the load: the key then names the weights that were loaded.
    const std::string vaeStamp = stampOf(opt_.files.vae);
    vae_ = vae::loadAutoencoderKL(opt_.files.vae, {opt_.device, opt_.vaeDtype}, opt_.files.vaeHints);
    if (stampOf(opt_.files.vae) != vaeStamp)
      throw LoadError(opt_.files.vae.string() + ": changed while it was being loaded; start the run again");
    vid << "vae " << vaeStamp;
  }
  textFilesStamp_ = textFilesStamp();
  for (auto& p : vae_->parameters()) p.set_requires_grad(false);
  const auto& vc = vae_->config();
  if (vc.latentChannels != opt_.latentChannels)
    throw LoadError(opt_.files.vae.string() + ": the VAE gives " + std::to_string(vc.latentChannels) +
                    " latent channels, the transformer takes " + std::to_string(opt_.latentChannels));
  downscale_ = vc.downscaleFactor();
  vid << " (" << dtypeName(vae_->dtype()) << "; training latents (mean - " << vc.shiftFactor << ") * "
      << vc.scalingFactor << ")";
  tid << (opt_.randomWeights ? " " : "") << textFilesStamp_ << " (" << dtypeName(opt_.t5Dtype) << ", "
      << dtypeName(opt_.clipDtype) << ", max_sequence_length "
      << opt_.maxSequenceLength
      // A quantized T5 gives other embeddings: its cache is not a float T5's.
      << (opt_.t5Quantize == nn::QuantType::None ? "" : std::string(", T5 ") + nn::quantTypeName(opt_.t5Quantize))
      << ")";
  vaeId_ = vid.str();
  textId_ = tid.str();
}

FluxRunModels::~FluxRunModels() = default;

std::string FluxRunModels::textFilesStamp() const {
  std::string s;
  if (!opt_.randomWeights) s = "t5 " + stampOf(opt_.files.text.t5) + " clip " + stampOf(opt_.files.text.clip) + " ";
  return s + "tokenizers " + stampOf(opt_.files.text.t5Tokenizer) + " " + stampOf(opt_.files.text.clipTokenizer);
}

void FluxRunModels::loadTextEncoders() {
  TextEncoderOptions o;
  o.device = opt_.device;
  o.t5Dtype = opt_.t5Dtype;
  o.clipDtype = opt_.clipDtype;
  o.t5Quantize = opt_.t5Quantize;
  o.onT5Progress = opt_.onT5Progress;
  o.maxSequenceLength = opt_.maxSequenceLength;
  std::shared_ptr<FluxTextEncoders> enc;
  if (opt_.randomWeights) {
    at::manual_seed(opt_.seed + 1);
    enc = FluxTextEncoders::random(opt_.files.text, randomT5Config(opt_.jointAttentionDim),
                                   randomClipConfig(opt_.pooledProjectionDim), o);
  } else {
    enc = FluxTextEncoders::load(opt_.files.text, o);
  }
  if (enc->t5Width() != opt_.jointAttentionDim || enc->pooledWidth() != opt_.pooledProjectionDim)
    throw LoadError("text encoders " + opt_.files.text.t5.string() + " (d_model " + std::to_string(enc->t5Width()) +
                    ") / " + opt_.files.text.clip.string() + " (hidden " + std::to_string(enc->pooledWidth()) +
                    ") do not fit the transformer's joint_attention_dim " + std::to_string(opt_.jointAttentionDim) +
                    " / pooled_projection_dim " + std::to_string(opt_.pooledProjectionDim));
  // T5 and CLIP load long after the run started (only when something must be encoded): files
  // replaced since then would fill the cache under the old files' key.
  if (textFilesStamp() != textFilesStamp_)
    throw LoadError("text encoders " + opt_.files.text.t5.string() + " / " + opt_.files.text.clip.string() +
                    " (or their tokenizers) changed since the run started; start the run again");
  text_ = std::move(enc);
}

at::Tensor FluxRunModels::encodeImages(const at::Tensor& pixels) {
  if (!vae_) throw Error("image encoding: the VAE was released");
  at::NoGradGuard noGrad;
  const auto dist = vae_->encode(pixels);                              // mean [B, C, H/f, W/f]
  return vae_->toTrainingLatents(dist.mean).to(at::kCPU, at::kFloat);  // (mean - shift) * scale
}

PromptEmbeddings FluxRunModels::encodeTexts(const std::vector<std::string>& texts) {
  if (textReleased_) throw Error("text encoding: the text encoders were released after caching");
  if (!text_) loadTextEncoders();
  auto e = text_->encode(texts);
  e.t5 = e.t5.to(at::kCPU, at::kFloat);          // [B, L, D]
  e.pooled = e.pooled.to(at::kCPU, at::kFloat);  // [B, P]
  return e;
}

at::Tensor FluxRunModels::decode(const at::Tensor& trainingLatents) {
  if (!vae_) throw Error("decoding: the VAE was released");
  at::NoGradGuard noGrad;
  const auto lat = vae_->fromTrainingLatents(trainingLatents.to(vae_->device(), vae_->dtype()));
  const auto img = vae_->decode(lat);  // [B, 3, h f, w f] in [-1, 1]
  return (img.to(at::kFloat) / 2 + 0.5).clamp(0, 1).cpu();
}

void FluxRunModels::releaseTextEncoders() {
  if (text_) text_->release();
  text_.reset();
  textReleased_ = true;
}

void FluxRunModels::releaseVae() { vae_.reset(); }

std::string FluxRunModels::describe() const {
  std::ostringstream s;
  const std::string where = opt_.device.str();
  if (opt_.randomWeights) {
    s << "random VAE, T5-XXL, CLIP-L at the transformer's widths";
  } else {
    s << "VAE " << opt_.files.vae.string() << ", T5 " << opt_.files.text.t5.string() << ", CLIP "
      << opt_.files.text.clip.string();
  }
  s << " on " << where << " (VAE " << (vae_ ? dtypeName(vae_->dtype()) : "released") << ", T5 "
    << dtypeName(opt_.t5Dtype) << ", CLIP " << dtypeName(opt_.clipDtype) << ")";
  return s.str();
}

}  // namespace strata::pipeline
