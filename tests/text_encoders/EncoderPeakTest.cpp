// t5::t5EncodePeakBytes and clip::clipEncodePeakBytes: the activation peak the
// planner sizes the caching phase with, against the walk done by hand;
// tests/gpu/test_encoder_peaks_gpu.cpp checks them against the CUDA peak.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "models/clip/ClipTextConfig.h"
#include "models/t5/T5Config.h"

using namespace strata;

TEST(EncoderPeak, T5XxlPeaksAtTheSoftmax) {
  // Batch 4 x 512 tokens in bf16. S = B H L^2 scores, P = H L^2 position bias.
  // At the softmax: P + h, x, q, k, v + the scores, their float32 copy, the
  // float32 softmax and its bf16 cast: 2 P + 2 (2 + 3) B L d + (2 + 4 + 4 + 2) S.
  const int64_t s = 4LL * 64 * 512 * 512, p = 64LL * 512 * 512, bld = 4LL * 512 * 4096;
  const auto xxl = t5::T5Config::t5Xxl();
  EXPECT_EQ(t5::t5EncodePeakBytes(xxl, 4, 512, 2), 2 * p + 2 * 5 * bld + 12 * s);
  // float32: no copies, so the feed-forward is the peak: P, h (old and new), y,
  // x, q, k, v, attn, the scores and the softmax still alive, four [B, L, d_ff].
  const int64_t bldff = 4LL * 512 * 10240;
  EXPECT_EQ(t5::t5EncodePeakBytes(xxl, 4, 512, 4), 4 * p + 4 * 7 * bld + 8 * s + 4 * 4 * bldff);
  // Short prompts: the gated feed-forward is the peak (four [B, L, d_ff] tensors).
  const int64_t ff = 4LL * 8 * 10240;
  EXPECT_GE(t5::t5EncodePeakBytes(xxl, 4, 8, 2), 4 * ff * 2);
  EXPECT_THROW(t5::t5EncodePeakBytes(xxl, 0, 512, 2), ConfigError);
}

TEST(EncoderPeak, ClipScalesWithTheBatch) {
  const auto l = clip::ClipTextConfig::clipL();
  const int64_t one = clip::clipEncodePeakBytes(l, 1, 2);
  EXPECT_GT(one, 0);
  EXPECT_EQ(clip::clipEncodePeakBytes(l, 4, 2), 4 * one);
  EXPECT_GT(clip::clipEncodePeakBytes(l, 1, 4), one);
  EXPECT_THROW(clip::clipEncodePeakBytes(l, 1, 0), ConfigError);
}
