#include "families/flux2/Flux2Denoiser.h"

#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Transformer.h"

namespace fs = std::filesystem;

namespace strata::families {

diffusion::Denoiser flux2Denoiser(flux2::Flux2Transformer& model, const at::Device& device,
                                  flux2::Flux2GuidanceMode mode) {
  diffusion::Denoiser d;
  d.patchSize = 2;  // the codec's latents [B, C, h, w]; the transformer takes 2x2 patches as tokens
  flux2::Flux2Transformer* m = &model;
  d.applyLora = [m](const fs::path& lora, double multiplier) -> std::function<void()> {
    auto net = lora::loadLoraNetwork(*m, flux2::Flux2LoraRules(m->config()), lora);
    net->setMultiplier(multiplier);
    return [net] { net->detach(); };
  };
  d.wantsNegative = [mode](const diffusion::ImageRequest& r) { return flux2::runsNegativePass(mode, r.guidance); };
  d.sample = [m, device, mode](const at::Tensor& noise, const diffusion::TextEncoding& text,
                               const diffusion::TextEncoding& negative, const diffusion::ImageRequest& r) {
    const auto patches = flux2::patchifyLatents(noise);  // [B, 4C, h/2, w/2]
    const int64_t batch = noise.size(0), h = patches.size(2), w = patches.size(3);
    const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
    const auto ids = flux2::latentIds(h, w, longs);              // [h*w, 4]
    const auto packed = flux2::packLatents(patches).to(device);  // [B, h*w, 4C]
    const auto txt = text.tokens.to(device, m->dtype());         // [B, L, joint_attention_dim]
    const auto txtIds = flux2::textIds(txt.size(1), longs).unsqueeze(0).expand({batch, txt.size(1), 4});
    const auto sigmas = flux2::samplingSigmas(r.steps, h * w);
    const auto onStep = [&r](int64_t done, const at::Tensor&) {
      if (r.onStep) r.onStep(done, r.steps);
    };
    at::Tensor out;  // [B, h*w, C]
    if (flux2::runsNegativePass(mode, r.guidance)) {
      const auto neg = negative.tokens.to(device, m->dtype());
      const auto negIds = flux2::textIds(neg.size(1), longs).unsqueeze(0).expand({batch, neg.size(1), 4});
      out = flux2::samplePackedTrueCfg(*m, packed, ids, txt, txtIds, neg, negIds, r.guidance, sigmas, nullptr, onStep);
    } else {
      out = flux2::samplePacked(*m, packed, ids, txt, txtIds, r.guidance, sigmas, nullptr, onStep);
    }
    return flux2::unpatchifyLatents(flux2::unpackLatentsWithIds(out, ids));  // [B, C, 2h, 2w] training latents
  };
  return d;
}

}  // namespace strata::families
