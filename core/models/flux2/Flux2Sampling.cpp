#include "models/flux2/Flux2Sampling.h"

#include "common/Error.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Transformer.h"

namespace strata::flux2 {

namespace {

std::string dimsText(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

at::Tensor packLatents(const at::Tensor& patchified) {
  if (patchified.dim() != 4) throw Error("packLatents: expected [B, C, h, w], got " + dimsText(patchified));
  const int64_t b = patchified.size(0), c = patchified.size(1);
  return patchified.reshape({b, c, -1}).permute({0, 2, 1}).contiguous();  // [B, h*w, C]
}

at::Tensor unpackLatentsWithIds(const at::Tensor& tokens, const at::Tensor& ids) {
  if (tokens.dim() != 3) throw Error("unpackLatentsWithIds: expected tokens [B, N, C], got " + dimsText(tokens));
  const auto batchIds = ids.dim() == 2 ? ids.unsqueeze(0).expand({tokens.size(0), ids.size(0), ids.size(1)}) : ids;
  if (batchIds.dim() != 3 || batchIds.size(0) != tokens.size(0) || batchIds.size(1) != tokens.size(1) ||
      batchIds.size(2) < 3)
    throw Error("unpackLatentsWithIds: ids " + dimsText(ids) + " do not fit tokens " + dimsText(tokens));
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < tokens.size(0); ++i) {
    const auto pos = batchIds[i].to(at::kLong).cpu();  // [N, 4]
    const auto row = pos.select(1, 1);
    const auto col = pos.select(1, 2);
    const int64_t h = row.max().item<int64_t>() + 1;
    const int64_t w = col.max().item<int64_t>() + 1;
    const int64_t ch = tokens.size(2);
    const auto flat = (row * w + col).to(tokens.device());
    auto grid = at::zeros({h * w, ch}, tokens.options());
    grid.index_copy_(0, flat, tokens[i]);                     // token n to cell (row, col)
    out.push_back(grid.view({h, w, ch}).permute({2, 0, 1}));  // [C, h, w]
  }
  return at::stack(out, 0);  // [B, C, h, w]
}

at::Tensor latentIds(int64_t height, int64_t width, const at::TensorOptions& options) {
  auto ids = at::zeros({height, width, 4}, options);
  ids.select(2, 1).copy_(at::arange(height, options).unsqueeze(1).expand({height, width}));
  ids.select(2, 2).copy_(at::arange(width, options).unsqueeze(0).expand({height, width}));
  return ids.reshape({height * width, 4});  // [h*w, 4]
}

at::Tensor textIds(int64_t tokens, const at::TensorOptions& options) {
  auto ids = at::zeros({tokens, 4}, options);
  ids.select(1, 3).copy_(at::arange(tokens, options));
  return ids;  // [tokens, 4]
}

at::Tensor samplingSigmas(int64_t steps, int64_t imageSeqLen) {
  return dit::FlowSchedule::empirical().sigmas(steps, imageSeqLen);
}

at::Tensor samplePacked(Flux2Transformer& model, const at::Tensor& noise, const at::Tensor& imgIds,
                        const at::Tensor& txt, const at::Tensor& txtIds, double guidance, const at::Tensor& sigmas,
                        nn::BlockRunner* runner, const Flux2StepCallback& onStep) {
  if (noise.dim() != 3) throw Error("Flux2 samplePacked: noise must be packed [B, N, C], got " + dimsText(noise));
  Flux2Inputs in;
  in.txt = txt;
  in.imgIds = imgIds;
  in.txtIds = txtIds;
  return dit::sampleModel(model, in, noise, guidance, sigmas, runner, [&](int64_t done, int64_t, const at::Tensor& x) {
    if (onStep) onStep(done, x);
  });
}

Flux2GuidanceMode guidanceModeOf(const Flux2Config& cfg, bool distilled) {
  if (cfg.guidanceEmbeds) return Flux2GuidanceMode::Embedded;
  return distilled ? Flux2GuidanceMode::None : Flux2GuidanceMode::TrueCfg;
}

const char* toString(Flux2GuidanceMode mode) {
  switch (mode) {
    case Flux2GuidanceMode::Embedded:
      return "guidance embedding";
    case Flux2GuidanceMode::TrueCfg:
      return "true CFG against the negative prompt";
    case Flux2GuidanceMode::None:
      return "none (step-distilled)";
  }
  return "?";
}

at::Tensor samplePackedTrueCfg(Flux2Transformer& model, const at::Tensor& noise, const at::Tensor& imgIds,
                               const at::Tensor& txt, const at::Tensor& txtIds, const at::Tensor& negTxt,
                               const at::Tensor& negTxtIds, double scale, const at::Tensor& sigmas,
                               nn::BlockRunner* runner, const Flux2StepCallback& onStep) {
  if (noise.dim() != 3)
    throw Error("Flux2 samplePackedTrueCfg: noise must be packed [B, N, C], got " + dimsText(noise));
  if (!negTxt.defined() || negTxt.dim() != 3 || negTxt.size(0) != txt.size(0))
    throw Error("Flux2 samplePackedTrueCfg: the negative prompt's states must be [B, N, D] with the prompts' B");
  Flux2Inputs cond, uncond;
  cond.txt = txt;
  cond.txtIds = txtIds;
  uncond.txt = negTxt;
  uncond.txtIds = negTxtIds;
  for (auto* in : {&cond, &uncond}) in->imgIds = imgIds;  // no guidance input: the model has no embedding for it
  // Two passes, as the pipeline runs them (not one doubled batch): the same
  // numbers whatever the two prompts' lengths.
  const auto velocity = [&](const at::Tensor& x, const at::Tensor& timestep) {
    cond.img = uncond.img = x;
    cond.timestep = uncond.timestep = timestep;
    const auto v = model.forward(cond, runner);
    const auto vNeg = model.forward(uncond, runner);
    return vNeg + scale * (v - vNeg);
  };
  return dit::sampleEuler(noise, sigmas, velocity, [&](int64_t done, int64_t, const at::Tensor& x) {
    if (onStep) onStep(done, x);
  });
}

at::Tensor sample(Flux2Transformer& model, const at::Tensor& noise, const at::Tensor& txt, double guidance,
                  int64_t steps, nn::BlockRunner* runner) {
  if (noise.dim() != 4) throw Error("Flux2 sample: noise must be patchified [B, 4C, h, w], got " + dimsText(noise));
  const auto ids = latentIds(noise.size(2), noise.size(3), noise.options().dtype(at::kLong));
  const auto packed = packLatents(noise);
  const auto sigmas = samplingSigmas(steps, packed.size(1));
  const auto out = samplePacked(model, packed, ids, txt, textIds(txt.size(1), txt.options().dtype(at::kLong)), guidance,
                                sigmas, runner);
  return unpackLatentsWithIds(out, ids);
}

}  // namespace strata::flux2
