// T5 with its Linears quantized while loading (model.quantize_te) against the
// float T5 run on the dequantized weights, on every "t5_encoder" fixture and on
// the T5 of every "flux_pipeline" fixture: the same numbers within float
// tolerance, whatever the shapes (the error against the float T5 grows with
// them, so it is printed, not bounded). Config, files and inputs come from each
// folder's manifest and files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <map>
#include <string>

#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "io/Safetensors.h"
#include "models/t5/T5Checkpoint.h"
#include "models/t5/T5Encoder.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"
#include "parity/ParityRegistry.h"
#include "parity/TextEncoderFixture.h"

namespace fs = std::filesystem;
using namespace strata;

using strata::test::relL2;

namespace {

// Quantized and dequantized runs differ only in where the scale multiplies
// ((x W_q^T) * s vs x (W_q s)^T): float32 rounding, not quantization error.
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-3;

std::vector<nn::QuantType> quantTypes() {
  std::vector<nn::QuantType> types = {nn::QuantType::Int8};
  if (compat::kHasFloat8) types.insert(types.end(), {nn::QuantType::QFloat8, nn::QuantType::Float8E4m3});
  return types;
}

// Every Linear of `dense` gets the weight of `quantized`'s Linear of the same name, dequantized to float32.
void copyDequantizedWeights(const torch::nn::Module& quantized, torch::nn::Module& dense) {
  std::map<std::string, const nn::LinearImpl*> byName;
  for (const auto& item : quantized.named_modules())
    if (const auto* lin = dynamic_cast<const nn::LinearImpl*>(item.value().get())) byName[item.key()] = lin;
  int64_t n = 0;
  for (const auto& item : dense.named_modules()) {
    auto* lin = dynamic_cast<nn::LinearImpl*>(item.value().get());
    if (!lin) continue;
    ASSERT_TRUE(byName.count(item.key())) << item.key();
    lin->weight.copy_(byName.at(item.key())->denseWeight(at::kFloat));
    ++n;
  }
  EXPECT_EQ(n, static_cast<int64_t>(byName.size()));
}

// T5 at `weights` loaded float and quantized-while-loading, run on `ids`; the
// quantized output against the float T5 on the dequantized weights per qtype,
// and its error against the float T5 (and `ref` when given) printed.
void checkQuantizedT5(const fs::path& weights, const t5::T5Config& cfg, const at::Tensor& ids, const at::Tensor& mask,
                      const at::Tensor& ref) {
  at::NoGradGuard noGrad;
  auto base = t5::loadT5Encoder(weights, {}, cfg);
  const auto floatOut = base->forward(ids, mask);
  for (auto t : quantTypes()) {
    t5::T5StreamOptions so;
    so.quantize = t;
    auto model = t5::loadT5Encoder(weights, {}, cfg, so);
    int64_t n = 0;
    for (const auto& m : model->modules(true))
      if (auto* lin = dynamic_cast<nn::LinearImpl*>(m.get())) n += lin->quantType() == t ? 1 : 0;
    EXPECT_EQ(n, cfg.numLayers * (cfg.gatedAct ? 7 : 6)) << "every Linear of every block is quantized";
    const auto out = model->forward(ids, mask);
    const double vsFloat = relL2(out, floatOut);
    std::cout << "[parity]     " << nn::quantTypeName(t) << " T5 (" << n << " Linears): relative L2 " << vsFloat
              << " vs the float T5";
    if (ref.defined()) std::cout << ", " << relL2(out, ref) << " vs the reference";
    std::cout << std::endl;
    EXPECT_GT(vsFloat, 0.0) << nn::quantTypeName(t);
    auto dense = t5::loadT5Encoder(weights, {}, cfg);
    copyDequantizedWeights(*model, *dense);
    EXPECT_TRUE(test::allClose(out, dense->forward(ids, mask), kAtol, kRtol))
        << nn::quantTypeName(t) << " T5 vs the float T5 on its dequantized weights";
  }
}

void checkT5Encoder(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = t5::T5Config::fromTransformersJson(manifest.at("config"));
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto ref = io::loadSafetensors(dir / "outputs.safetensors").at("last_hidden_state");
  const at::Tensor mask = in.count("attention_mask") ? in.at("attention_mask") : at::Tensor();
  checkQuantizedT5(dir / parity::weightsFileOf(manifest), cfg, in.at("input_ids"), mask, ref);
}

void checkPipelineT5(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = t5::T5Config::fromTransformersJson(manifest.at("config").at("text_encoder_2"));
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  // The pipeline's T5 ids and embeddings (FluxPipeline passes no attention mask).
  checkQuantizedT5(dir / "model", cfg, out.at("t5_input_ids"), at::Tensor(), out.at("prompt_embeds"));
}

}  // namespace

STRATA_PARITY_CHECK("t5_encoder", "quantize_te: T5 quantized while loading = float T5 on the dequantized weights",
                    checkT5Encoder);
STRATA_PARITY_CHECK("flux_pipeline",
                    "quantize_te: the pipeline's T5 quantized while loading = float on the dequantized weights",
                    checkPipelineT5);
