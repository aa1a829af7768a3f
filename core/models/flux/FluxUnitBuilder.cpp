#include "models/flux/FluxUnitBuilder.h"

namespace strata::flux {

UnitBuilder::UnitBuilder(torch::nn::Module& root, const std::vector<FluxModuleSpec>& layout, const FluxBuildOptions& o,
                         double rmsEps)
    : builder_(root, layout, [&o, rmsEps](const FluxModuleSpec& m) -> std::shared_ptr<torch::nn::Module> {
        if (m.type == FluxModuleSpec::Type::Linear)
          return nn::Linear(m.inFeatures, m.outFeatures, m.bias, at::TensorOptions().device(o.device).dtype(o.dtype))
              .ptr();
        return FluxRmsNorm(m.outFeatures, o, rmsEps).ptr();
      }) {}

nn::Linear UnitBuilder::linear(const std::string& path) const { return nn::Linear(builder_.get<nn::LinearImpl>(path)); }

FluxRmsNorm UnitBuilder::rmsNorm(const std::string& path) const {
  return FluxRmsNorm(builder_.get<FluxRmsNormImpl>(path));
}

std::shared_ptr<torch::nn::Module> UnitBuilder::container(const std::string& path) { return builder_.container(path); }

}  // namespace strata::flux
