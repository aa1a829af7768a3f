#pragma once
// Which files of a text-encoder fixture hold what, read from its manifest's
// "files" descriptions (shared by the CPU parity checks and tests/gpu).
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace strata::parity {

// The one .safetensors entry of manifest["files"] whose description starts with
// "weights" (t5_encoder: "t5.safetensors": "weights, transformers naming").
inline std::string weightsFileOf(const nlohmann::json& manifest) {
  std::vector<std::string> found;
  for (const auto& [name, what] : manifest.at("files").items()) {
    const bool safetensors = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (safetensors && what.is_string() && what.get<std::string>().rfind("weights", 0) == 0) found.push_back(name);
  }
  if (found.size() != 1)
    throw std::runtime_error("manifest: expected one 'weights' file in \"files\", found " +
                             std::to_string(found.size()));
  return found[0];
}

// The one "singles/..." entry of manifest["files"] whose description names `className`
// ("singles/t5xxl.safetensors": "T5EncoderModel state dict, ...").
inline std::string singleFileOf(const nlohmann::json& manifest, const std::string& className) {
  std::vector<std::string> found;
  for (const auto& [name, what] : manifest.at("files").items()) {
    if (name.rfind("singles/", 0) == 0 && what.is_string() &&
        what.get<std::string>().find(className) != std::string::npos)
      found.push_back(name);
  }
  if (found.size() != 1)
    throw std::runtime_error("manifest: expected one singles/ file described as " + className + ", found " +
                             std::to_string(found.size()));
  return found[0];
}

}  // namespace strata::parity
