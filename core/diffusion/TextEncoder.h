#pragma once
// A text encoder of an image model as the generic image path sees it (the images
// run's caches, `strata-train sample`): prompts in, the token sequence the
// transformer attends to and, for a model that takes one, a pooled vector out.
// A family adapts its encoders to it (FLUX.1's T5 + CLIP:
// families/flux/FluxTextEncoder.h); a model with several encoders whose outputs
// it combines is one TextEncoder.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace strata::diffusion {

struct TextEncoding {
  at::Tensor tokens;  // [B, L, D], in the encoder's dtype, on its device
  at::Tensor mask;    // [B, L] bool (true: a real token), or undefined: every position counts
  at::Tensor pooled;  // [B, P] like tokens, or undefined: the model takes no pooled vector
};

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  // One row per prompt. May load the weights on the first call (a run whose
  // cache is complete never reads them). Throws ConfigError for an empty list,
  // strata::Error after release().
  virtual TextEncoding encode(const std::vector<std::string>& prompts) = 0;
  // What the text cache is keyed by: changes whenever the encodings would (the
  // weights' content, dtypes, lengths; or the random seed and shapes). Known
  // without loading the weights.
  virtual const std::string& identity() const = 0;
  virtual int64_t sequenceLength() const = 0;  // L
  // Frees the weights for good (after caching): a later encode() throws.
  virtual void release() = 0;
  virtual bool loaded() const = 0;
};

}  // namespace strata::diffusion
