// FLUX.2 through the shared DiT loader (dit/DitCheckpoint.h): streamed block by block,
// quantized as it goes, bit for bit what build, load and quantize give (diffusers and
// BFL files), checked before the first block exists; the BFL writer refuses a quantized
// model as FLUX.1's does.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Transformer.h"
#include "nn/Quantize.h"

using namespace strata;
using namespace strata::flux2;

namespace {

std::vector<nn::QuantType> availableTypes() {
  std::vector<nn::QuantType> out{nn::QuantType::None};
  for (const auto& name : nn::quantTypeNames())
    if (nn::quantTypeAvailable(nn::quantTypeFromName(name))) out.push_back(nn::quantTypeFromName(name));
  return out;
}

::testing::AssertionResult sameBits(Flux2Transformer& a, Flux2Transformer& b) {
  const auto pa = a.named_parameters(true), pb = b.named_parameters(true);
  if (pa.size() != pb.size()) return ::testing::AssertionFailure() << pa.size() << " vs " << pb.size() << " params";
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto& x = pa[i].value();
    const auto& y = pb[i].value();
    if (pa[i].key() != pb[i].key() || x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes())
      return ::testing::AssertionFailure() << pa[i].key() << " differs in name, dtype or shape";
    const bool equal =
        at::isFloatingType(x.scalar_type()) ? at::equal(x.to(at::kFloat), y.to(at::kFloat)) : at::equal(x, y);
    if (!equal) return ::testing::AssertionFailure() << pa[i].key() << " differs";
  }
  const auto la = a.linears(), lb = b.linears();
  if (la.size() != lb.size()) return ::testing::AssertionFailure() << "Linear count differs";
  for (size_t i = 0; i < la.size(); ++i) {
    const auto& x = la[i].second;
    const auto& y = lb[i].second;
    if (x->quantType() != y->quantType()) return ::testing::AssertionFailure() << la[i].first << ": quant type";
    if (x->weightScale.defined() != y->weightScale.defined() ||
        (x->weightScale.defined() && !at::equal(x->weightScale, y->weightScale)))
      return ::testing::AssertionFailure() << la[i].first << ": scale differs";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(Flux2StreamLoad, StreamedAndQuantizedEqualsLoadThenQuantizeInBothNamings) {
  const auto cfg = Flux2Config::tiny();
  at::manual_seed(11);
  Flux2Transformer src(cfg);
  test::TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> diffusers;
  for (const auto& p : src.named_parameters(true)) diffusers.emplace_back(p.key(), p.value().detach());
  io::writeSafetensors(dir / "diffusers.safetensors", diffusers);
  io::writeSafetensors(dir / "bfl.safetensors", flux2BflStateDict(src));

  for (const char* file : {"diffusers.safetensors", "bfl.safetensors"})
    for (const auto t : availableTypes()) {
      SCOPED_TRACE(std::string(file) + " " + nn::quantTypeName(t));
      Flux2Transformer expected(cfg);
      loadFlux2Weights(expected, dir / file);
      if (t != nn::QuantType::None)
        for (auto& slot : expected.blockList().blocks) nn::quantizeLinears(*slot.block, t);

      Flux2BuildOptions o;
      int64_t built = 0;
      o.onBlockBuilt = [&](torch::nn::Module&) { ++built; };
      Flux2StreamOptions so;
      so.quantize = t;
      std::vector<int64_t> progress;
      so.onProgress = [&](int64_t done, int64_t total) {
        progress.push_back(done);
        EXPECT_EQ(total, cfg.numLayers + cfg.numSingleLayers + 1);
      };
      const auto streamed = streamFlux2Transformer(openFlux2Checkpoint(dir / file), cfg, o, so);
      EXPECT_EQ(built, cfg.numLayers + cfg.numSingleLayers);
      EXPECT_EQ(progress.size(), static_cast<size_t>(cfg.numLayers + cfg.numSingleLayers + 1));
      EXPECT_TRUE(sameBits(*streamed, expected));
      if (t == nn::QuantType::None) EXPECT_TRUE(sameBits(*streamed, src));
    }
}

TEST(Flux2StreamLoad, ABadFileIsRefusedBeforeTheFirstBlockExists) {
  const auto cfg = Flux2Config::tiny();
  Flux2Transformer src(cfg);
  std::vector<std::pair<std::string, at::Tensor>> broken;
  for (const auto& p : src.named_parameters(true))
    if (p.key() != "transformer_blocks.1.attn.to_q.weight") broken.emplace_back(p.key(), p.value().detach());
  test::TempDir dir;
  io::writeSafetensors(dir / "broken.safetensors", broken);
  Flux2BuildOptions o;
  int built = 0;
  o.onBlockBuilt = [&](torch::nn::Module&) { ++built; };
  Flux2StreamOptions so;
  so.quantize = nn::QuantType::Int8;
  try {
    streamFlux2Transformer(openFlux2Checkpoint(dir / "broken.safetensors"), cfg, o, so);
    FAIL() << "expected a LoadError";
  } catch (const LoadError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(FLUX.2 transformer, diffusers names): 1 problem(s), nothing loaded"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("missing: transformer_blocks.1.attn.to_q.weight [128, 128]"), std::string::npos) << msg;
  }
  EXPECT_EQ(built, 0) << "the keys are checked before the first block exists";
}

TEST(Flux2Checkpoint, BflWriterRefusesAQuantizedModelNamingTheLinear) {
  Flux2Transformer src(Flux2Config::tiny());
  ASSERT_NO_THROW(flux2BflStateDict(src));
  const std::string path = "single_transformer_blocks.1.attn.to_out";
  auto* lin = dynamic_cast<nn::LinearImpl*>(src.named_modules("", false)[path].get());
  ASSERT_NE(lin, nullptr) << path;
  lin->quantize(nn::QuantType::Int8);
  try {
    (void)flux2BflStateDict(src);
    ADD_FAILURE() << "flux2BflStateDict wrote a quantized model";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("flux2BflStateDict"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + path + "' is quantized (int8)"), std::string::npos) << msg;
  }
}
