#include "models/t5/T5Encoder.h"

#include <torch/autograd.h>

#include <cmath>
#include <limits>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "nn/UnitBuilder.h"

namespace strata::t5 {

namespace {

at::TensorOptions optionsOf(const T5BuildOptions& o, at::ScalarType dtype) {
  return at::TensorOptions().device(o.device).dtype(dtype);
}

// T5 v1.1 has no biases anywhere.
nn::Linear makeLinear(int64_t in, int64_t out, const T5BuildOptions& o, at::ScalarType dtype) {
  return nn::Linear(in, out, /*withBias=*/false, optionsOf(o, dtype));
}

at::Tensor activate(const at::Tensor& x, T5Activation act) {
  switch (act) {
    case T5Activation::Relu:
      return at::relu(x);
    case T5Activation::GeluTanh:
      return at::gelu(x, "tanh");  // transformers' gelu_new
    case T5Activation::Gelu:
      return at::gelu(x);
    case T5Activation::Silu:
      return at::silu(x);
  }
  return x;
}

// transformers clamps fp16 hidden states after each sub-layer so the residual
// stream cannot reach inf (T5's FF output overflows fp16).
at::Tensor clampHalf(const at::Tensor& x) {
  if (x.scalar_type() != at::kHalf) return x;
  const double fp16Max = 65504.0;
  const double limit = at::isinf(x).any().item<bool>() ? fp16Max - 1000.0 : fp16Max;
  return x.clamp(-limit, limit);
}

// [B, L, H*Dh] -> [B, H, L, Dh]
at::Tensor splitHeads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

}  // namespace

// ---- layer norm ----------------------------------------------------------------

T5LayerNormImpl::T5LayerNormImpl(int64_t dim, double eps, const T5BuildOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}, optionsOf(options, options.dtype)));
}

at::Tensor T5LayerNormImpl::forward(const at::Tensor& x) {
  const auto variance = x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true);
  auto y = x * at::rsqrt(variance + eps_);  // float32 at least
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16) y = y.to(weight.scalar_type());
  return weight * y;
}

// ---- relative position buckets -----------------------------------------------

at::Tensor relativePositionBucket(const at::Tensor& relativePosition, int64_t numBuckets, int64_t maxDistance) {
  // Bidirectional: the upper half of the buckets is for keys after the query.
  const int64_t half = numBuckets / 2;
  auto buckets = (relativePosition > 0).to(at::kLong) * half;
  const auto distance = relativePosition.abs();
  const int64_t maxExact = half / 2;
  const auto isSmall = distance < maxExact;
  // Same op order and dtypes as transformers, so every bucket boundary agrees.
  auto large = at::log(distance.to(at::kFloat) / maxExact) /
               std::log(static_cast<double>(maxDistance) / static_cast<double>(maxExact)) * (half - maxExact);
  large = large.to(at::kLong) + maxExact;
  large = at::clamp_max(large, half - 1);
  return buckets + at::where(isSmall, distance, large);
}

namespace {

// How a row of t5UnitLayout becomes a module (T5Config.h): Linears in the model's
// dtype but wo in `woDtype`; the embeddings as nn.Embedding initialises them, N(0, 1).
nn::UnitBuilder::Make moduleMaker(const T5Config& cfg, const T5BuildOptions& bo, at::ScalarType woDtype) {
  return [&cfg, &bo, woDtype](const nn::ModuleSpec& m) -> std::shared_ptr<torch::nn::Module> {
    switch (m.type) {
      case nn::ModuleSpec::Type::Linear: {
        const bool wo = m.path == "layer.1.DenseReluDense.wo";
        return makeLinear(m.inFeatures, m.outFeatures, bo, wo ? woDtype : bo.dtype).ptr();
      }
      case nn::ModuleSpec::Type::RmsNorm:
        return T5LayerNorm(m.outFeatures, cfg.layerNormEpsilon, bo).ptr();
      case nn::ModuleSpec::Type::Embedding: {
        at::NoGradGuard noGrad;
        auto e = std::make_shared<torch::nn::Module>();
        e->register_parameter("weight", at::randn({m.inFeatures, m.outFeatures}, optionsOf(bo, bo.dtype)));
        return e;
      }
      case nn::ModuleSpec::Type::LayerNorm:
        break;
    }
    throw Error("T5Encoder: no module for the layout row '" + m.path + "'");
  };
}

}  // namespace

// ---- block -----------------------------------------------------------------------

