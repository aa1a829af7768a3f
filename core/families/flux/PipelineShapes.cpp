#include "families/flux/PipelineShapes.h"

#include <filesystem>
#include <system_error>

#include "common/Error.h"
#include "io/DiffusersFolder.h"
#include "models/clip/ClipCheckpoint.h"
#include "models/t5/T5Checkpoint.h"
#include "models/vae/VaeCheckpoint.h"
#include "families/flux/FluxPipeline.h"

namespace fs = std::filesystem;

namespace strata::families {

namespace {

bool hereAndSet(const fs::path& p) {
  std::error_code ec;
  return !p.empty() && fs::exists(p, ec);
}

// "config.json of DIR" when the component's config came from one, else its headers.
std::string sourceOf(const fs::path& configJson, const fs::path& weights) {
  if (!configJson.empty()) return "config.json of " + configJson.parent_path().string();
  return "shapes of " + weights.string() + " (headers only)";
}

}  // namespace

PipelineShapes PipelineShapes::flux1Presets() {
  PipelineShapes s;
  s.t5 = t5::T5Config::t5Xxl();
  s.clip = clip::ClipTextConfig::clipL();
  s.vae = vae::VaeConfig::flux1();
  s.t5Source = "preset t5-xxl";
  s.clipSource = "preset clip-l";
  s.vaeSource = "preset flux1 VAE";
  return s;
}

PipelineShapes pipelineShapesFromPaths(const std::string& nameOrPath, const std::string& vaePath,
                                       const std::string& clipPath, const std::string& t5Path,
                                       const std::string& tokenizerPath, std::optional<int64_t> vaeNormNumGroups,
                                       std::optional<int64_t> clipNumAttentionHeads) {
  PipelineShapes s = PipelineShapes::flux1Presets();
  const fs::path root(nameOrPath);
  if (!hereAndSet(root)) {
    const std::string note = " (" + nameOrPath + " not found here)";
    s.t5Source += note;
    s.clipSource += note;
    s.vaeSource += note;
    return s;
  }
  // Every single file must be here to resolve a single-file layout; a preview for
  // another machine may lack some: those keep their preset.
  const bool folder = fs::is_directory(root);
  PipelineFiles files;
  if (folder) {
    files = PipelineFiles::fromModelPaths(root, vaePath, clipPath, t5Path, tokenizerPath);
  } else {
    for (const auto& [key, path] : {std::pair<const char*, const std::string&>{"model.vae_path", vaePath},
                                    {"model.clip_path", clipPath},
                                    {"model.t5_path", t5Path}})
      if (path.empty())
        throw ConfigError(std::string(key) + ": required with a single-file transformer (" + nameOrPath +
                          "); see docs/pipeline.md");
    files.vae = vaePath;
    files.text.clip = clipPath;
    files.text.t5 = t5Path;
  }
  if (vaeNormNumGroups) files.vaeHints.normNumGroups = *vaeNormNumGroups;
  auto missing = [](const fs::path& p) { return " (" + p.string() + " not found here)"; };
  if (hereAndSet(files.text.t5)) {
    const auto ckpt = t5::T5Checkpoint::open(files.text.t5);
    s.t5 = files.text.t5Config.value_or(ckpt.config());
    s.t5Source = sourceOf(ckpt.configJsonPath(), files.text.t5);
  } else {
    s.t5Source += missing(files.text.t5);
  }
  if (hereAndSet(files.text.clip)) {
    const auto ckpt = clip::ClipCheckpoint::open(files.text.clip);
    s.clip = files.text.clipConfig.value_or(ckpt.config(clipNumAttentionHeads));
    s.clipSource = sourceOf(ckpt.configJsonPath(), files.text.clip);
  } else {
    s.clipSource += missing(files.text.clip);
  }
  if (hereAndSet(files.vae)) {
    const auto ckpt = vae::VaeCheckpoint::open(files.vae);
    s.vae = ckpt.config(files.vaeHints);
    s.vaeSource = sourceOf(ckpt.configJsonPath(), ckpt.path());
  } else {
    s.vaeSource += missing(files.vae);
  }
  return s;
}

}  // namespace strata::families
