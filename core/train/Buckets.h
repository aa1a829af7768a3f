#pragma once
// Aspect-ratio buckets (the kohya / ai-toolkit scheme): for a base resolution r
// every bucket has sides that are multiples of 16 (8x VAE, 2x2 packing) and an
// area at most r^2 and within one 16-px step of it; aspects run from 1:4 to 4:1.
// An image goes to the bucket of closest aspect, is resized to cover it and
// centre-cropped.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace strata::train {

constexpr int64_t kBucketMultiple = 16;
constexpr double kMaxBucketAspect = 4.0;

struct Bucket {
  int64_t width = 0;
  int64_t height = 0;
  bool operator==(const Bucket& o) const { return width == o.width && height == o.height; }
  bool operator<(const Bucket& o) const { return width != o.width ? width < o.width : height < o.height; }
  std::string name() const { return std::to_string(width) + "x" + std::to_string(height); }
};

// The buckets of one base resolution (a multiple of 16), widest last.
std::vector<Bucket> bucketsFor(int64_t resolution);
// The bucket whose aspect is closest to width:height (in log ratio; ties go to the larger area).
Bucket chooseBucket(const std::vector<Bucket>& buckets, int64_t width, int64_t height);
// Whether an image of this size covers the bucket without being enlarged.
bool coversBucket(int64_t width, int64_t height, const Bucket& bucket);
// rgb [C, H, W] float -> [C, bucket.height, bucket.width]: scaled (antialiased)
// so that it covers the bucket, then the centre cut out.
at::Tensor resizeAndCrop(const at::Tensor& chw, const Bucket& bucket);

}  // namespace strata::train
