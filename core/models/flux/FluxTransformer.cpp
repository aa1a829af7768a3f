#include "models/flux/FluxTransformer.h"

#include <torch/autograd.h>

#include <cmath>
#include <map>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "models/flux/FluxKernels.h"
#include "models/flux/FluxLayout.h"
#include "models/flux/FluxOps.h"
#include "models/flux/FluxUnitBuilder.h"
#include "nn/GradLayout.h"

namespace strata::flux {

// ---- shared pieces -----------------------------------------------------------

FluxRmsNormImpl::FluxRmsNormImpl(int64_t dim, const FluxBuildOptions& options, double normEps) : eps(normEps) {
  weight = register_parameter("weight", at::ones({dim}, at::TensorOptions(options.device).dtype(options.dtype)));
}

namespace {

// diffusers' RMSNorm arithmetic: x * rsqrt(mean(x^2) + eps) in float32, then (for a
// half-precision weight) rounded to the weight's dtype and scaled by it.
at::Tensor rmsNormValue(const at::Tensor& x, const at::Tensor& rstd, const at::Tensor& weight) {
  const auto y = x * rstd;  // float32
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16)
    return y.to(weight.scalar_type()) * weight;
  return (y * weight).to(x.scalar_type());
}

// The same forward for a frozen weight, keeping only x (its dtype) and rstd [..., 1]
// for the backward. Plain autograd keeps a float32 copy of x as well (for pow):
// 4 more bytes per element of every q and k, ~6 GB over FLUX.1-dev at 1024 px
// without checkpointing.
struct FrozenRmsNorm : torch::autograd::Function<FrozenRmsNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    const auto rstd = at::rsqrt(x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true) + eps);  // [..., 1]
    ctx->save_for_backward({x, rstd, weight});
    return rmsNormValue(x, rstd, weight);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& rstd = saved[1];
    const auto& weight = saved[2];
    const auto n = x.to(at::kFloat) * rstd;                                   // normalised x, float32
    const auto gn = gradOut[0].to(at::kFloat) * weight.to(at::kFloat);        // d loss / d n
    // d/dx of x * rstd(x): rstd * (gn - n * mean(gn * n)).
    const auto gx = rstd * (gn - n * (gn * n).mean(-1, /*keepdim=*/true));  // float32
    return {gx.to(x.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor FluxRmsNormImpl::forward(const at::Tensor& x) {
  if (at::GradMode::is_enabled() && x.requires_grad() && !weight.requires_grad())
    return FrozenRmsNorm::apply(x, weight, eps);
  const auto rstd = at::rsqrt(x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true) + eps);
  return rmsNormValue(x, rstd, weight);
}

std::array<at::Tensor, 3> projectQkv(const QkvProjections& p, const at::Tensor& x) {
  // One input: the LoRA downs of q, k and v run as one matmul (nn::forwardSiblings).
  const auto out = nn::forwardSiblings({p.q.ptr().get(), p.k.ptr().get(), p.v.ptr().get()}, x);
  return {out[0], out[1], out[2]};
}

namespace {

// Whether view `v` hands its gradient to `base` (its narrow's node leads to base's
// gradient edge): not so for views a custom Function returned (a checkpoint's outputs),
// whose base autograd never reaches through them.
bool gradientReaches(const at::Tensor& v, const at::Tensor& base) {
  const auto& fn = v.grad_fn();
  if (!fn || fn->num_outputs() != 1 || fn->next_edges().empty()) return false;
  const auto edge = torch::autograd::impl::gradient_edge(base);
  const auto& next = fn->next_edge(0);
  return next.function == edge.function && next.input_nr == edge.input_nr;
}

}  // namespace

at::Tensor joinedTokens(const at::Tensor& txt, const at::Tensor& img) {
  if (nn::fusedPaths() && txt.dim() == 3 && img.dim() == 3 && txt.is_view() && img.is_view()) {
    const at::Tensor base(txt._base());  // a TensorBase in some LibTorch versions
    const bool halves = base.is_same(img._base()) && base.dim() == 3 && base.is_contiguous() &&
                        base.scalar_type() == txt.scalar_type() && base.scalar_type() == img.scalar_type() &&
                        base.size(0) == txt.size(0) && base.size(0) == img.size(0) && base.size(2) == txt.size(2) &&
                        base.size(2) == img.size(2) && base.size(1) == txt.size(1) + img.size(1) &&
                        txt.strides() == base.strides() && img.strides() == base.strides() &&
                        txt.storage_offset() == base.storage_offset() &&
                        img.storage_offset() == base.storage_offset() + txt.size(1) * base.stride(1);
    const bool tracked = txt.requires_grad() || img.requires_grad() || base.requires_grad();
    if (halves && (!tracked || (base.requires_grad() && gradientReaches(txt, base) && gradientReaches(img, base))))
      return base;
  }
  return at::cat({txt, img}, 1);
}

at::Tensor applyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // x: [B, N, H, Dh]; pairs (x0, x1) rotate to (-x1, x0).
  const auto pairs = x.unflatten(-1, {x.size(-1) / 2, 2});  // [B, N, H, Dh/2, 2]
  const auto real = pairs.select(-1, 0);
  const auto imag = pairs.select(-1, 1);
  const auto rotated = at::stack({-imag, real}, -1).flatten(-2);  // [B, N, H, Dh]
  const auto c = cos.unsqueeze(0).unsqueeze(2);                   // [1, N, 1, Dh]
  const auto s = sin.unsqueeze(0).unsqueeze(2);
  return (x.to(at::kFloat) * c + rotated.to(at::kFloat) * s).to(x.scalar_type());
}

