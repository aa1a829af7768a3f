#pragma once
// The parts of a FLUX.1 pipeline that an images training run needs beside the
// transformer: the VAE (pictures -> training latents while caching, sampled
// latents -> pictures) and the text encoders (captions and sample prompts -> the
// T5 sequence and the CLIP pooled vector). The VAE is loaded at once (it decodes
// the samples); T5 and CLIP are loaded on their first use, so a run whose cache is
// complete never reads them, and freed after caching (releaseTextEncoders).
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/FluxPipeline.h"
#include "pipeline/FluxTextEncoders.h"

namespace strata::vae {
class AutoencoderKL;
}

namespace strata::pipeline {

struct RunModelsOptions {
  PipelineFiles files;  // its vae and text parts (the transformer is the trainer's); tokenizers only when random
  // Random weights at FLUX.1's shapes (VaeConfig::flux1, T5-XXL, CLIP-L) with the
  // widths the transformer implies below; nothing but the tokenizers is read.
  bool randomWeights = false;
  uint64_t seed = 0;                  // of the random weights
  int64_t latentChannels = 16;        // the transformer's (in_channels / 4)
  int64_t jointAttentionDim = 4096;   // T5's width
  int64_t pooledProjectionDim = 768;  // CLIP's width
  int64_t maxSequenceLength = 512;    // T5 tokens
  at::Device device = at::kCPU;
  at::ScalarType vaeDtype = at::kFloat;  // requested; the VAE runs in vae::vaeComputeDtype of it
  at::ScalarType t5Dtype = at::kFloat;
  at::ScalarType clipDtype = at::kFloat;
  nn::QuantType t5Quantize = nn::QuantType::None;                 // model.quantize_te (TextEncoderOptions::t5Quantize)
  std::function<void(int64_t done, int64_t total)> onT5Progress;  // TextEncoderOptions::onT5Progress
};

class FluxRunModels {
 public:
  // Loads (or builds) the VAE and checks it against the transformer's latent
  // channels. Throws IoError / LoadError / ConfigError naming the file.
  explicit FluxRunModels(RunModelsOptions options);
  ~FluxRunModels();

  // pixels [B, 3, H, W] in [-1, 1] -> training latents (mean - shift) * scale,
  // [B, C, H/f, W/f] float32 on the CPU.
  at::Tensor encodeImages(const at::Tensor& pixels);
  // One row per text: t5 [B, L, D], pooled [B, P] (float32, on the CPU). Loads the
  // text encoders on the first call; throws strata::Error after releaseTextEncoders.
  PromptEmbeddings encodeTexts(const std::vector<std::string>& texts);
  // training latents [B, C, h, w] -> rgb [B, 3, h f, w f] in [0, 1], float32 on the CPU.
  at::Tensor decode(const at::Tensor& trainingLatents);

  void releaseTextEncoders();  // T5 and CLIP (loaded or not): a later encodeTexts throws
  void releaseVae();           // encodeImages and decode throw afterwards
  bool textEncodersLoaded() const { return text_ != nullptr; }

  // What the caches are keyed by: the files (name, size, modification time of
  // each), dtypes, lengths, or the random seed and shapes. Known without loading.
  const std::string& vaeIdentity() const { return vaeId_; }
  const std::string& textIdentity() const { return textId_; }
  int64_t downscaleFactor() const { return downscale_; }
  std::string describe() const;  // "VAE ae.safetensors (bfloat16, cuda:0), T5 ..., CLIP ..."

 private:
  void loadTextEncoders();
  RunModelsOptions opt_;
  std::shared_ptr<vae::AutoencoderKL> vae_;
  std::shared_ptr<FluxTextEncoders> text_;
  bool textReleased_ = false;
  int64_t downscale_ = 8;
  std::string vaeId_, textId_;
  std::string textFilesStamp_;  // the text encoders' and tokenizers' content hashes when the run started
  std::string textFilesStamp() const;
};

}  // namespace strata::pipeline
