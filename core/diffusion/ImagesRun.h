#pragma once
// What a run with an `images` dataset adds to the loop (docs/training.md, "An
// images run"): the image and text encoders that fill the datasets' caches, the
// sample prompts' embeddings (encoded once, through the same text cache, the
// trigger word applied), and the decoder that turns sampled latents into
// pictures. Model-neutral: the family's text encoder and latent codec sit behind
// ImageModels (FLUX.1's: families/flux/FluxImageModels), and the family's run
// calls ImagesRun in a few places: before the datasets are built (encoders),
// after them (finishCaching: prompts encoded, the text encoders freed) and for
// each sample (promptEmbedding, decode).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "diffusion/ImageModels.h"
#include "train/Datasets.h"
#include "train/EncodeCache.h"
#include "train/TextEmbedder.h"

namespace strata::events {
class EventBus;
}

namespace strata::diffusion {

// Whether any of the run's datasets is an images folder.
bool hasImagesDataset(const config::RunConfig& cfg);
// The largest resolution over the run's images datasets (what the VAE encodes at
// most, for the plan); 0 without one.
int64_t largestImagesResolution(const config::RunConfig& cfg);
// A sample prompt as sampled: every [trigger] replaced by the trigger word (empty:
// removed); unlike a caption, nothing is put in front (ai-toolkit's rule).
std::string samplePromptText(const std::string& prompt, const std::string& triggerWord);

class ImagesRun {
 public:
  ImagesRun(std::unique_ptr<ImageModels> models, const config::RunConfig& cfg, const train::DatasetContext& ctx,
            const events::EventBus& bus);
  ~ImagesRun();

  // For the datasets' caches (DatasetContext::encoders). The calls are counted.
  const train::Encoders& encoders() const { return encoders_; }
  // After the datasets were built: the sample prompts through the text cache of
  // the first images dataset, then the text encoders freed (and the decoder too
  // when there are no sample prompts). Call releaseDeviceCaches afterwards.
  void finishCaching();

  size_t promptCount() const { return prompts_.size(); }
  const std::string& promptText(size_t i) const { return prompts_.at(i); }
  const train::TextEmbedding& promptEmbedding(size_t i) const { return promptEmbeddings_.at(i); }
  at::Tensor decode(const at::Tensor& latents) { return models_->decode(latents); }
  int64_t downscaleFactor() const { return models_->downscaleFactor(); }

  int64_t imagesEncoded() const { return *imagesEncoded_; }  // by this run, through encoders()
  int64_t textsEncoded() const { return *textsEncoded_; }

 private:
  std::unique_ptr<ImageModels> models_;
  config::RunConfig cfg_;
  const events::EventBus& bus_;
  train::Encoders encoders_;
  std::shared_ptr<int64_t> imagesEncoded_ = std::make_shared<int64_t>(0);
  std::shared_ptr<int64_t> textsEncoded_ = std::make_shared<int64_t>(0);
  std::vector<std::string> prompts_;
  std::vector<train::TextEmbedding> promptEmbeddings_;
};

}  // namespace strata::diffusion
