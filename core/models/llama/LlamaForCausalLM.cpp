#include "models/llama/LlamaForCausalLM.h"

#include <torch/autograd.h>

#include <cmath>
#include <limits>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "nn/UnitBuilder.h"

namespace strata::llama {

namespace {

at::TensorOptions optionsOf(const LlamaBuildOptions& o) { return at::TensorOptions().device(o.device).dtype(o.dtype); }

nn::Linear makeLinear(int64_t in, int64_t out, bool bias, const LlamaBuildOptions& o) {
  return nn::Linear(in, out, bias, optionsOf(o));
}

// transformers' rotary_emb keeps inv_freq as a (non-persistent) buffer: a module
// of the stem, so Placement moves it with embed_tokens and the audit sees it.
class RotaryEmbedding : public torch::nn::Module {
 public:
  explicit RotaryEmbedding(const at::Tensor& invFreq, const at::Device& device) {
    invFreq_ = register_buffer("inv_freq", invFreq.to(device));
  }
  const at::Tensor& invFreq() const { return invFreq_; }

 private:
  at::Tensor invFreq_;
};

double lowestOf(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case at::kBFloat16:
      return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case at::kDouble:
      return std::numeric_limits<double>::lowest();
    default:
      return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

// [B, L, H*Dh] -> [B, H, L, Dh]
at::Tensor headsFirst(const at::Tensor& x, int64_t heads, int64_t headDim) {
  return x.view({x.size(0), x.size(1), heads, headDim}).transpose(1, 2);
}

}  // namespace

// ---- pieces --------------------------------------------------------------------

LlamaRmsNormImpl::LlamaRmsNormImpl(int64_t dim, double eps, const LlamaBuildOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}, optionsOf(options)));
}

