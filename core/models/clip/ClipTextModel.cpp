#include "models/clip/ClipTextModel.h"

#include <torch/autograd.h>

#include <cmath>
#include <limits>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "nn/UnitBuilder.h"

namespace strata::clip {

namespace {

at::TensorOptions optionsOf(const ClipBuildOptions& o) { return at::TensorOptions().device(o.device).dtype(o.dtype); }

nn::Linear makeLinear(int64_t in, int64_t out, const ClipBuildOptions& o) {
  return nn::Linear(in, out, /*withBias=*/true, optionsOf(o));
}

at::Tensor activate(const at::Tensor& x, ClipActivation act) {
  switch (act) {
    case ClipActivation::QuickGelu:
      return x * at::sigmoid(1.702 * x);
    case ClipActivation::Gelu:
      return at::gelu(x);
    case ClipActivation::GeluTanh:
      return at::gelu(x, "tanh");
  }
  return x;
}

double lowestOf(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return -65504.0;
    case at::kBFloat16:
      return -3.3895313892515355e38;
    case at::kDouble:
      return std::numeric_limits<double>::lowest();
    default:
      return std::numeric_limits<float>::lowest();
  }
}

// [B, L, H*Dh] -> [B, H, L, Dh]
at::Tensor splitHeads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

}  // namespace

ClipLayerNormImpl::ClipLayerNormImpl(int64_t dim, double eps, const ClipBuildOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}, optionsOf(options)));
  bias = register_parameter("bias", at::zeros({dim}, optionsOf(options)));
}

at::Tensor ClipLayerNormImpl::forward(const at::Tensor& x) {
  return at::layer_norm(x, {x.size(-1)}, weight, bias, eps_);
}

namespace {

// How a row of clipUnitLayout becomes a module (ClipTextConfig.h); transformers'
// init for the embeddings: N(0, 0.02) tokens, N(0, 0.01) positions.
nn::UnitBuilder::Make moduleMaker(const ClipTextConfig& cfg, const ClipBuildOptions& o) {
  return [&cfg, &o](const nn::ModuleSpec& m) -> std::shared_ptr<torch::nn::Module> {
    switch (m.type) {
      case nn::ModuleSpec::Type::Linear:
        return makeLinear(m.inFeatures, m.outFeatures, o).ptr();
      case nn::ModuleSpec::Type::LayerNorm:
        return ClipLayerNorm(m.outFeatures, cfg.layerNormEps, o).ptr();
      case nn::ModuleSpec::Type::Embedding: {
        at::NoGradGuard noGrad;
        const double std = m.path == "embeddings.position_embedding" ? 0.01 : 0.02;
        auto e = std::make_shared<torch::nn::Module>();
        e->register_parameter("weight", at::randn({m.inFeatures, m.outFeatures}, optionsOf(o)) * std);
        return e;
      }
      case nn::ModuleSpec::Type::RmsNorm:
        break;
    }
    throw Error("ClipTextModel: no module for the layout row '" + m.path + "'");
  };
}

}  // namespace

ClipEncoderLayer::ClipEncoderLayer(const ClipTextConfig& cfg, const ClipBuildOptions& o) : cfg_(cfg) {
  const nn::UnitBuilder b(*this, clipUnitLayout(ClipUnit::Layer, cfg), moduleMaker(cfg, o));
  kProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.k_proj"));
  vProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.v_proj"));
  qProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.q_proj"));
  outProj = nn::Linear(b.get<nn::LinearImpl>("self_attn.out_proj"));
  layerNorm1 = ClipLayerNorm(b.get<ClipLayerNormImpl>("layer_norm1"));
  fc1 = nn::Linear(b.get<nn::LinearImpl>("mlp.fc1"));
  fc2 = nn::Linear(b.get<nn::LinearImpl>("mlp.fc2"));
  layerNorm2 = ClipLayerNorm(b.get<ClipLayerNormImpl>("layer_norm2"));
}

nn::BlockIO ClipEncoderLayer::forward(const nn::BlockIO& io) {
  nn::BlockIO out = io;
  at::Tensor h = io.img;  // [B, L, D]
  const int64_t batch = h.size(0), length = h.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(cfg_.headDim()));

  const auto x = layerNorm1->forward(h);
  const auto q = splitHeads(qProj->forward(x), cfg_.numAttentionHeads);  // [B, H, L, Dh]
  const auto k = splitHeads(kProj->forward(x), cfg_.numAttentionHeads);
  const auto v = splitHeads(vProj->forward(x), cfg_.numAttentionHeads);
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, L, L]
  if (io.mask.defined()) scores = scores + io.mask.to(scores.scalar_type());
  const auto weights = at::softmax(scores.to(at::kFloat), -1).to(q.scalar_type());
  const auto attn = at::matmul(weights, v).transpose(1, 2).reshape({batch, length, cfg_.hiddenSize});  // [B, L, D]
  h = h + outProj->forward(attn);

  const auto y = layerNorm2->forward(h);
  h = h + fc2->forward(activate(fc1->forward(y), cfg_.hiddenAct));  // [B, L, intermediate] inside
  out.img = h;
  return out;
}

