#include "models/flux/FluxTransformer.h"

#include <torch/autograd.h>

#include <cmath>
#include <mutex>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace strata::flux {

namespace {

constexpr double kEps = FluxConfig::kNormEps;

// An nn::Linear with its parameters in the build dtype on the build device.
nn::Linear makeLinear(int64_t in, int64_t out, const FluxBuildOptions& o) {
  return nn::Linear(in, out, /*withBias=*/true, at::TensorOptions().device(o.device).dtype(o.dtype));
}

// A plain container so that children get the diffusers path ("attn.to_q").
std::shared_ptr<torch::nn::Module> node() { return std::make_shared<torch::nn::Module>(); }

at::Tensor layerNorm(const at::Tensor& x) {
  return at::layer_norm(x, {x.size(-1)}, /*weight=*/{}, /*bias=*/{}, kEps);
}

// x * (1 + scale) + shift with per-sample modulation [B, D] over tokens [B, N, D].
at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

at::Tensor geluTanh(const at::Tensor& x) { return at::gelu(x, "tanh"); }

at::Tensor clipHalf(const at::Tensor& x) {
  // diffusers clamps fp16 activations so the residual stream cannot reach inf.
  return x.scalar_type() == at::kHalf ? x.clamp(-65504.0, 65504.0) : x;
}

// [B, N, H*Dh] -> [B, N, H, Dh]
at::Tensor splitHeads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads});
}

}  // namespace

// ---- shared pieces -----------------------------------------------------------

FluxRmsNormImpl::FluxRmsNormImpl(int64_t dim, const FluxBuildOptions& options) {
  weight = register_parameter("weight", at::ones({dim}, at::TensorOptions(options.device).dtype(options.dtype)));
}

at::Tensor FluxRmsNormImpl::forward(const at::Tensor& x) {
  const auto variance = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);
  auto y = x * at::rsqrt(variance + kEps);  // float32
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16)
    return y.to(weight.scalar_type()) * weight;
  return (y * weight).to(x.scalar_type());
}

std::array<at::Tensor, 3> projectQkv(const QkvProjections& p, const at::Tensor& x) {
  return {p.q.ptr()->forward(x), p.k.ptr()->forward(x), p.v.ptr()->forward(x)};
}

at::Tensor applyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // x: [B, N, H, Dh]; pairs (x0, x1) rotate to (-x1, x0).
  const auto pairs = x.unflatten(-1, {x.size(-1) / 2, 2});  // [B, N, H, Dh/2, 2]
  const auto real = pairs.select(-1, 0);
  const auto imag = pairs.select(-1, 1);
  const auto rotated = at::stack({-imag, real}, -1).flatten(-2);  // [B, N, H, Dh]
  const auto c = cos.unsqueeze(0).unsqueeze(2);  // [1, N, 1, Dh]
  const auto s = sin.unsqueeze(0).unsqueeze(2);
  return (x.to(at::kFloat) * c + rotated.to(at::kFloat) * s).to(x.scalar_type());
}

at::Tensor jointAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (q.is_cuda()) {
    static std::once_flag cudnnOff;
    std::call_once(cudnnOff, [] { compat::disableCudnnAttention(); });
  }
  // [B, N, H, Dh] -> [B, H, N, Dh] for the fused kernel, and back.
  const auto out = compat::scaledDotProductAttention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  return out.transpose(1, 2).flatten(2);  // [B, N, H*Dh]
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
    const auto freqs = 1.0 / at::pow(theta, exponents);             // [dim/2]
    const auto angles = at::outer(pos.select(1, static_cast<int64_t>(axis)), freqs);  // [N, dim/2]
    cosParts.push_back(angles.cos().repeat_interleave(2, 1));       // [N, dim]
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
  const int64_t d = cfg.hiddenSize();
  const int64_t mlp = cfg.mlpHiddenSize();
  norm1Linear = makeLinear(d, 6 * d, o);
  norm1ContextLinear = makeLinear(d, 6 * d, o);
  register_module("norm1", node())->register_module("linear", norm1Linear);
  register_module("norm1_context", node())->register_module("linear", norm1ContextLinear);

  auto attn = register_module("attn", node());
  imgQkv = {makeLinear(d, d, o), makeLinear(d, d, o), makeLinear(d, d, o)};
  txtQkv = {makeLinear(d, d, o), makeLinear(d, d, o), makeLinear(d, d, o)};
  attn->register_module("to_q", imgQkv.q);
  attn->register_module("to_k", imgQkv.k);
  attn->register_module("to_v", imgQkv.v);
  normQ = attn->register_module("norm_q", FluxRmsNorm(headDim_, o));
  normK = attn->register_module("norm_k", FluxRmsNorm(headDim_, o));
  attn->register_module("add_q_proj", txtQkv.q);
  attn->register_module("add_k_proj", txtQkv.k);
  attn->register_module("add_v_proj", txtQkv.v);
  normAddedQ = attn->register_module("norm_added_q", FluxRmsNorm(headDim_, o));
  normAddedK = attn->register_module("norm_added_k", FluxRmsNorm(headDim_, o));
  toOut = makeLinear(d, d, o);
  attn->register_module("to_out", node())->register_module("0", toOut);
  toAddOut = attn->register_module("to_add_out", makeLinear(d, d, o));

  ffIn = makeLinear(d, mlp, o);
  ffOut = makeLinear(mlp, d, o);
  auto ffNet = register_module("ff", node())->register_module("net", node());
  ffNet->register_module("0", node())->register_module("proj", ffIn);
  ffNet->register_module("2", ffOut);
  ffContextIn = makeLinear(d, mlp, o);
  ffContextOut = makeLinear(mlp, d, o);
  auto ffcNet = register_module("ff_context", node())->register_module("net", node());
  ffcNet->register_module("0", node())->register_module("proj", ffContextIn);
  ffcNet->register_module("2", ffContextOut);
}

