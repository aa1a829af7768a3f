#include "models/flux/FluxLoraRules.h"

#include "models/flux/FluxNames.h"

namespace strata::flux {

FluxLoraRules::FluxLoraRules(const FluxConfig& cfg)
    : dit::BflLoraRules(fluxParamPlan(cfg), names::bflNames(cfg),
                        {"FLUX.1",
                         {{"ss_network_module", "networks.lora_flux"},
                          {"ss_base_model_version", "flux1"},
                          {"modelspec.architecture", "flux-1-dev/lora"},
                          {"modelspec.implementation", "https://github.com/black-forest-labs/flux"}},
                         /*onlyModelLinears=*/false}) {}

}  // namespace strata::flux