ClipTextModel::ClipTextModel(const ClipTextConfig& cfg, const ClipBuildOptions& options) : cfg_(cfg) {
  cfg_.validate();
  nn::UnitBuilder stem(*this, clipUnitLayout(ClipUnit::Stem, cfg), moduleMaker(cfg, options));
  embeddings_ = stem.container("embeddings");
  tokenEmbedding = stem.get<torch::nn::Module>("embeddings.token_embedding")->named_parameters(false)["weight"];
  positionEmbedding = stem.get<torch::nn::Module>("embeddings.position_embedding")->named_parameters(false)["weight"];
  auto encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
  layerList_ = encoder->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.numHiddenLayers; ++i) {
    auto layer = std::make_shared<ClipEncoderLayer>(cfg, options);
    layerList_->push_back(layer);
    layers_.push_back(layer);
  }
  const nn::UnitBuilder head(*this, clipUnitLayout(ClipUnit::Head, cfg), moduleMaker(cfg, options));
  finalLayerNorm = ClipLayerNorm(head.get<ClipLayerNormImpl>("final_layer_norm"));
}

nn::BlockIO ClipTextModel::stem(const at::Tensor& inputIds, const at::Tensor& attentionMask) {
  if (inputIds.dim() != 2 || at::isFloatingType(inputIds.scalar_type()) || inputIds.scalar_type() == at::kBool)
    throw Error("ClipTextModel: input_ids must be integer [B, L], got " +
                std::string(c10::toString(inputIds.scalar_type())) + " " + shapeText(inputIds.sizes()));
  const int64_t length = inputIds.size(1);
  if (length == 0) throw Error("ClipTextModel: input_ids has no tokens");
  if (length > cfg_.maxPositionEmbeddings)
    throw Error("ClipTextModel: " + std::to_string(length) + " tokens, but the model has " +
                std::to_string(cfg_.maxPositionEmbeddings) + " positions (max_position_embeddings)");
  const int64_t lo = inputIds.min().item<int64_t>(), hi = inputIds.max().item<int64_t>();
  if (lo < 0 || hi >= cfg_.vocabSize)
    throw Error("ClipTextModel: token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary [0, " +
                std::to_string(cfg_.vocabSize) + ")");
  const auto device = tokenEmbedding.device();
  const auto ids = inputIds.to(device).to(at::kLong);
  nn::BlockIO io;
  io.img = at::embedding(tokenEmbedding, ids) + positionEmbedding.narrow(0, 0, length).unsqueeze(0);  // [B, L, D]

  // Key j is visible from query i when j <= i (and j is not padding).
  auto allowed = at::ones({length, length}, at::TensorOptions().device(device).dtype(at::kBool)).tril();  // [L, L]
  allowed = allowed.unsqueeze(0).unsqueeze(0);  // [1, 1, L, L]
  if (attentionMask.defined()) {
    if (attentionMask.sizes() != inputIds.sizes())
      throw Error("ClipTextModel: attention_mask " + shapeText(attentionMask.sizes()) + " must match input_ids " +
                  shapeText(inputIds.sizes()));
    const auto keys = attentionMask.to(device).ne(0).unsqueeze(1).unsqueeze(1);  // [B, 1, 1, L]
    allowed = at::logical_and(allowed, keys);                                    // [B, 1, L, L]
  }
  io.mask = at::zeros(allowed.sizes(), io.img.options()).masked_fill(allowed.logical_not(), lowestOf(dtype()));
  return io;
}

at::Tensor ClipTextModel::pooledPositions(const at::Tensor& inputIds) const {
  const auto ids = inputIds.to(at::kLong);
  // transformers: argmax of the ids for the legacy eos id 2, else the first eos
  // (argmax of a 0/1 row; a row without eos gives position 0, as there).
  if (cfg_.legacyArgmaxPooling()) return ids.argmax(-1);
  return ids.eq(cfg_.eosTokenId).to(at::kInt).argmax(-1);
}

ClipTextOutput ClipTextModel::head(const nn::BlockIO& io, const at::Tensor& inputIds) {
  ClipTextOutput out;
  out.lastHiddenState = finalLayerNorm->forward(io.img);  // [B, L, D]
  const auto& h = out.lastHiddenState;
  const auto positions = pooledPositions(inputIds).to(h.device()).to(at::kLong);           // [B]
  const auto index = positions.view({h.size(0), 1, 1}).expand({h.size(0), 1, h.size(2)});  // [B, 1, D]
  out.pooled = h.gather(1, index).squeeze(1);                                              // [B, D]
  return out;
}

ClipTextOutput ClipTextModel::forward(const at::Tensor& inputIds, const at::Tensor& attentionMask,
                                      nn::BlockRunner* runner) {
  nn::LocalRunner local;
  if (!runner) runner = &local;
  nn::BlockIO io = stem(inputIds, attentionMask);
  for (size_t i = 0; i < layers_.size(); ++i) io = runner->run(i, *layers_[i], io);
  io = runner->toHead(io);
  return head(io, inputIds);
}

nn::BlockList ClipTextModel::blockList() {
  nn::BlockList list;
  list.stem.id = "stem";
  list.stem.kind = "stem";
  list.stem.modules = {{"embeddings", embeddings_}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string id = "encoder.layers." + std::to_string(i);
    list.blocks.push_back({id, "layer", {{id, layers_[i]}}, layers_[i]});
  }
  list.head.id = "head";
  list.head.kind = "head";
  list.head.modules = {{"final_layer_norm", finalLayerNorm.ptr()}};
  return list;
}

}  // namespace strata::clip
