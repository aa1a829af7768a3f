#pragma once
// Helpers shared by the FLUX transformer parity checks: the manifest's
// tolerance and the fixture inputs as model inputs.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "models/flux/FluxTransformer.h"

namespace strata::parity {

struct Tolerance {
  double atol = 1e-4;
  double rtol = 1e-3;
};

inline Tolerance toleranceOf(const nlohmann::json& manifest) {
  Tolerance t;
  if (manifest.contains("tolerance")) {
    t.atol = manifest["tolerance"].value("atol", t.atol);
    t.rtol = manifest["tolerance"].value("rtol", t.rtol);
  }
  return t;
}

// inputs.safetensors of a flux_transformer fixture, as the model takes them.
inline flux::FluxInputs inputsOf(const std::map<std::string, at::Tensor>& in) {
  flux::FluxInputs x;
  x.img = in.at("hidden_states");
  x.txt = in.at("encoder_hidden_states");
  x.pooled = in.at("pooled_projections");
  x.timestep = in.at("timestep");
  x.guidance = in.at("guidance");
  x.imgIds = in.at("img_ids");
  x.txtIds = in.at("txt_ids");
  return x;
}

}  // namespace strata::parity
