#pragma once
// FLUX.1's VAE (models/vae's AutoencoderKL) as the image path's latent codec:
// training latents are (mean - shift_factor) * scaling_factor of its encoding
// (FLUX.1: 0.1159, 0.3611), the VAE's config says which. The model stays a
// network; this adapter is the family's.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "diffusion/LatentCodec.h"

namespace strata::vae {
class AutoencoderKL;
}

namespace strata::families {

class FluxVaeCodec final : public diffusion::LatentCodec {
 public:
  // `vae` loaded or built (its parameters are frozen here); `identity` names its
  // weights in cache keys.
  FluxVaeCodec(std::shared_ptr<vae::AutoencoderKL> vae, std::string identity);
  ~FluxVaeCodec() override;

  at::Tensor encode(const at::Tensor& pixels) override;
  at::Tensor decode(const at::Tensor& latents) override;
  at::Tensor normalize(const at::Tensor& raw) const override;
  at::Tensor denormalize(const at::Tensor& latents) const override;
  const std::string& identity() const override { return identity_; }
  int64_t latentChannels() const override { return channels_; }
  int64_t downscaleFactor() const override { return downscale_; }
  void release() override { vae_.reset(); }

 private:
  std::shared_ptr<vae::AutoencoderKL> vae_;
  std::string identity_;
  int64_t channels_ = 0;
  int64_t downscale_ = 8;
  double scale_ = 1, shift_ = 0;  // kept: normalize() works after release()
};

}  // namespace strata::families
