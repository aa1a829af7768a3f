// Llama's decoder layer runs q/k/v and gate/up as siblings (nn::forwardSiblings): with
// the fused paths on, their LoRA downs take one matmul each (one LoraSiblingsAdd node
// per group), and the loss and every LoRA gradient equal the unfused path's to float32
// rounding; on an int8 base too.
#include <gtest/gtest.h>

#include <cstdio>

#include "common/FusedPaths.h"
#include "common/LoraTraining.h"
#include "common/TestSupport.h"
#include "lora/LoraNetwork.h"
#include "models/llama/LlamaForCausalLM.h"
#include "models/llama/LlamaModuleNames.h"
#include "nn/Quantize.h"

using namespace strata;
using strata::test::backwardThrough;
using strata::test::FusedPathsAs;
using strata::test::LoraTraining;
using strata::test::relL2;

namespace {

LoraTraining train(llama::LlamaForCausalLM& model, const llama::LlamaInputs& in, lora::LoraNetwork& net) {
  const auto labels = in.inputIds.masked_fill(in.attentionMask.eq(0), -100);
  return backwardThrough(llama::causalLmLoss(model.forward(in), labels), net);
}

}  // namespace

TEST(LlamaFused, SiblingProjectionsTrainTheSameFusedAndUnfused) {
  for (bool int8 : {false, true}) {
    SCOPED_TRACE(int8 ? "int8 base" : "float32 base");
    torch::manual_seed(11);
    llama::LlamaConfig cfg = llama::LlamaConfig::tiny();
    llama::LlamaForCausalLM model(cfg);
    if (int8)
      for (auto& slot : model.blockList().blocks) nn::quantizeLinears(*slot.block, nn::QuantType::Int8);
    lora::LoraConfig c;
    c.rank = 4;
    c.alpha = 8;
    c.targetModules = llama::peftDefaultTargets();
    auto net = lora::LoraNetwork::create(model, c);
    {
      at::NoGradGuard g;
      for (const auto& a : net->adapters()) a->up.normal_(0, 0.1);  // a zero up would hide the downs' gradients
    }
    llama::LlamaInputs in;
    in.inputIds = at::randint(1, cfg.vocabSize, {2, 9}, at::kLong);
    in.attentionMask = at::ones({2, 9}, at::kLong);
    in.attentionMask[1].narrow(0, 0, 3).zero_();

    LoraTraining fused, plain;
    {
      FusedPathsAs on(true);
      fused = train(model, in, *net);
    }
    {
      FusedPathsAs off(false);
      plain = train(model, in, *net);
    }
    EXPECT_EQ(fused.fusedNodes, 2 * cfg.numHiddenLayers) << "q/k/v and gate/up in every layer";
    EXPECT_EQ(plain.fusedNodes, 0);
    EXPECT_LE(std::abs(fused.loss - plain.loss) / plain.loss, 1e-5);
    ASSERT_EQ(fused.grads.size(), plain.grads.size());
    double worst = 0;
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      const auto& path = net->adapters()[i / 2]->hostPath();
      ASSERT_GT(plain.grads[i].abs().sum().item<double>(), 0) << path << ": no gradient, the check says nothing";
      const double err = relL2(fused.grads[i], plain.grads[i]);
      worst = std::max(worst, err);
      EXPECT_LE(err, 2e-5) << path << (i % 2 ? " up" : " down");
    }
    std::printf("[llama fused] %s: %zu adapters, %d fused nodes, loss %.8g / %.8g, worst gradient rel L2 %.3g\n",
                int8 ? "int8" : "float32", net->adapters().size(), fused.fusedNodes, fused.loss, plain.loss, worst);
  }
}
