#pragma once
// What the "flux2_pipeline" checks share (fixtures/README.md): the folder's parts
// (diffusers model/, BFL singles/), its manifest fields, its tensors, and the
// tolerance of each output (the manifest's overrides first, then its default).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>

#include "io/Safetensors.h"
#include "parity/FluxFixture.h"

namespace strata::parity {

struct Flux2PipelineFixture {
  std::filesystem::path dir;
  nlohmann::json manifest;
  std::map<std::string, at::Tensor> inputs;   // noise, noise_packed, latent_ids, image
  std::map<std::string, at::Tensor> outputs;  // see the manifest's "files"

  Flux2PipelineFixture(std::filesystem::path folder, nlohmann::json m)
      : dir(std::move(folder)), manifest(std::move(m)) {
    inputs = io::loadSafetensors(dir / "inputs.safetensors");
    outputs = io::loadSafetensors(dir / "outputs.safetensors");
  }

  std::filesystem::path modelDir() const { return dir / "model"; }
  std::filesystem::path singleTransformer() const { return dir / "singles" / "flux2.safetensors"; }
  std::filesystem::path singleVae() const { return dir / "singles" / "flux2-vae.safetensors"; }
  std::filesystem::path loraFile() const { return dir / "lora.safetensors"; }
  std::string variant() const { return manifest.at("variant").get<std::string>(); }

  // The tolerance for output `name`: tolerance_overrides[name] when present
  // (the sampled latents and the decoded images carry looser ones), else the default.
  Tolerance toleranceFor(const std::string& name) const {
    Tolerance t = toleranceOf(manifest);
    if (manifest.contains("tolerance_overrides") && manifest["tolerance_overrides"].contains(name)) {
      const auto& o = manifest["tolerance_overrides"][name];
      t.atol = o.value("atol", t.atol);
      t.rtol = o.value("rtol", t.rtol);
    }
    return t;
  }
};

}  // namespace strata::parity
