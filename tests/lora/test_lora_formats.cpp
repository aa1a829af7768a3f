// LoRA files: export in each form, read back, same outputs; key names and shapes
// of docs/design.md §3; kohya fusing of q/k/v (rank 3r) and linear1 (4r); exact splits of
// general fused LoRAs; errors that name the key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "LoraTestSupport.h"
#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "models/flux/FluxNames.h"

using namespace strata;
using namespace strata::lora;
using strata::lora::test::randomizeUps;
using strata::lora::test::TinyFlux;

namespace {

LoraConfig allLinearsConfig(int64_t rank, double alpha) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  // Every block Linear plus the head's norm_out.linear (halves swapped in BFL) and proj_out.
  c.targetModules = {"re:(single_)?transformer_blocks\\..*", "norm_out.linear", "proj_out"};
  return c;
}

LoraExportOptions exportOptions(LoraFileFormat format) {
  LoraExportOptions o;
  o.format = format;
  o.softwareVersion = "0.1.0";
  o.baseModel = "black-forest-labs/FLUX.1-dev";
  o.title = "test_lora";
  o.steps = 123;
  o.runYaml = "job:\n  name: test_lora\n";
  o.extraMetadata["custom_key"] = "custom value";
  return o;
}

std::map<std::string, at::Tensor> tensorsOf(const std::filesystem::path& p) { return io::loadSafetensors(p); }

