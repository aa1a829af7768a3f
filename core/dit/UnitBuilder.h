#pragma once
// nn::UnitBuilder (nn/UnitBuilder.h) over a DiT layout: its rows become nn::Linears
// and RMSNorms, registered at their paths in layout order. A model's
// constructors only pick their members by path. Shared by FLUX.1 and FLUX.2.
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dit/DitLayers.h"
#include "dit/ModuleSpec.h"
#include "nn/Linear.h"
#include "nn/UnitBuilder.h"

namespace strata::dit {

class UnitBuilder {
 public:
  // `rmsEps`: the eps of every RMSNorm in the layout.
  UnitBuilder(torch::nn::Module& root, const std::vector<ModuleSpec>& layout, const BuildOptions& options,
              double rmsEps = kNormEps);

  // The module at `path`; throws strata::Error when the layout has none of that type there.
  nn::Linear linear(const std::string& path) const;
  RmsNorm rmsNorm(const std::string& path) const;
  // A double block's attention modules ("attn.to_q" ... "attn.to_add_out").
  DoubleAttention doubleAttention(int64_t heads) const;
  // A double block's stream MLPs: "ff." / "ff_context." + `in` and `out`.
  StreamMlps streamMlps(const std::string& in, const std::string& out) const;
  // The timestep embedder under `prefix` and, with `guidance`, the guidance embedder.
  ScalarEmbedders scalarEmbedders(const std::string& prefix, bool guidance) const;
  // The container at `path` ("time_text_embed"), made when the layout first needed it.
  std::shared_ptr<torch::nn::Module> container(const std::string& path);

 private:
  nn::UnitBuilder builder_;
};

}  // namespace strata::dit
