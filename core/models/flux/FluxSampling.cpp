#include "models/flux/FluxSampling.h"

#include "common/Error.h"
#include "models/flux/FluxTransformer.h"

namespace strata::flux {

at::Tensor packLatents(const at::Tensor& latents) {
  if (latents.dim() != 4 || latents.size(2) % 2 != 0 || latents.size(3) % 2 != 0)
    throw Error("packLatents: expected [B, C, H, W] with even H and W, got " + std::to_string(latents.dim()) + "-d");
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2), w = latents.size(3);
  return latents.view({b, c, h / 2, 2, w / 2, 2})
      .permute({0, 2, 4, 1, 3, 5})
      .reshape({b, (h / 2) * (w / 2), c * 4});  // [B, HW/4, 4C]
}

at::Tensor unpackLatents(const at::Tensor& packed, int64_t height, int64_t width) {
  if (packed.dim() != 3 || height % 2 != 0 || width % 2 != 0 || packed.size(1) != (height / 2) * (width / 2) ||
      packed.size(2) % 4 != 0)
    throw Error("unpackLatents: packed tokens do not match a " + std::to_string(height) + "x" + std::to_string(width) +
                " latent");
  const int64_t b = packed.size(0), c = packed.size(2) / 4;
  return packed.view({b, height / 2, width / 2, c, 2, 2})
      .permute({0, 3, 1, 4, 2, 5})
      .reshape({b, c, height, width});  // [B, C, H, W]
}

at::Tensor imageIds(int64_t latentHeight, int64_t latentWidth, const at::TensorOptions& options) {
  const int64_t h = latentHeight / 2, w = latentWidth / 2;
  auto ids = at::zeros({h, w, 3}, options);
  ids.select(2, 1).copy_(at::arange(h, options).unsqueeze(1).expand({h, w}));
  ids.select(2, 2).copy_(at::arange(w, options).unsqueeze(0).expand({h, w}));
  return ids.reshape({h * w, 3});  // [HW/4, 3]
}

at::Tensor textIds(int64_t tokens, const at::TensorOptions& options) { return at::zeros({tokens, 3}, options); }

at::Tensor samplePacked(FluxTransformer& model, const at::Tensor& noise, const at::Tensor& imgIds,
                        const at::Tensor& txt, const at::Tensor& txtIds, const at::Tensor& pooled, double guidance,
                        const at::Tensor& sigmas, nn::BlockRunner* runner, const SampleProgress& onStep) {
  FluxInputs in;
  in.txt = txt;
  in.pooled = pooled;
  in.imgIds = imgIds;
  in.txtIds = txtIds;
  return dit::sampleModel(model, in, noise, guidance, sigmas, runner,
                          [&](int64_t done, int64_t total, const at::Tensor&) {
                            if (onStep) onStep(done, total);
                          });
}

at::Tensor sample(FluxTransformer& model, const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& pooled,
                  double guidance, int64_t steps, nn::BlockRunner* runner) {
  const int64_t h = noise.size(2), w = noise.size(3);
  const auto packed = packLatents(noise);
  const auto sigmas = dit::FlowSchedule::imageTokenShift().sigmas(steps, packed.size(1));
  const auto opts = noise.options().dtype(at::kFloat);
  const auto out = samplePacked(model, packed, imageIds(h, w, opts), txt, textIds(txt.size(1), opts), pooled, guidance,
                                sigmas, runner);
  return unpackLatents(out, h, w);
}

}  // namespace strata::flux