std::string loadErrorOf(const std::map<std::string, at::Tensor>& tensors, const nn::LoraNameRules& rules) {
  try {
    convertLoraTensors(tensors, {}, rules);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

class LoraFormatRoundTrip : public ::testing::TestWithParam<LoraFileFormat> {};

}  // namespace

TEST_P(LoraFormatRoundTrip, ExportLoadBackSameOutputs) {
  const LoraFileFormat format = GetParam();
  TinyFlux f;
  const auto base = f.forward();
  at::Tensor withLora;
  strata::test::TempDir dir;
  const auto path = dir / (std::string("lora_") + toString(format) + ".safetensors");
  {
    auto net = LoraNetwork::create(*f.model, allLinearsConfig(4, 8));
    randomizeUps(*net, 0.1);
    withLora = f.forward();
    ASSERT_FALSE(strata::test::allClose(withLora, base, 1e-4, 0)) << "the LoRA must change the output";
    writeLoraFile(path, *net, f.rules, exportOptions(format));
  }
  ASSERT_TRUE(strata::test::allClose(f.forward(), base, 0, 0));
  const auto content = readLoraFile(path, f.rules);
  EXPECT_EQ(content.format, format);
  auto loaded = loadLoraNetwork(*f.model, f.rules, path);
  EXPECT_TRUE(strata::test::allClose(f.forward(), withLora, 1e-5, 1e-4)) << toString(format);
  // Fused q/k/v written block-diagonal come back as one rank-r LoRA per projection.
  for (const auto& a : loaded->adapters()) EXPECT_EQ(a->rank(), 4) << a->hostPath();
  EXPECT_EQ(loaded->adapters().size(), static_cast<size_t>(14 * f.cfg.numLayers + 6 * f.cfg.numSingleLayers + 2));

  const auto file = io::SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  EXPECT_EQ(meta.at("ss_network_dim"), "4");
  EXPECT_EQ(meta.at("ss_network_alpha"), "8");
  EXPECT_EQ(meta.at("ss_steps"), "123");
  EXPECT_EQ(meta.at("ss_sd_model_name"), "black-forest-labs/FLUX.1-dev");
  EXPECT_EQ(meta.at("strata_run_config"), "job:\n  name: test_lora\n");
  EXPECT_EQ(meta.at("modelspec.architecture"), "flux-1-dev/lora");
  EXPECT_EQ(meta.at("modelspec.title"), "test_lora");
  EXPECT_EQ(meta.at("custom_key"), "custom value");
  const auto software = nlohmann::json::parse(meta.at("software"));
  EXPECT_EQ(software.at("name"), "Strata");
  EXPECT_EQ(software.at("version"), "0.1.0");
}

INSTANTIATE_TEST_SUITE_P(AllForms, LoraFormatRoundTrip,
                         ::testing::Values(LoraFileFormat::Diffusers, LoraFileFormat::Kohya, LoraFileFormat::Comfy),
                         [](const auto& info) { return std::string(toString(info.param)); });

TEST(LoraFormats, DiffusersExportFoldsAlphaAndWritesPeftMetadata) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, allLinearsConfig(4, 8));
  randomizeUps(*net);
  strata::test::TempDir dir;
  writeLoraFile(dir / "d.safetensors", *net, f.rules, exportOptions(LoraFileFormat::Diffusers));
  const auto t = tensorsOf(dir / "d.safetensors");
  const int64_t h = f.cfg.hiddenSize();
  EXPECT_EQ(t.size(), 2 * net->adapters().size()) << "no .alpha tensors in the diffusers form";
  const auto& a = *net->adapter("transformer_blocks.0.attn.to_q");
  EXPECT_EQ(t.at("transformer.transformer_blocks.0.attn.to_q.lora_A.weight").sizes(), (std::vector<int64_t>{4, h}));
  EXPECT_TRUE(t.at("transformer.transformer_blocks.0.attn.to_q.lora_A.weight").equal(a.down));
  EXPECT_TRUE(
      strata::test::allClose(t.at("transformer.transformer_blocks.0.attn.to_q.lora_B.weight"), a.up * 2.0, 0, 1e-7));
  EXPECT_EQ(t.at("transformer.single_transformer_blocks.0.proj_mlp.lora_B.weight").sizes(),
            (std::vector<int64_t>{f.cfg.mlpHiddenSize(), 4}));
  EXPECT_TRUE(t.count("transformer.proj_out.lora_A.weight"));
  const auto peft =
      nlohmann::json::parse(io::SafetensorsFile::open(dir / "d.safetensors").metadata().at("lora_adapter_metadata"));
  EXPECT_EQ(peft.at("transformer.r"), 4);
  EXPECT_EQ(peft.at("transformer.lora_alpha"), 4) << "alpha/r is folded in, so alpha = r";

  // A loader that reads the metadata and one that assumes alpha = r agree.
  std::map<std::string, std::string> noMeta;
  const auto withoutMeta = convertLoraTensors(t, noMeta, f.rules);
  for (const auto& m : withoutMeta.modules) EXPECT_DOUBLE_EQ(m.alpha, 4.0);
  // Keys without the "transformer." prefix are accepted too.
  std::map<std::string, at::Tensor> bare;
  for (const auto& [k, v] : t) bare[k.substr(std::string("transformer.").size())] = v;
  EXPECT_EQ(convertLoraTensors(bare, {}, f.rules).modules.size(), net->adapters().size());
}