at::Tensor LlamaRmsNormImpl::forward(const at::Tensor& x) {
  const auto xf = x.to(at::kFloat);
  const auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

LlamaEmbeddingImpl::LlamaEmbeddingImpl(int64_t vocab, int64_t dim, const LlamaBuildOptions& options) {
  at::NoGradGuard noGrad;
  weight = register_parameter("weight", at::empty({vocab, dim}, optionsOf(options)).normal_(0.0, 0.02));
}

at::Tensor LlamaEmbeddingImpl::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

at::Tensor ropeInvFreq(const LlamaConfig& cfg) {
  const int64_t dim = cfg.headDim;
  // As transformers: integer arange, float32 exponent, base ** exponent in float32.
  const auto exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  auto inv = 1.0 / at::pow(cfg.ropeTheta, exponent);  // [dim/2]
  const RopeScaling& s = cfg.ropeScaling;
  if (s.type == RopeType::Linear) return inv / s.factor;
  if (s.type != RopeType::Llama3) return inv;
  // Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth
  // blend in between (transformers' _compute_llama3_parameters).
  const double oldContext = static_cast<double>(s.originalMaxPositionEmbeddings);
  const double lowFreqWavelen = oldContext / s.lowFreqFactor;
  const double highFreqWavelen = oldContext / s.highFreqFactor;
  const auto wavelen = 2 * M_PI / inv;
  auto scaled = at::where(wavelen > lowFreqWavelen, inv / s.factor, inv);
  const auto smooth = (oldContext / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
  const auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const auto medium = (wavelen >= highFreqWavelen).logical_and(wavelen <= lowFreqWavelen);
  return at::where(medium, smoothed, scaled);
}

std::pair<at::Tensor, at::Tensor> rotaryTables(const at::Tensor& invFreq, const at::Tensor& positions) {
  // positions [B, L] -> angles [B, L, Dh/2], the halves repeated: [B, L, Dh]
  const auto angles = positions.to(at::kFloat).unsqueeze(-1) * invFreq.to(at::kFloat).view({1, 1, -1});
  const auto emb = at::cat({angles, angles}, -1);
  return {emb.cos(), emb.sin()};
}

at::Tensor applyRotaryHalves(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // x [B, H, L, Dh]; rotate_half: (x1, x2) -> (-x2, x1) over the two halves of Dh.
  const int64_t half = x.size(-1) / 2;
  const auto rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  const auto c = cos.unsqueeze(1);  // [B, 1, L, Dh]
  const auto s = sin.unsqueeze(1);
  return x * c + rotated * s;
}

at::Tensor causalMask(const at::Tensor& attentionMask, int64_t batch, int64_t length, at::ScalarType dtype,
                      const at::Device& device, int64_t slidingWindow) {
  const auto pos = at::arange(length, at::TensorOptions().device(device).dtype(at::kLong));
  const auto q = pos.view({length, 1});
  const auto k = pos.view({1, length});
  auto allowed = k <= q;  // [L, L]
  if (slidingWindow > 0) allowed = allowed.logical_and((q - k) < slidingWindow);
  auto full = allowed.view({1, 1, length, length}).expand({batch, 1, length, length});  // [B, 1, L, L]
  if (attentionMask.defined()) {
    if (attentionMask.dim() != 2 || attentionMask.size(0) != batch || attentionMask.size(1) != length)
      throw Error("LlamaForCausalLM: attention_mask must be [" + std::to_string(batch) + ", " + std::to_string(length) +
                  "], got " + std::to_string(attentionMask.dim()) + "-d");
    const auto keys = attentionMask.to(device).ne(0).view({batch, 1, 1, length});
    full = full.logical_and(keys);
  }
  return at::zeros({batch, 1, length, length}, at::TensorOptions().device(device).dtype(dtype))
      .masked_fill(full.logical_not(), lowestOf(dtype));
}

namespace {

// How a row of llamaUnitLayout becomes a module (LlamaConfig.h).
nn::UnitBuilder::Make moduleMaker(const LlamaConfig& cfg, const LlamaBuildOptions& o) {
  return [&cfg, &o](const nn::ModuleSpec& m) -> std::shared_ptr<torch::nn::Module> {
    switch (m.type) {
      case nn::ModuleSpec::Type::Linear:
        return makeLinear(m.inFeatures, m.outFeatures, m.bias, o).ptr();
      case nn::ModuleSpec::Type::RmsNorm:
        return LlamaRmsNorm(m.outFeatures, cfg.rmsNormEps, o).ptr();
      case nn::ModuleSpec::Type::Embedding:
        return LlamaEmbedding(m.inFeatures, m.outFeatures, o).ptr();
      case nn::ModuleSpec::Type::LayerNorm:
        break;
    }
    throw Error("LlamaForCausalLM: no module for the layout row '" + m.path + "'");
  };
}

}  // namespace

// ---- decoder layer ---------------------------------------------------------------

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& cfg, const LlamaBuildOptions& o)
    : heads_(cfg.numAttentionHeads), kvHeads_(cfg.numKeyValueHeads), headDim_(cfg.headDim) {
  const nn::UnitBuilder b(*this, llamaUnitLayout(LlamaUnit::Layer, cfg), moduleMaker(cfg, o));
  inputLayernorm = LlamaRmsNorm(b.get<LlamaRmsNormImpl>("input_layernorm"));
  qProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.q_proj"));
  kProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.k_proj"));
  vProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.v_proj"));
  oProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.o_proj"));
  if (cfg.qkNorm) {
    qNorm = LlamaRmsNorm(b.get<LlamaRmsNormImpl>("self_attn.q_norm"));
    kNorm = LlamaRmsNorm(b.get<LlamaRmsNormImpl>("self_attn.k_norm"));
  }
  postAttentionLayernorm = LlamaRmsNorm(b.get<LlamaRmsNormImpl>("post_attention_layernorm"));
  gateProj = nn::Linear(b.get<nn::LinearImpl>("mlp.gate_proj"));
  upProj = nn::Linear(b.get<nn::LinearImpl>("mlp.up_proj"));
  downProj = nn::Linear(b.get<nn::LinearImpl>("mlp.down_proj"));
}

nn::BlockIO LlamaDecoderLayer::forward(const nn::BlockIO& io) {
  if (io.img.is_cuda()) {
    // Llama runs without cuDNN's attention: it is checked on FLUX only (DESIGN §4). Set at
    // every forward, not once: a FLUX run in the same process (the app) turns it on.
    compat::disableCudnnAttention();
  }
  const at::Tensor& x = io.img;  // [B, L, D]
  const int64_t batch = x.size(0), length = x.size(1);
  const auto h = inputLayernorm->forward(x);
  // One input each: q, k, v (and below gate, up) as siblings, so their LoRA downs run
  // as one matmul and an fp8 base quantizes the input once (nn::forwardSiblings).
  const auto qkv = nn::forwardSiblings({qProj.get(), kProj.get(), vProj.get()}, h);
  auto q = headsFirst(qkv[0], heads_, headDim_);    // [B, H, L, Dh]
  auto k = headsFirst(qkv[1], kvHeads_, headDim_);  // [B, Hkv, L, Dh]
  auto v = headsFirst(qkv[2], kvHeads_, headDim_);
  if (qNorm) {
    // Qwen3: each head's q and k RMS-normalised over head_dim, before the rotation.
    q = qNorm->forward(q);
    k = kNorm->forward(k);
  }
  q = applyRotaryHalves(q, io.ropeCos, io.ropeSin);
  k = applyRotaryHalves(k, io.ropeCos, io.ropeSin);
  if (kvHeads_ != heads_) {
    // Grouped-query attention: query head i reads kv head i / (H / Hkv), as repeat_kv.
    const int64_t rep = heads_ / kvHeads_;
    k = k.unsqueeze(2).expand({batch, kvHeads_, rep, length, headDim_}).reshape({batch, heads_, length, headDim_});
    v = v.unsqueeze(2).expand({batch, kvHeads_, rep, length, headDim_}).reshape({batch, heads_, length, headDim_});
  }
  auto attn = compat::scaledDotProductAttention(q, k, v, io.mask);  // [B, H, L, Dh]
  if (io.mask.defined()) {
    // A query that sees no key (leading left padding) attends to nothing: zero, as
    // scaled_dot_product_attention gives from PyTorch 2.5 on (the header).
    const auto blind = io.mask.amax(-1, /*keepdim=*/true).ne(0);  // [B, 1, L, 1]
    attn = attn.masked_fill(blind, 0.0);
  }
  attn = attn.transpose(1, 2).reshape({batch, length, heads_ * headDim_});  // [B, L, H*Dh]
  const auto hidden = x + oProj->forward(attn);
  const auto m = postAttentionLayernorm->forward(hidden);
  nn::BlockIO out = io;
  const auto gateUp = nn::forwardSiblings({gateProj.get(), upProj.get()}, m);
  out.img = hidden + downProj->forward(at::silu(gateUp[0]) * gateUp[1]);
  return out;
}

// ---- the model -------------------------------------------------------------------

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& cfg, const LlamaBuildOptions& o) : cfg_(cfg) {
  cfg_.validate();
  nn::UnitBuilder stem(*this, llamaUnitLayout(LlamaUnit::Stem, cfg_), moduleMaker(cfg_, o));
  embedTokens = LlamaEmbedding(stem.get<LlamaEmbeddingImpl>("model.embed_tokens"));
  model_ = stem.container("model");
  layerList_ = model_->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg_.numHiddenLayers; ++i) {
    const auto index = static_cast<size_t>(i);
    LlamaBuildOptions lo = o;
    if (o.layerDevice) lo.device = o.layerDevice(index);
    auto layer = std::make_shared<LlamaDecoderLayer>(cfg_, lo);
    layerList_->push_back(layer);
    layers_.push_back(layer);
    if (o.onLayerBuilt) o.onLayerBuilt(index, *layer);
  }
  // The head's rows reuse the stem's "model" container (model.norm), then lm_head.
  const nn::UnitBuilder head(*this, llamaUnitLayout(LlamaUnit::Head, cfg_), moduleMaker(cfg_, o));
  norm = LlamaRmsNorm(head.get<LlamaRmsNormImpl>("model.norm"));
  model_->register_module("rotary_emb", std::make_shared<RotaryEmbedding>(ropeInvFreq(cfg_), o.device));
  if (!cfg_.tieWordEmbeddings) lmHead = nn::Linear(head.get<nn::LinearImpl>("lm_head"));
}