at::Tensor normThenRotary(FluxRmsNormImpl& norm, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t offset) {
  const auto c = cos.narrow(0, offset, x.size(1));  // [N, Dh]
  const auto s = sin.narrow(0, offset, x.size(1));
  if (normRopeFits(x, norm.weight, c, s)) return normRope(x, norm.weight, c, s, norm.eps);
  return applyRotary(norm.forward(x), c, s);
}

at::Tensor jointAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  // The backend (cuDNN or flash on CUDA) is the process's choice: model.attention_backend.
  // [B, N, H, Dh] -> [B, H, N, Dh] for the fused kernel, and back.
  // The gradient reaching the attention's backward gets the output's strides: cuDNN's
  // SDPA backward has required dO laid out as O (flash does not care), and dO may come
  // back as a strided narrow (a quantized proj_out over cat(attn, mlp) gave one).
  const auto out = nn::gradInLayoutOf(
      compat::scaledDotProductAttention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)));  // [B, H, N, Dh]
  return out.transpose(1, 2).flatten(2);  // [B, N, H*Dh]
}

std::pair<at::Tensor, at::Tensor> doubleBlockAttention(const DoubleAttentionModules& m, const at::Tensor& imgNorm,
                                                       const at::Tensor& txtNorm, const at::Tensor& cos,
                                                       const at::Tensor& sin) {
  const int64_t nTxt = txtNorm.size(1);
  auto [q, k, v] = projectQkv(m.imgQkv, imgNorm);
  auto [tq, tk, tv] = projectQkv(m.txtQkv, txtNorm);
  // [B, N, H, Dh], text first; the rotary tables cover [text; image] tokens.
  const auto query = at::cat({normThenRotary(m.normAddedQ, splitHeads(tq, m.heads), cos, sin, 0),
                              normThenRotary(m.normQ, splitHeads(q, m.heads), cos, sin, nTxt)},
                             1);
  const auto key = at::cat({normThenRotary(m.normAddedK, splitHeads(tk, m.heads), cos, sin, 0),
                            normThenRotary(m.normK, splitHeads(k, m.heads), cos, sin, nTxt)},
                           1);
  const auto value = at::cat({splitHeads(tv, m.heads), splitHeads(v, m.heads)}, 1);
  const auto attn = jointAttention(query, key, value);  // [B, Nt+Ni, D]
  const auto txtAttn = m.toAddOut.forward(attn.narrow(1, 0, nTxt));
  const auto imgAttn = m.toOut.forward(attn.narrow(1, nTxt, attn.size(1) - nTxt));
  return {imgAttn, txtAttn};
}