TEST(LoraFormats, KohyaExportFusesQkvToRank3rAndLinear1To4r) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, allLinearsConfig(4, 8));
  randomizeUps(*net);
  strata::test::TempDir dir;
  writeLoraFile(dir / "k.safetensors", *net, f.rules, exportOptions(LoraFileFormat::Kohya));
  const auto t = tensorsOf(dir / "k.safetensors");
  const int64_t h = f.cfg.hiddenSize(), mlp = f.cfg.mlpHiddenSize();
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(t.at("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight").sizes(), (Shape{12, h}));
  EXPECT_EQ(t.at("lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight").sizes(), (Shape{3 * h, 12}));
  EXPECT_EQ(t.at("lora_unet_double_blocks_0_img_attn_qkv.alpha").item<double>(), 24.0) << "scale 2 kept at rank 12";
  EXPECT_EQ(t.at("lora_unet_double_blocks_1_txt_attn_qkv.lora_up.weight").sizes(), (Shape{3 * h, 12}));
  EXPECT_EQ(t.at("lora_unet_single_blocks_0_linear1.lora_down.weight").sizes(), (Shape{16, h}));
  EXPECT_EQ(t.at("lora_unet_single_blocks_0_linear1.lora_up.weight").sizes(), (Shape{3 * h + mlp, 16}));
  EXPECT_EQ(t.at("lora_unet_single_blocks_0_linear2.lora_down.weight").sizes(), (Shape{4, h + mlp}));
  EXPECT_EQ(t.at("lora_unet_double_blocks_0_img_mod_lin.lora_up.weight").sizes(), (Shape{6 * h, 4}));
  EXPECT_EQ(t.at("lora_unet_double_blocks_0_img_mlp_0.lora_up.weight").sizes(), (Shape{mlp, 4}));
  EXPECT_EQ(t.at("lora_unet_single_blocks_0_modulation_lin.alpha").item<double>(), 8.0);
  EXPECT_TRUE(t.count("lora_unet_final_layer_linear.lora_down.weight"));
  EXPECT_TRUE(t.count("lora_unet_final_layer_adaLN_modulation_1.lora_down.weight"));
  // Stacked downs, block-diagonal up.
  const auto& q = *net->adapter("transformer_blocks.0.attn.to_q");
  const auto& k = *net->adapter("transformer_blocks.0.attn.to_k");
  const auto& down = t.at("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight");
  const auto& up = t.at("lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight");
  EXPECT_TRUE(down.narrow(0, 4, 4).equal(k.down));
  EXPECT_TRUE(up.narrow(0, h, h).narrow(1, 4, 4).equal(k.up));
  EXPECT_EQ(up.narrow(0, 0, h).narrow(1, 4, 8).abs().max().item<double>(), 0.0);
  // The fused delta equals the three per-projection deltas stacked.
  const auto fusedDelta = at::matmul(up, down) * 2.0;  // [3h, h]
  EXPECT_TRUE(strata::test::allClose(fusedDelta.narrow(0, 0, h), q.deltaWeight(), 1e-6, 1e-5));
  EXPECT_TRUE(strata::test::allClose(fusedDelta.narrow(0, h, h), k.deltaWeight(), 1e-6, 1e-5));
  // Final layer: BFL holds (shift, scale) where diffusers holds (scale, shift).
  const auto& normOut = *net->adapter("norm_out.linear");
  const auto& finalUp = t.at("lora_unet_final_layer_adaLN_modulation_1.lora_up.weight");
  EXPECT_TRUE(finalUp.narrow(0, 0, h).equal(normOut.up.narrow(0, h, h)));
  EXPECT_TRUE(finalUp.narrow(0, h, h).equal(normOut.up.narrow(0, 0, h)));
}

TEST(LoraFormats, ComfyExportUsesBflNames) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, allLinearsConfig(4, 4));
  strata::test::TempDir dir;
  auto o = exportOptions(LoraFileFormat::Comfy);
  o.dtype = at::kBFloat16;
  writeLoraFile(dir / "c.safetensors", *net, f.rules, o);
  const auto t = tensorsOf(dir / "c.safetensors");
  const int64_t h = f.cfg.hiddenSize();
  EXPECT_EQ(t.at("diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight").sizes(), (std::vector<int64_t>{12, h}));
  EXPECT_EQ(t.at("diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight").scalar_type(), at::kBFloat16);
  EXPECT_TRUE(t.count("diffusion_model.single_blocks.1.linear1.lora_B.weight"));
  EXPECT_TRUE(t.count("diffusion_model.double_blocks.1.txt_mlp.2.alpha"));
  EXPECT_TRUE(t.count("diffusion_model.final_layer.linear.lora_A.weight"));
  for (const auto& [k, v] : t) EXPECT_EQ(k.rfind("diffusion_model.", 0), 0u) << k;
}

