#pragma once
// FLUX.2's VAE (models/vae's AutoencoderKL built as AutoencoderKLFlux2) as the
// image path's latent codec. Its normalisation is Flux2Pipeline's: the posterior's
// mode patchified 2x2 into channels, normalised by the batch norm's running
// statistics, (patchify(mode) - mean) / sqrt(var + eps). The codec hands the
// result back unpatchified, [B, C, H / f, W / f] (32 x H/8 x W/8 for the real VAE),
// as FLUX.1's codec does: the transformer's side cuts 2x2 patches into tokens
// itself (the training step, Flux2Denoiser), and the patchify is a permutation,
// so the numbers are the pipeline's. decode() is the inverse, then the VAE's
// decoder, then the pipeline's (x / 2 + 0.5).clamp(0, 1).
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "diffusion/LatentCodec.h"

namespace strata::vae {
class AutoencoderKL;
class VaeBatchNormImpl;
}  // namespace strata::vae

namespace strata::families {

class Flux2VaeCodec final : public diffusion::LatentCodec {
 public:
  // `vae` loaded or built as an AutoencoderKLFlux2 with a square patch (its
  // parameters are frozen here); throws Error otherwise. `weights` names its
  // weights (content stamp, dtype); identity() adds the normalisation: the patch,
  // eps and a digest of the statistics' values.
  Flux2VaeCodec(std::shared_ptr<vae::AutoencoderKL> vae, const std::string& weights);
  ~Flux2VaeCodec() override;

  at::Tensor encode(const at::Tensor& pixels) override;
  at::Tensor decode(const at::Tensor& latents) override;
  // raw: the VAE's latents [B, C, H, W] (encode's mode) <-> training latents [B, C, H, W] (H, W even).
  at::Tensor normalize(const at::Tensor& raw) const override;
  at::Tensor denormalize(const at::Tensor& latents) const override;
  const std::string& identity() const override { return identity_; }
  int64_t latentChannels() const override { return channels_; }  // the VAE's (32 for FLUX.2)
  int64_t downscaleFactor() const override { return downscale_; }
  void release() override { vae_.reset(); }

 private:
  at::Tensor patchify(const at::Tensor& x) const;
  at::Tensor unpatchify(const at::Tensor& x) const;

  std::shared_ptr<vae::AutoencoderKL> vae_;
  std::string identity_;
  int64_t channels_ = 0;
  int64_t downscale_ = 16;
  // A CPU copy of the VAE's batch norm (its statistics, float32), so normalize()
  // works after release().
  std::array<int64_t, 2> patch_{2, 2};
  std::shared_ptr<vae::VaeBatchNormImpl> stats_;
};

}  // namespace strata::families