nn::BlockIO FluxDoubleBlock::forward(const nn::BlockIO& io) {
  // img [B, Ni, D], txt [B, Nt, D], temb [B, D]
  const auto act = at::silu(io.temb);
  const auto imgMod = norm1Linear->forward(act).chunk(6, 1);  // shift, scale, gate (attn), shift, scale, gate (mlp)
  const auto txtMod = norm1ContextLinear->forward(act).chunk(6, 1);
  const int64_t nTxt = io.txt.size(1);

  const auto imgNorm = modulate(layerNorm(io.img), imgMod[0], imgMod[1]);
  const auto txtNorm = modulate(layerNorm(io.txt), txtMod[0], txtMod[1]);

  auto [q, k, v] = projectQkv(imgQkv, imgNorm);
  auto [tq, tk, tv] = projectQkv(txtQkv, txtNorm);
  // [B, N, H, Dh], text first
  auto query = at::cat({normAddedQ->forward(splitHeads(tq, heads_)), normQ->forward(splitHeads(q, heads_))}, 1);
  auto key = at::cat({normAddedK->forward(splitHeads(tk, heads_)), normK->forward(splitHeads(k, heads_))}, 1);
  const auto value = at::cat({splitHeads(tv, heads_), splitHeads(v, heads_)}, 1);
  query = applyRotary(query, io.ropeCos, io.ropeSin);
  key = applyRotary(key, io.ropeCos, io.ropeSin);
  const auto attn = jointAttention(query, key, value);  // [B, Nt+Ni, D]
  const auto txtAttn = toAddOut->forward(attn.narrow(1, 0, nTxt));
  const auto imgAttn = toOut->forward(attn.narrow(1, nTxt, attn.size(1) - nTxt));

  nn::BlockIO out = io;
  auto img = io.img + imgMod[2].unsqueeze(1) * imgAttn;
  img = img + imgMod[5].unsqueeze(1) *
                  ffOut->forward(geluTanh(ffIn->forward(modulate(layerNorm(img), imgMod[3], imgMod[4]))));
  auto txt = io.txt + txtMod[2].unsqueeze(1) * txtAttn;
  txt = txt + txtMod[5].unsqueeze(1) *
                  ffContextOut->forward(
                      geluTanh(ffContextIn->forward(modulate(layerNorm(txt), txtMod[3], txtMod[4]))));
  out.img = img;
  out.txt = clipHalf(txt);
  return out;
}

// ---- single block --------------------------------------------------------------