TEST(LoraFormats, KohyaFusesSeparateQkvLorasWithEqualOutputs) {
  // Three independently trained rank-r LoRAs on q, k, v (different scales too).
  TinyFlux f;
  const auto base = f.forward();
  const int64_t h = f.cfg.hiddenSize(), r = 3;
  std::vector<LoraModuleWeights> w;
  double alpha = 1.0;
  for (const char* p : {"to_q", "to_k", "to_v"}) {
    w.push_back(
        {std::string("transformer_blocks.1.attn.") + p, at::randn({r, h}) * 0.1, at::randn({h, r}) * 0.1, alpha});
    alpha *= 2.0;
  }
  at::Tensor expected;
  {
    auto net = LoraNetwork::fromWeights(*f.model, w);
    expected = f.forward();
  }
  ASSERT_FALSE(strata::test::allClose(expected, base, 1e-4, 0));
  const auto fused = loraTensorsForExport(w, LoraFileFormat::Kohya, f.rules);
  ASSERT_EQ(fused.size(), 3u) << "one fused module";
  std::map<std::string, at::Tensor> t(fused.begin(), fused.end());
  EXPECT_EQ(t.at("lora_unet_double_blocks_1_img_attn_qkv.lora_down.weight").size(0), 3 * r);
  auto net = LoraNetwork::fromWeights(*f.model, convertLoraTensors(t, {}, f.rules).modules);
  EXPECT_TRUE(strata::test::allClose(f.forward(), expected, 1e-5, 1e-4));
  ASSERT_EQ(net->adapters().size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(strata::test::allClose(net->adapters()[i]->deltaWeight(),
                                       at::matmul(w[i].up, w[i].down) * (w[i].alpha / r), 1e-6, 1e-5));
}

TEST(LoraFormats, GeneralFusedKohyaLoraSplitsExactlyWithSharedDown) {
  TinyFlux f;
  const int64_t h = f.cfg.hiddenSize(), mlp = f.cfg.mlpHiddenSize(), R = 5;
  const auto down = at::randn({R, h}) * 0.1;
  const auto up = at::randn({3 * h + mlp, R}) * 0.1;  // dense: no block structure
  std::map<std::string, at::Tensor> t{{"lora_unet_single_blocks_2_linear1.lora_down.weight", down},
                                      {"lora_unet_single_blocks_2_linear1.lora_up.weight", up},
                                      {"lora_unet_single_blocks_2_linear1.alpha", at::scalar_tensor(10.0)}};
  const auto content = convertLoraTensors(t, {}, f.rules);
  EXPECT_EQ(content.format, LoraFileFormat::Kohya);
  ASSERT_EQ(content.modules.size(), 4u);
  const char* parts[] = {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"};
  const int64_t offsets[] = {0, h, 2 * h, 3 * h}, rows[] = {h, h, h, mlp};
  const auto fusedDelta = at::matmul(up, down) * (10.0 / R);
  auto net = LoraNetwork::fromWeights(*f.model, content.modules);
  for (int i = 0; i < 4; ++i) {
    const auto a = net->adapter(std::string("single_transformer_blocks.2.") + parts[i]);
    ASSERT_NE(a, nullptr) << parts[i];
    EXPECT_EQ(a->rank(), R);
    EXPECT_TRUE(strata::test::allClose(a->deltaWeight(), fusedDelta.narrow(0, offsets[i], rows[i]), 1e-6, 1e-5));
  }
  // Untrained, they still share one down: exported back as the same rank-R fused LoRA.
  const auto back = loraTensorsForExport(net->moduleWeights(), LoraFileFormat::Kohya, f.rules);
  std::map<std::string, at::Tensor> b(back.begin(), back.end());
  EXPECT_TRUE(b.at("lora_unet_single_blocks_2_linear1.lora_down.weight").equal(down));
  EXPECT_TRUE(b.at("lora_unet_single_blocks_2_linear1.lora_up.weight").equal(up));
  EXPECT_DOUBLE_EQ(b.at("lora_unet_single_blocks_2_linear1.alpha").item<double>(), 10.0);
}

TEST(LoraFormats, FusedLoraOnOnePartOnlyGivesOneAdapter) {
  TinyFlux f;
  const int64_t h = f.cfg.hiddenSize(), r = 2;
  std::vector<LoraModuleWeights> w{{"transformer_blocks.0.attn.add_v_proj", at::randn({r, h}), at::randn({h, r}), 2.0}};
  const auto out = loraTensorsForExport(w, LoraFileFormat::Comfy, f.rules);
  std::map<std::string, at::Tensor> t(out.begin(), out.end());
  EXPECT_EQ(t.at("diffusion_model.double_blocks.0.txt_attn.qkv.lora_B.weight").sizes(),
            (std::vector<int64_t>{3 * h, r}));
  const auto back = convertLoraTensors(t, {}, f.rules);
  ASSERT_EQ(back.modules.size(), 1u);
  EXPECT_EQ(back.modules[0].modulePath, "transformer_blocks.0.attn.add_v_proj");
  EXPECT_TRUE(back.modules[0].up.equal(w[0].up));
  EXPECT_DOUBLE_EQ(back.modules[0].alpha, 2.0);
}

TEST(LoraFormats, AlphaFromTensorsMetadataOrOverride) {
  TinyFlux f;
  const int64_t h = f.cfg.hiddenSize();
  std::map<std::string, at::Tensor> t{{"transformer.proj_out.lora_A.weight", at::randn({4, h})},
                                      {"transformer.proj_out.lora_B.weight", at::randn({f.cfg.outChannels, 4})}};
  EXPECT_DOUBLE_EQ(convertLoraTensors(t, {}, f.rules).modules[0].alpha, 4.0) << "no alpha: alpha = r";
  std::map<std::string, std::string> meta{
      {"lora_adapter_metadata", R"({"transformer.r": 4, "transformer.lora_alpha": 16})"}};
  EXPECT_DOUBLE_EQ(convertLoraTensors(t, meta, f.rules).modules[0].alpha, 16.0);
  meta["lora_adapter_metadata"] = R"({"r": 4, "lora_alpha": 16, "alpha_pattern": {"proj_out": 2}})";
  EXPECT_DOUBLE_EQ(convertLoraTensors(t, meta, f.rules).modules[0].alpha, 2.0);
  LoraLoadOptions o;
  o.alpha = 8.0;
  EXPECT_DOUBLE_EQ(convertLoraTensors(t, meta, f.rules, o).modules[0].alpha, 8.0);
  t["transformer.proj_out.alpha"] = at::scalar_tensor(1.0);
  EXPECT_DOUBLE_EQ(convertLoraTensors(t, meta, f.rules).modules[0].alpha, 1.0);
  meta["lora_adapter_metadata"] = "{not json";
  EXPECT_THROW(convertLoraTensors(t, meta, f.rules), LoadError);
}

TEST(LoraFormats, KeyThatNamesNoModuleIsAnErrorNamingTheKey) {
  TinyFlux f;
  const int64_t h = f.cfg.hiddenSize();
  const auto down = at::randn({2, h}), up = at::randn({h, 2});
  for (const std::string base :
       {"transformer.transformer_blocks.9.attn.to_q",    // block out of range
        "transformer.transformer_blocks.0.attn.norm_q",  // not a Linear
        "transformer.no_such_module", "lora_unet_double_blocks_0_img_attn_foo",
        "lora_unet_single_blocks_7_linear2",  // tiny has 4 single blocks
        "lora_te1_text_model_encoder_layers_0_mlp_fc1", "diffusion_model.double_blocks.0.bogus"}) {
    const bool kohya = base.rfind("lora_", 0) == 0;
    std::map<std::string, at::Tensor> t{{base + (kohya ? ".lora_down.weight" : ".lora_A.weight"), down},
                                        {base + (kohya ? ".lora_up.weight" : ".lora_B.weight"), up}};
    const std::string msg = loadErrorOf(t, f.rules);
    EXPECT_NE(msg.find(base), std::string::npos) << base << " -> '" << msg << "'";
  }
  const std::string notLora = loadErrorOf({{"transformer.proj_out.weight", down}}, f.rules);
  EXPECT_NE(notLora.find("transformer.proj_out.weight"), std::string::npos) << notLora;
  const std::string unpaired = loadErrorOf({{"transformer.proj_out.lora_A.weight", down}}, f.rules);
  EXPECT_NE(unpaired.find("transformer.proj_out.lora_A.weight"), std::string::npos) << unpaired;
  // Through the file loader too, with the file named.
  strata::test::TempDir dir;
  io::writeSafetensors(dir / "bad.safetensors", {{"transformer.transformer_blocks.0.attn.to_x.lora_A.weight", down},
                                                 {"transformer.transformer_blocks.0.attn.to_x.lora_B.weight", up}});
  try {
    loadLoraNetwork(*f.model, f.rules, dir / "bad.safetensors");
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.transformer_blocks.0.attn.to_x.lora_"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos);
  }
  EXPECT_TRUE(f.model->linears().front().second->adapters().empty()) << "nothing attached after a failed load";
}

TEST(LoraFormats, PerSampleMultiplierOnALoadedNetwork) {
  TinyFlux f(/*batch=*/2);
  const auto base = f.forward();
  strata::test::TempDir dir;
  at::Tensor full;
  {
    auto net = LoraNetwork::create(*f.model, allLinearsConfig(2, 2));
    randomizeUps(*net, 0.1);
    full = f.forward();
    writeLoraFile(dir / "m.safetensors", *net, f.rules, exportOptions(LoraFileFormat::Kohya));
  }
  auto net = loadLoraNetwork(*f.model, f.rules, dir / "m.safetensors");
  net->setMultiplier(at::tensor({1.0f, 0.0f}));
  const auto out = f.forward();
  EXPECT_TRUE(strata::test::allClose(out[0], full[0], 1e-5, 1e-4));
  EXPECT_TRUE(strata::test::allClose(out[1], base[1], 1e-5, 1e-4));
}

TEST(LoraFormats, ComfyKeysWithDownUpOrWithoutPrefixLoadTheSame) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, allLinearsConfig(2, 4));
  randomizeUps(*net);
  const auto exported = loraTensorsForExport(net->moduleWeights(), LoraFileFormat::Comfy, f.rules);
  std::map<std::string, at::Tensor> downUp, bare;
  const std::string prefix = "diffusion_model.";
  for (const auto& [k, v] : exported) {
    std::string key = k;
    for (const auto& [from, to] : {std::pair<std::string, std::string>{".lora_A.weight", ".lora_down.weight"},
                                   {".lora_B.weight", ".lora_up.weight"}})
      if (key.size() > from.size() && key.compare(key.size() - from.size(), from.size(), from) == 0)
        key = key.substr(0, key.size() - from.size()) + to;
    downUp["model." + key] = v;
    bare[k.substr(prefix.size())] = v;
  }
  const auto reference = net->moduleWeights();
  for (const auto* t : {&downUp, &bare}) {
    const auto content = convertLoraTensors(*t, {}, f.rules);
    EXPECT_EQ(content.format, LoraFileFormat::Comfy);
    ASSERT_EQ(content.modules.size(), reference.size());
    for (const auto& m : content.modules) {
      const auto a = net->adapter(m.modulePath);
      ASSERT_NE(a, nullptr) << m.modulePath;
      EXPECT_TRUE(
          strata::test::allClose(at::matmul(m.up, m.down) * (m.alpha / m.down.size(0)), a->deltaWeight(), 1e-6, 1e-5))
          << m.modulePath;
    }
  }
}

