#pragma once
// What the trainer, `strata-train plan` and the app's planned GPU map share, so
// the plan a user previews is the plan a run makes: the FLUX shape a run config
// describes, the tokens of one sample, and the planner's input, all from shapes
// alone (no weights are read). Light to include (no ATen), as the UI needs. Devices are left to each caller: the trainer's
// real, capped ones; the CLI's and the app's real or simulated ones.
#include <cstdint>
#include <map>
#include <string>

#include "config/RunConfig.h"
#include "models/flux/FluxConfig.h"
#include "placement/Planner.h"

namespace strata::train {

// `base` (a preset or a checkpoint's shapes) with the config's explicit shape
// keys applied (model.num_layers, in_channels, ...), then validated.
flux::FluxConfig withShapeOverrides(flux::FluxConfig base, const config::ModelConfig& m);

// The shape to plan with, from the config alone: the preset, or the checkpoint's
// headers when model.name_or_path exists here (random_weights off), else
// flux-dev (a plan may be made on a machine that lacks the file); then the
// overrides. `source` (optional) says which, for the user.
flux::FluxConfig planFluxConfig(const config::ModelConfig& m, std::string* source = nullptr);

// Image plus text tokens of one training sample at the largest dataset
// resolution: through the VAE (8x), or the demo's pixel code, packed 2x2; the
// text tokens the trainer gives a model of this width (defaultTextTokens).
int64_t planTokens(const config::RunConfig& cfg, const flux::FluxConfig& fc);

struct RunPlanInput {
  placement::PlannerInput input;        // devices empty: the caller's to fill
  std::map<std::string, int> adapters;  // LoRA adapters per unit id ("stem", "transformer_blocks.0", ...)
};

// Per-unit parameters and LoRA-targeted Linears (network.target_modules), the
// cost options of the config (dtype, rank, EMA, batch, checkpointing), the
// placement mode and ai-toolkit's other-module scale.
RunPlanInput runPlanInput(const config::RunConfig& cfg, const flux::FluxConfig& fc, int64_t tokens);

}  // namespace strata::train