at::Tensor LlamaForCausalLM::invFreq() const {
  return std::static_pointer_cast<RotaryEmbedding>(model_->named_children()["rotary_emb"])->invFreq();
}

nn::BlockIO LlamaForCausalLM::stem(const LlamaInputs& in) {
  if (!in.inputIds.defined() || in.inputIds.dim() != 2)
    throw Error("LlamaForCausalLM: input_ids must be a [B, L] tensor");
  const at::Device device = embedTokens->weight.device();
  const at::Tensor ids = in.inputIds.to(device, at::kLong);
  const int64_t batch = ids.size(0), length = ids.size(1);
  if (ids.numel() > 0 && !in.idsChecked) {
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    if (lo < 0 || hi >= cfg_.vocabSize)
      throw Error("LlamaForCausalLM: token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary (" +
                  std::to_string(cfg_.vocabSize) + " tokens)");
  }
  at::Tensor positions = in.positionIds;
  if (!positions.defined()) {
    positions =
        at::arange(length, at::TensorOptions().device(device).dtype(at::kLong)).unsqueeze(0).expand({batch, length});
  } else if (positions.sizes() != ids.sizes()) {
    throw Error("LlamaForCausalLM: position_ids must have the shape of input_ids");
  }
  nn::BlockIO io;
  io.img = embedTokens->forward(ids);  // [B, L, D]
  auto [cos, sin] = rotaryTables(invFreq(), positions.to(device));
  io.ropeCos = cos.to(dtype());  // [B, L, Dh], cast as transformers does
  io.ropeSin = sin.to(dtype());
  io.mask = causalMask(in.attentionMask, batch, length, dtype(), device, cfg_.slidingWindow.value_or(0));
  return io;
}