TEST(LoraFormats, AlphaTensorsAreFloat32WhateverTheExportDtype) {
  // Three rank-1 LoRAs on q, k, v with alpha 0.7 fuse into one of rank 3 and alpha
  // 2.1, which bf16 would round to 2.09375 (a 0.3% change of the LoRA's strength).
  TinyFlux f;
  const int64_t h = f.cfg.hiddenSize();
  std::vector<LoraModuleWeights> w;
  for (const char* p : {"to_q", "to_k", "to_v"})
    w.push_back({std::string("transformer_blocks.0.attn.") + p, at::randn({1, h}), at::randn({h, 1}), 0.7});
  w.push_back({"transformer_blocks.0.ff.net.2", at::randn({2, f.cfg.mlpHiddenSize()}), at::randn({h, 2}), 2.1});
  for (const auto format : {LoraFileFormat::Kohya, LoraFileFormat::Comfy}) {
    const auto out = loraTensorsForExport(w, format, f.rules, at::kBFloat16);
    std::map<std::string, at::Tensor> t(out.begin(), out.end());
    const std::string fused = format == LoraFileFormat::Kohya ? "lora_unet_double_blocks_0_img_attn_qkv"
                                                              : "diffusion_model.double_blocks.0.img_attn.qkv";
    const std::string single = format == LoraFileFormat::Kohya ? "lora_unet_double_blocks_0_img_mlp_2"
                                                               : "diffusion_model.double_blocks.0.img_mlp.2";
    for (const auto& stem : {fused, single}) {
      const auto& alpha = t.at(stem + ".alpha");
      EXPECT_EQ(alpha.scalar_type(), at::kFloat) << stem;
      EXPECT_EQ(alpha.item<float>(), 2.1f) << stem;
    }
    EXPECT_EQ(t.at(fused + (format == LoraFileFormat::Kohya ? ".lora_down.weight" : ".lora_A.weight")).scalar_type(),
              at::kBFloat16);
    // Read back, the scale is the float32 one: 2.1 / 3 per projection.
    for (const auto& m : convertLoraTensors(t, {}, f.rules).modules)
      EXPECT_NEAR(m.alpha / static_cast<double>(m.down.size(0)),
                  m.modulePath.find("ff.") != std::string::npos ? 1.05 : 0.7, 1e-6)
          << m.modulePath;
  }
}

