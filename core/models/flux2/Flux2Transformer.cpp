#include "models/flux2/Flux2Transformer.h"

#include <tuple>

#include "common/Error.h"
#include "dit/DitOps.h"
#include "dit/UnitBuilder.h"
#include "models/flux2/Flux2Layout.h"

namespace strata::flux2 {

namespace {

using M = Flux2Modulation;

using dit::clipHalf;
using dit::gated;
using dit::joinedTokens;
using dit::normModulate;
using dit::normThenRotary;
using dit::splitHeads;
using dit::swiglu;
using dit::UnitBuilder;

// The `count` (shift, scale, gate) modulations of one slice of BlockIO::temb:
// temb [B, 16 D] -> 3 * count tensors [B, D].
std::vector<at::Tensor> modulationOf(const at::Tensor& temb, int64_t hidden, int64_t offset, int64_t count) {
  if (temb.dim() != 2 || temb.size(1) != M::kWidth * hidden)
    throw Error("Flux2Transformer: BlockIO::temb must be [B, " + std::to_string(M::kWidth * hidden) +
                "] (embedding + shared modulation), got last dim " + std::to_string(temb.size(-1)));
  return temb.narrow(1, offset * hidden, 3 * count * hidden).chunk(3 * count, 1);
}

}  // namespace

// ---- double block --------------------------------------------------------------

Flux2DoubleBlock::Flux2DoubleBlock(const Flux2Config& cfg, const Flux2BuildOptions& o)
    : heads_(cfg.numAttentionHeads), eps_(cfg.eps) {
  UnitBuilder b(*this, flux2UnitLayout(FluxUnit::Double, cfg), o, cfg.eps);
  attn = b.doubleAttention(heads_);
  mlp = b.streamMlps("linear_in", "linear_out");
}

nn::BlockIO Flux2DoubleBlock::forward(const nn::BlockIO& io) {
  // img [B, Ni, D], txt [B, Nt, D], temb [B, 16 D]
  const int64_t hidden = io.img.size(2);
  // shift, scale, gate (attention), shift, scale, gate (MLP): each [B, D]
  const auto imgMod = modulationOf(io.temb, hidden, M::kDoubleImg, 2);
  const auto txtMod = modulationOf(io.temb, hidden, M::kDoubleTxt, 2);

  const auto imgNorm = normModulate(io.img, imgMod[0], imgMod[1], eps_);
  const auto txtNorm = normModulate(io.txt, txtMod[0], txtMod[1], eps_);
  const auto [imgAttn, txtAttn] = attn.forward(imgNorm, txtNorm, io.ropeCos, io.ropeSin);

  auto img = gated(io.img, imgMod[2], imgAttn);
  img = gated(img, imgMod[5],
              mlp.ffOut->forward(swiglu(mlp.ffIn->forward(normModulate(img, imgMod[3], imgMod[4], eps_)))));
  auto txt = gated(io.txt, txtMod[2], txtAttn);
  txt =
      gated(txt, txtMod[5],
            mlp.ffContextOut->forward(swiglu(mlp.ffContextIn->forward(normModulate(txt, txtMod[3], txtMod[4], eps_)))));
  nn::BlockIO out = io;
  out.img = img;
  out.txt = clipHalf(txt);
  return out;
}

// ---- single block --------------------------------------------------------------

Flux2SingleBlock::Flux2SingleBlock(const Flux2Config& cfg, const Flux2BuildOptions& o)
    : heads_(cfg.numAttentionHeads), hidden_(cfg.hiddenSize()), mlpHidden_(cfg.mlpHiddenSize()), eps_(cfg.eps) {
  UnitBuilder b(*this, flux2UnitLayout(FluxUnit::Single, cfg), o, cfg.eps);
  toQkvMlp = b.linear("attn.to_qkv_mlp_proj");
  normQ = b.rmsNorm("attn.norm_q");
  normK = b.rmsNorm("attn.norm_k");
  toOut = b.linear("attn.to_out");
}

nn::BlockIO Flux2SingleBlock::forward(const nn::BlockIO& io) {
  const int64_t nTxt = io.txt.size(1);
  const auto x = joinedTokens(io.txt, io.img);                     // [B, Nt + Ni, D]
  const auto mod = modulationOf(io.temb, hidden_, M::kSingle, 1);  // shift, scale, gate
  const auto xNorm = normModulate(x, mod[0], mod[1], eps_);

  const auto h = toQkvMlp->forward(xNorm);  // [B, N, 3 D + 2 M]
  const auto parts = dit::splitAlong(h, -1, {hidden_, hidden_, hidden_, 2 * mlpHidden_});
  const auto& q = parts[0];  // [B, N, D] each, views of h
  const auto& k = parts[1];
  const auto& v = parts[2];
  const auto mlp = swiglu(parts[3]);  // [B, N, M]
  const auto query = normThenRotary(*normQ, splitHeads(q, heads_), io.ropeCos, io.ropeSin, 0);
  const auto key = normThenRotary(*normK, splitHeads(k, heads_), io.ropeCos, io.ropeSin, 0);
  const auto attn = dit::jointAttention(query, key, splitHeads(v, heads_));  // [B, N, D]

  // to_out over concat(attention, mlp), without the concatenated copy
  const auto y = clipHalf(gated(x, mod[2], toOut->forwardParts({attn, mlp})));
  nn::BlockIO out = io;
  out.txt = y.narrow(1, 0, nTxt);
  out.img = y.narrow(1, nTxt, y.size(1) - nTxt);
  return out;
}

// ---- the model -----------------------------------------------------------------

Flux2Transformer::Flux2Transformer(const Flux2Config& cfg, const Flux2BuildOptions& o) : DitTransformer(cfg) {
  UnitBuilder stem(*this, flux2UnitLayout(FluxUnit::Stem, cfg_), o, cfg_.eps);
  embedders = stem.scalarEmbedders("time_guidance_embed", cfg_.guidanceEmbeds);
  modDoubleImg = stem.linear("double_stream_modulation_img.linear");
  modDoubleTxt = stem.linear("double_stream_modulation_txt.linear");
  modSingle = stem.linear("single_stream_modulation.linear");
  xEmbedder = stem.linear("x_embedder");
  contextEmbedder = stem.linear("context_embedder");
  stemModules_ = {{"time_guidance_embed", stem.container("time_guidance_embed")},
                  {"double_stream_modulation_img", stem.container("double_stream_modulation_img")},
                  {"double_stream_modulation_txt", stem.container("double_stream_modulation_txt")},
                  {"single_stream_modulation", stem.container("single_stream_modulation")},
                  {"x_embedder", xEmbedder.ptr()},
                  {"context_embedder", contextEmbedder.ptr()}};

  buildBlocks(
      cfg_.numLayers, cfg_.numSingleLayers, o,
      [this](const Flux2BuildOptions& bo) { return std::make_shared<Flux2DoubleBlock>(cfg_, bo); },
      [this](const Flux2BuildOptions& bo) { return std::make_shared<Flux2SingleBlock>(cfg_, bo); });

  UnitBuilder head(*this, flux2UnitLayout(FluxUnit::Head, cfg_), o, cfg_.eps);
  normOutLinear = head.linear("norm_out.linear");
  projOut = head.linear("proj_out");
  headModules_ = {{"norm_out", head.container("norm_out")}, {"proj_out", projOut.ptr()}};
}

nn::BlockIO Flux2Transformer::stem(const Flux2Inputs& in) {
  if (!in.img.defined() || !in.txt.defined() || !in.timestep.defined() || !in.imgIds.defined() || !in.txtIds.defined())
    throw Error("Flux2Transformer: img, txt, timestep, imgIds and txtIds are required");
  if (cfg_.guidanceEmbeds && !in.guidance.defined())
    throw Error("Flux2Transformer: this model embeds guidance (guidance_embeds) and no guidance was given");
  if (in.img.dim() != 3 || in.img.size(2) != cfg_.inChannels)
    throw Error("Flux2Transformer: img must be [B, N, " + std::to_string(cfg_.inChannels) + "] (in_channels)");
  if (in.txt.dim() != 3 || in.txt.size(2) != cfg_.jointAttentionDim)
    throw Error("Flux2Transformer: txt must be [B, N, " + std::to_string(cfg_.jointAttentionDim) +
                "] (joint_attention_dim)");
  const auto dt = dtype();
  const int64_t batch = in.img.size(0);
  const int64_t channels = cfg_.timestepGuidanceChannels;
  // Conditioning: timestep (and guidance) x1000, sinusoids in float32 (as FLUX.1 keeps them).
  const auto temb = embedders.forward(in.timestep, in.guidance, batch, channels, dt);  // [B, D]
  // The shared modulation, once per forward: [B, D] -> [B, 16 D] (layout: Flux2Modulation).
  // The three modulation Linears read the same act: with LoRA on them, one down matmul.
  const auto act = at::silu(temb);
  const auto mods = nn::forwardSiblings({modDoubleImg.get(), modDoubleTxt.get(), modSingle.get()}, act);
  nn::BlockIO io;
  io.temb = at::cat({temb, mods[0], mods[1], mods[2]}, 1);
  io.img = xEmbedder->forward(in.img.to(dt));        // [B, Ni, D]
  io.txt = contextEmbedder->forward(in.txt.to(dt));  // [B, Nt, D]
  std::tie(io.ropeCos, io.ropeSin) =
      dit::jointRotary(in.txtIds, in.imgIds, cfg_.axesDimsRope, cfg_.ropeTheta);  // [Nt + Ni, Dh]
  return io;
}

at::Tensor Flux2Transformer::head(const nn::BlockIO& io) {
  const int64_t hidden = cfg_.hiddenSize();
  const auto emb = io.temb.narrow(1, M::kEmbedding * hidden, hidden);       // [B, D]
  const auto mod = normOutLinear->forward(at::silu(emb)).chunk(2, 1);       // scale, shift
  return projOut->forward(normModulate(io.img, mod[1], mod[0], cfg_.eps));  // [B, Ni, out_channels]
}

}  // namespace strata::flux2
