#pragma once
// Helpers shared by the FLUX.2 transformer parity checks (kind "flux2_transformer"):
// the folder's config from its manifest and its inputs as model inputs.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>

#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Transformer.h"

namespace strata::parity {

inline flux2::Flux2Config flux2ConfigOf(const nlohmann::json& manifest) {
  return flux2::Flux2Config::fromDiffusersJson(manifest.at("config"));
}

// inputs.safetensors of a flux2_transformer fixture, as the model takes them
// (guidance is absent or ignored when the config has no guidance embedding).
inline flux2::Flux2Inputs flux2InputsOf(const std::map<std::string, at::Tensor>& in,
                                        const at::Device& device = at::kCPU) {
  flux2::Flux2Inputs x;
  x.img = in.at("hidden_states").to(device);
  x.txt = in.at("encoder_hidden_states").to(device);
  x.timestep = in.at("timestep").to(device);
  if (in.count("guidance")) x.guidance = in.at("guidance").to(device);
  x.imgIds = in.at("img_ids").to(device);
  x.txtIds = in.at("txt_ids").to(device);
  return x;
}

}  // namespace strata::parity
