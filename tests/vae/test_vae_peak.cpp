// vae::vaeEncodePeakBytes / vaeDecodePeakBytes: the activation peak the planner
// sizes the caching phase and the sample decode with. Checked here against the
// walk done by hand for FLUX.1's VAE; tests/gpu/test_encoder_peaks_gpu.cpp
// checks it against the measured CUDA peak.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "models/vae/VaeConfig.h"

using namespace strata;

namespace {

constexpr int64_t kPixels1024 = 1024 * 1024;

}  // namespace

TEST(VaePeak, Flux1EncodePeaksInTheSecondResnetOfTheFullResolutionLevel) {
  // T = one 128-channel map at 1024 px. The second resnet of level 0, at conv2: the
  // level's input (held by the encoder), the resnet's input, h1, norm2's output,
  // conv2's output and its workspace (input + output) = 7 T, plus the image.
  const int64_t t = 128 * kPixels1024;
  const int64_t image = 3 * kPixels1024;
  const auto cfg = vae::VaeConfig::flux1();
  EXPECT_EQ(vae::vaeEncodePeakBytes(cfg, 1, 1024, 1024, 2), (7 * t + image) * 2);
  EXPECT_EQ(vae::vaeEncodePeakBytes(cfg, 1, 1024, 1024, 4), (7 * t + image) * 4);
}

TEST(VaePeak, Flux1DecodePeaksAtTheLastUpsampler) {
  // Up block 2 at 512 px: its input (512 channels = T), the resnets' output (256
  // channels = T / 2), the upsampled copy (2 T), conv's output (2 T) and workspace
  // (4 T) = 9.5 T, plus the latents (16 x 128 x 128).
  const int64_t t = 128 * kPixels1024;
  const int64_t latents = 16 * 128 * 128;
  const auto cfg = vae::VaeConfig::flux1();
  EXPECT_EQ(vae::vaeDecodePeakBytes(cfg, 1, 1024, 1024, 2), (19 * t / 2 + latents) * 2);
}

TEST(VaePeak, ScalesWithBatchAndAreaAndRefusesNonsense) {
  const auto cfg = vae::VaeConfig::flux1();
  const int64_t one = vae::vaeEncodePeakBytes(cfg, 1, 512, 512, 2);
  EXPECT_EQ(vae::vaeEncodePeakBytes(cfg, 4, 512, 512, 2), 4 * one);
  EXPECT_EQ(vae::vaeEncodePeakBytes(cfg, 1, 1024, 1024, 2), 4 * one);
  // A wide bucket of about the same area peaks about the same.
  const double wide = static_cast<double>(vae::vaeEncodePeakBytes(cfg, 1, 768, 1344, 2));
  EXPECT_NEAR(wide / static_cast<double>(4 * one), 768.0 * 1344.0 / (1024.0 * 1024.0), 1e-3);
  EXPECT_GT(vae::vaeDecodePeakBytes(cfg, 1, 1024, 1024, 2), vae::vaeEncodePeakBytes(cfg, 1, 1024, 1024, 2));
  EXPECT_THROW(vae::vaeEncodePeakBytes(cfg, 0, 512, 512, 2), ConfigError);
  EXPECT_THROW(vae::vaeDecodePeakBytes(cfg, 1, -8, 512, 2), ConfigError);
}
