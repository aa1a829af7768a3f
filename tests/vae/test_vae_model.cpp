// AutoencoderKL module layout, shapes and the behaviours the fixtures do not pin
// down on their own: quant convs, asymmetric downsample padding, logvar clamp,
// sampling, tiled encoding, chunked attention, the training-latent rule.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "models/vae/AutoencoderKL.h"
#include "vae/VaeTestConfigs.h"

using namespace strata;
using namespace strata::vae;

namespace {

at::Tensor randomImage(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::rand(shape, gen, at::kFloat) * 2 - 1;
}

}  // namespace

TEST(AutoencoderKL, NamedParametersAreTheDiffusersKeySet) {
  for (const auto& cfg : {tiny::fluxLayout(), tiny::sdLayout(), tiny::oddLayout()}) {
    AutoencoderKL model(cfg);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : model.named_parameters(true)) {
      shapes[p.key()] = p.value().sizes().vec();
      EXPECT_FALSE(p.value().requires_grad()) << p.key();
    }
    EXPECT_EQ(shapes, vaeParamShapes(cfg));
    EXPECT_EQ(static_cast<bool>(model.quantConv), cfg.useQuantConv);
    EXPECT_EQ(static_cast<bool>(model.postQuantConv), cfg.usePostQuantConv);
  }
}

TEST(AutoencoderKL, EncodeAndDecodeShapes) {
  const auto cfg = tiny::sdLayout();  // three levels: factor 4
  AutoencoderKL model(cfg);
  at::NoGradGuard noGrad;
  const auto dist = model.encode(randomImage({2, 3, 16, 24}, 1));
  EXPECT_EQ(dist.mean.sizes().vec(), (std::vector<int64_t>{2, 3, 4, 6}));
  EXPECT_EQ(dist.logvar.sizes().vec(), (std::vector<int64_t>{2, 3, 4, 6}));
  EXPECT_EQ(model.decode(dist.mean).sizes().vec(), (std::vector<int64_t>{2, 3, 16, 24}));

  const auto odd = tiny::oddLayout();  // 1 channel in, 2 out, factor 8
  AutoencoderKL oddModel(odd);
  const auto oddDist = oddModel.encode(randomImage({1, 1, 32, 16}, 2));
  EXPECT_EQ(oddDist.mean.sizes().vec(), (std::vector<int64_t>{1, 5, 4, 2}));
  EXPECT_EQ(oddModel.decode(oddDist.mean).sizes().vec(), (std::vector<int64_t>{1, 2, 32, 16}));
}

TEST(AutoencoderKL, WrongInputShapesAreRefused) {
  AutoencoderKL model(tiny::fluxLayout());
  at::NoGradGuard noGrad;
  try {
    model.encode(at::zeros({3, 16, 16}));
    FAIL() << "a 3-d image was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 16, 16]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model.encode(at::zeros({1, 4, 16, 16})), Error);
  EXPECT_THROW(model.decode(at::zeros({1, 3, 8, 8})), Error);
}

TEST(AutoencoderKL, QuantConvsAreApplied) {
  const auto cfg = tiny::sdLayout();
  AutoencoderKL model(cfg);
  at::NoGradGuard noGrad;
  // quant_conv with zero weights gives its bias everywhere.
  model.quantConv->weight.zero_();
  model.quantConv->bias.copy_(at::arange(2 * cfg.latentChannels, at::kFloat) * 0.1);
  const auto dist = model.encode(randomImage({1, 3, 16, 16}, 3));
  for (int64_t c = 0; c < cfg.latentChannels; ++c) {
    EXPECT_TRUE(test::allClose(dist.mean.select(1, c), at::full_like(dist.mean.select(1, c), 0.1 * c), 1e-6, 0));
    const double lv = 0.1 * (c + cfg.latentChannels);
    EXPECT_TRUE(test::allClose(dist.logvar.select(1, c), at::full_like(dist.logvar.select(1, c), lv), 1e-6, 0));
  }
  // post_quant_conv with zero weights and bias makes every latent decode alike.
  model.postQuantConv->weight.zero_();
  model.postQuantConv->bias.zero_();
  const auto a = model.decode(at::randn({1, 3, 4, 4}));
  const auto b = model.decode(at::zeros({1, 3, 4, 4}));
  EXPECT_TRUE(test::allClose(a, b, 0, 0));
}

TEST(AutoencoderKL, DownsamplePadsOnlyRightAndBottom) {
  const auto o = at::TensorOptions().dtype(at::kFloat);
  VaeLevel level(1, 1, /*layers=*/0, 1, VaeLevelImpl::Resample::Down, o);
  at::NoGradGuard noGrad;
  const auto x = at::arange(1, 65, o).view({1, 1, 8, 8});
  level->resampleConv->bias.zero_();
  level->resampleConv->weight.zero_();
  level->resampleConv->weight[0][0][0][0] = 1.0;  // top-left tap
  auto y = level->forward(x);                     // [1, 1, 4, 4]
  ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{1, 1, 4, 4}));
  EXPECT_TRUE(test::allClose(y, x.slice(2, 0, 8, 2).slice(3, 0, 8, 2), 0, 0)) << "no padding on the top or left";
  level->resampleConv->weight.zero_();
  level->resampleConv->weight[0][0][2][2] = 1.0;  // bottom-right tap reaches the padding row/column
  y = level->forward(x);
  EXPECT_EQ(y[0][0][3][3].item<float>(), 0.0f);
  EXPECT_EQ(y[0][0][2][2].item<float>(), x[0][0][6][6].item<float>());
}

