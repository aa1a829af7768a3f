#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"

using namespace strata;
using namespace strata::flux;

namespace {

FluxConfig smallConfig() {
  FluxConfig c = FluxConfig::tiny();
  c.inChannels = 16;
  c.outChannels = 16;
  c.numAttentionHeads = 2;
  c.attentionHeadDim = 16;
  c.axesDimsRope = {4, 6, 6};
  c.jointAttentionDim = 24;
  c.pooledProjectionDim = 20;
  return c;
}

FluxInputs randomInputs(const FluxConfig& cfg, int64_t batch = 2, int64_t h = 4, int64_t w = 6, int64_t nTxt = 5) {
  FluxInputs in;
  in.img = at::randn({batch, h * w / 4, cfg.inChannels});
  in.txt = at::randn({batch, nTxt, cfg.jointAttentionDim});
  in.pooled = at::randn({batch, cfg.pooledProjectionDim});
  in.timestep = at::rand({batch});
  in.guidance = at::full({batch}, 3.5);
  in.imgIds = imageIds(h, w);
  in.txtIds = textIds(nTxt);
  return in;
}

int64_t countParams(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// Records the block order a model's forward visits.
class RecordingRunner : public nn::BlockRunner {
 public:
  std::vector<size_t> visited;
  int toHeadCalls = 0;
  nn::BlockIO run(size_t i, nn::Block& block, const nn::BlockIO& in) override {
    visited.push_back(i);
    return block.forward(in);
  }
  nn::BlockIO toHead(const nn::BlockIO& io) override {
    ++toHeadCalls;
    return io;
  }
};

}  // namespace

TEST(FluxConfig, DiffusersJsonRoundTripAndDefaults) {
  const auto dev = FluxConfig::fluxDev();
  EXPECT_EQ(FluxConfig::fromDiffusersJson(dev.toDiffusersJson()), dev);
  // FLUX.1-dev's transformer/config.json (values from the published file).
  const auto j = nlohmann::json::parse(R"({"_class_name": "FluxTransformer2DModel", "attention_head_dim": 128,
      "axes_dims_rope": [16, 56, 56], "guidance_embeds": true, "in_channels": 64, "joint_attention_dim": 4096,
      "num_attention_heads": 24, "num_layers": 19, "num_single_layers": 38, "patch_size": 1,
      "pooled_projection_dim": 768})");
  EXPECT_EQ(FluxConfig::fromDiffusersJson(j), dev);
  EXPECT_EQ(FluxConfig::preset("flux-dev"), dev);
  EXPECT_EQ(FluxConfig::preset("tiny"), FluxConfig::tiny());
  EXPECT_THROW(FluxConfig::preset("flux-pro"), ConfigError);
  auto bad = j;
  bad["axes_dims_rope"] = {16, 56, 50};
  EXPECT_THROW(FluxConfig::fromDiffusersJson(bad), ConfigError);
  bad = j;
  bad["num_layers"] = "many";
  EXPECT_THROW(FluxConfig::fromDiffusersJson(bad), ConfigError);
}

