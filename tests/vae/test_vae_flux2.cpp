// FLUX.2's VAE (AutoencoderKLFlux2): its config (defaults, preset, bounds naming
// the file and key), the BFL single file's names (ldm + encoder.quant_conv,
// decoder.post_quant_conv, bn.running_*) both ways, the batch-norm latent
// normalisation, and strict loads of both namings.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "dit/LatentPatch.h"
#include "io/Safetensors.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "models/vae/VaeNames.h"
#include "vae/VaeTestConfigs.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::vae;

namespace {

using StateDict = std::vector<std::pair<std::string, at::Tensor>>;
using Shapes = std::map<std::string, std::vector<int64_t>>;

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// Statistics unlike BatchNorm2d's initial zeros / ones, so a test sees them used.
void setStats(AutoencoderKL& model, uint64_t seed) {
  at::NoGradGuard noGrad;
  auto gen = at::detail::createCPUGenerator(seed);
  const int64_t n = model.bn->runningMean.size(0);
  model.bn->runningMean.copy_(at::randn({n}, gen, at::kFloat));
  model.bn->runningVar.copy_(at::rand({n}, gen, at::kFloat) * 3 + 0.1);
}

Shapes keyShapes(const StateDict& sd) {
  Shapes out;
  for (const auto& [k, t] : sd) out[k] = t.sizes().vec();
  return out;
}

StateDict without(StateDict sd, const std::string& key) {
  sd.erase(std::remove_if(sd.begin(), sd.end(), [&](const auto& kv) { return kv.first == key; }), sd.end());
  return sd;
}

}  // namespace

// ---- config ---------------------------------------------------------------------------

TEST(VaeFlux2Config, PresetHasTheRealShapes) {
  const auto c = VaeConfig::preset("flux2");
  EXPECT_EQ(c, VaeConfig::flux2());
  EXPECT_EQ(c.cls, VaeClass::AutoencoderKLFlux2);
  EXPECT_EQ(c.latentChannels, 32);
  EXPECT_EQ(c.blockOutChannels, (std::vector<int64_t>{128, 256, 512, 512}));
  EXPECT_EQ(c.layersPerBlock, 2);
  EXPECT_EQ(c.normNumGroups, 32);
  EXPECT_TRUE(c.useQuantConv && c.usePostQuantConv);
  EXPECT_EQ(c.batchNormChannels(), 128);
  EXPECT_EQ(c.trainingChannels(), 128);
  EXPECT_EQ(c.trainingDownscale(), (std::array<int64_t, 2>{16, 16}));
  const auto shapes = vaeParamShapes(c);
  EXPECT_EQ(shapes.at("quant_conv.weight"), (std::vector<int64_t>{64, 64, 1, 1}));
  EXPECT_EQ(shapes.at("post_quant_conv.weight"), (std::vector<int64_t>{32, 32, 1, 1}));
  EXPECT_EQ(shapes.at("encoder.conv_out.weight"), (std::vector<int64_t>{64, 512, 3, 3}));
  EXPECT_EQ(shapes.at("decoder.conv_in.weight"), (std::vector<int64_t>{512, 32, 3, 3}));
  EXPECT_EQ(vaeBufferShapes(c), (Shapes{{"bn.running_mean", {128}}, {"bn.running_var", {128}}}));
  // FLUX.1's VAE plus the quant convs and its wider latent convs: the one count both share.
  EXPECT_EQ(vaeParamCount(c) - vaeParamCount(VaeConfig::flux1()),
            (64 * 64 + 64) + (32 * 32 + 32) + (64 - 32) * 512 * 9 + (64 - 32) + 512 * (32 - 16) * 9);
  EXPECT_TRUE(vaeBufferShapes(VaeConfig::flux1()).empty());
}

TEST(VaeFlux2Config, DiffusersJsonTakesAutoencoderKLFlux2Defaults) {
  // A config.json naming only the class means diffusers' AutoencoderKLFlux2 defaults.
  const auto c = VaeConfig::fromDiffusersJson(nlohmann::json{{"_class_name", "AutoencoderKLFlux2"}});
  EXPECT_EQ(c, VaeConfig::flux2());
  for (const auto& cfg : {VaeConfig::flux2(), tiny::flux2Layout(), tiny::flux2NarrowDecoder()}) {
    const auto j = cfg.toDiffusersJson();
    EXPECT_EQ(j.at("_class_name"), "AutoencoderKLFlux2");
    EXPECT_FALSE(j.contains("scaling_factor"));
    EXPECT_EQ(VaeConfig::fromDiffusersJson(j), cfg) << j.dump();
  }
  EXPECT_TRUE(tiny::flux2Layout().toDiffusersJson().at("decoder_block_out_channels").is_null());
  // AutoencoderKL stays as it was: no batch norm, its scale and shift.
  const auto kl = VaeConfig::fromDiffusersJson(VaeConfig::flux1().toDiffusersJson());
  EXPECT_EQ(kl, VaeConfig::flux1());
  EXPECT_FALSE(kl.batchNormLatents());
  EXPECT_EQ(kl.trainingChannels(), 16);
}

