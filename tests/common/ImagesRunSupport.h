#pragma once
// What the images-run tests share (tests/train, tests/families, tests/apps): the
// pictures they put in a dataset folder, the count of a cache's files and the check
// of a run's sample PNGs.
// Header-only; the including test links strata_io (io::writePng, io::readImage).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/Image.h"

namespace strata::test {

// uint8 [H, W, 3]: red follows x, green follows y, blue is `blue`.
inline at::Tensor gradient(int64_t h, int64_t w, double blue = 128.0) {
  at::Tensor x = at::arange(w, at::kFloat).div(std::max<int64_t>(w - 1, 1)).mul(255).view({1, w, 1});
  at::Tensor y = at::arange(h, at::kFloat).div(std::max<int64_t>(h - 1, 1)).mul(255).view({h, 1, 1});
  return at::cat({x.expand({h, w, 1}), y.expand({h, w, 1}), at::full({h, w, 1}, blue)}, 2).round().to(at::kByte);
}

// uint8 [H, W, 3] with some structure: the gradient (blue 40 * seed) with a bright
// block whose place depends on `seed`.
inline at::Tensor blockPicture(int64_t h, int64_t w, int seed) {
  at::Tensor img = gradient(h, w, 40.0 * seed).clone();
  const int64_t y = (seed * 7) % std::max<int64_t>(h / 2, 1), x = (seed * 11) % std::max<int64_t>(w / 2, 1);
  img.slice(0, y, y + h / 3).slice(1, x, x + w / 3).fill_(230);
  return img;
}

inline void writeBytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

// A PNG signature followed by a chunk that declares far more bytes than the file holds.
inline std::string corruptPngBytes() { return std::string("\x89PNG\r\n\x1a\n", 8) + std::string(64, 'x'); }

// Regular files directly in `dir` (a cache's latents/ or text/); 0 when it cannot be listed.
inline int64_t filesIn(const std::filesystem::path& dir) {
  std::error_code ec;
  int64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

// What every sample PNG of a run must be.
struct SamplePngs {
  int64_t width = 0;
  int64_t height = 0;
  std::string prompt;  // as sampled (the trigger word in place)
};

// runDir/samples/step_<step>_p00.png for each step: decoded at the configured
// size, the prompt and the step in its text chunks, not one flat colour.
inline void expectSamplePngs(const std::filesystem::path& runDir, const std::vector<int64_t>& steps,
                             const SamplePngs& want) {
  for (int64_t step : steps) {
    char name[64];
    std::snprintf(name, sizeof name, "step_%08lld_p00.png", static_cast<long long>(step));
    const std::filesystem::path p = runDir / "samples" / name;
    ASSERT_TRUE(std::filesystem::is_regular_file(p)) << p;
    const auto img = io::readImage(p, io::ImageChannels::Rgb);
    EXPECT_EQ(img.pixels.sizes().vec(), (std::vector<int64_t>{want.height, want.width, 3})) << p;
    ASSERT_TRUE(img.text.count("prompt")) << p << " has no prompt";
    EXPECT_EQ(img.text.at("prompt"), want.prompt) << p;
    ASSERT_TRUE(img.text.count("step")) << p << " has no step";
    EXPECT_EQ(img.text.at("step"), std::to_string(step)) << p;
    EXPECT_GT(img.pixels.to(at::kFloat).std().item<double>(), 0.0) << p << " is one flat colour";
  }
}

}  // namespace strata::test
