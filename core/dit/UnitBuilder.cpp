#include "dit/UnitBuilder.h"

#include "common/Error.h"

namespace strata::dit {

UnitBuilder::UnitBuilder(torch::nn::Module& root, const std::vector<ModuleSpec>& layout, const BuildOptions& o,
                         double rmsEps)
    : builder_(root, layout, [&o, rmsEps](const ModuleSpec& m) -> std::shared_ptr<torch::nn::Module> {
        if (m.type == ModuleSpec::Type::Linear)
          return nn::Linear(m.inFeatures, m.outFeatures, m.bias, at::TensorOptions().device(o.device).dtype(o.dtype))
              .ptr();
        if (m.type == ModuleSpec::Type::RmsNorm) return RmsNorm(m.outFeatures, o, rmsEps).ptr();
        throw Error("UnitBuilder: a DiT layout holds Linears and RMSNorms only ('" + m.path + "')");
      }) {}

nn::Linear UnitBuilder::linear(const std::string& path) const { return nn::Linear(builder_.get<nn::LinearImpl>(path)); }

RmsNorm UnitBuilder::rmsNorm(const std::string& path) const { return RmsNorm(builder_.get<RmsNormImpl>(path)); }

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

std::shared_ptr<torch::nn::Module> UnitBuilder::container(const std::string& path) { return builder_.container(path); }

}  // namespace strata::dit
