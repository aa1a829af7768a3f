#include "train/Buckets.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/Error.h"

namespace strata::train {

std::vector<Bucket> bucketsFor(int64_t resolution) {
  if (resolution < kBucketMultiple || resolution % kBucketMultiple != 0)
    throw ConfigError("bucket resolution " + std::to_string(resolution) + " is not a positive multiple of 16");
  const int64_t area = resolution * resolution;
  std::set<Bucket> out;
  for (int64_t w = kBucketMultiple; w <= resolution * 4; w += kBucketMultiple) {
    const int64_t h = area / w / kBucketMultiple * kBucketMultiple;  // largest multiple of 16 with w*h <= r^2
    if (h < kBucketMultiple) break;
    const double aspect = static_cast<double>(std::max(w, h)) / static_cast<double>(std::min(w, h));
    if (aspect > kMaxBucketAspect + 1e-9) continue;
    out.insert({w, h});
  }
  return {out.begin(), out.end()};
}

Bucket chooseBucket(const std::vector<Bucket>& buckets, int64_t width, int64_t height) {
  if (buckets.empty() || width <= 0 || height <= 0) throw Error("chooseBucket: no buckets or an empty image");
  const double target = std::log(static_cast<double>(width) / static_cast<double>(height));
  const Bucket* best = &buckets.front();
  double bestDist = 1e300;
  for (const Bucket& b : buckets) {
    const double d = std::abs(std::log(static_cast<double>(b.width) / static_cast<double>(b.height)) - target);
    if (d < bestDist - 1e-12 || (std::abs(d - bestDist) <= 1e-12 && b.width * b.height > best->width * best->height)) {
      best = &b;
      bestDist = d;
    }
  }
  return *best;
}

bool coversBucket(int64_t width, int64_t height, const Bucket& bucket) {
  return width >= bucket.width && height >= bucket.height;
}

at::Tensor resizeAndCrop(const at::Tensor& chw, const Bucket& bucket) {
  if (chw.dim() != 3) throw Error("resizeAndCrop: expected [C, H, W]");
  const int64_t h = chw.size(1), w = chw.size(2);
  const double scale = std::max(static_cast<double>(bucket.width) / w, static_cast<double>(bucket.height) / h);
  // Rounded up so that the scaled image still covers the bucket.
  const int64_t sh = std::max(bucket.height, static_cast<int64_t>(std::ceil(h * scale - 1e-6)));
  const int64_t sw = std::max(bucket.width, static_cast<int64_t>(std::ceil(w * scale - 1e-6)));
  at::Tensor x = chw.to(at::kFloat).unsqueeze(0);                               // [1, C, H, W]
  if (sh != h || sw != w) x = at::_upsample_bilinear2d_aa(x, {sh, sw}, false);  // [1, C, sh, sw]
  const int64_t top = (sh - bucket.height) / 2, left = (sw - bucket.width) / 2;
  return x.squeeze(0).narrow(1, top, bucket.height).narrow(2, left, bucket.width).contiguous();  // [C, bh, bw]
}

}  // namespace strata::train