T5Block::T5Block(const T5Config& cfg, bool hasRelativeAttentionBias, const T5BuildOptions& bo) : cfg_(cfg) {
  // transformers keeps wo in fp32 when the model is fp16 (_keep_in_fp32_modules).
  woDtype_ = bo.dtype == at::kHalf ? at::kFloat : bo.dtype;
  const nn::UnitBuilder b(*this, t5UnitLayout(hasRelativeAttentionBias ? T5Unit::FirstBlock : T5Unit::Block, cfg),
                          moduleMaker(cfg, bo, woDtype_));
  q = nn::Linear(b.get<nn::LinearImpl>("layer.0.SelfAttention.q"));
  k = nn::Linear(b.get<nn::LinearImpl>("layer.0.SelfAttention.k"));
  v = nn::Linear(b.get<nn::LinearImpl>("layer.0.SelfAttention.v"));
  o = nn::Linear(b.get<nn::LinearImpl>("layer.0.SelfAttention.o"));
  if (hasRelativeAttentionBias)
    relativeAttentionBias = b.get<torch::nn::Module>("layer.0.SelfAttention.relative_attention_bias")
                                ->named_parameters(/*recurse=*/false)["weight"];
  attnNorm = T5LayerNorm(b.get<T5LayerNormImpl>("layer.0.layer_norm"));
  if (cfg.gatedAct) {
    wi0 = nn::Linear(b.get<nn::LinearImpl>("layer.1.DenseReluDense.wi_0"));
    wi1 = nn::Linear(b.get<nn::LinearImpl>("layer.1.DenseReluDense.wi_1"));
  } else {
    wi = nn::Linear(b.get<nn::LinearImpl>("layer.1.DenseReluDense.wi"));
  }
  wo = nn::Linear(b.get<nn::LinearImpl>("layer.1.DenseReluDense.wo"));
  ffNorm = T5LayerNorm(b.get<T5LayerNormImpl>("layer.1.layer_norm"));
}

at::Tensor T5Block::positionBias(int64_t length) const {
  if (!relativeAttentionBias.defined()) throw Error("T5Block: only block 0 holds relative_attention_bias");
  const auto options = at::TensorOptions().device(relativeAttentionBias.device()).dtype(at::kLong);
  const auto queryPos = at::arange(length, options).unsqueeze(1);   // [L, 1]
  const auto memoryPos = at::arange(length, options).unsqueeze(0);  // [1, L]
  const auto buckets = relativePositionBucket(memoryPos - queryPos, cfg_.relativeAttentionNumBuckets,
                                              cfg_.relativeAttentionMaxDistance);  // [L, L]
  const auto values = at::embedding(relativeAttentionBias, buckets);               // [L, L, H]
  return values.permute({2, 0, 1}).unsqueeze(0);                                   // [1, H, L, L]
}

nn::BlockIO T5Block::forward(const nn::BlockIO& io) {
  nn::BlockIO out = io;
  at::Tensor h = io.img;  // [B, L, d]
  const int64_t batch = h.size(0), length = h.size(1);
  at::Tensor bias = io.mask;
  if (hasRelativeAttentionBias()) {
    const auto position = positionBias(length);
    bias = bias.defined() ? position + bias : position;  // [B|1, H, L, L]
    out.mask = bias;
  } else if (!bias.defined()) {
    throw Error("T5Block: a block after block 0 needs block 0's position bias in BlockIO.mask");
  }

  // Self-attention: no 1/sqrt(d) scaling in T5; scores + bias; softmax in fp32.
  const auto x = attnNorm->forward(h);
  const auto qh = splitHeads(q->forward(x), cfg_.numHeads);  // [B, H, L, Dh]
  const auto kh = splitHeads(k->forward(x), cfg_.numHeads);
  const auto vh = splitHeads(v->forward(x), cfg_.numHeads);
  auto scores = at::matmul(qh, kh.transpose(-2, -1));  // [B, H, L, L]
  scores = scores + bias.to(scores.scalar_type());
  const auto weights = at::softmax(scores.to(at::kFloat), -1).to(scores.scalar_type());
  const auto attn = at::matmul(weights, vh).transpose(1, 2).reshape({batch, length, cfg_.innerDim()});  // [B, L, H*Dh]
  h = clampHalf(h + o->forward(attn));

  // Gated feed-forward: act(wi_0 x) * wi_1 x, then wo (in wo's dtype).
  const auto y = ffNorm->forward(h);
  at::Tensor hidden = cfg_.gatedAct ? activate(wi0->forward(y), cfg_.activation) * wi1->forward(y)
                                    : activate(wi->forward(y), cfg_.activation);  // [B, L, d_ff]
  if (hidden.scalar_type() != woDtype_) hidden = hidden.to(woDtype_);
  h = clampHalf(h + wo->forward(hidden));
  out.img = h;
  return out;
}

