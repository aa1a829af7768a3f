// The streaming FLUX load onto cuda:0 (label gpu; skips without CUDA): a
// checkpoint at FLUX.1-dev widths (3 double + 6 single blocks, 3.8 GB in bf16)
// written to the machine's disk, streamed in with each block quantized on the
// card before the next is read. Peak allocated on the card must stay within the
// quantized model + one bf16 block + a stated margin, and the result must equal
// load-then-quantize bit for bit. Peak host RSS growth is printed too.
#include <gtest/gtest.h>

#include <iostream>

#include "common/ProcMemory.h"
#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "io/Safetensors.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Quantize.h"

#ifdef STRATA_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

using namespace strata;
using namespace strata::flux;
using namespace strata::test::gpu;

namespace {

// The quantize workspace (float32 row chunks of 1M elements: a few 4 MB
// temporaries) and the caching allocator's rounding.
constexpr int64_t kMarginBytes = 64ll << 20;

int64_t moduleBytes(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel() * static_cast<int64_t>(p.element_size());
  for (const auto& sub : m.modules(true))
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(sub.get()))
      if (lin->weightScale.defined()) n += lin->weightScale.numel() * 4;
  return n;
}

void emptyCache() {
#ifdef STRATA_HAS_CUDA
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

bool sameBits(FluxTransformer& a, FluxTransformer& b) {
  const auto pa = a.named_parameters(true), pb = b.named_parameters(true);
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto& x = pa[i].value();
    const auto& y = pb[i].value();
    if (pa[i].key() != pb[i].key() || x.scalar_type() != y.scalar_type()) return false;
    if (!(at::isFloatingType(x.scalar_type()) ? at::equal(x.to(at::kFloat), y.to(at::kFloat)) : at::equal(x, y)))
      return false;
  }
  const auto la = a.linears(), lb = b.linears();
  for (size_t i = 0; i < la.size(); ++i)
    if (la[i].second->weightScale.defined() && !at::equal(la[i].second->weightScale, lb[i].second->weightScale))
      return false;
  return true;
}

}  // namespace

TEST(StreamLoadGpu, FluxDevWidthsQuantizedOnTheCardWithinOneBlockOfTheQuantizedModel) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  FluxConfig cfg = FluxConfig::fluxDev();
  cfg.numLayers = 3;
  cfg.numSingleLayers = 6;
  const at::Device cuda(at::kCUDA, 0);
  FluxBuildOptions o;
  o.device = cuda;
  o.dtype = at::kBFloat16;
  test::TempDir dir;
  const auto path = dir / "flux-dev-widths.safetensors";
  int64_t blockBytes = 0;
  {
    at::manual_seed(3);
    FluxTransformer src(cfg, o);
    for (size_t i = 0; i < src.blockCount(); ++i) blockBytes = std::max(blockBytes, moduleBytes(*src.block(i)));
    io::writeSafetensors(path, diffusersStateDict(src));
  }
  emptyCache();
  std::vector<nn::QuantType> types = {nn::QuantType::Int8};
  if (compat::kHasFloat8) types.push_back(nn::QuantType::QFloat8);
  for (const auto t : types) {
    SCOPED_TRACE(nn::quantTypeName(t));
    FluxStreamOptions so;
    so.quantize = t;
    synchronize();
    emptyCache();
    resetPeak();
    const int64_t before = currentAllocatedBytes();
    const bool hostMeasured = test::resetPeakRss();
    const int64_t rssBefore = test::procStatusBytes("VmRSS");
    auto streamed = streamFluxTransformer(path, o, so, cfg.axesDimsRope);
    synchronize();
    const int64_t peak = peakAllocatedBytes() - before;
    const int64_t hostPeak = hostMeasured ? test::procStatusBytes("VmHWM") - rssBefore : -1;
    const int64_t quantizedBytes = moduleBytes(*streamed);
    const int64_t bound = quantizedBytes + blockBytes + kMarginBytes;
    std::cout << "[ measured ] " << nn::quantTypeName(t) << ": quantized model " << gib(quantizedBytes)
              << " GiB, largest bf16 block " << gib(blockBytes) << " GiB; peak allocated on cuda:0 " << gib(peak)
              << " GiB (bound " << gib(bound) << " GiB); peak host RSS growth " << gib(hostPeak) << " GiB" << std::endl;
    EXPECT_LE(peak, bound);
    EXPECT_GE(peak, quantizedBytes);
    EXPECT_EQ(streamed->xEmbedder->weight.device(), cuda);

    // Load-then-quantize on the card: the same bits, and a peak of the whole bf16 model.
    resetPeak();
    const int64_t before2 = currentAllocatedBytes();
    FluxTransformer reference(cfg, o);
    loadFluxWeights(reference, path);
    for (auto& slot : reference.blockList().blocks) nn::quantizeLinears(*slot.block, t);
    synchronize();
    const int64_t peak2 = peakAllocatedBytes() - before2;
    std::cout << "[ measured ] " << nn::quantTypeName(t) << ": load-then-quantize peak " << gib(peak2) << " GiB"
              << std::endl;
    EXPECT_GT(peak2, bound);
    EXPECT_TRUE(sameBits(*streamed, reference));
  }
}