TEST(FluxConfig, ParamPlanOfFluxDevAndEqualToBuiltModel) {
  const auto plan = fluxParamPlan(FluxConfig::fluxDev());
  EXPECT_EQ(plan.blocks.size(), 57u);
  EXPECT_EQ(plan.blocks[0].id, "transformer_blocks.0");
  EXPECT_EQ(plan.blocks[19].id, "single_transformer_blocks.0");
  EXPECT_EQ(plan.blocks[19].kind, "single");
  // FLUX.1-dev has 11,901,408,320 parameters (diffusers num_parameters()).
  EXPECT_EQ(plan.totalParams(), 11901408320LL);
  EXPECT_EQ(plan.blocks[0].linears.size(), 14u);
  EXPECT_EQ(plan.blocks[19].linears.size(), 6u);

  const auto cfg = smallConfig();
  FluxTransformer model(cfg);
  const auto small = fluxParamPlan(cfg);
  EXPECT_EQ(small.totalParams(), countParams(model));
  const auto list = model.blockList();
  ASSERT_EQ(list.blocks.size(), small.blocks.size());
  for (size_t i = 0; i < list.blocks.size(); ++i) {
    EXPECT_EQ(list.blocks[i].id, small.blocks[i].id);
    EXPECT_EQ(list.blocks[i].kind, small.blocks[i].kind);
    EXPECT_EQ(countParams(*list.blocks[i].block), small.blocks[i].paramCount) << small.blocks[i].id;
  }
  int64_t stem = 0, head = 0;
  for (const auto& m : list.stem.modules) stem += countParams(*m.module);
  for (const auto& m : list.head.modules) head += countParams(*m.module);
  EXPECT_EQ(stem, small.stem.paramCount);
  EXPECT_EQ(head, small.head.paramCount);
  // Every Linear of the model is in the plan with its shape.
  std::map<std::string, FluxLinearShape> planned;
  for (const auto* b : {&small.stem, &small.head})
    for (const auto& l : b->linears) planned[l.path] = l;
  for (const auto& b : small.blocks)
    for (const auto& l : b.linears) planned[l.path] = l;
  const auto linears = model.linears();
  EXPECT_EQ(linears.size(), planned.size());
  for (const auto& [path, lin] : linears) {
    ASSERT_TRUE(planned.count(path)) << path;
    EXPECT_EQ(lin->inFeatures(), planned[path].inFeatures) << path;
    EXPECT_EQ(lin->outFeatures(), planned[path].outFeatures) << path;
  }
  // The plan lists them in the model's own order (both come from one layout).
  std::vector<std::string> planOrder;
  for (const auto& l : small.stem.linears) planOrder.push_back(l.path);
  for (const auto& b : small.blocks)
    for (const auto& l : b.linears) planOrder.push_back(l.path);
  for (const auto& l : small.head.linears) planOrder.push_back(l.path);
  std::vector<std::string> modelOrder;
  for (const auto& [path, lin] : linears) modelOrder.push_back(path);
  EXPECT_EQ(planOrder, modelOrder);
}

TEST(FluxTransformer, RunnerVisitsEveryBlockInOrderAndMatchesLocal) {
  const auto cfg = smallConfig();
  FluxTransformer model(cfg);
  const auto in = randomInputs(cfg);
  at::NoGradGuard g;
  RecordingRunner rec;
  const auto a = model.forward(in, &rec);
  const auto b = model.forward(in);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{2, 6, cfg.outChannels}));
  std::vector<size_t> expected(cfg.numLayers + cfg.numSingleLayers);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = i;
  EXPECT_EQ(rec.visited, expected);
  EXPECT_EQ(rec.toHeadCalls, 1);
  EXPECT_TRUE(test::allClose(a, b, 0, 0));
  // Each sample in a batch is independent of the others.
  FluxInputs one = in;
  one.img = in.img.narrow(0, 1, 1);
  one.txt = in.txt.narrow(0, 1, 1);
  one.pooled = in.pooled.narrow(0, 1, 1);
  one.timestep = in.timestep.narrow(0, 1, 1);
  one.guidance = in.guidance.narrow(0, 1, 1);
  EXPECT_TRUE(test::allClose(model.forward(one), b.narrow(0, 1, 1), 1e-5, 1e-4));
}

TEST(FluxTransformer, BackwardReachesEveryBlockLinear) {
  const auto cfg = smallConfig();
  FluxTransformer model(cfg);
  auto in = randomInputs(cfg, 1);
  model.forward(in).pow(2).mean().backward();
  for (const auto& [path, lin] : model.linears()) {
    ASSERT_TRUE(lin->weight.grad().defined()) << path;
    EXPECT_GT(lin->weight.grad().abs().sum().item<double>(), 0.0) << path;
  }
}

TEST(FluxTransformer, GuidanceRequiredWhenEmbedded) {
  const auto cfg = smallConfig();
  FluxTransformer model(cfg);
  auto in = randomInputs(cfg, 1);
  in.guidance = at::Tensor();
  EXPECT_THROW(model.forward(in), Error);
  auto noGuidance = cfg;
  noGuidance.guidanceEmbeds = false;
  FluxTransformer schnell(noGuidance);
  at::NoGradGuard g;
  EXPECT_EQ(schnell.forward(in).size(2), cfg.outChannels);
}