TEST(AutoencoderKL, UpsampleIsNearestTwiceThenConv) {
  const auto o = at::TensorOptions().dtype(at::kFloat);
  VaeLevel level(1, 1, 0, 1, VaeLevelImpl::Resample::Up, o);
  at::NoGradGuard noGrad;
  level->resampleConv->bias.zero_();
  level->resampleConv->weight.zero_();
  level->resampleConv->weight[0][0][1][1] = 1.0;  // identity
  const auto x = at::arange(6, o).view({1, 1, 2, 3});
  const auto expected = x.repeat_interleave(2, 2).repeat_interleave(2, 3);
  EXPECT_TRUE(test::allClose(level->forward(x), expected, 0, 0));
}

TEST(AutoencoderKL, LogvarIsClampedAndSamplingIsSeeded) {
  const auto cfg = tiny::fluxLayout();
  AutoencoderKL model(cfg);
  at::NoGradGuard noGrad;
  const int64_t z = cfg.latentChannels;
  auto& bias = model.encoder->convOut->bias;
  bias.narrow(0, z, z).fill_(1e4);
  const auto image = randomImage({1, 3, 8, 8}, 4);
  EXPECT_TRUE(test::allClose(model.encode(image).logvar, at::full({1, z, 4, 4}, 20.0), 0, 0));
  bias.narrow(0, z, z).fill_(-1e4);
  const auto dist = model.encode(image);
  EXPECT_TRUE(test::allClose(dist.logvar, at::full({1, z, 4, 4}, -30.0), 0, 0));
  // std e^-15: a sample is the mean to float precision.
  EXPECT_TRUE(test::allClose(dist.sample(), dist.mean, 1e-5, 0));

  bias.narrow(0, z, z).fill_(0.0);
  const auto wide = model.encode(image);
  const auto s1 = wide.sample(at::detail::createCPUGenerator(7));
  const auto s2 = wide.sample(at::detail::createCPUGenerator(7));
  EXPECT_TRUE(test::allClose(s1, s2, 0, 0));
  EXPECT_FALSE(test::allClose(s1, wide.mean, 1e-3, 0));
}

TEST(AutoencoderKL, TrainingLatentRule) {
  const auto cfg = tiny::oddLayout();  // scale 1.5, shift -0.25
  AutoencoderKL model(cfg);
  const auto x = at::randn({2, cfg.latentChannels, 3, 3});
  EXPECT_TRUE(test::allClose(model.toTrainingLatents(x), (x + 0.25) * 1.5, 1e-6, 0));
  EXPECT_TRUE(test::allClose(model.fromTrainingLatents(model.toTrainingLatents(x)), x, 1e-6, 0));
}

