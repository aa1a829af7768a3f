#include "models/flux/FluxSampling.h"

#include <torch/autograd.h>

#include <cmath>

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

double shiftMu(int64_t imageTokens, const ShiftParams& p) {
  const double m = (p.maxShift - p.baseShift) / static_cast<double>(p.maxSeqLen - p.baseSeqLen);
  const double b = p.baseShift - m * static_cast<double>(p.baseSeqLen);
  return static_cast<double>(imageTokens) * m + b;
}

double shiftSigma(double sigma, double mu) {
  if (sigma <= 0.0) return 0.0;
  const double e = std::exp(mu);
  return e / (e + 1.0 / sigma - 1.0);
}

at::Tensor shiftSigmas(const at::Tensor& sigmas, double mu) {
  const double e = std::exp(mu);
  const auto shifted = e / (e + (1.0 / sigmas - 1.0));
  return at::where(sigmas > 0, shifted, at::zeros_like(sigmas));
}

at::Tensor samplingSigmas(int64_t steps, double mu) {
  if (steps < 1) throw Error("samplingSigmas: steps must be >= 1, got " + std::to_string(steps));
  // linspace in double, stored as float32, shifted in float32 (as the reference scheduler does).
  const auto base = at::linspace(1.0, 1.0 / static_cast<double>(steps), steps, at::kDouble).to(at::kFloat);
  return at::cat({shiftSigmas(base, mu), at::zeros({1}, at::kFloat)});  // [steps + 1]
}

at::Tensor eulerStep(const at::Tensor& x, const at::Tensor& velocity, const at::Tensor& sigma,
                     const at::Tensor& sigmaNext) {
  const auto dt = (sigmaNext.to(at::kFloat) - sigma.to(at::kFloat)).to(x.device());
  return (x.to(at::kFloat) + dt * velocity.to(at::kFloat)).to(velocity.scalar_type());
}

at::Tensor samplePacked(FluxTransformer& model, const at::Tensor& noise, const at::Tensor& imgIds,
                        const at::Tensor& txt, const at::Tensor& txtIds, const at::Tensor& pooled, double guidance,
                        const at::Tensor& sigmas, nn::BlockRunner* runner, const SampleProgress& onStep) {
  at::NoGradGuard noGrad;
  const int64_t batch = noise.size(0);
  const auto floatOnDevice = noise.options().dtype(at::kFloat);
  const auto sig = sigmas.to(at::kFloat).cpu();
  FluxInputs in;
  in.txt = txt;
  in.pooled = pooled;
  in.imgIds = imgIds;
  in.txtIds = txtIds;
  in.guidance = at::full({batch}, guidance, floatOnDevice);
  at::Tensor x = noise.to(at::kFloat);
  for (int64_t i = 0; i + 1 < sig.size(0); ++i) {
    // timestep = (sigma * 1000) / 1000 in float32, as the reference pipeline feeds it.
    const auto t = (sig[i] * 1000) / 1000;
    in.timestep = t.to(noise.device()).expand({batch}).contiguous();
    in.img = x;
    const auto v = model.forward(in, runner);  // [B, N, C]
    x = eulerStep(x, v.to(at::kFloat), sig[i], sig[i + 1]);
    if (onStep) onStep(i + 1, sig.size(0) - 1);
  }
  return x;
}

at::Tensor sample(FluxTransformer& model, const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& pooled,
                  double guidance, int64_t steps, nn::BlockRunner* runner) {
  const int64_t h = noise.size(2), w = noise.size(3);
  const auto packed = packLatents(noise);
  const auto sigmas = samplingSigmas(steps, shiftMu(packed.size(1)));
  const auto opts = noise.options().dtype(at::kFloat);
  const auto out = samplePacked(model, packed, imageIds(h, w, opts), txt, textIds(txt.size(1), opts), pooled, guidance,
                                sigmas, runner);
  return unpackLatents(out, h, w);
}

}  // namespace strata::flux
