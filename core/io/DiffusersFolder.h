#pragma once
// A diffusers pipeline folder's model_index.json: which subfolder holds a component.
#include <filesystem>
#include <string>
#include <vector>

namespace strata::io {

// True when `dir` holds a model_index.json (a diffusers pipeline root).
bool isDiffusersPipelineFolder(const std::filesystem::path& dir);

// The subfolder of the one component whose class (the second entry of its
// ["library", "Class"] pair) is in `classNames`, e.g. {"T5EncoderModel"} ->
// root/text_encoder_2. Throws IoError naming model_index.json when it is not
// valid JSON, names none or more than one such component, or the subfolder is absent.
std::filesystem::path diffusersComponentFolder(const std::filesystem::path& root,
                                               const std::vector<std::string>& classNames);

// What model_index.json says of the pipeline itself.
struct DiffusersPipelineInfo {
  std::string className;   // "_class_name": "Flux2KleinPipeline"; empty when absent
  bool distilled = false;  // "is_distilled" (FLUX.2 [klein]: one pass, no CFG); false when absent
};
// Throws IoError naming model_index.json when it is not a JSON object or a key
// has the wrong type.
DiffusersPipelineInfo diffusersPipelineInfo(const std::filesystem::path& root);

}  // namespace strata::io
