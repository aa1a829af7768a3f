#pragma once
// nn::UnitBuilder (nn/UnitBuilder.h) over a FLUX layout: its rows become nn::Linears
// and FluxRmsNorms, registered at their paths in layout order. A model's
// constructors only pick their members by path. Shared by FLUX.1 and FLUX.2.
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/flux/FluxLayout.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Linear.h"
#include "nn/UnitBuilder.h"

namespace strata::flux {

class UnitBuilder {
 public:
  // `rmsEps`: the eps of every RMSNorm in the layout.
  UnitBuilder(torch::nn::Module& root, const std::vector<FluxModuleSpec>& layout, const FluxBuildOptions& options,
              double rmsEps = FluxConfig::kNormEps);

  // The module at `path`; throws strata::Error when the layout has none of that type there.
  nn::Linear linear(const std::string& path) const;
  FluxRmsNorm rmsNorm(const std::string& path) const;
  // The container at `path` ("time_text_embed"), made when the layout first needed it.
  std::shared_ptr<torch::nn::Module> container(const std::string& path);

 private:
  nn::UnitBuilder builder_;
};

}  // namespace strata::flux
