#pragma once
// An image model's encoders and decoder for an images run: its text encoder and
// latent codec (diffusion/TextEncoder.h, LatentCodec.h), in the form the
// datasets' caches take them (train::TextEmbedding: one row per text, float32 on
// the CPU). The family builds the two (FLUX.1: families/flux/FluxImageModels.h).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "diffusion/LatentCodec.h"
#include "diffusion/TextEncoder.h"
#include "train/TextEmbedder.h"

namespace strata::diffusion {

class ImageModels {
 public:
  // Throws strata::Error when either is missing.
  ImageModels(std::unique_ptr<LatentCodec> codec, std::unique_ptr<TextEncoder> text);

  // pixels [B, 3, H, W] in [-1, 1] -> training latents [B, C, H/f, W/f] (float32, CPU).
  at::Tensor encodeImages(const at::Tensor& pixels) { return codec_->encode(pixels); }
  // One embedding per text: txt [L, D], pooled [P] (float32, CPU; pooled empty when
  // the encoder gives none). Throws strata::Error for an encoder with a mask: the
  // cache holds no mask yet.
  std::vector<train::TextEmbedding> encodeTexts(const std::vector<std::string>& texts);
  // training latents [B, C, h, w] -> rgb [B, 3, h f, w f] in [0, 1] (float32, CPU).
  at::Tensor decode(const at::Tensor& latents) { return codec_->decode(latents); }
  void releaseTextEncoders() { text_->release(); }  // after caching: a later encodeTexts throws
  void releaseDecoder() { codec_->release(); }      // when nothing is sampled
  bool textEncodersLoaded() const { return text_->loaded(); }
  // Cache keys: change whenever the encoders' results would.
  const std::string& imageModelId() const { return codec_->identity(); }
  const std::string& textModelId() const { return text_->identity(); }
  int64_t downscaleFactor() const { return codec_->downscaleFactor(); }

  TextEncoder& textEncoder() { return *text_; }
  LatentCodec& codec() { return *codec_; }

 private:
  std::unique_ptr<LatentCodec> codec_;
  std::unique_ptr<TextEncoder> text_;
};

}  // namespace strata::diffusion