TEST(VaeFlux2Config, BadValuesAreRefusedNamingFileAndKey) {
  test::TempDir dir;
  const auto path = dir / "config.json";
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"patch_size", nlohmann::json::array({0, 2})},
      {"patch_size", nlohmann::json::array({int64_t{1} << 40, 2})},
      {"patch_size", nlohmann::json::array({2})},
      {"patch_size", nlohmann::json::array({18446744073709551615ULL, 2})},
      {"batch_norm_eps", 0.0},
      {"batch_norm_eps", -1e-4},
      {"batch_norm_momentum", 2.0},
      {"decoder_block_out_channels", nlohmann::json::array({8, 16})},
      {"decoder_block_out_channels", nlohmann::json::array({8, int64_t{1} << 40, 16})},
      {"decoder_block_out_channels", nlohmann::json::array({8, 6, 16})},  // not divisible by 4 groups
      {"_class_name", "AutoencoderKLWan"}};
  for (const auto& [key, value] : cases) {
    nlohmann::json j = tiny::flux2Layout().toDiffusersJson();
    j[key] = value;
    std::ofstream(path, std::ios::trunc) << j.dump();
    try {
      VaeConfig::fromDiffusersJsonFile(path);
      ADD_FAILURE() << key << " = " << value.dump() << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), path.string())) << e.what();
      EXPECT_TRUE(contains(e.what(), key)) << e.what();
    }
  }
  // Without block types, diffusers builds four levels: three widths cannot be meant.
  for (const char* key : {"down_block_types", "up_block_types"}) {
    nlohmann::json j = tiny::flux2Layout().toDiffusersJson();
    j.erase(key);
    std::ofstream(path, std::ios::trunc) << j.dump();
    try {
      VaeConfig::fromDiffusersJsonFile(path);
      ADD_FAILURE() << key << " absent with 3 levels accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), path.string()) && contains(e.what(), key)) << e.what();
    }
  }
  // A decoder width list is AutoencoderKLFlux2's alone.
  VaeConfig kl = tiny::fluxLayout();
  kl.decoderBlockOutChannels = {8, 16};
  EXPECT_THROW(kl.validate(), ConfigError);
}

TEST(VaeFlux2Config, NarrowerDecoderShowsInShapesAndDecodePeak) {
  const auto wide = VaeConfig::flux2();
  auto narrow = wide;
  narrow.decoderBlockOutChannels = {96, 192, 384, 384};
  const auto shapes = vaeParamShapes(narrow);
  EXPECT_EQ(shapes.at("decoder.conv_in.weight"), (std::vector<int64_t>{384, 32, 3, 3}));
  EXPECT_EQ(shapes.at("decoder.conv_out.weight"), (std::vector<int64_t>{3, 96, 3, 3}));
  EXPECT_EQ(shapes.at("encoder.conv_out.weight"), vaeParamShapes(wide).at("encoder.conv_out.weight"));
  EXPECT_LT(vaeParamCount(narrow), vaeParamCount(wide));
  EXPECT_EQ(vaeEncodePeakBytes(narrow, 1, 1024, 1024, 2), vaeEncodePeakBytes(wide, 1, 1024, 1024, 2));
  EXPECT_LT(vaeDecodePeakBytes(narrow, 1, 1024, 1024, 2), vaeDecodePeakBytes(wide, 1, 1024, 1024, 2));
  AutoencoderKL model(tiny::flux2NarrowDecoder());
  EXPECT_EQ(model.decoder->convIn->weight.size(0), 8);
}

// ---- names -----------------------------------------------------------------------------

