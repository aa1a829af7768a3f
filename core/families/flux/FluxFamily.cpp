#include "families/flux/FluxFamily.h"

#include "families/flux/FluxPlanning.h"
#include "families/flux/FluxRun.h"
#include "lora/LoraFormats.h"
#include "models/flux/FluxLoraRules.h"
#include "placement/Planner.h"

namespace strata::families {

namespace {

class FluxFamily : public train::ModelFamily {
 public:
  std::string arch() const override { return "flux"; }
  std::unique_ptr<train::FamilyRun> newRun() const override { return std::make_unique<FluxRun>(); }

  train::FamilyPlan plan(const config::RunConfig& cfg) const override {
    train::FamilyPlan out;
    const auto fc = planFluxConfig(cfg.model, &out.source);
    PlannedTokens tokens = planTokenCounts(cfg, fc);
    out.tokens = tokens.total();
    out.tokensNote = std::move(tokens.note);
    out.input = runPlanInput(cfg, fc, out.tokens);
    out.summary = "FLUX " + out.source + ", " + std::to_string(fc.numLayers) + " double + " +
                  std::to_string(fc.numSingleLayers) + " single blocks, " +
                  placement::formatParams(flux::fluxParamPlan(fc).totalParams()) + " parameters";
    return out;
  }
  // A preset's shape cannot fail but for its overrides; a checkpoint's headers can.
  std::string planKey(const config::RunConfig& cfg) const override {
    return cfg.model.randomWeights || cfg.model.nameOrPath.empty() ? "model" : "model.name_or_path";
  }
  std::vector<placement::OtherModule> otherModules(const config::RunConfig& cfg, const std::string& device,
                                                   std::string* note) const override {
    return fluxOtherModules(cfg, device, note);
  }
  double trainStepFlops(const config::RunConfig& cfg) const override {
    return families::trainStepFlops(cfg, planFluxConfig(cfg.model));
  }
  std::string checkpointPrefix() const override { return "transformer."; }
  config::RunConfig tinyRun(const std::filesystem::path& folder) const override {
    config::RunConfig c = train::tinyRunSettings("flux", folder);
    c.model.preset = "tiny";
    config::DatasetConfig d;
    d.type = config::DatasetType::Synthetic;
    d.resolution = {32};  // 4x4 latents: 4 image tokens
    d.numItems = 4;
    c.datasets = {d};
    c.save.exportFormats = {config::ExportFormat::Diffusers, config::ExportFormat::Kohya, config::ExportFormat::Comfy};
    return c;
  }
  std::vector<train::ConfigTemplate> templates() const override {
    const std::string images = "The folder of your images (each with a .txt caption of the same name)";
    const std::string model =
        "The FLUX.1-dev folder (diffusers layout, as downloaded; cancel to set it later, or a .safetensors file)";
    return {
        {"demo", "demo.yaml", "CPU demo: a tiny model, no download",
         "A few-MB model with the FLUX architecture learns coloured shapes on the CPU in minutes. Shows the "
         "whole loop: loss, samples, checkpoints, LoRA export.",
         "", true, "", "", "model.name_or_path", "Try the demo",
         "A tiny model on the CPU, nothing to download: press Start training next"},
        {"flux-my-images-1gpu", "flux-my-images-1gpu.yaml", "FLUX.1-dev on my images, one GPU (24 GB and up)",
         "A LoRA of your own pictures. You pick the image folder and the FLUX.1-dev folder (or its .safetensors "
         "file). The frozen base is held in 8 bits so it fits a 24 GB card; a LoRA file every 250 steps.",
         "datasets[0].folder_path", true, images, model, "model.name_or_path", "New from my images...",
         "A FLUX.1-dev LoRA of your pictures: asks for the image folder"},
        {"flux-my-images-4x16gb", "flux-my-images-4x16gb.yaml", "FLUX.1-dev on my images, four 16 GB GPUs",
         "A LoRA of your own pictures, the model's blocks shared out over four cards capped at 16 GB each. You "
         "pick the image folder and the FLUX.1-dev folder (or its .safetensors file).",
         "datasets[0].folder_path", true, images, model},
        {"flux-dev-1gpu", "flux-dev-1gpu.yaml", "FLUX.1-dev on one large GPU (40 GB and up), random weights",
         "The whole model on one card, from random weights on synthetic data: see the plan and the speed before "
         "you download anything. A 24 GB card falls about 4 GB short unless the model is quantized.",
         "", true, ""},
        {"flux-dev-split-4x16gb", "flux-dev-split-4x16gb.yaml", "FLUX.1-dev split over four 16 GB GPUs, random weights",
         "The blocks shared out over four cards, each capped at 16 GB, from random weights on synthetic data.", "",
         true, ""},
    };
  }
  std::string formatProblem(config::ExportFormat format) const override {
    return format == config::ExportFormat::Peft
               ? "peft (an adapter folder) is the causal-LM form; a FLUX LoRA is written as diffusers, kohya or comfy"
               : "";
  }

  void exportModules(const std::vector<lora::LoraModuleWeights>& modules, const config::RunConfig& cfg,
                     config::ExportFormat format, const std::filesystem::path& path, int64_t step,
                     const std::string& softwareVersion) const override {
    const double alpha = modules.empty() ? cfg.network.linearAlpha : modules.front().alpha;
    const flux::FluxLoraRules rules(planFluxConfig(cfg.model));
    lora::writeLoraFile(path, modules, rules, fluxExportOptions(cfg, format, step, alpha, "", softwareVersion));
  }
};

}  // namespace

std::shared_ptr<const train::ModelFamily> makeFluxFamily() { return std::make_shared<FluxFamily>(); }

}  // namespace strata::families