std::pair<at::Tensor, at::Tensor> rotaryFromIds(const at::Tensor& idsIn, const std::vector<int64_t>& axesDims,
                                                double theta) {
  const at::Tensor ids = idsIn.dim() == 3 ? idsIn[0] : idsIn;  // [N, n_axes]
  if (ids.dim() != 2 || ids.size(1) != static_cast<int64_t>(axesDims.size()))
    throw Error("FluxTransformer: position ids must be [N, " + std::to_string(axesDims.size()) + "], got " +
                std::to_string(ids.dim()) + "-d with last dim " + std::to_string(ids.size(-1)));
  const auto pos = ids.to(at::kFloat).to(at::kDouble);
  std::vector<at::Tensor> cosParts, sinParts;
  for (size_t axis = 0; axis < axesDims.size(); ++axis) {
    const int64_t dim = axesDims[axis];
    const auto exponents = at::arange(0, dim, 2, pos.options()) / static_cast<double>(dim);
    const auto freqs = 1.0 / at::pow(theta, exponents);                               // [dim/2]
    const auto angles = at::outer(pos.select(1, static_cast<int64_t>(axis)), freqs);  // [N, dim/2]
    cosParts.push_back(angles.cos().repeat_interleave(2, 1));                         // [N, dim]
    sinParts.push_back(angles.sin().repeat_interleave(2, 1));
  }
  return {at::cat(cosParts, -1).to(at::kFloat), at::cat(sinParts, -1).to(at::kFloat)};  // [N, Dh]
}

at::Tensor timestepSinusoid(const at::Tensor& t, int64_t channels) {
  const int64_t half = channels / 2;
  const auto exponent =
      at::arange(0, half, t.options().dtype(at::kFloat)) * (-std::log(10000.0) / static_cast<double>(half));
  const auto angles = t.to(at::kFloat).unsqueeze(1) * at::exp(exponent).unsqueeze(0);  // [B, half]
  return at::cat({angles.cos(), angles.sin()}, -1);  // [B, channels], cos first (flip_sin_to_cos)
}

// ---- double block --------------------------------------------------------------

FluxDoubleBlock::FluxDoubleBlock(const FluxConfig& cfg, const FluxBuildOptions& o)
    : heads_(cfg.numAttentionHeads), headDim_(cfg.attentionHeadDim) {
  UnitBuilder b(*this, fluxUnitLayout(FluxUnit::Double, cfg), o);
  norm1Linear = b.linear("norm1.linear");
  norm1ContextLinear = b.linear("norm1_context.linear");
  imgQkv = {b.linear("attn.to_q"), b.linear("attn.to_k"), b.linear("attn.to_v")};
  txtQkv = {b.linear("attn.add_q_proj"), b.linear("attn.add_k_proj"), b.linear("attn.add_v_proj")};
  normQ = b.rmsNorm("attn.norm_q");
  normK = b.rmsNorm("attn.norm_k");
  normAddedQ = b.rmsNorm("attn.norm_added_q");
  normAddedK = b.rmsNorm("attn.norm_added_k");
  toOut = b.linear("attn.to_out.0");
  toAddOut = b.linear("attn.to_add_out");
  ffIn = b.linear("ff.net.0.proj");
  ffOut = b.linear("ff.net.2");
  ffContextIn = b.linear("ff_context.net.0.proj");
  ffContextOut = b.linear("ff_context.net.2");
}