TEST(VaeFlux2Names, BflSingleFileNamesBothWays) {
  using names::diffusersKey;
  using names::fileKey;
  const auto bfl = VaeWeightFormat::LdmFlux2;
  EXPECT_EQ(fileKey("quant_conv.weight", bfl, 3), "encoder.quant_conv.weight");
  EXPECT_EQ(fileKey("post_quant_conv.bias", bfl, 3), "decoder.post_quant_conv.bias");
  EXPECT_EQ(fileKey("bn.running_mean", bfl, 3), "bn.running_mean");
  EXPECT_EQ(fileKey("decoder.up_blocks.0.upsamplers.0.conv.weight", bfl, 3), "decoder.up.2.upsample.conv.weight");
  EXPECT_EQ(diffusersKey("encoder.quant_conv.weight", bfl, 3), "quant_conv.weight");
  EXPECT_EQ(diffusersKey("decoder.post_quant_conv.weight", bfl, 3), "post_quant_conv.weight");
  EXPECT_EQ(diffusersKey("bn.running_var", bfl, 3), "bn.running_var");
  // SD's ldm files keep the quant convs at the top level, as before.
  EXPECT_EQ(fileKey("quant_conv.weight", VaeWeightFormat::Ldm, 3), "quant_conv.weight");
  EXPECT_EQ(diffusersKey("quant_conv.weight", VaeWeightFormat::Ldm, 3), "quant_conv.weight");
  EXPECT_EQ(diffusersKey("encoder.quant_conv.weight", VaeWeightFormat::Ldm, 3), std::nullopt);

  // Every key of a FLUX.2 VAE, to BFL names and back, and the naming detected from them.
  for (const auto& cfg : {tiny::flux2Layout(), tiny::flux2NarrowDecoder(), VaeConfig::flux2()}) {
    auto keys = vaeParamShapes(cfg);
    for (const auto& kv : vaeBufferShapes(cfg)) keys.insert(kv);
    std::vector<std::string> fileKeys;
    for (const auto& [key, shape] : keys) {
      const auto f = fileKey(key, bfl, cfg.numBlocks());
      ASSERT_TRUE(f) << key;
      fileKeys.push_back(*f);
      EXPECT_EQ(diffusersKey(*f, bfl, cfg.numBlocks()), key) << *f;
    }
    EXPECT_EQ(names::detectFormat(fileKeys), bfl);
    EXPECT_EQ(names::ldmBlockCount(fileKeys), cfg.numBlocks());
  }
  EXPECT_STREQ(toString(bfl), "ldm (FLUX.2)");
  EXPECT_TRUE(isLdm(bfl));
}

// ---- model -----------------------------------------------------------------------------

TEST(VaeFlux2Model, TrainingLatentsArePatchifiedAndBatchNormalised) {
  for (const auto& cfg : {tiny::flux2Layout(), tiny::flux2NarrowDecoder()}) {
    AutoencoderKL model(cfg);
    setStats(model, 7);
    const auto& p = cfg.patchSize;
    auto gen = at::detail::createCPUGenerator(3);
    const auto z = at::randn({2, cfg.latentChannels, 4 * p[0], 6 * p[1]}, gen, at::kFloat);
    const auto train = model.toTrainingLatents(z);
    ASSERT_EQ(train.sizes().vec(), (std::vector<int64_t>{2, cfg.trainingChannels(), 4, 6}));
    // Written out element by element: channel c * ph * pw + dy * pw + dx of patch (i, j)
    // is z[c, i ph + dy, j pw + dx], normalised by that channel's statistics.
    const auto mean = model.bn->runningMean;
    const auto var = model.bn->runningVar;
    for (int64_t c = 0; c < cfg.latentChannels; ++c)
      for (int64_t dy = 0; dy < p[0]; ++dy)
        for (int64_t dx = 0; dx < p[1]; ++dx) {
          const int64_t ch = (c * p[0] + dy) * p[1] + dx;
          const auto src = z.select(1, c).slice(1, dy, z.size(2), p[0]).slice(2, dx, z.size(3), p[1]);  // [2, 4, 6]
          const auto expected = (src - mean[ch]) / at::sqrt(var[ch] + cfg.batchNormEps);
          EXPECT_TRUE(test::allClose(train.select(1, ch), expected, 1e-6, 1e-6)) << "channel " << ch;
        }
    EXPECT_TRUE(test::allClose(model.fromTrainingLatents(train), z, 1e-5, 1e-5)) << "inverse";
    EXPECT_THROW(model.toTrainingLatents(at::zeros({1, cfg.latentChannels + 1, 4, 4})), Error);
    EXPECT_THROW(model.fromTrainingLatents(at::zeros({1, cfg.trainingChannels() + 1, 4, 4})), Error);
  }
  // The 2x2 patch is the pipeline's (dit::patchifyLatents, shared with FLUX.2's sampler).
  AutoencoderKL model(tiny::flux2Layout());
  const auto z = at::arange(4 * 4 * 4, at::kFloat).view({1, 4, 4, 4});
  const double initialStd = std::sqrt(1.0 + model.config().batchNormEps);  // BatchNorm2d's initial mean 0, var 1
  EXPECT_TRUE(test::allClose(model.toTrainingLatents(z), dit::patchifyLatents(z) / initialStd, 1e-6, 1e-6));
}