TEST(FluxCheckpoint, DiffusersAndBflFilesLoadTheSameWeights) {
  const auto cfg = smallConfig();
  FluxTransformer src(cfg);
  test::TempDir dir;
  io::writeSafetensors(dir / "diffusers.safetensors", diffusersStateDict(src));
  // ComfyUI-style prefix on the BFL file is stripped on load.
  auto bfl = bflStateDict(src);
  for (auto& [k, t] : bfl) k = "model.diffusion_model." + k;
  io::writeSafetensors(dir / "bfl.safetensors", bfl);

  const auto in = randomInputs(cfg);
  at::NoGradGuard g;
  const auto expected = src.forward(in);
  for (const char* name : {"diffusers.safetensors", "bfl.safetensors"}) {
    EXPECT_EQ(FluxConfig::fromCheckpoint(dir / name, cfg.axesDimsRope), cfg) << name;
    auto model = loadFluxTransformer(dir / name, {}, cfg.axesDimsRope);
    EXPECT_TRUE(test::allClose(model->forward(in), expected, 0, 0)) << name;
  }
  EXPECT_EQ(FluxCheckpoint::open(dir / "bfl.safetensors").format(), FluxWeightFormat::Bfl);
  // Converted to bf16 on load.
  FluxBuildOptions bf16;
  bf16.dtype = at::kBFloat16;
  auto half = loadFluxTransformer(dir / "bfl.safetensors", bf16, cfg.axesDimsRope);
  EXPECT_EQ(half->dtype(), at::kBFloat16);
  EXPECT_TRUE(test::allClose(half->xEmbedder->weight.to(at::kFloat), src.xEmbedder->weight, 1e-2, 1e-2));
  EXPECT_TRUE(test::allClose(half->forward(in).to(at::kFloat), expected, 0.1, 0.1));
}

// A quantized Linear's "weight" is 1-byte storage without its scale: written as it is,
// it would reload as garbage. Both writers refuse, naming the Linear.
TEST(FluxCheckpoint, WritersRefuseAQuantizedModelNamingTheLinear) {
  FluxTransformer src(smallConfig());
  ASSERT_NO_THROW(diffusersStateDict(src));
  const std::string path = "single_transformer_blocks.1.proj_out";
  auto* lin = dynamic_cast<nn::LinearImpl*>(src.named_modules("", false)[path].get());
  ASSERT_NE(lin, nullptr) << path;
  lin->quantize(nn::QuantType::Int8);
  for (int bfl = 0; bfl < 2; ++bfl) {
    const char* writer = bfl ? "bflStateDict" : "diffusersStateDict";
    try {
      (void)(bfl ? bflStateDict(src) : diffusersStateDict(src));
      ADD_FAILURE() << writer << " wrote a quantized model";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(writer), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + path + "' is quantized (int8)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("write the float base"), std::string::npos) << msg;
    }
  }
}

TEST(FluxCheckpoint, ShardedDiffusersFolderWithIndex) {
  const auto cfg = smallConfig();
  FluxTransformer src(cfg);
  test::TempDir dir;
  const auto transformer = dir.path() / "transformer";
  std::filesystem::create_directories(transformer);
  auto sd = diffusersStateDict(src);
  const size_t half = sd.size() / 2;
  std::vector<std::pair<std::string, at::Tensor>> a(sd.begin(), sd.begin() + half), b(sd.begin() + half, sd.end());
  io::writeSafetensors(transformer / "diffusion_pytorch_model-00001-of-00002.safetensors", a);
  io::writeSafetensors(transformer / "diffusion_pytorch_model-00002-of-00002.safetensors", b);
  nlohmann::json index;
  for (const auto& [k, _] : a) index["weight_map"][k] = "diffusion_pytorch_model-00001-of-00002.safetensors";
  for (const auto& [k, _] : b) index["weight_map"][k] = "diffusion_pytorch_model-00002-of-00002.safetensors";
  std::ofstream(transformer / "diffusion_pytorch_model.safetensors.index.json") << index.dump();
  std::ofstream(transformer / "config.json") << cfg.toDiffusersJson().dump();

  // Rotary axes come from config.json; the root folder is accepted too.
  EXPECT_EQ(FluxConfig::fromCheckpoint(dir.path()), cfg);
  auto model = loadFluxTransformer(dir.path(), {});
  const auto in = randomInputs(cfg);
  at::NoGradGuard g;
  EXPECT_TRUE(test::allClose(model->forward(in), src.forward(in), 0, 0));
  EXPECT_EQ(FluxCheckpoint::open(transformer).files().size(), 2u);
}

