#include "families/flux/FluxVaeCodec.h"

#include <torch/autograd.h>

#include "common/Error.h"
#include "models/vae/AutoencoderKL.h"

namespace strata::families {

FluxVaeCodec::FluxVaeCodec(std::shared_ptr<vae::AutoencoderKL> vae, std::string identity)
    : vae_(std::move(vae)), identity_(std::move(identity)) {
  if (!vae_) throw Error("FluxVaeCodec: no VAE");
  for (auto& p : vae_->parameters()) p.set_requires_grad(false);
  const auto& c = vae_->config();
  if (c.batchNormLatents())
    throw Error("FluxVaeCodec: " + identity_ + " is FLUX.2's VAE (" + vae::toString(c.cls) +
                ", batch-norm latents), not FLUX.1's");
  channels_ = c.latentChannels;
  downscale_ = c.downscaleFactor();
  scale_ = c.scalingFactor;
  shift_ = c.shiftFactor;
}

FluxVaeCodec::~FluxVaeCodec() = default;

at::Tensor FluxVaeCodec::encode(const at::Tensor& pixels) {
  if (!vae_) throw Error("image encoding: the VAE was released");
  at::NoGradGuard noGrad;
  const auto dist = vae_->encode(pixels);                              // mean [B, C, H/f, W/f]
  return vae_->toTrainingLatents(dist.mean).to(at::kCPU, at::kFloat);  // (mean - shift) * scale
}

at::Tensor FluxVaeCodec::decode(const at::Tensor& latents) {
  if (!vae_) throw Error("decoding: the VAE was released");
  at::NoGradGuard noGrad;
  const auto lat = vae_->fromTrainingLatents(latents.to(vae_->device(), vae_->dtype()));
  const auto img = vae_->decode(lat);  // [B, 3, h f, w f] in [-1, 1]
  return (img.to(at::kFloat) / 2 + 0.5).clamp(0, 1).cpu();
}

// The VAE's own formulas (AutoencoderKL::toTrainingLatents / fromTrainingLatents).
at::Tensor FluxVaeCodec::normalize(const at::Tensor& raw) const { return (raw - shift_) * scale_; }
at::Tensor FluxVaeCodec::denormalize(const at::Tensor& latents) const { return latents / scale_ + shift_; }

}  // namespace strata::families