TEST(LoraFormats, FusedSplitAndFuseRoundTripExactly) {
  // Per-projection LoRAs of different ranks on linear1's four parts -> one fused
  // kohya LoRA (block-diagonal up) -> split back: the same four adapters.
  TinyFlux f;
  const int64_t h = f.cfg.hiddenSize(), mlp = f.cfg.mlpHiddenSize();
  std::vector<LoraModuleWeights> w{
      {"single_transformer_blocks.1.attn.to_q", at::randn({1, h}), at::randn({h, 1}), 1.0},
      {"single_transformer_blocks.1.attn.to_k", at::randn({2, h}), at::randn({h, 2}), 2.0},
      {"single_transformer_blocks.1.attn.to_v", at::randn({3, h}), at::randn({h, 3}), 3.0},
      {"single_transformer_blocks.1.proj_mlp", at::randn({2, h}), at::randn({mlp, 2}), 2.0}};
  const auto out = loraTensorsForExport(w, LoraFileFormat::Kohya, f.rules);
  ASSERT_EQ(out.size(), 3u);
  std::map<std::string, at::Tensor> t(out.begin(), out.end());
  EXPECT_EQ(t.at("lora_unet_single_blocks_1_linear1.lora_up.weight").sizes(), (std::vector<int64_t>{3 * h + mlp, 8}));
  const auto back = convertLoraTensors(t, {}, f.rules).modules;  // in the model's order
  ASSERT_EQ(back.size(), w.size());
  for (const auto& m : w) {
    const auto it = std::find_if(back.begin(), back.end(), [&](const auto& b) { return b.modulePath == m.modulePath; });
    ASSERT_NE(it, back.end()) << m.modulePath;
    EXPECT_EQ(it->down.size(0), m.down.size(0)) << m.modulePath;
    EXPECT_TRUE(strata::test::allClose(at::matmul(it->up, it->down) * (it->alpha / it->down.size(0)),
                                       at::matmul(m.up, m.down) * (m.alpha / m.down.size(0)), 1e-6, 1e-5))
        << m.modulePath;
  }
  // And fused again: the same file tensors.
  const auto again = loraTensorsForExport(back, LoraFileFormat::Kohya, f.rules);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(again[i].first, out[i].first);
    EXPECT_TRUE(strata::test::allClose(again[i].second, out[i].second, 1e-6, 1e-6)) << out[i].first;
  }
}