TEST(VaeFlux2Model, ParametersAndBuffersAreTheDiffusersKeySet) {
  for (const auto& cfg : {tiny::flux2Layout(), tiny::flux2NarrowDecoder()}) {
    AutoencoderKL model(cfg);
    Shapes params, buffers;
    for (const auto& p : model.named_parameters(true)) params[p.key()] = p.value().sizes().vec();
    for (const auto& b : model.named_buffers(true)) buffers[b.key()] = b.value().sizes().vec();
    EXPECT_EQ(params, vaeParamShapes(cfg));
    EXPECT_EQ(buffers, vaeBufferShapes(cfg));
    // A round trip through the shapes gives the config back (the decoder's own widths included).
    auto all = params;
    all.insert(buffers.begin(), buffers.end());
    EXPECT_EQ(vaeConfigFromShapes(all, VaeHints::of(cfg)), cfg);
    const auto image = at::rand({1, 3, 16, 16}) * 2 - 1;
    at::NoGradGuard noGrad;
    const auto mean = model.encode(image).mean;
    EXPECT_EQ(mean.sizes().vec(),
              (std::vector<int64_t>{1, cfg.latentChannels, 16 / cfg.downscaleFactor(), 16 / cfg.downscaleFactor()}));
    EXPECT_EQ(model.decode(mean).sizes().vec(), (std::vector<int64_t>{1, 3, 16, 16}));
  }
}

// ---- weights on disk -------------------------------------------------------------------

class VaeFlux2CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { setStats(source, 11); }
  VaeConfig cfg = tiny::flux2Layout();
  AutoencoderKL source{cfg};
  test::TempDir dir;

  void expectSameAsSource(AutoencoderKL& model) {
    const auto expected = source.named_parameters(true);
    for (const auto& p : model.named_parameters(true))
      EXPECT_TRUE(test::allClose(p.value(), expected[p.key()], 0, 0)) << p.key();
    EXPECT_TRUE(test::allClose(model.bn->runningMean, source.bn->runningMean, 0, 0));
    EXPECT_TRUE(test::allClose(model.bn->runningVar, source.bn->runningVar, 0, 0));
  }
  std::string loadError(const fs::path& file, const VaeConfig& into) {
    AutoencoderKL model(into);
    try {
      loadVaeWeights(model, file);
    } catch (const LoadError& e) {
      return e.what();
    }
    return "<no error>";
  }
};