TEST(AutoencoderKL, TiledEncodeBlendsTilesThatEachEncodeOnTheirOwn) {
  const auto cfg = tiny::fluxLayout();  // factor 2
  AutoencoderKL model(cfg);
  at::NoGradGuard noGrad;
  const auto image = randomImage({1, 3, 32, 48}, 5);
  const auto whole = model.encode(image);

  // A tile that covers the image is the whole-image encode.
  const auto covered = model.encode(image, {48, 0.25});
  EXPECT_TRUE(test::allClose(covered.mean, whole.mean, 0, 0));

  // 16 px tiles (8 latent pixels), overlap 2: latent rows/cols 0..5 belong to the first tile alone.
  const auto tiled = model.encode(image, {16, 0.25});
  ASSERT_EQ(tiled.mean.sizes(), whole.mean.sizes());
  const auto first = model.encode(image.narrow(2, 0, 16).narrow(3, 0, 16));
  EXPECT_TRUE(test::allClose(tiled.mean.narrow(2, 0, 6).narrow(3, 0, 6), first.mean.narrow(2, 0, 6).narrow(3, 0, 6),
                             1e-6, 1e-6));
  EXPECT_TRUE(test::allClose(tiled.logvar.narrow(2, 0, 6).narrow(3, 0, 6), first.logvar.narrow(2, 0, 6).narrow(3, 0, 6),
                             1e-6, 1e-6));
  // The last tile sits flush with the bottom-right corner: its far corner is its own too.
  const auto last = model.encode(image.narrow(2, 16, 16).narrow(3, 32, 16));
  EXPECT_TRUE(test::allClose(tiled.mean.narrow(2, 14, 2).narrow(3, 22, 2), last.mean.narrow(2, 6, 2).narrow(3, 6, 2),
                             1e-6, 1e-6));
  // Tiles normalise on their own, so tiling does change the result.
  EXPECT_TRUE(at::isfinite(tiled.mean).all().item<bool>());
  EXPECT_FALSE(test::allClose(tiled.mean, whole.mean, 1e-4, 0));

  EXPECT_THROW(model.encode(image, {15, 0.25}), Error);  // not a multiple of the factor
  EXPECT_THROW(model.encode(image, {16, 0.75}), Error);
}

TEST(AutoencoderKL, ChunkedAttentionEqualsOnePiece) {
  auto gen = at::detail::createCPUGenerator(11);
  const auto q = at::randn({2, 1, 50, 8}, gen, at::kFloat);
  const auto k = at::randn({2, 1, 50, 8}, gen, at::kFloat);
  const auto v = at::randn({2, 1, 50, 8}, gen, at::kFloat);
  const auto reference = at::matmul(at::softmax(at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1), v);
  EXPECT_TRUE(test::allClose(vaeAttention(q, k, v), reference, 1e-5, 1e-5));
  EXPECT_TRUE(test::allClose(vaeAttention(q, k, v, 2 * 50 * 7), reference, 1e-5, 1e-5)) << "7-row chunks";
  EXPECT_TRUE(test::allClose(vaeAttention(q, k, v, 1), reference, 1e-5, 1e-5)) << "1-row chunks";
}

TEST(AutoencoderKL, ComputeDtypeFollowsForceUpcast) {
  auto cfg = tiny::fluxLayout();
  EXPECT_EQ(vaeComputeDtype(cfg, at::kHalf), at::kFloat);
  EXPECT_EQ(vaeComputeDtype(cfg, at::kBFloat16), at::kBFloat16);
  EXPECT_EQ(vaeComputeDtype(cfg, at::kFloat), at::kFloat);
  cfg.forceUpcast = false;
  EXPECT_EQ(vaeComputeDtype(cfg, at::kHalf), at::kHalf);
  AutoencoderKL bf16(cfg, {at::kCPU, at::kBFloat16});
  for (const auto& p : bf16.parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  EXPECT_EQ(bf16.dtype(), at::kBFloat16);
}
