#include "models/flux/FluxTransformer.h"

#include <tuple>

#include "common/Error.h"
#include "dit/DitOps.h"
#include "dit/UnitBuilder.h"
#include "models/flux/FluxLayout.h"

namespace strata::flux {

namespace {

using dit::clipHalf;
using dit::gated;
using dit::joinedTokens;
using dit::normModulate;
using dit::splitHeads;
using dit::UnitBuilder;

}  // namespace

// ---- double block --------------------------------------------------------------

FluxDoubleBlock::FluxDoubleBlock(const FluxConfig& cfg, const FluxBuildOptions& o)
    : heads_(cfg.numAttentionHeads), headDim_(cfg.attentionHeadDim) {
  UnitBuilder b(*this, fluxUnitLayout(FluxUnit::Double, cfg), o);
  norm1Linear = b.linear("norm1.linear");
  norm1ContextLinear = b.linear("norm1_context.linear");
  attn = b.doubleAttention(heads_);
  mlp = b.streamMlps("net.0.proj", "net.2");
}

nn::BlockIO FluxDoubleBlock::forward(const nn::BlockIO& io) {
  // img [B, Ni, D], txt [B, Nt, D], temb [B, D]
  const auto act = at::silu(io.temb);
  // Both modulations read act: with LoRA on both, one down matmul.
  const auto mods = nn::forwardSiblings({norm1Linear.get(), norm1ContextLinear.get()}, act);
  const auto imgMod = mods[0].chunk(6, 1);  // shift, scale, gate (attn), shift, scale, gate (mlp)
  const auto txtMod = mods[1].chunk(6, 1);

  const auto imgNorm = normModulate(io.img, imgMod[0], imgMod[1], FluxConfig::kNormEps);
  const auto txtNorm = normModulate(io.txt, txtMod[0], txtMod[1], FluxConfig::kNormEps);

  const auto [imgAttn, txtAttn] = attn.forward(imgNorm, txtNorm, io.ropeCos, io.ropeSin);

  nn::BlockIO out = io;
  auto img = gated(io.img, imgMod[2], imgAttn);
  // The MLPs' output Linears apply the GELU themselves, so its [B, N, 4D] output is not kept.
  img = gated(img, imgMod[5],
              mlp.ffOut->forwardGelu(mlp.ffIn->forward(normModulate(img, imgMod[3], imgMod[4], FluxConfig::kNormEps))));
  auto txt = gated(io.txt, txtMod[2], txtAttn);
  txt = gated(txt, txtMod[5],
              mlp.ffContextOut->forwardGelu(
                  mlp.ffContextIn->forward(normModulate(txt, txtMod[3], txtMod[4], FluxConfig::kNormEps))));
  out.img = img;
  out.txt = clipHalf(txt);
  return out;
}

// ---- single block --------------------------------------------------------------

FluxSingleBlock::FluxSingleBlock(const FluxConfig& cfg, const FluxBuildOptions& o)
    : heads_(cfg.numAttentionHeads), headDim_(cfg.attentionHeadDim) {
  UnitBuilder b(*this, fluxUnitLayout(FluxUnit::Single, cfg), o);
  normLinear = b.linear("norm.linear");
  projMlp = b.linear("proj_mlp");
  projOut = b.linear("proj_out");
  qkv = {b.linear("attn.to_q"), b.linear("attn.to_k"), b.linear("attn.to_v")};
  normQ = b.rmsNorm("attn.norm_q");
  normK = b.rmsNorm("attn.norm_k");
}

nn::BlockIO FluxSingleBlock::forward(const nn::BlockIO& io) {
  const int64_t nTxt = io.txt.size(1);
  const auto x = joinedTokens(io.txt, io.img);                          // [B, Nt+Ni, D]
  const auto mod = normLinear->forward(at::silu(io.temb)).chunk(3, 1);  // shift, scale, gate
  const auto xNorm = normModulate(x, mod[0], mod[1], FluxConfig::kNormEps);

  // q, k, v and proj_mlp read xNorm: their LoRA downs as one matmul.
  const auto proj = nn::forwardSiblings({qkv.q.get(), qkv.k.get(), qkv.v.get(), projMlp.get()}, xNorm);
  const auto& q = proj[0];
  const auto& k = proj[1];
  const auto& v = proj[2];
  const auto& mlpPre = proj[3];  // [B, N, mlp], before the GELU
  const auto query = normThenRotary(*normQ, splitHeads(q, heads_), io.ropeCos, io.ropeSin, 0);
  const auto key = normThenRotary(*normK, splitHeads(k, heads_), io.ropeCos, io.ropeSin, 0);
  const auto attn = jointAttention(query, key, splitHeads(v, heads_));  // [B, N, D]

  // proj_out over concat(attn, gelu(mlpPre)), without the concatenated copy; proj_out
  // applies the GELU, so its output is not kept for the backward.
  const auto y = clipHalf(gated(x, mod[2], projOut->forwardParts({attn, mlpPre}, /*geluPart=*/1)));
  nn::BlockIO out = io;
  out.txt = y.narrow(1, 0, nTxt);
  out.img = y.narrow(1, nTxt, y.size(1) - nTxt);
  return out;
}

// ---- the model -----------------------------------------------------------------

FluxTransformer::FluxTransformer(const FluxConfig& cfg, const FluxBuildOptions& o) : DitTransformer(cfg) {
  UnitBuilder stem(*this, fluxUnitLayout(FluxUnit::Stem, cfg_), o);
  xEmbedder = stem.linear("x_embedder");
  contextEmbedder = stem.linear("context_embedder");
  embedders = stem.scalarEmbedders("time_text_embed", cfg_.guidanceEmbeds);
  textLinear1 = stem.linear("time_text_embed.text_embedder.linear_1");
  textLinear2 = stem.linear("time_text_embed.text_embedder.linear_2");

  stemModules_ = {{"x_embedder", xEmbedder.ptr()},
                  {"context_embedder", contextEmbedder.ptr()},
                  {"time_text_embed", stem.container("time_text_embed")}};
  buildBlocks(
      cfg_.numLayers, cfg_.numSingleLayers, o,
      [this](const FluxBuildOptions& bo) { return std::make_shared<FluxDoubleBlock>(cfg_, bo); },
      [this](const FluxBuildOptions& bo) { return std::make_shared<FluxSingleBlock>(cfg_, bo); });

  UnitBuilder head(*this, fluxUnitLayout(FluxUnit::Head, cfg_), o);
  normOutLinear = head.linear("norm_out.linear");
  projOut = head.linear("proj_out");
  headModules_ = {{"norm_out", head.container("norm_out")}, {"proj_out", projOut.ptr()}};
}

nn::BlockIO FluxTransformer::stem(const FluxInputs& in) {
  if (!in.img.defined() || !in.txt.defined() || !in.pooled.defined() || !in.timestep.defined() ||
      !in.imgIds.defined() || !in.txtIds.defined())
    throw Error("FluxTransformer: img, txt, pooled, timestep, imgIds and txtIds are required");
  if (cfg_.guidanceEmbeds && !in.guidance.defined())
    throw Error("FluxTransformer: this model embeds guidance (guidance_embeds) and no guidance was given");
  const auto dt = dtype();
  const int64_t batch = in.img.size(0);
  nn::BlockIO io;
  io.img = xEmbedder->forward(in.img.to(dt));        // [B, Ni, D]
  io.txt = contextEmbedder->forward(in.txt.to(dt));  // [B, Nt, D]
  // Conditioning: timestep and guidance x1000 and their sinusoids in float32.
  const auto temb = embedders.forward(in.timestep, in.guidance, batch, FluxConfig::kTimestepChannels, dt);
  io.temb = temb + textLinear2->forward(at::silu(textLinear1->forward(in.pooled.to(dt))));  // [B, D]
  std::tie(io.ropeCos, io.ropeSin) =
      dit::jointRotary(in.txtIds, in.imgIds, cfg_.axesDimsRope, cfg_.ropeTheta);  // [Nt+Ni, Dh]
  return io;
}

at::Tensor FluxTransformer::head(const nn::BlockIO& io) {
  const auto mod = normOutLinear->forward(at::silu(io.temb)).chunk(2, 1);               // scale, shift
  return projOut->forward(normModulate(io.img, mod[1], mod[0], FluxConfig::kNormEps));  // [B, Ni, out_channels]
}

}  // namespace strata::flux
