#include "models/flux/FluxLayout.h"

namespace strata::flux {

std::vector<FluxModuleSpec> fluxUnitLayout(FluxUnit unit, const FluxConfig& cfg) {
  const int64_t d = cfg.hiddenSize();
  const int64_t mlp = cfg.mlpHiddenSize();
  const int64_t hd = cfg.attentionHeadDim;
  const int64_t tc = FluxConfig::kTimestepChannels;
  using T = FluxModuleSpec::Type;
  auto linear = [](std::string path, int64_t in, int64_t out) {
    return FluxModuleSpec{std::move(path), T::Linear, in, out};
  };
  auto rmsNorm = [](std::string path, int64_t dim) {
    return FluxModuleSpec{std::move(path), T::RmsNorm, dim, dim, false};
  };
  switch (unit) {
    case FluxUnit::Stem: {
      std::vector<FluxModuleSpec> l{
          linear("x_embedder", cfg.inChannels, d),
          linear("context_embedder", cfg.jointAttentionDim, d),
          linear("time_text_embed.timestep_embedder.linear_1", tc, d),
          linear("time_text_embed.timestep_embedder.linear_2", d, d),
      };
      if (cfg.guidanceEmbeds) {
        l.push_back(linear("time_text_embed.guidance_embedder.linear_1", tc, d));
        l.push_back(linear("time_text_embed.guidance_embedder.linear_2", d, d));
      }
      l.push_back(linear("time_text_embed.text_embedder.linear_1", cfg.pooledProjectionDim, d));
      l.push_back(linear("time_text_embed.text_embedder.linear_2", d, d));
      return l;
    }
    case FluxUnit::Double:
      return {
          linear("norm1.linear", d, 6 * d),  // 6 modulations of the image stream
          linear("norm1_context.linear", d, 6 * d),
          linear("attn.to_q", d, d),
          linear("attn.to_k", d, d),
          linear("attn.to_v", d, d),
          rmsNorm("attn.norm_q", hd),
          rmsNorm("attn.norm_k", hd),
          linear("attn.add_q_proj", d, d),
          linear("attn.add_k_proj", d, d),
          linear("attn.add_v_proj", d, d),
          rmsNorm("attn.norm_added_q", hd),
          rmsNorm("attn.norm_added_k", hd),
          linear("attn.to_out.0", d, d),
          linear("attn.to_add_out", d, d),
          linear("ff.net.0.proj", d, mlp),
          linear("ff.net.2", mlp, d),
          linear("ff_context.net.0.proj", d, mlp),
          linear("ff_context.net.2", mlp, d),
      };
    case FluxUnit::Single:
      return {
          linear("norm.linear", d, 3 * d),                                  // 3 modulations
          linear("proj_mlp", d, mlp),      linear("proj_out", d + mlp, d),  // over concat(attn, mlp)
          linear("attn.to_q", d, d),       linear("attn.to_k", d, d),      linear("attn.to_v", d, d),
          rmsNorm("attn.norm_q", hd),      rmsNorm("attn.norm_k", hd),
      };
    case FluxUnit::Head:
      return {
          linear("norm_out.linear", d, 2 * d),  // (scale, shift)
          linear("proj_out", d, cfg.outChannels),
      };
  }
  return {};
}

}  // namespace strata::flux