at::Tensor LlamaForCausalLM::head(const nn::BlockIO& io) {
  const auto h = norm->forward(io.img);   // [B, L, D]
  if (lmHead) return lmHead->forward(h);  // [B, L, vocab]
  // Tied: the stem's table. Placement keeps stem and head on one device; when a
  // caller splits them, the table is read across (a copy for this product only).
  const at::Tensor& table = embedTokens->weight;
  return at::linear(h, table.device() == h.device() ? table : table.to(h.device()));
}

at::Tensor LlamaForCausalLM::forward(const LlamaInputs& in, nn::BlockRunner* runner) {
  nn::LocalRunner local;
  if (!runner) runner = &local;
  nn::BlockIO io = stem(in);
  for (size_t i = 0; i < layers_.size(); ++i) io = runner->run(i, *layers_[i], io);
  io = runner->toHead(io);
  return head(io);
}

nn::BlockList LlamaForCausalLM::blockList() {
  nn::BlockList list;
  list.stem.id = "stem";
  list.stem.kind = "stem";
  list.stem.modules = {{"model.embed_tokens", embedTokens.ptr()},
                       {"model.rotary_emb", model_->named_children()["rotary_emb"]}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string id = "model.layers." + std::to_string(i);
    list.blocks.push_back({id, "layer", {{id, layers_[i]}}, layers_[i]});
  }
  list.head.id = "head";
  list.head.kind = "head";
  list.head.modules = {{"model.norm", norm.ptr()}};
  if (lmHead) list.head.modules.push_back({"lm_head", lmHead.ptr()});
  return list;
}

std::vector<std::pair<std::string, nn::Linear>> LlamaForCausalLM::linears() {
  std::vector<std::pair<std::string, nn::Linear>> out;
  for (const auto& item : named_modules("", /*include_self=*/false)) {
    if (auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value()))
      out.emplace_back(item.key(), nn::Linear(lin));
  }
  return out;
}

at::Tensor causalLmLoss(const at::Tensor& logits, const at::Tensor& labels) {
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) || logits.size(1) != labels.size(1))
    throw Error("causalLmLoss: logits must be [B, L, V] and labels [B, L]");
  const int64_t length = logits.size(1);
  // Position t predicts token t + 1.
  const auto shifted = logits.narrow(1, 0, length - 1).to(at::kFloat).reshape({-1, logits.size(2)});  // [B*(L-1), V]
  const auto targets = labels.narrow(1, 1, length - 1).to(logits.device(), at::kLong).reshape({-1});
  return at::cross_entropy_loss(shifted, targets, /*weight=*/{}, at::Reduction::Mean, /*ignore_index=*/-100);
}

}  // namespace strata::llama
