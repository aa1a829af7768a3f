#include "models/flux2/Flux2Layout.h"

#include <string>
#include <utility>

namespace strata::flux2 {

std::vector<FluxModuleSpec> flux2UnitLayout(FluxUnit unit, const Flux2Config& cfg) {
  const int64_t d = cfg.hiddenSize();
  const int64_t mlp = cfg.mlpHiddenSize();
  const int64_t hd = cfg.attentionHeadDim;
  const int64_t tc = cfg.timestepGuidanceChannels;
  using T = FluxModuleSpec::Type;
  auto linear = [](std::string path, int64_t in, int64_t out) {
    return FluxModuleSpec{std::move(path), T::Linear, in, out, /*bias=*/false};
  };
  auto rmsNorm = [](std::string path, int64_t dim) {
    return FluxModuleSpec{std::move(path), T::RmsNorm, dim, dim, false};
  };
  switch (unit) {
    case FluxUnit::Stem: {
      std::vector<FluxModuleSpec> l{
          linear("time_guidance_embed.timestep_embedder.linear_1", tc, d),
          linear("time_guidance_embed.timestep_embedder.linear_2", d, d),
      };
      if (cfg.guidanceEmbeds) {
        l.push_back(linear("time_guidance_embed.guidance_embedder.linear_1", tc, d));
        l.push_back(linear("time_guidance_embed.guidance_embedder.linear_2", d, d));
      }
      // The shared modulation: (shift, scale, gate) x 2 for the double blocks' streams, x 1 for the single blocks.
      l.push_back(linear("double_stream_modulation_img.linear", d, 6 * d));
      l.push_back(linear("double_stream_modulation_txt.linear", d, 6 * d));
      l.push_back(linear("single_stream_modulation.linear", d, 3 * d));
      l.push_back(linear("x_embedder", cfg.inChannels, d));
      l.push_back(linear("context_embedder", cfg.jointAttentionDim, d));
      return l;
    }
    case FluxUnit::Double:
      return {
          linear("attn.to_q", d, d),
          linear("attn.to_k", d, d),
          linear("attn.to_v", d, d),
          rmsNorm("attn.norm_q", hd),
          rmsNorm("attn.norm_k", hd),
          linear("attn.to_out.0", d, d),
          rmsNorm("attn.norm_added_q", hd),
          rmsNorm("attn.norm_added_k", hd),
          linear("attn.add_q_proj", d, d),
          linear("attn.add_k_proj", d, d),
          linear("attn.add_v_proj", d, d),
          linear("attn.to_add_out", d, d),
          linear("ff.linear_in", d, 2 * mlp),  // SwiGLU: (gate, up)
          linear("ff.linear_out", mlp, d),
          linear("ff_context.linear_in", d, 2 * mlp),
          linear("ff_context.linear_out", mlp, d),
      };
    case FluxUnit::Single:
      return {
          linear("attn.to_qkv_mlp_proj", d, 3 * d + 2 * mlp),  // q, k, v, gate, up
          rmsNorm("attn.norm_q", hd), rmsNorm("attn.norm_k", hd),
          linear("attn.to_out", d + mlp, d),  // over concat(attention, mlp)
      };
    case FluxUnit::Head:
      return {
          linear("norm_out.linear", d, 2 * d),  // (scale, shift)
          linear("proj_out", d, cfg.patchSize * cfg.patchSize * cfg.outChannels),
      };
  }
  return {};
}

dit::FluxParamPlan flux2ParamPlan(const Flux2Config& cfg) {
  cfg.validate();
  return dit::paramPlanOf(flux2Layout(cfg), cfg.numLayers, cfg.numSingleLayers);
}

dit::UnitLayout flux2Layout(const Flux2Config& cfg) {
  return [cfg](FluxUnit unit) { return flux2UnitLayout(unit, cfg); };
}

double flux2TrainStepFlops(const Flux2Config& cfg, int64_t batch, int64_t imageTokens, int64_t textTokens,
                           int64_t loraRank, const std::function<bool(const std::string&)>& hasLora) {
  auto perSample = [](const std::string& path) {
    return path.find("time_guidance_embed") != std::string::npos || path.find("_modulation") != std::string::npos ||
           path.find("norm_out.linear") != std::string::npos;
  };
  return dit::trainStepFlops(flux2ParamPlan(cfg), cfg.hiddenSize(), batch, imageTokens, textTokens, loraRank, perSample,
                             hasLora);
}

}  // namespace strata::flux2