FluxSingleBlock::FluxSingleBlock(const FluxConfig& cfg, const FluxBuildOptions& o)
    : heads_(cfg.numAttentionHeads), headDim_(cfg.attentionHeadDim) {
  const int64_t d = cfg.hiddenSize();
  const int64_t mlp = cfg.mlpHiddenSize();
  normLinear = makeLinear(d, 3 * d, o);
  register_module("norm", node())->register_module("linear", normLinear);
  projMlp = register_module("proj_mlp", makeLinear(d, mlp, o));
  projOut = register_module("proj_out", makeLinear(d + mlp, d, o));
  auto attn = register_module("attn", node());
  qkv = {makeLinear(d, d, o), makeLinear(d, d, o), makeLinear(d, d, o)};
  attn->register_module("to_q", qkv.q);
  attn->register_module("to_k", qkv.k);
  attn->register_module("to_v", qkv.v);
  normQ = attn->register_module("norm_q", FluxRmsNorm(headDim_, o));
  normK = attn->register_module("norm_k", FluxRmsNorm(headDim_, o));
}

nn::BlockIO FluxSingleBlock::forward(const nn::BlockIO& io) {
  const int64_t nTxt = io.txt.size(1);
  const auto x = at::cat({io.txt, io.img}, 1);                          // [B, Nt+Ni, D]
  const auto mod = normLinear->forward(at::silu(io.temb)).chunk(3, 1);  // shift, scale, gate
  const auto xNorm = modulate(layerNorm(x), mod[0], mod[1]);

  const auto mlp = geluTanh(projMlp->forward(xNorm));  // [B, N, mlp]
  auto [q, k, v] = projectQkv(qkv, xNorm);
  const auto query = applyRotary(normQ->forward(splitHeads(q, heads_)), io.ropeCos, io.ropeSin);
  const auto key = applyRotary(normK->forward(splitHeads(k, heads_)), io.ropeCos, io.ropeSin);
  const auto attn = jointAttention(query, key, splitHeads(v, heads_));  // [B, N, D]

  const auto y = clipHalf(x + mod[2].unsqueeze(1) * projOut->forward(at::cat({attn, mlp}, 2)));
  nn::BlockIO out = io;
  out.txt = y.narrow(1, 0, nTxt);
  out.img = y.narrow(1, nTxt, y.size(1) - nTxt);
  return out;
}

// ---- the model -----------------------------------------------------------------

FluxTransformer::FluxTransformer(const FluxConfig& cfg, const FluxBuildOptions& o) : cfg_(cfg) {
  cfg_.validate();
  const int64_t d = cfg_.hiddenSize();
  const int64_t tc = FluxConfig::kTimestepChannels;

  xEmbedder = register_module("x_embedder", makeLinear(cfg_.inChannels, d, o));
  contextEmbedder = register_module("context_embedder", makeLinear(cfg_.jointAttentionDim, d, o));
  timeTextEmbed_ = register_module("time_text_embed", node());
  auto timeEmb = timeTextEmbed_->register_module("timestep_embedder", node());
  timeLinear1 = timeEmb->register_module("linear_1", makeLinear(tc, d, o));
  timeLinear2 = timeEmb->register_module("linear_2", makeLinear(d, d, o));
  if (cfg_.guidanceEmbeds) {
    auto guidEmb = timeTextEmbed_->register_module("guidance_embedder", node());
    guidanceLinear1 = guidEmb->register_module("linear_1", makeLinear(tc, d, o));
    guidanceLinear2 = guidEmb->register_module("linear_2", makeLinear(d, d, o));
  }
  auto textEmb = timeTextEmbed_->register_module("text_embedder", node());
  textLinear1 = textEmb->register_module("linear_1", makeLinear(cfg_.pooledProjectionDim, d, o));
  textLinear2 = textEmb->register_module("linear_2", makeLinear(d, d, o));

  doubleBlocks_ = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.numLayers; ++i) {
    auto b = std::make_shared<FluxDoubleBlock>(cfg_, o);
    doubleBlocks_->push_back(b);
    blocks_.push_back(b);
  }
  singleBlocks_ = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.numSingleLayers; ++i) {
    auto b = std::make_shared<FluxSingleBlock>(cfg_, o);
    singleBlocks_->push_back(b);
    blocks_.push_back(b);
  }

  normOut_ = register_module("norm_out", node());
  normOutLinear = normOut_->register_module("linear", makeLinear(d, 2 * d, o));
  projOut = register_module("proj_out", makeLinear(d, cfg_.outChannels, o));
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
  io.img = xEmbedder->forward(in.img.to(dt));           // [B, Ni, D]
  io.txt = contextEmbedder->forward(in.txt.to(dt));     // [B, Nt, D]
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
  return projOut->forward(modulate(layerNorm(io.img), mod[1], mod[0]));  // [B, Ni, out_channels]
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
    if (auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value())) out.emplace_back(item.key(), nn::Linear(lin));
  }
  return out;
}

}  // namespace strata::flux
