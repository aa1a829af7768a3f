#include "diffusion/ImageModels.h"

#include "common/Error.h"

namespace strata::diffusion {

ImageModels::ImageModels(std::unique_ptr<LatentCodec> codec, std::unique_ptr<TextEncoder> text)
    : codec_(std::move(codec)), text_(std::move(text)) {
  if (!codec_ || !text_) throw Error("ImageModels: a latent codec and a text encoder are both needed");
}

std::vector<train::TextEmbedding> ImageModels::encodeTexts(const std::vector<std::string>& texts) {
  const auto e = text_->encode(texts);
  if (e.mask.defined())
    throw Error("text encoding: the encoder gives a token mask, which the text cache does not hold yet");
  const auto tokens = e.tokens.to(at::kCPU, at::kFloat);                                      // [B, L, D]
  const auto pooled = e.pooled.defined() ? e.pooled.to(at::kCPU, at::kFloat) : at::Tensor();  // [B, P]
  std::vector<train::TextEmbedding> out;
  for (int64_t b = 0; b < tokens.size(0); ++b)
    out.push_back({tokens[b].contiguous(), pooled.defined() ? pooled[b].contiguous() : at::zeros({0}, at::kFloat)});
  return out;
}

}  // namespace strata::diffusion
