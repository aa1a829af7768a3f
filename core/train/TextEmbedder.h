#pragma once
// A small deterministic caption embedder. Strata has no T5/CLIP encoder yet, so
// the demo and the built-in datasets turn captions into "text embeddings" this
// way: every lowercase word maps to a fixed random vector (seeded by a hash of
// the word), one token per word after a fixed start token, padded with zeros;
// the pooled vector is the mean of per-word pooled vectors. The same caption
// always gives the same embedding, and words shared by captions share vectors,
// which is all the demo model needs to learn "red" or "circle". It is NOT a
// language model: real runs use precomputed T5/CLIP embeddings (`latents`).
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace strata::train {

struct TextEmbedding {
  at::Tensor txt;     // [tokens, dim] float32
  at::Tensor pooled;  // [pooledDim] float32
};

class WordEmbedder {
 public:
  WordEmbedder(int64_t tokens, int64_t dim, int64_t pooledDim);

  // The empty caption gives the start token and zeros: the caption-dropout embedding.
  TextEmbedding embed(const std::string& caption) const;
  static std::vector<std::string> words(const std::string& caption);

  int64_t tokens() const { return tokens_; }
  int64_t dim() const { return dim_; }
  int64_t pooledDim() const { return pooledDim_; }

 private:
  at::Tensor wordVector(const std::string& word, int64_t size, uint64_t salt) const;
  int64_t tokens_, dim_, pooledDim_;
};

}  // namespace strata::train
