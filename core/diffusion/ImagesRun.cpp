#include "diffusion/ImagesRun.h"

#include <algorithm>

#include "common/Error.h"
#include "events/EventBus.h"
#include "train/ImageDataset.h"

namespace strata::diffusion {

bool hasImagesDataset(const config::RunConfig& cfg) {
  for (const auto& d : cfg.datasets)
    if (d.type == config::DatasetType::Images) return true;
  return false;
}

int64_t largestImagesResolution(const config::RunConfig& cfg) {
  int64_t px = 0;
  for (const auto& d : cfg.datasets)
    if (d.type == config::DatasetType::Images)
      for (int64_t r : d.resolution) px = std::max(px, r);
  return px;
}

std::string samplePromptText(const std::string& prompt, const std::string& triggerWord) {
  const std::string kTag = "[trigger]";
  std::string out = prompt;
  for (size_t pos = out.find(kTag); pos != std::string::npos; pos = out.find(kTag, pos + triggerWord.size()))
    out.replace(pos, kTag.size(), triggerWord);
  return out;
}

ImagesRun::ImagesRun(std::unique_ptr<ImageModels> models, const config::RunConfig& cfg,
                     const train::DatasetContext& ctx, const events::EventBus& bus)
    : models_(std::move(models)), cfg_(cfg), bus_(bus) {
  if (!models_) throw Error("ImagesRun: no image models");
  ImageModels* m = models_.get();
  auto images = imagesEncoded_;
  auto texts = textsEncoded_;
  encoders_.image = [m, images](const at::Tensor& pixels) {
    *images += pixels.size(0);
    return m->encodeImages(pixels);
  };
  encoders_.text = [m, texts](const std::vector<std::string>& t) {
    *texts += static_cast<int64_t>(t.size());
    return m->encodeTexts(t);
  };
  encoders_.imageModelId = m->imageModelId();
  encoders_.textModelId = m->textModelId();
  encoders_.maxSequenceLength = ctx.textTokens;
  // What every cache entry must be, checked as it is read.
  encoders_.latentChannels = ctx.latentChannels;
  encoders_.downscaleFactor = m->downscaleFactor();
  encoders_.textDim = ctx.textDim;
  encoders_.pooledDim = ctx.pooledDim;
  encoders_.stopRequested = ctx.stopRequested;
}

ImagesRun::~ImagesRun() = default;

void ImagesRun::finishCaching() {
  // The trigger word of the first images dataset that has one (ai-toolkit has one per job).
  const config::DatasetConfig* first = nullptr;
  std::string trigger;
  for (const auto& d : cfg_.datasets) {
    if (d.type != config::DatasetType::Images) continue;
    if (!first) first = &d;
    if (trigger.empty()) trigger = d.triggerWord;
  }
  if (!first) throw Error("ImagesRun: the run has no images dataset");
  prompts_.clear();
  promptEmbeddings_.clear();
  for (const auto& p : cfg_.sample.prompts) prompts_.push_back(samplePromptText(p, trigger));
  if (!prompts_.empty()) {
    const std::filesystem::path folder = first->cacheLatentsToDisk
                                             ? std::filesystem::path(first->folderPath) / train::kCacheFolderName
                                             : std::filesystem::path();
    train::EncodeCache cache(folder, encoders_, &bus_);
    cache.buildTexts(prompts_, "sample prompts");
    for (const auto& p : prompts_) promptEmbeddings_.push_back(cache.text(p));
  } else {
    models_->releaseDecoder();  // nothing to decode
  }
  // ai-toolkit's unload_text_encoder: T5 and CLIP are not needed for training.
  models_->releaseTextEncoders();
}

}  // namespace strata::diffusion
