#include "models/flux2/Flux2LoraRules.h"

#include "models/flux2/Flux2Layout.h"
#include "models/flux2/Flux2Names.h"

namespace strata::flux2 {

Flux2LoraRules::Flux2LoraRules(const Flux2Config& cfg)
    : dit::BflLoraRules(flux2ParamPlan(cfg), Flux2Names(cfg),
                        {"FLUX.2",
                         {{"ss_base_model_version", "flux2"},
                          {"modelspec.architecture", "flux-2-dev/lora"},
                          {"modelspec.implementation", "https://github.com/black-forest-labs/flux2"}},
                         /*onlyModelLinears=*/true,
                         // diffusers' reader of FLUX.2's ComfyUI form refuses ".alpha" keys;
                         // ComfyUI and stable-diffusion.cpp scale by 1 without them.
                         /*alphaFoldedForms=*/{nn::LoraFileFormat::Comfy}}) {}

}  // namespace strata::flux2
