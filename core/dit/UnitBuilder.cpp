#include "dit/UnitBuilder.h"

#include "common/Error.h"

namespace strata::dit {

namespace {

template <class Map>
typename Map::mapped_type findIn(const Map& map, const std::string& path) {
  const auto it = map.find(path);
  if (it == map.end()) throw Error("UnitBuilder: the layout has no module '" + path + "' of that type");
  return it->second;
}

}  // namespace

UnitBuilder::UnitBuilder(torch::nn::Module& root, const std::vector<ModuleSpec>& layout, const BuildOptions& o,
                         double rmsEps)
    : root_(root) {
  const auto options = at::TensorOptions().device(o.device).dtype(o.dtype);
  for (const auto& m : layout) {
    const auto dot = m.path.rfind('.');
    torch::nn::Module& parent = dot == std::string::npos ? root_ : *container(m.path.substr(0, dot));
    const std::string leaf = dot == std::string::npos ? m.path : m.path.substr(dot + 1);
    if (m.type == ModuleSpec::Type::Linear) {
      linears_.emplace(m.path, parent.register_module(leaf, nn::Linear(m.inFeatures, m.outFeatures, m.bias, options)));
    } else {
      norms_.emplace(m.path, parent.register_module(leaf, RmsNorm(m.outFeatures, o, rmsEps)));
    }
  }
}

nn::Linear UnitBuilder::linear(const std::string& path) const { return findIn(linears_, path); }

RmsNorm UnitBuilder::rmsNorm(const std::string& path) const { return findIn(norms_, path); }

DoubleAttention UnitBuilder::doubleAttention(int64_t heads) const {
  DoubleAttention a;
  a.imgQkv = {linear("attn.to_q"), linear("attn.to_k"), linear("attn.to_v")};
  a.txtQkv = {linear("attn.add_q_proj"), linear("attn.add_k_proj"), linear("attn.add_v_proj")};
  a.normQ = rmsNorm("attn.norm_q");
  a.normK = rmsNorm("attn.norm_k");
  a.normAddedQ = rmsNorm("attn.norm_added_q");
  a.normAddedK = rmsNorm("attn.norm_added_k");
  a.toOut = linear("attn.to_out.0");
  a.toAddOut = linear("attn.to_add_out");
  a.heads = heads;
  return a;
}

StreamMlps UnitBuilder::streamMlps(const std::string& in, const std::string& out) const {
  return {linear("ff." + in), linear("ff." + out), linear("ff_context." + in), linear("ff_context." + out)};
}

ScalarEmbedders UnitBuilder::scalarEmbedders(const std::string& prefix, bool guidance) const {
  ScalarEmbedders e;
  e.timeLinear1 = linear(prefix + ".timestep_embedder.linear_1");
  e.timeLinear2 = linear(prefix + ".timestep_embedder.linear_2");
  if (guidance) {
    e.guidanceLinear1 = linear(prefix + ".guidance_embedder.linear_1");
    e.guidanceLinear2 = linear(prefix + ".guidance_embedder.linear_2");
  }
  return e;
}

std::shared_ptr<torch::nn::Module> UnitBuilder::container(const std::string& path) {
  const auto it = containers_.find(path);
  if (it != containers_.end()) return it->second;
  const auto dot = path.rfind('.');
  torch::nn::Module& parent = dot == std::string::npos ? root_ : *container(path.substr(0, dot));
  auto made = parent.register_module(dot == std::string::npos ? path : path.substr(dot + 1),
                                     std::make_shared<torch::nn::Module>());
  containers_.emplace(path, made);
  return made;
}

}  // namespace strata::dit
