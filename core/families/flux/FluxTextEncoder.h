#pragma once
// FLUX.1's text side as the image path's text encoder: T5's sequence (the tokens
// the transformer attends to, no mask) and CLIP's pooled vector, both from
// FluxTextEncoders. One encoder, not two: FLUX.1's cache key names both at once
// (an existing cache stays valid) and both load, and are freed, together.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "diffusion/TextEncoder.h"

namespace strata::families {

class FluxTextEncoders;

class FluxTextEncoder final : public diffusion::TextEncoder {
 public:
  using Loader = std::function<std::shared_ptr<FluxTextEncoders>()>;
  // `load` runs on the first encode() (a run whose cache is complete never reads
  // T5 and CLIP); `identity` is the text cache's key.
  FluxTextEncoder(Loader load, std::string identity, int64_t sequenceLength);
  // Encoders loaded already (a sampling pipeline); identity: theirs.
  explicit FluxTextEncoder(std::shared_ptr<FluxTextEncoders> loaded);
  ~FluxTextEncoder() override;

  // tokens: T5 [B, L, d_model], pooled: CLIP [B, hidden] (their dtypes, their device).
  diffusion::TextEncoding encode(const std::vector<std::string>& prompts) override;
  const std::string& identity() const override { return identity_; }
  int64_t sequenceLength() const override { return sequenceLength_; }
  void release() override;
  bool loaded() const override { return encoders_ != nullptr; }

 private:
  Loader load_;
  std::shared_ptr<FluxTextEncoders> encoders_;
  std::string identity_;
  int64_t sequenceLength_ = 0;
  bool released_ = false;
};

}  // namespace strata::families