nn::BlockIO FluxDoubleBlock::forward(const nn::BlockIO& io) {
  // img [B, Ni, D], txt [B, Nt, D], temb [B, D]
  const auto act = at::silu(io.temb);
  // Both modulations read act: with LoRA on both, one down matmul.
  const auto mods = nn::forwardSiblings({norm1Linear.get(), norm1ContextLinear.get()}, act);
  const auto imgMod = mods[0].chunk(6, 1);  // shift, scale, gate (attn), shift, scale, gate (mlp)
  const auto txtMod = mods[1].chunk(6, 1);

  const auto imgNorm = modulate(layerNorm(io.img), imgMod[0], imgMod[1]);
  const auto txtNorm = modulate(layerNorm(io.txt), txtMod[0], txtMod[1]);

  const auto [imgAttn, txtAttn] =
      doubleBlockAttention({imgQkv, txtQkv, *normQ, *normK, *normAddedQ, *normAddedK, *toOut, *toAddOut, heads_},
                           imgNorm, txtNorm, io.ropeCos, io.ropeSin);

  nn::BlockIO out = io;
  auto img = gated(io.img, imgMod[2], imgAttn);
  // The MLPs' output Linears apply the GELU themselves, so its [B, N, 4D] output is not kept.
  img = gated(img, imgMod[5], ffOut->forwardGelu(ffIn->forward(modulate(layerNorm(img), imgMod[3], imgMod[4]))));
  auto txt = gated(io.txt, txtMod[2], txtAttn);
  txt = gated(txt, txtMod[5],
              ffContextOut->forwardGelu(ffContextIn->forward(modulate(layerNorm(txt), txtMod[3], txtMod[4]))));
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
  const auto xNorm = modulate(layerNorm(x), mod[0], mod[1]);

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

FluxTransformer::FluxTransformer(const FluxConfig& cfg, const FluxBuildOptions& o) : cfg_(cfg) {
  cfg_.validate();
  UnitBuilder stem(*this, fluxUnitLayout(FluxUnit::Stem, cfg_), o);
  xEmbedder = stem.linear("x_embedder");
  contextEmbedder = stem.linear("context_embedder");
  timeTextEmbed_ = stem.container("time_text_embed");
  timeLinear1 = stem.linear("time_text_embed.timestep_embedder.linear_1");
  timeLinear2 = stem.linear("time_text_embed.timestep_embedder.linear_2");
  if (cfg_.guidanceEmbeds) {
    guidanceLinear1 = stem.linear("time_text_embed.guidance_embedder.linear_1");
    guidanceLinear2 = stem.linear("time_text_embed.guidance_embedder.linear_2");
  }
  textLinear1 = stem.linear("time_text_embed.text_embedder.linear_1");
  textLinear2 = stem.linear("time_text_embed.text_embedder.linear_2");

  doubleBlocks_ = register_module("transformer_blocks", torch::nn::ModuleList());
  // The options of block i: its own device when the blocks are split.
  auto blockOptions = [&o](size_t i) {
    FluxBuildOptions bo = o;
    if (o.blockDevice) bo.device = o.blockDevice(i);
    return bo;
  };
  for (int64_t i = 0; i < cfg_.numLayers; ++i) {
    auto b = std::make_shared<FluxDoubleBlock>(cfg_, blockOptions(blocks_.size()));
    if (o.onBlockBuilt) o.onBlockBuilt(*b);
    doubleBlocks_->push_back(b);
    blocks_.push_back(b);
  }
  singleBlocks_ = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.numSingleLayers; ++i) {
    auto b = std::make_shared<FluxSingleBlock>(cfg_, blockOptions(blocks_.size()));
    if (o.onBlockBuilt) o.onBlockBuilt(*b);
    singleBlocks_->push_back(b);
    blocks_.push_back(b);
  }

  UnitBuilder head(*this, fluxUnitLayout(FluxUnit::Head, cfg_), o);
  normOut_ = head.container("norm_out");
  normOutLinear = head.linear("norm_out.linear");
  projOut = head.linear("proj_out");
}

at::ScalarType FluxTransformer::dtype() const { return xEmbedder->weight.scalar_type(); }