TEST_F(VaeFlux2CheckpointTest, BflSingleFileIsDetectedAndLoadsExactly) {
  const auto sd = vaeStateDict(source, VaeWeightFormat::LdmFlux2);
  const auto keys = keyShapes(sd);
  EXPECT_TRUE(keys.count("encoder.quant_conv.weight") && keys.count("decoder.post_quant_conv.weight"));
  EXPECT_TRUE(keys.count("bn.running_mean") && keys.count("bn.running_var"));
  EXPECT_FALSE(keys.count("quant_conv.weight"));
  io::writeSafetensors(dir / "flux2-vae.safetensors", sd);
  const auto ckpt = VaeCheckpoint::open(dir / "flux2-vae.safetensors");
  EXPECT_EQ(ckpt.format(), VaeWeightFormat::LdmFlux2);
  EXPECT_EQ(ckpt.config(VaeHints::of(cfg)), cfg);
  // Without hints: a FLUX.2 VAE by its keys, its latent width and 2x2 patch by bn's size.
  VaeHints groups;
  groups.normNumGroups = cfg.normNumGroups;
  const auto detected = ckpt.config(groups);
  EXPECT_EQ(detected.cls, VaeClass::AutoencoderKLFlux2);
  EXPECT_EQ(detected.patchSize, (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(detected.batchNormEps, VaeConfig::flux2().batchNormEps);
  auto model = loadAutoencoderKL(dir / "flux2-vae.safetensors", {}, VaeHints::of(cfg));
  EXPECT_EQ(model->config(), cfg);
  expectSameAsSource(*model);
  // FLUX.1's ae.safetensors layout (no bn) is still an AutoencoderKL.
  AutoencoderKL flux1(tiny::fluxLayout());
  io::writeSafetensors(dir / "ae.safetensors", vaeStateDict(flux1, VaeWeightFormat::Ldm));
  const auto ae = VaeCheckpoint::open(dir / "ae.safetensors");
  EXPECT_EQ(ae.format(), VaeWeightFormat::Ldm);
  EXPECT_EQ(ae.config(groups).cls, VaeClass::AutoencoderKL);
}

TEST_F(VaeFlux2CheckpointTest, DiffusersFolderWithItsCounterLoadsExactly) {
  auto sd = vaeStateDict(source);
  sd.emplace_back(kVaeBatchNormCounterKey, at::scalar_tensor(5, at::kLong));  // diffusers writes it
  fs::create_directories(dir / "pipe" / "vae");
  io::writeSafetensors(dir / "pipe" / "vae" / "diffusion_pytorch_model.safetensors", sd);
  std::ofstream(dir / "pipe" / "vae" / "config.json") << cfg.toDiffusersJson().dump();
  auto model = loadAutoencoderKL(dir / "pipe", {});
  EXPECT_EQ(model->config(), cfg);
  expectSameAsSource(*model);
}

TEST_F(VaeFlux2CheckpointTest, StrictLoadsNameTheFileAndKey) {
  const auto bfl = vaeStateDict(source, VaeWeightFormat::LdmFlux2);
  io::writeSafetensors(dir / "no-var.safetensors", without(bfl, "bn.running_var"));
  auto msg = loadError(dir / "no-var.safetensors", cfg);
  EXPECT_TRUE(contains(msg, "no-var.safetensors")) << msg;
  EXPECT_TRUE(contains(msg, "missing: bn.running_var")) << msg;
  // Detection reads bn.running_mean only; the strict load above is what catches the gap.
  EXPECT_EQ(VaeCheckpoint::open(dir / "no-var.safetensors").config(VaeHints::of(cfg)).cls,
            VaeClass::AutoencoderKLFlux2);

  // Statistics of the wrong size.
  auto wrong = bfl;
  for (auto& [k, t] : wrong)
    if (k == "bn.running_mean") t = at::zeros({cfg.batchNormChannels() + 1});
  io::writeSafetensors(dir / "wrong.safetensors", wrong);
  msg = loadError(dir / "wrong.safetensors", cfg);
  EXPECT_TRUE(contains(msg, "wrong.safetensors") && contains(msg, "mis-shaped: bn.running_mean")) << msg;
  try {
    VaeCheckpoint::open(dir / "wrong.safetensors").config(VaeHints::of(cfg));
    ADD_FAILURE() << "a bn of 4 x latent + 1 channels was taken for a patch";
  } catch (const LoadError& e) {
    EXPECT_TRUE(contains(e.what(), "wrong.safetensors") && contains(e.what(), "bn.running_mean")) << e.what();
  }

  // A FLUX.2 file into a FLUX.1-style model: the statistics are unexpected, not dropped.
  AutoencoderKL flux1Like(tiny::fluxLayout());
  io::writeSafetensors(dir / "flux1.safetensors", vaeStateDict(flux1Like, VaeWeightFormat::Ldm));
  msg = loadError(dir / "flux1.safetensors", cfg);
  EXPECT_TRUE(contains(msg, "flux1.safetensors") && contains(msg, "missing: bn.running_mean")) << msg;
  VaeConfig klOfSameShape = cfg;
  klOfSameShape.cls = VaeClass::AutoencoderKL;
  klOfSameShape.scalingFactor = 1.0;
  msg = loadError(dir / "no-var.safetensors", klOfSameShape);
  EXPECT_TRUE(contains(msg, "unexpected: bn.running_mean")) << msg;
  // The counter is known only beside a batch norm.
  auto counter = vaeStateDict(flux1Like);
  counter.emplace_back(kVaeBatchNormCounterKey, at::scalar_tensor(1, at::kLong));
  io::writeSafetensors(dir / "counter.safetensors", counter);
  msg = loadError(dir / "counter.safetensors", tiny::fluxLayout());
  EXPECT_TRUE(contains(msg, std::string("unexpected: ") + kVaeBatchNormCounterKey)) << msg;
}
