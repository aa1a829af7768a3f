// Strict VAE loading: diffusers, legacy diffusers and ldm files, folders, full
// checkpoints, dtype conversion, and every error naming the file and the keys.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <algorithm>
#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "vae/VaeTestConfigs.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::vae;

namespace {

using StateDict = std::vector<std::pair<std::string, at::Tensor>>;

std::map<std::string, at::Tensor> paramsOf(AutoencoderKL& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters(true)) out[p.key()] = p.value().detach().clone();
  return out;
}

void expectSameParams(AutoencoderKL& model, const std::map<std::string, at::Tensor>& expected) {
  const auto actual = paramsOf(model);
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [key, t] : expected) EXPECT_TRUE(test::allClose(actual.at(key), t.to(at::kFloat), 0, 0)) << key;
}

std::string loadError(AutoencoderKL& model, const fs::path& file) {
  try {
    loadVaeWeights(model, file);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "<no error>";
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

StateDict without(StateDict sd, const std::string& key) {
  sd.erase(std::remove_if(sd.begin(), sd.end(), [&](const auto& kv) { return kv.first == key; }), sd.end());
  return sd;
}

at::Tensor& entry(StateDict& sd, const std::string& key) {
  for (auto& kv : sd)
    if (kv.first == key) return kv.second;
  throw std::runtime_error("no " + key);
}

class VaeCheckpointTest : public ::testing::Test {
 protected:
  VaeConfig cfg = tiny::sdLayout();  // quant convs and conv shortcuts: every kind of key
  AutoencoderKL source{cfg};
  test::TempDir dir;
};

}  // namespace

TEST_F(VaeCheckpointTest, DiffusersFileLoadsExactly) {
  io::writeSafetensors(dir / "vae.safetensors", vaeStateDict(source));
  const auto ckpt = VaeCheckpoint::open(dir / "vae.safetensors");
  EXPECT_EQ(ckpt.format(), VaeWeightFormat::Diffusers);
  EXPECT_EQ(ckpt.config(VaeHints::of(cfg)), cfg);
  AutoencoderKL target(cfg);
  loadVaeWeights(target, ckpt);
  expectSameParams(target, paramsOf(source));
}

TEST_F(VaeCheckpointTest, LdmFileLoadsExactlyAndRoundTrips) {
  auto ldm = vaeStateDict(source, VaeWeightFormat::Ldm);
  EXPECT_EQ(entry(ldm, "encoder.mid.attn_1.q.weight").sizes().vec(), (std::vector<int64_t>{12, 12, 1, 1}));
  io::writeSafetensors(dir / "ae.safetensors", ldm);
  const auto ckpt = VaeCheckpoint::open(dir / "ae.safetensors");
  EXPECT_EQ(ckpt.format(), VaeWeightFormat::Ldm);
  AutoencoderKL target(cfg);
  loadVaeWeights(target, ckpt);
  expectSameParams(target, paramsOf(source));
  // And back: the loaded model writes the same ldm file.
  const auto again = vaeStateDict(target, VaeWeightFormat::Ldm);
  ASSERT_EQ(again.size(), ldm.size());
  for (size_t i = 0; i < ldm.size(); ++i) {
    EXPECT_EQ(again[i].first, ldm[i].first);
    EXPECT_TRUE(test::allClose(again[i].second, ldm[i].second, 0, 0)) << ldm[i].first;
  }
}

TEST_F(VaeCheckpointTest, LdmProjectionsAlreadySqueezedAreAccepted) {
  auto ldm = vaeStateDict(source, VaeWeightFormat::Ldm);
  for (const char* proj : {"q", "k", "v", "proj_out"}) {
    auto& t = entry(ldm, std::string("decoder.mid.attn_1.") + proj + ".weight");
    t = t.flatten(1);  // [C, C]
  }
  io::writeSafetensors(dir / "ae.safetensors", ldm);
  AutoencoderKL target(cfg);
  loadVaeWeights(target, dir / "ae.safetensors");
  expectSameParams(target, paramsOf(source));
}

TEST_F(VaeCheckpointTest, LegacyDiffusersAttentionNamesLoad) {
  io::writeSafetensors(dir / "old.safetensors", vaeStateDict(source, VaeWeightFormat::DiffusersLegacyAttention));
  const auto ckpt = VaeCheckpoint::open(dir / "old.safetensors");
  EXPECT_EQ(ckpt.format(), VaeWeightFormat::DiffusersLegacyAttention);
  EXPECT_TRUE(ckpt.shapes().count("encoder.mid_block.attentions.0.query.weight"));
  AutoencoderKL target(cfg);
  loadVaeWeights(target, ckpt);
  expectSameParams(target, paramsOf(source));
}

TEST_F(VaeCheckpointTest, EveryProblemIsListedByNameAndNothingIsLoaded) {
  auto sd = without(vaeStateDict(source), "decoder.up_blocks.1.resnets.0.conv_shortcut.weight");
  sd.emplace_back("decoder.extra.weight", at::zeros({3}));
  entry(sd, "encoder.conv_in.weight") = at::zeros({4, 3, 5, 5});
  io::writeSafetensors(dir / "broken.safetensors", sd);

  AutoencoderKL target(cfg);
  const auto before = paramsOf(target);
  const auto msg = loadError(target, dir / "broken.safetensors");
  EXPECT_TRUE(contains(msg, (dir / "broken.safetensors").string())) << msg;
  EXPECT_TRUE(contains(msg, "3 problem(s), nothing loaded")) << msg;
  EXPECT_TRUE(contains(msg, "missing: decoder.up_blocks.1.resnets.0.conv_shortcut.weight [8, 12, 1, 1]")) << msg;
  EXPECT_TRUE(contains(msg, "unexpected: decoder.extra.weight [3]")) << msg;
  EXPECT_TRUE(contains(msg, "mis-shaped: encoder.conv_in.weight expected [4, 3, 3, 3], got [4, 3, 5, 5]")) << msg;
  expectSameParams(target, before);
}

TEST_F(VaeCheckpointTest, LdmProblemsAreNamedAsTheFileNamesThem) {
  auto ldm = without(vaeStateDict(source, VaeWeightFormat::Ldm), "encoder.mid.attn_1.q.weight");
  io::writeSafetensors(dir / "ae.safetensors", ldm);
  AutoencoderKL target(cfg);
  const auto msg = loadError(target, dir / "ae.safetensors");
  EXPECT_TRUE(contains(msg, "(ldm names)")) << msg;
  EXPECT_TRUE(contains(msg, "missing: encoder.mid.attn_1.q.weight [12, 12, 1, 1]")) << msg;
}

TEST_F(VaeCheckpointTest, AModelWithoutQuantConvsRefusesAFileWithThem) {
  auto flux = cfg;
  flux.useQuantConv = false;
  flux.usePostQuantConv = false;
  io::writeSafetensors(dir / "sd.safetensors", vaeStateDict(source));
  AutoencoderKL target(flux);
  const auto msg = loadError(target, dir / "sd.safetensors");
  EXPECT_TRUE(contains(msg, "unexpected: quant_conv.weight")) << msg;
  EXPECT_TRUE(contains(msg, "unexpected: post_quant_conv.bias")) << msg;
}

TEST_F(VaeCheckpointTest, IntegerTensorsAreRefused) {
  auto sd = vaeStateDict(source);
  entry(sd, "decoder.conv_out.bias") = at::zeros({3}, at::kLong);
  io::writeSafetensors(dir / "ints.safetensors", sd);
  AutoencoderKL target(cfg);
  const auto msg = loadError(target, dir / "ints.safetensors");
  EXPECT_TRUE(contains(msg, "not floating point: decoder.conv_out.bias")) << msg;
}

TEST_F(VaeCheckpointTest, DtypesAreConvertedOnLoad) {
  auto sd = vaeStateDict(source);
  for (auto& [key, t] : sd) t = t.to(at::kBFloat16);
  io::writeSafetensors(dir / "bf16.safetensors", sd);
  AutoencoderKL f32(cfg);
  loadVaeWeights(f32, dir / "bf16.safetensors");
  std::map<std::string, at::Tensor> expected;
  for (const auto& [key, t] : sd) expected[key] = t.to(at::kFloat);
  expectSameParams(f32, expected);

  io::writeSafetensors(dir / "f32.safetensors", vaeStateDict(source));
  AutoencoderKL bf16(cfg, {at::kCPU, at::kBFloat16});
  loadVaeWeights(bf16, dir / "f32.safetensors");
  for (const auto& p : bf16.named_parameters(true)) {
    EXPECT_EQ(p.value().scalar_type(), at::kBFloat16);
    EXPECT_TRUE(test::allClose(p.value(), expected.at(p.key()), 0, 0)) << p.key();
  }
}

TEST_F(VaeCheckpointTest, FullCheckpointsGiveUpTheirVaePart) {
  StateDict full;
  for (auto& [key, t] : vaeStateDict(source, VaeWeightFormat::Ldm)) full.emplace_back("first_stage_model." + key, t);
  full.emplace_back("model.diffusion_model.input_blocks.0.0.weight", at::zeros({2, 2}));
  full.emplace_back("cond_stage_model.transformer.x.weight", at::zeros({2}));
  io::writeSafetensors(dir / "full.safetensors", full);
  const auto ckpt = VaeCheckpoint::open(dir / "full.safetensors");
  EXPECT_EQ(ckpt.prefix(), "first_stage_model.");
  EXPECT_EQ(ckpt.format(), VaeWeightFormat::Ldm);
  EXPECT_EQ(ckpt.config(VaeHints::of(cfg)), cfg);
  AutoencoderKL target(cfg);
  loadVaeWeights(target, ckpt);
  expectSameParams(target, paramsOf(source));

  // Problems name the key with its prefix, as the file stores it.
  full.erase(full.begin());
  io::writeSafetensors(dir / "full2.safetensors", full);
  const auto msg = loadError(target, dir / "full2.safetensors");
  EXPECT_TRUE(contains(msg, "missing: first_stage_model.")) << msg;
}

TEST_F(VaeCheckpointTest, DiffusersFoldersAndPipelineFolders) {
  fs::create_directories(dir / "pipe" / "vae");
  io::writeSafetensors(dir / "pipe" / "vae" / "diffusion_pytorch_model.safetensors", vaeStateDict(source));
  std::ofstream(dir / "pipe" / "vae" / "config.json") << cfg.toDiffusersJson().dump(2);
  const fs::path weights = dir / "pipe" / "vae" / "diffusion_pytorch_model.safetensors";
  for (const fs::path& p : {dir / "pipe", dir / "pipe" / "vae", weights}) {
    SCOPED_TRACE(p.string());
    const auto ckpt = VaeCheckpoint::open(p);
    EXPECT_EQ(ckpt.configJsonPath(), dir / "pipe" / "vae" / "config.json");
    EXPECT_EQ(ckpt.config(), cfg);  // from config.json, no hints needed
    const auto model = loadAutoencoderKL(p, {});
    EXPECT_EQ(model->config(), cfg);
    expectSameParams(*model, paramsOf(source));
  }
  // A config.json that disagrees with the weights fails on the keys, naming the file.
  auto wrong = cfg;
  wrong.useQuantConv = false;
  std::ofstream(dir / "pipe" / "vae" / "config.json") << wrong.toDiffusersJson().dump(2);
  try {
    loadAutoencoderKL(dir / "pipe", {});
    FAIL() << "a config.json without quant_conv loaded weights with it";
  } catch (const LoadError& e) {
    EXPECT_TRUE(contains(e.what(), "diffusion_pytorch_model.safetensors")) << e.what();
    EXPECT_TRUE(contains(e.what(), "unexpected: quant_conv.weight")) << e.what();
  }
}

TEST_F(VaeCheckpointTest, SingleFilesTakeTheirConfigFromShapesAndHints) {
  io::writeSafetensors(dir / "ae.safetensors", vaeStateDict(source, VaeWeightFormat::Ldm));
  const auto model = loadAutoencoderKL(dir / "ae.safetensors", {}, VaeHints::of(cfg));
  EXPECT_EQ(model->config(), cfg);
  expectSameParams(*model, paramsOf(source));
  // fp16 asked for a force_upcast VAE: float32, as diffusers does.
  const auto upcast = loadAutoencoderKL(dir / "ae.safetensors", {at::kCPU, at::kHalf}, VaeHints::of(cfg));
  EXPECT_EQ(upcast->dtype(), at::kFloat);
  // Without the group hint the tiny channel counts cannot take 32 groups: the file is named.
  try {
    loadAutoencoderKL(dir / "ae.safetensors", {});
    FAIL() << "32 groups over 4 channels";
  } catch (const LoadError& e) {
    EXPECT_TRUE(contains(e.what(), "ae.safetensors")) << e.what();
    EXPECT_TRUE(contains(e.what(), "norm_num_groups")) << e.what();
  }
}

TEST_F(VaeCheckpointTest, FolderAndPathErrors) {
  EXPECT_THROW(VaeCheckpoint::open(dir / "nothing-here"), IoError);
  fs::create_directories(dir / "empty");
  EXPECT_THROW(VaeCheckpoint::open(dir / "empty"), LoadError);
  fs::create_directories(dir / "two");
  io::writeSafetensors(dir / "two" / "a.safetensors", vaeStateDict(source));
  io::writeSafetensors(dir / "two" / "b.safetensors", vaeStateDict(source));
  try {
    VaeCheckpoint::open(dir / "two");
    FAIL() << "two weight files";
  } catch (const LoadError& e) {
    EXPECT_TRUE(contains(e.what(), "a.safetensors, b.safetensors")) << e.what();
  }
  // With diffusers' own file name present, that one is the VAE.
  io::writeSafetensors(dir / "two" / "diffusion_pytorch_model.safetensors", vaeStateDict(source));
  EXPECT_EQ(VaeCheckpoint::open(dir / "two").path().filename(), "diffusion_pytorch_model.safetensors");
}