TEST(FluxCheckpoint, StrictListsEveryProblemAndLoadsNothing) {
  const auto cfg = smallConfig();
  FluxTransformer src(cfg);
  auto sd = diffusersStateDict(src);
  std::vector<std::pair<std::string, at::Tensor>> broken;
  for (auto& [k, t] : sd) {
    if (k == "transformer_blocks.0.attn.to_q.weight") continue;  // missing
    if (k == "proj_out.bias") t = at::zeros({t.size(0) + 1});    // mis-shaped
    broken.emplace_back(k, t);
  }
  broken.emplace_back("transformer_blocks.0.attn.to_z.weight", at::zeros({2, 2}));  // unexpected
  test::TempDir dir;
  io::writeSafetensors(dir / "broken.safetensors", broken);

  FluxTransformer target(cfg);
  const auto before = target.xEmbedder->weight.clone();
  try {
    loadFluxWeights(target, dir / "broken.safetensors");
    FAIL() << "expected a LoadError";
  } catch (const LoadError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing: transformer_blocks.0.attn.to_q.weight [32, 32]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mis-shaped: proj_out.bias expected [16], got [17]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected: transformer_blocks.0.attn.to_z.weight [2, 2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 problem(s)"), std::string::npos) << msg;
  }
  EXPECT_TRUE(test::allClose(target.xEmbedder->weight, before, 0, 0)) << "nothing may load partially";

  // A BFL file with a wrong fused size names the fused key.
  auto bfl = bflStateDict(src);
  for (auto& [k, t] : bfl)
    if (k == "single_blocks.1.linear1.weight") t = t.narrow(0, 0, t.size(0) - 1).contiguous();
  io::writeSafetensors(dir / "bfl.safetensors", bfl);
  try {
    loadFluxWeights(target, dir / "bfl.safetensors");
    FAIL() << "expected a LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(
        std::string(e.what()).find("mis-shaped: single_blocks.1.linear1.weight expected [224, 32], got [223, 32]"),
        std::string::npos)
        << e.what();
  }
}

TEST(FluxSampling, PackUnpackIdsAndSchedule) {
  const auto latents = at::randn({2, 16, 6, 8});
  const auto packed = packLatents(latents);
  EXPECT_EQ(packed.sizes(), (std::vector<int64_t>{2, 12, 64}));
  EXPECT_TRUE(test::allClose(unpackLatents(packed, 6, 8), latents, 0, 0));
  // Token (r, c) holds channel-major 2x2 patches: channel 1, pixel (1, 0) of patch (1, 2).
  EXPECT_EQ(packed[0][1 * 4 + 2][1 * 4 + 2].item<float>(), latents[0][1][3][4].item<float>());
  const auto ids = imageIds(6, 8);
  EXPECT_EQ(ids.sizes(), (std::vector<int64_t>{12, 3}));
  EXPECT_EQ(ids[7][1].item<float>(), 1.0f);
  EXPECT_EQ(ids[7][2].item<float>(), 3.0f);
  EXPECT_EQ(ids.select(1, 0).abs().sum().item<float>(), 0.0f);
  EXPECT_THROW(packLatents(at::zeros({1, 4, 3, 4})), Error);

  EXPECT_NEAR(shiftMu(256), 0.5, 1e-12);
  EXPECT_NEAR(shiftMu(4096), 1.15, 1e-12);
  EXPECT_NEAR(shiftSigma(0.5, std::log(3.0)), 0.75, 1e-12);
  const auto s = samplingSigmas(4, 0.0);  // mu 0: no shift
  EXPECT_TRUE(test::allClose(s, at::tensor({1.0f, 0.75f, 0.5f, 0.25f, 0.0f}), 1e-7, 0));
  // Euler: x + (s_next - s) v
  const auto x = at::ones({3});
  EXPECT_TRUE(test::allClose(eulerStep(x, at::full({3}, 2.0), at::tensor(0.75f), at::tensor(0.5f)), at::full({3}, 0.5),
                             1e-7, 0));
}