nn::BlockIO FluxTransformer::stem(const FluxInputs& in) {
  if (!in.img.defined() || !in.txt.defined() || !in.pooled.defined() || !in.timestep.defined() ||
      !in.imgIds.defined() || !in.txtIds.defined())
    throw Error("FluxTransformer: img, txt, pooled, timestep, imgIds and txtIds are required");
  if (cfg_.guidanceEmbeds && !in.guidance.defined())
    throw Error("FluxTransformer: this model embeds guidance (guidance_embeds) and no guidance was given");
  const auto dt = dtype();
  const int64_t batch = in.img.size(0);
  auto perSample = [&](const at::Tensor& t) {  // scalar or [B] -> [B]
    return t.dim() == 0 ? t.reshape({1}).expand({batch}) : t.reshape({-1});
  };

  nn::BlockIO io;
  io.img = xEmbedder->forward(in.img.to(dt));        // [B, Ni, D]
  io.txt = contextEmbedder->forward(in.txt.to(dt));  // [B, Nt, D]
  // Conditioning: timestep and guidance x1000 and their sinusoids in float32.
  // diffusers rounds t to the model dtype first; in bf16 that moves t = 0.37 to
  // 368, a different embedding, so Strata keeps float32 here (equal in fp32).
  const auto t = perSample(in.timestep).to(at::kFloat) * 1000;
  auto temb = timeLinear2->forward(at::silu(timeLinear1->forward(timestepSinusoid(t).to(dt))));  // [B, D]
  if (cfg_.guidanceEmbeds) {
    const auto g = perSample(in.guidance).to(at::kFloat) * 1000;
    temb = temb + guidanceLinear2->forward(at::silu(guidanceLinear1->forward(timestepSinusoid(g).to(dt))));
  }
  io.temb = temb + textLinear2->forward(at::silu(textLinear1->forward(in.pooled.to(dt))));
  const auto txtIds = in.txtIds.dim() == 3 ? in.txtIds[0] : in.txtIds;
  const auto imgIds = in.imgIds.dim() == 3 ? in.imgIds[0] : in.imgIds;
  auto [cos, sin] = rotaryFromIds(at::cat({txtIds.to(at::kFloat), imgIds.to(at::kFloat)}, 0), cfg_.axesDimsRope,
                                  cfg_.ropeTheta);  // [Nt+Ni, Dh]
  io.ropeCos = cos;
  io.ropeSin = sin;
  return io;
}

at::Tensor FluxTransformer::head(const nn::BlockIO& io) {
  const auto mod = normOutLinear->forward(at::silu(io.temb)).chunk(2, 1);  // scale, shift
  return projOut->forward(modulate(layerNorm(io.img), mod[1], mod[0]));    // [B, Ni, out_channels]
}

at::Tensor FluxTransformer::forward(const FluxInputs& in, nn::BlockRunner* runner) {
  nn::LocalRunner local;
  if (!runner) runner = &local;
  nn::BlockIO io = stem(in);
  for (size_t i = 0; i < blocks_.size(); ++i) io = runner->run(i, *blocks_[i], io);
  io = runner->toHead(io);
  return head(io);
}

nn::BlockList FluxTransformer::blockList() {
  nn::BlockList list;
  list.stem.id = "stem";
  list.stem.kind = "stem";
  list.stem.modules = {{"x_embedder", xEmbedder.ptr()},
                       {"context_embedder", contextEmbedder.ptr()},
                       {"time_text_embed", timeTextEmbed_}};
  for (int64_t i = 0; i < cfg_.numLayers; ++i) {
    const std::string id = "transformer_blocks." + std::to_string(i);
    list.blocks.push_back({id, "double", {{id, blocks_[i]}}, blocks_[i]});
  }
  for (int64_t i = 0; i < cfg_.numSingleLayers; ++i) {
    const std::string id = "single_transformer_blocks." + std::to_string(i);
    const auto& b = blocks_[cfg_.numLayers + i];
    list.blocks.push_back({id, "single", {{id, b}}, b});
  }
  list.head.id = "head";
  list.head.kind = "head";
  list.head.modules = {{"norm_out", normOut_}, {"proj_out", projOut.ptr()}};
  return list;
}

std::vector<std::pair<std::string, nn::Linear>> FluxTransformer::linears() {
  std::vector<std::pair<std::string, nn::Linear>> out;
  for (const auto& item : named_modules("", /*include_self=*/false)) {
    if (auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value()))
      out.emplace_back(item.key(), nn::Linear(lin));
  }
  return out;
}

}  // namespace strata::flux