// ---- encoder -----------------------------------------------------------------------

T5Encoder::T5Encoder(const T5Config& cfg, const T5BuildOptions& options) : cfg_(cfg) {
  cfg_.validate();
  nn::UnitBuilder stem(*this, t5UnitLayout(T5Unit::Stem, cfg), moduleMaker(cfg, options, options.dtype));
  sharedNode_ = stem.get<torch::nn::Module>("shared");
  shared = sharedNode_->named_parameters(/*recurse=*/false)["weight"];
  auto encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
  blockList_ = encoder->register_module("block", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.numLayers; ++i) {
    auto b = std::make_shared<T5Block>(cfg, /*hasRelativeAttentionBias=*/i == 0, options);
    if (options.onBlockBuilt) options.onBlockBuilt(*b);
    blockList_->push_back(b);
    blocks_.push_back(b);
  }
  // The head's row reuses the "encoder" container.
  const nn::UnitBuilder head(*this, t5UnitLayout(T5Unit::Head, cfg), moduleMaker(cfg, options, options.dtype));
  finalLayerNorm = T5LayerNorm(head.get<T5LayerNormImpl>("encoder.final_layer_norm"));
}

nn::BlockIO T5Encoder::stem(const at::Tensor& inputIds, const at::Tensor& attentionMask) {
  if (inputIds.dim() != 2 || at::isFloatingType(inputIds.scalar_type()) || inputIds.scalar_type() == at::kBool)
    throw Error("T5Encoder: input_ids must be integer [B, L], got " +
                std::string(c10::toString(inputIds.scalar_type())) + " " + shapeText(inputIds.sizes()));
  if (inputIds.size(1) == 0) throw Error("T5Encoder: input_ids has no tokens");
  const int64_t lo = inputIds.min().item<int64_t>(), hi = inputIds.max().item<int64_t>();
  if (lo < 0 || hi >= cfg_.vocabSize)
    throw Error("T5Encoder: token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary [0, " +
                std::to_string(cfg_.vocabSize) + ")");
  const auto ids = inputIds.to(shared.device()).to(at::kLong);
  nn::BlockIO io;
  io.img = at::embedding(shared, ids);  // [B, L, d]
  if (attentionMask.defined()) {
    if (attentionMask.sizes() != inputIds.sizes())
      throw Error("T5Encoder: attention_mask " + shapeText(attentionMask.sizes()) + " must match input_ids " +
                  shapeText(inputIds.sizes()));
    // 1 -> 0, 0 -> the dtype's lowest value (transformers' extended mask): [B, 1, 1, L].
    const double lowest = dtype() == at::kFloat      ? std::numeric_limits<float>::lowest()
                          : dtype() == at::kBFloat16 ? -3.3895313892515355e38
                          : dtype() == at::kHalf     ? -65504.0
                                                     : std::numeric_limits<double>::lowest();
    const auto m = attentionMask.to(shared.device()).to(dtype());
    io.mask = ((1.0 - m) * lowest).unsqueeze(1).unsqueeze(1);
  }
  return io;
}

at::Tensor T5Encoder::head(const nn::BlockIO& io) { return finalLayerNorm->forward(io.img); }

at::Tensor T5Encoder::forward(const at::Tensor& inputIds, const at::Tensor& attentionMask, nn::BlockRunner* runner) {
  nn::LocalRunner local;
  if (!runner) runner = &local;
  nn::BlockIO io = stem(inputIds, attentionMask);
  for (size_t i = 0; i < blocks_.size(); ++i) io = runner->run(i, *blocks_[i], io);
  io = runner->toHead(io);
  return head(io);  // [B, L, d]
}

nn::BlockList T5Encoder::blockList() {
  nn::BlockList list;
  list.stem.id = "stem";
  list.stem.kind = "stem";
  list.stem.modules = {{"shared", sharedNode_}};
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const std::string id = "encoder.block." + std::to_string(i);
    list.blocks.push_back({id, "layer", {{id, blocks_[i]}}, blocks_[i]});
  }
  list.head.id = "head";
  list.head.kind = "head";
  list.head.modules = {{"encoder.final_layer_norm", finalLayerNorm.ptr()}};
  return list;
}

}  // namespace strata::t5
