#include "train/TextEmbedder.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cctype>
#include <cmath>

namespace strata::train {

namespace {
uint64_t fnv1a(const std::string& s, uint64_t salt) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
}  // namespace

WordEmbedder::WordEmbedder(int64_t tokens, int64_t dim, int64_t pooledDim)
    : tokens_(tokens), dim_(dim), pooledDim_(pooledDim) {}

std::vector<std::string> WordEmbedder::words(const std::string& caption) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : caption) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

at::Tensor WordEmbedder::wordVector(const std::string& word, int64_t size, uint64_t salt) const {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(fnv1a(word, salt));
  return at::randn({size}, gen, at::kFloat);
}

TextEmbedding WordEmbedder::embed(const std::string& caption) const {
  TextEmbedding e;
  e.txt = at::zeros({tokens_, dim_}, at::kFloat);  // [tokens, dim]
  e.pooled = at::zeros({pooledDim_}, at::kFloat);
  if (tokens_ > 0) e.txt[0].copy_(wordVector("<start>", dim_, 1));
  const auto ws = words(caption);
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(ws.size()), tokens_ - 1);
  for (int64_t i = 0; i < n; ++i) e.txt[i + 1].copy_(wordVector(ws[i], dim_, 1));
  if (!ws.empty()) {
    for (const auto& w : ws) e.pooled.add_(wordVector(w, pooledDim_, 2));
    e.pooled.div_(std::sqrt(static_cast<double>(ws.size())));
  }
  return e;
}

}  // namespace strata::train
