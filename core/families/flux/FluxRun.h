#pragma once
// FLUX.1's side of one training run (train::FamilyRun): the datasets (latents and
// text embeddings; an images dataset through the VAE and text encoders), the
// transformer built, frozen and placed, the flow-matching micro-step, the image
// samples and the LoRA file forms (diffusers, kohya, comfy).
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "config/RunConfig.h"
#include "diffusion/ImagesRun.h"
#include "lora/LoraFormats.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxTransformer.h"
#include "train/Datasets.h"
#include "train/ModelFamily.h"
#include "train/TextEmbedder.h"

namespace strata::families {

class FluxRun : public train::FamilyRun {
 public:
  void prepareData(train::RunContext& run) override;
  train::PlacedModel buildAndPlace(train::RunContext& run) override;
  torch::nn::Module& module() override { return *model_; }
  const nn::LoraNameRules& loraRules() const override { return *rules_; }
  // [img (noised, packed), txt, pooled, timestep, guidance, imgIds, txtIds, target (packed)]
  std::vector<at::Tensor> microBatch(train::RunContext& run, int64_t batch, int64_t step) override;
  at::Tensor microLoss(train::RunContext& run, const std::vector<at::Tensor>& batch) override;
  std::string microBatchShapeChange() const override;
  train::Sample sample(train::RunContext& run, int64_t step, size_t promptIndex) override;
  void exportLora(train::RunContext& run, config::ExportFormat format, const std::filesystem::path& path, int64_t step,
                  const std::string& runYaml, const std::string& softwareVersion) override;
  void release() override;

 private:
  flux::FluxConfig config_;  // the shape prepareRun planned (planFluxConfig)
  std::shared_ptr<train::Dataset> dataset_;
  std::unique_ptr<train::WordEmbedder> promptEmbedder_;
  train::TextEmbedding emptyPrompt_;
  std::unique_ptr<diffusion::ImagesRun> images_;  // an images run: its encoders, sample prompts and decoder
  bool pixelCode_ = false;                        // the shapes demo: latents are the pixel code
  std::shared_ptr<flux::FluxTransformer> model_;
  std::unique_ptr<flux::FluxLoraRules> rules_;
};

// The LoRA file's options and metadata for a run (`runYaml` empty: written from cfg).
lora::LoraExportOptions fluxExportOptions(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                          double alpha, const std::string& runYaml, const std::string& softwareVersion);

}  // namespace strata::families
