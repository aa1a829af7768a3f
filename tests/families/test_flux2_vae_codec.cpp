// FLUX.2's latent codec (families/flux2/Flux2VaeCodec) on a tiny random
// AutoencoderKLFlux2: the training latents' shape and formula, decode's range,
// the cache identity following the batch-norm statistics and eps, release(),
// and the refusals (FLUX.1's VAE here, FLUX.2's in FluxVaeCodec).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "dit/LatentPatch.h"
#include "families/flux/FluxVaeCodec.h"
#include "families/flux2/Flux2VaeCodec.h"
#include "models/vae/AutoencoderKL.h"

using namespace strata;

namespace {

vae::VaeConfig tinyFlux2() {
  vae::VaeConfig c = vae::VaeConfig::flux2();
  c.blockOutChannels = {8, 16};
  c.layersPerBlock = 1;
  c.latentChannels = 4;
  c.normNumGroups = 4;
  c.sampleSize = 32;
  return c;
}

std::shared_ptr<vae::AutoencoderKL> tinyVae(const vae::VaeConfig& cfg, uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  auto model = std::make_shared<vae::AutoencoderKL>(cfg);
  at::NoGradGuard noGrad;
  auto gen = at::detail::createCPUGenerator(seed);
  const int64_t n = cfg.batchNormChannels();
  model->bn->runningMean.copy_(at::randn({n}, gen, at::kFloat));
  model->bn->runningVar.copy_(at::rand({n}, gen, at::kFloat) + 0.5);
  return model;
}

}  // namespace

TEST(Flux2VaeCodec, EncodesToNormalisedLatentsAndDecodesToUnitRange) {
  const auto cfg = tinyFlux2();
  auto model = tinyVae(cfg, 1);
  families::Flux2VaeCodec codec(model, "tiny");
  EXPECT_EQ(codec.latentChannels(), 4);   // the VAE's: the transformer's side patchifies
  EXPECT_EQ(codec.downscaleFactor(), 2);  // one downsample
  const auto pixels = at::rand({2, 3, 16, 24}) * 2 - 1;
  const auto latents = codec.encode(pixels);
  ASSERT_EQ(latents.sizes().vec(), (std::vector<int64_t>{2, 4, 8, 12}));
  EXPECT_EQ(latents.scalar_type(), at::kFloat);
  at::NoGradGuard noGrad;
  const auto mode = model->encode(pixels).mean;
  const auto mean = model->bn->runningMean.view({1, -1, 1, 1});
  const auto deviation = at::sqrt(model->bn->runningVar.view({1, -1, 1, 1}) + cfg.batchNormEps);
  // The pipeline's normalisation on the 2x2 patches, handed back unpatchified.
  const auto normalised = (dit::patchifyLatents(mode) - mean) / deviation;  // [2, 16, 4, 6]
  EXPECT_TRUE(test::allClose(dit::patchifyLatents(latents), normalised, 1e-6, 1e-5));
  EXPECT_FALSE(test::allClose(latents, mode, 1e-3, 1e-3));  // the statistics did something
  EXPECT_TRUE(test::allClose(codec.normalize(mode), latents, 1e-6, 1e-5));
  EXPECT_TRUE(test::allClose(codec.denormalize(latents), mode, 1e-5, 1e-5));
  const auto rgb = codec.decode(latents);
  ASSERT_EQ(rgb.sizes().vec(), (std::vector<int64_t>{2, 3, 16, 24}));
  EXPECT_GE(rgb.min().item<float>(), 0.0f);
  EXPECT_LE(rgb.max().item<float>(), 1.0f);
  const auto expected =
      (model->decode(dit::unpatchifyLatents(dit::patchifyLatents(latents) * deviation + mean)) / 2 + 0.5).clamp(0, 1);
  EXPECT_TRUE(test::allClose(rgb, expected, 1e-5, 1e-5));
  codec.release();
  EXPECT_THROW(codec.encode(pixels), Error);
  EXPECT_THROW(codec.decode(latents), Error);
  EXPECT_TRUE(test::allClose(codec.normalize(mode), latents, 1e-6, 1e-5)) << "normalize after release";
}

TEST(Flux2VaeCodec, IdentityFollowsTheStatisticsAndEps) {
  const auto cfg = tinyFlux2();
  const auto base = families::Flux2VaeCodec(tinyVae(cfg, 1), "vae w").identity();
  EXPECT_EQ(families::Flux2VaeCodec(tinyVae(cfg, 1), "vae w").identity(), base) << "deterministic";
  EXPECT_NE(base.find("vae w"), std::string::npos) << base;
  auto otherVar = tinyVae(cfg, 1);
  {
    at::NoGradGuard noGrad;
    otherVar->bn->runningVar[3] += 1e-3;
  }
  EXPECT_NE(families::Flux2VaeCodec(otherVar, "vae w").identity(), base) << "running_var";
  auto otherMean = tinyVae(cfg, 1);
  {
    at::NoGradGuard noGrad;
    otherMean->bn->runningMean[0] += 1e-3;
  }
  EXPECT_NE(families::Flux2VaeCodec(otherMean, "vae w").identity(), base) << "running_mean";
  auto epsCfg = cfg;
  epsCfg.batchNormEps = 1e-5;
  EXPECT_NE(families::Flux2VaeCodec(tinyVae(epsCfg, 1), "vae w").identity(), base) << "eps";
}

TEST(Flux2VaeCodec, RefusesTheOtherFamilysVae) {
  vae::VaeConfig flux1 = vae::VaeConfig::flux1();
  flux1.blockOutChannels = {8, 16};
  flux1.layersPerBlock = 1;
  flux1.normNumGroups = 4;
  EXPECT_THROW(families::Flux2VaeCodec(std::make_shared<vae::AutoencoderKL>(flux1), "ae"), Error);
  EXPECT_THROW(families::FluxVaeCodec(tinyVae(tinyFlux2(), 1), "flux2-vae"), Error);
  auto oblong = tinyFlux2();
  oblong.patchSize = {1, 2};
  EXPECT_THROW(families::Flux2VaeCodec(tinyVae(oblong, 1), "oblong"), Error);
}
