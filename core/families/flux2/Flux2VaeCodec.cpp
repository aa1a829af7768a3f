#include "families/flux2/Flux2VaeCodec.h"

#include <torch/autograd.h>

#include <iomanip>
#include <sstream>

#include "common/Error.h"
#include "dit/LatentPatch.h"
#include "models/vae/AutoencoderKL.h"

namespace strata::families {

namespace {

// FNV-1a over the float32 values: a cache key changes when any statistic does.
uint64_t digestOf(const at::Tensor& t, uint64_t h = 1469598103934665603ULL) {
  const auto c = t.to(at::kCPU, at::kFloat).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
  for (size_t i = 0; i < static_cast<size_t>(c.numel()) * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

Flux2VaeCodec::Flux2VaeCodec(std::shared_ptr<vae::AutoencoderKL> vae, const std::string& weights)
    : vae_(std::move(vae)) {
  if (!vae_) throw Error("Flux2VaeCodec: no VAE");
  const auto& c = vae_->config();
  if (!c.batchNormLatents() || !vae_->bn)
    throw Error("Flux2VaeCodec: " + weights + " is an " + std::string(vae::toString(c.cls)) +
                ", not FLUX.2's AutoencoderKLFlux2 (no batch-norm statistics)");
  if (c.patchSize[0] != c.patchSize[1])
    throw Error("Flux2VaeCodec: " + weights + " has a " + std::to_string(c.patchSize[0]) + "x" +
                std::to_string(c.patchSize[1]) + " patch; the image path needs a square one");
  for (auto& p : vae_->parameters()) p.set_requires_grad(false);
  channels_ = c.latentChannels;  // unpatchified: the transformer's side takes 2x2 patches
  downscale_ = c.downscaleFactor();
  patch_ = c.patchSize;
  stats_ = std::make_shared<vae::VaeBatchNormImpl>(c.batchNormChannels(), c.batchNormEps, at::Device(at::kCPU));
  {
    at::NoGradGuard noGrad;
    stats_->runningMean.copy_(vae_->bn->runningMean);
    stats_->runningVar.copy_(vae_->bn->runningVar);
  }
  const auto& mean = stats_->runningMean;
  const auto& var = stats_->runningVar;
  std::ostringstream id;
  id << weights << "; training latents (patchify " << patch_[0] << "x" << patch_[1]
     << "(mode) - bn.running_mean) / sqrt(bn.running_var + " << std::setprecision(17) << c.batchNormEps
     << "), statistics " << std::hex << std::setw(16) << std::setfill('0') << digestOf(var, digestOf(mean));
  identity_ = id.str();
}

Flux2VaeCodec::~Flux2VaeCodec() = default;

at::Tensor Flux2VaeCodec::patchify(const at::Tensor& x) const { return dit::patchifyLatents(x, patch_[0], patch_[1]); }
at::Tensor Flux2VaeCodec::unpatchify(const at::Tensor& x) const {
  return dit::unpatchifyLatents(x, patch_[0], patch_[1]);
}

at::Tensor Flux2VaeCodec::encode(const at::Tensor& pixels) {
  if (!vae_) throw Error("image encoding: the VAE was released");
  at::NoGradGuard noGrad;
  const auto dist = vae_->encode(pixels);                                          // mean (the mode) [B, C, H/f, W/f]
  return unpatchify(vae_->toTrainingLatents(dist.mean)).to(at::kCPU, at::kFloat);  // [B, C, H/f, W/f]
}

at::Tensor Flux2VaeCodec::decode(const at::Tensor& latents) {
  if (!vae_) throw Error("decoding: the VAE was released");
  at::NoGradGuard noGrad;
  const auto raw = vae_->fromTrainingLatents(patchify(latents.to(vae_->device(), at::kFloat)));  // [B, C, h, w]
  const auto img = vae_->decode(raw);  // [B, 3, H, W] in [-1, 1]
  return (img.to(at::kFloat) / 2 + 0.5).clamp(0, 1).cpu();
}

// The VAE's own steps (AutoencoderKL::toTrainingLatents / fromTrainingLatents)
// with the copy of its batch norm kept here.
at::Tensor Flux2VaeCodec::normalize(const at::Tensor& raw) const {
  return unpatchify(stats_->normalize(patchify(raw)));  // [B, C, H, W]
}

at::Tensor Flux2VaeCodec::denormalize(const at::Tensor& latents) const {
  return unpatchify(stats_->unnormalize(patchify(latents)));  // [B, C, h, w]
}

}  // namespace strata::families
