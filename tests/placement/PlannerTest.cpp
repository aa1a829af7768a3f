// The planner is pure: every case here runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "common/Error.h"
#include "device/DeviceInventory.h"
#include "placement/Planner.h"
#include "train/AdamW8bit.h"

using namespace strata;
using namespace strata::placement;

namespace {

constexpr int64_t kGB = 1000000000LL;

PlannerInput uniformInput(size_t numBlocks, int64_t paramsPerBlock, int64_t bytesPerBlock) {
  PlannerInput in;
  in.stem = BlockCost{"stem", "stem", 0, 0};
  in.head = BlockCost{"head", "head", 0, 0};
  for (size_t i = 0; i < numBlocks; ++i) {
    BlockCost c;
    c.id = "blocks." + std::to_string(i);
    c.kind = "layer";
    c.paramCount = paramsPerBlock;
    c.weightBytes = bytesPerBlock;
    in.blocks.push_back(c);
  }
  return in;
}

OtherModule other(const std::string& name, int64_t params, int64_t bytes, int64_t cachingPeak, int64_t trainingPeak,
                  bool freed, int stage) {
  OtherModule m;
  m.name = name;
  m.dtype = "bf16";
  m.paramCount = params;
  m.weightBytes = bytes;
  m.cachingPeakBytes = cachingPeak;
  m.trainingPeakBytes = trainingPeak;
  m.freedBeforeTraining = freed;
  m.cachingStage = stage;
  return m;
}

std::vector<DeviceBudget> gpus(const std::vector<int64_t>& budgets) {
  std::vector<DeviceBudget> out;
  for (size_t i = 0; i < budgets.size(); ++i) {
    out.push_back(DeviceBudget{"cuda:" + std::to_string(i), "test", budgets[i]});
  }
  return out;
}

// Blocks of one device form one contiguous range, and devices are used in order.
void expectContiguous(const Plan& plan, const PlannerInput& in) {
  ASSERT_EQ(plan.blockDevice.size(), in.blocks.size());
  std::vector<std::string> order;
  for (const auto& d : plan.blockDevice) {
    if (order.empty() || order.back() != d) {
      for (const auto& seen : order) ASSERT_NE(seen, d) << "device " << d << " used twice";
      order.push_back(d);
    }
  }
  size_t last = 0;
  for (const auto& d : order) {
    size_t idx = 0;
    while (in.devices[idx].device != d) ++idx;
    EXPECT_GE(idx, last) << "devices out of input order";
    last = idx;
  }
}

}  // namespace

TEST(Planner, ParamCountSplitsEvenlyFrom1To8Devices) {
  for (int n = 1; n <= 8; ++n) {
    PlannerInput in = uniformInput(64, 100, 200);
    in.devices = gpus(std::vector<int64_t>(n, 0));
    const Plan plan = planPlacement(in);
    expectContiguous(plan, in);
    ASSERT_EQ(plan.devices.size(), static_cast<size_t>(n));
    for (const auto& dp : plan.devices) {
      // 64 equal blocks: every device within one block of 64 / n.
      EXPECT_NEAR(static_cast<double>(dp.blockIds.size()), 64.0 / n, 1.0) << "n=" << n << " " << dp.device;
    }
    EXPECT_EQ(plan.stemDevice, "cuda:0");
    EXPECT_EQ(plan.headDevice, "cuda:0");
    EXPECT_TRUE(plan.fits);  // budgets unknown: nothing to exceed
  }
}

TEST(Planner, ParamCountChargesOtherModulesToFirstDevice) {
  PlannerInput in = uniformInput(10, 100, 0);
  in.otherModules = {other("T5", 900, 0, 0, 0, true, 1), other("VAE", 100, 0, 0, 0, false, 0)};
  in.otherModuleParamCountScale = 0.3;  // 300 params of other modules on cuda:0
  in.devices = gpus({0, 0});
  const Plan plan = planPlacement(in);
  // total 1300, share 650: cuda:0 gets 300 + blocks whose midpoint is below 650: 0..2 (mid 550),
  // block 3 has its midpoint at 650 -> cuda:1.
  EXPECT_EQ(plan.devices[0].blockIds.size(), 3u);
  EXPECT_EQ(plan.devices[1].blockIds.size(), 7u);
  EXPECT_NE(plan.reason.find("param_count"), std::string::npos);
  EXPECT_NE(plan.reason.find("1.0K in T5 and VAE x 0.3 = 300 charged to cuda:0"), std::string::npos) << plan.reason;
}

TEST(Planner, ParamCountWithoutOtherModulesChargesNothing) {
  // The tiny demo's case: a few thousand parameters, no text encoder or VAE.
  PlannerInput in = uniformInput(8, 1000, 0);
  in.devices = gpus({0, 0, 0, 0});
  const Plan plan = planPlacement(in);
  for (const auto& dp : plan.devices) EXPECT_EQ(dp.blockIds.size(), 2u) << dp.device;
  EXPECT_NE(plan.reason.find("8.0K parameters in the model, no other modules; 8.0K shared evenly, 2.0K per device"),
            std::string::npos)
      << plan.reason;
  EXPECT_EQ(plan.reason.find("0.00B"), std::string::npos) << plan.reason;
  EXPECT_FALSE(plan.caching.needed);
}

TEST(Planner, ParamCountNeverSkipsACardWhenTheFirstIsOverItsShare) {
  // The old rule charged 5e9 x 0.3 to cuda:0 of a model of 6000 parameters and
  // sent every block to cuda:3, leaving cuda:1 and cuda:2 empty.
  PlannerInput in = uniformInput(6, 1000, 0);
  in.otherModules = {other("T5", 5000000000LL, 0, 0, 0, true, 1)};
  in.devices = gpus({0, 0, 0, 0});
  const Plan plan = planPlacement(in);
  expectContiguous(plan, in);
  EXPECT_TRUE(plan.devices[0].blockIds.empty());
  for (size_t d = 1; d < 4; ++d) EXPECT_EQ(plan.devices[d].blockIds.size(), 2u) << plan.devices[d].device;
  EXPECT_NE(plan.reason.find("cuda:0's stem, head and other modules (1.50B) exceed an even share (375.0M), so it "
                             "gets no blocks and the other 3 devices share them, 2.0K each"),
            std::string::npos)
      << plan.reason;
}

TEST(Planner, AnEmptyCardBeforeAFullOneIsExplained) {
  // Two blocks twice a share each: their midpoints fall on cuda:1 and cuda:3.
  PlannerInput in = uniformInput(2, 300, 0);
  in.devices = gpus({0, 0, 0, 0});
  Plan plan = planPlacement(in);
  EXPECT_EQ(plan.blockDevice, (std::vector<std::string>{"cuda:1", "cuda:3"}));
  EXPECT_NE(plan.reason.find("cuda:0, cuda:2 get no blocks: a block (up to 300 parameters) is larger than a "
                             "device's share (150)"),
            std::string::npos)
      << plan.reason;
  // More devices than blocks: the last ones say so.
  in = uniformInput(2, 100, 0);
  in.devices = gpus({0, 0, 0, 0, 0});
  plan = planPlacement(in);
  for (size_t d = 0; d < 5; ++d) {
    const bool empty = plan.devices[d].blockIds.empty();
    if (!empty) continue;
    EXPECT_NE(plan.reason.find(plan.devices[d].device), std::string::npos) << plan.reason;
  }
  EXPECT_NE(plan.reason.find("the model has 2 blocks for 5 devices"), std::string::npos) << plan.reason;
}

TEST(Planner, CachingIsItsOwnPhaseOnTheFirstDevice) {
  // FLUX.1-like parts in bf16: the VAE encodes the images first, then T5 and
  // CLIP join it for the captions; T5 and CLIP are freed before step 1.
  PlannerInput in = uniformInput(8, 100, 1 * kGB);
  in.mode = PlanMode::Memory;
  const int64_t vae = 170000000, t5 = 9520000000LL, clip = 250000000;
  in.otherModules = {other("T5", 4762310656LL, t5, 970000000, 0, true, 1),
                     other("CLIP", 123060480, clip, 50000000, 0, true, 1),
                     other("VAE", 83819683, vae, 7600000000LL, 2600000000LL, false, 0)};
  in.devices = gpus({15 * kGB, 15 * kGB});
  Plan plan = planPlacement(in);
  ASSERT_TRUE(plan.fits) << plan.reason;
  const CachingPlan& c = plan.caching;
  ASSERT_TRUE(c.needed);
  EXPECT_EQ(c.device, "cuda:0");
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[0].totalBytes, vae + 7600000000LL);           // the VAE alone
  EXPECT_EQ(c.stages[1].totalBytes, vae + t5 + clip + 970000000);  // T5's peak, not the VAE's
  EXPECT_EQ(c.totalBytes, std::max(c.stages[0].totalBytes, c.stages[1].totalBytes));
  // Training: only the VAE stays; its decode peak replaces the blocks' activations, not added to them.
  const DevicePlan& d0 = plan.devices[0];
  EXPECT_EQ(d0.otherBytes, vae);
  EXPECT_EQ(d0.otherPeakBytes, 2600000000LL);
  EXPECT_EQ(d0.totalBytes,
            d0.weightBytes + vae + std::max<int64_t>(d0.activationBytes + d0.workspaceBytes, 2600000000LL));
  EXPECT_LE(d0.totalBytes, d0.budgetBytes);
  EXPECT_NE(plan.reason.find("Caching, before the transformer is placed, on cuda:0: first VAE"), std::string::npos)
      << plan.reason;
  EXPECT_NE(plan.reason.find("then T5 and CLIP join"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("T5 and CLIP (9.8 GB) are freed before step 1"), std::string::npos) << plan.reason;
  EXPECT_NE(formatPlan(plan).find("caching (before the transformer is placed) on cuda:0: fits"), std::string::npos);
  const auto j = planToJson(plan);
  EXPECT_EQ(j["caching"]["total_bytes"].get<int64_t>(), c.totalBytes);
  EXPECT_EQ(j["other_modules"].size(), 3u);

  // A 10 GB card: the blocks fit beside the VAE, caching does not.
  in.devices = gpus({10 * kGB, 10 * kGB});
  plan = planPlacement(in);
  EXPECT_FALSE(plan.caching.fits);
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.caching.missingBytes, plan.caching.totalBytes - 10 * kGB);
  EXPECT_NE(plan.reason.find("does not fit, " + formatBytes(plan.caching.missingBytes) + " missing."),
            std::string::npos)
      << plan.reason;
  EXPECT_THROW(requireFits(plan), PlacementError);
}

namespace {

// A text encoder that runs as a stem, `layers` equal layers and a head (a block
// model), freed before step 1, and loaded once the VAE has encoded the images.
OtherModule splittableEncoder(const std::string& name, size_t layers, int64_t layerBytes, int64_t stemBytes,
                              int64_t headBytes, int64_t peak) {
  OtherModule m = other(name, 0, 0, peak, 0, true, 1);
  m.stemBytes = stemBytes;
  m.headBytes = headBytes;
  m.layerBytes.assign(layers, layerBytes);
  m.weightBytes = stemBytes + headBytes + layerBytes * static_cast<int64_t>(layers);
  m.paramCount = m.weightBytes / 2;
  return m;
}

// The caching split's invariants, whatever the shapes: the stem on the first device,
// each device's layers one contiguous range in device order, the head with the last
// layer, every device's bytes the sum of what it holds (its fullest stage), the plan's
// missing bytes the devices' sum.
void expectCachingSplitConsistent(const Plan& plan, const PlannerInput& in, size_t split) {
  const CachingPlan& c = plan.caching;
  const OtherModule& m = in.otherModules[split];
  ASSERT_EQ(c.splitModule, m.name);
  ASSERT_EQ(c.layerDevice.size(), m.layerBytes.size());
  ASSERT_EQ(c.devices.size(), in.devices.size());
  EXPECT_EQ(c.splitStemDevice, in.devices.front().device);
  EXPECT_TRUE(c.devices.front().hasSplitStem);
  EXPECT_EQ(c.splitHeadDevice, c.layerDevice.back());
  size_t next = 0, lastDevice = 0;
  int64_t missing = 0;
  for (size_t d = 0; d < c.devices.size(); ++d) {
    const CachingDevice& cd = c.devices[d];
    EXPECT_EQ(cd.device, in.devices[d].device);
    if (cd.endLayer > cd.firstLayer) {
      EXPECT_EQ(cd.firstLayer, next) << cd.device << ": the layers are not contiguous in device order";
      next = cd.endLayer;
      lastDevice = d;
      for (size_t i = cd.firstLayer; i < cd.endLayer; ++i) EXPECT_EQ(c.deviceOfLayer(i), cd.device);
    }
    int64_t part = 0;
    if (cd.hasSplitStem) part += m.stemBytes;
    for (size_t i = cd.firstLayer; i < cd.endLayer; ++i) part += m.layerBytes[i];
    if (cd.hasSplitHead) part += m.headBytes;
    // The split module's stage: its part and its peak, beside every whole module loaded by then (first device).
    int64_t whole = 0, peak = part > 0 ? m.cachingPeakBytes : 0;
    if (d == 0)
      for (size_t i = 0; i < in.otherModules.size(); ++i) {
        if (i == split || in.otherModules[i].cachingStage > m.cachingStage) continue;
        whole += in.otherModules[i].weightBytes;
        if (in.otherModules[i].cachingStage == m.cachingStage)
          peak = std::max(peak, in.otherModules[i].cachingPeakBytes);
      }
    EXPECT_GE(cd.totalBytes, part + whole + peak) << cd.device;
    int64_t held = part;  // by the end of caching: its part, and every whole module on the first device
    if (d == 0)
      for (size_t i = 0; i < in.otherModules.size(); ++i) held += i == split ? 0 : in.otherModules[i].weightBytes;
    EXPECT_EQ(cd.weightBytes, held) << cd.device;
    int64_t largestPeak = 0;  // no stage holds more than every weight and the largest peak
    for (const auto& o : in.otherModules) largestPeak = std::max(largestPeak, o.cachingPeakBytes);
    EXPECT_LE(cd.totalBytes, held + largestPeak) << cd.device;
    EXPECT_EQ(cd.missingBytes, cd.budgetBytes > 0 ? std::max<int64_t>(0, cd.totalBytes - cd.budgetBytes) : 0);
    missing += cd.missingBytes;
  }
  EXPECT_EQ(next, m.layerBytes.size()) << "every layer placed";
  EXPECT_TRUE(c.devices[lastDevice].hasSplitHead);
  EXPECT_EQ(c.missingBytes, missing);
  EXPECT_EQ(c.fits, missing == 0);
  if (!c.fits) EXPECT_FALSE(plan.fits);
}

}  // namespace

TEST(Planner, ASplittableTextEncoderThatFitsTheFirstDeviceStaysWhole) {
  PlannerInput in = uniformInput(8, 100, 1 * kGB);
  in.mode = PlanMode::Memory;
  in.otherModules = {splittableEncoder("text encoder", 12, 500000000, 300000000, 10000, 400000000),
                     other("VAE", 1, 200000000, 3 * kGB, 0, false, 0)};
  in.devices = gpus({15 * kGB, 15 * kGB, 15 * kGB});
  const Plan plan = planPlacement(in);
  ASSERT_TRUE(plan.fits) << plan.reason;
  const CachingPlan& c = plan.caching;
  EXPECT_TRUE(c.splitModule.empty());
  EXPECT_TRUE(c.layerDevice.empty());
  ASSERT_EQ(c.devices.size(), 3u);
  EXPECT_EQ(c.devices[0].modules, (std::vector<std::string>{"text encoder", "VAE"}));
  EXPECT_EQ(c.devices[0].totalBytes, c.totalBytes);
  for (size_t d = 1; d < c.devices.size(); ++d) {
    EXPECT_FALSE(c.devices[d].holdsSomething()) << c.devices[d].device;
    EXPECT_EQ(c.devices[d].totalBytes, 0);
  }
  EXPECT_THROW(c.deviceOfLayer(0), PlacementError);
  EXPECT_NE(plan.reason.find("Caching, before the transformer is placed, on cuda:0:"), std::string::npos)
      << plan.reason;
  EXPECT_NE(formatPlan(plan).find("caching (before the transformer is placed) on cuda:0: fits"), std::string::npos);
}

TEST(Planner, ATextEncoderTooLargeForOneCardIsSplitByLayersOverTheCards) {
  // A Mistral-like encoder (a large embedding table, equal layers) beside the VAE over
  // n 16 GB cards: too large for one, split by layers, each card at the same share.
  struct Case {
    size_t layers;
    int64_t layerBytes, stemBytes, peak;
    size_t cards;
  };
  for (const Case& k : {Case{30, 1112000000LL, 1342000000LL, 900000000LL, 4},
                        Case{36, 390000000LL, 1245000000LL, 600000000LL, 2}, Case{7, 2300000000LL, 0, 0, 3}}) {
    PlannerInput in = uniformInput(8, 100, 1 * kGB);
    in.mode = PlanMode::Memory;
    const int64_t vae = 170000000, vaePeak = 4 * kGB;
    in.otherModules = {splittableEncoder("text encoder", k.layers, k.layerBytes, k.stemBytes, 10240, k.peak),
                       other("VAE", 84000000, vae, vaePeak, 0, false, 0)};
    in.devices = gpus(std::vector<int64_t>(k.cards, 15 * kGB));
    const OtherModule& te = in.otherModules[0];
    ASSERT_GT(te.weightBytes + vae + k.peak, 15 * kGB) << "the case must not fit one card";
    const Plan plan = planPlacement(in);
    SCOPED_TRACE(plan.reason);
    ASSERT_TRUE(plan.caching.fits);
    EXPECT_TRUE(plan.fits);
    expectCachingSplitConsistent(plan, in, 0);
    const CachingPlan& c = plan.caching;
    // The first device holds the VAE whole, the encoder's stem, and the VAE's own stage still fits there.
    EXPECT_EQ(c.devices[0].modules, std::vector<std::string>{"VAE"});
    EXPECT_EQ(c.stages.front().totalBytes, vae + vaePeak);
    // Memory mode levels the cards: no card is more than one layer (and the peak of a
    // card that had none) fuller than another that holds layers.
    int64_t most = 0, least = 15 * kGB;
    for (const auto& cd : c.devices) {
      if (cd.endLayer == cd.firstLayer) continue;
      most = std::max(most, cd.totalBytes);
      least = std::min(least, cd.totalBytes);
    }
    EXPECT_LE(most - least, k.layerBytes + k.peak + k.stemBytes + vae);
    // Shown per device: the table names each card's layer range, the JSON the same.
    const std::string table = formatPlanTable(plan);
    EXPECT_NE(table.find("over " + std::to_string(k.cards) + " devices, text encoder split by layers: fits"),
              std::string::npos)
        << table;
    for (const auto& cd : c.devices) {
      if (cd.endLayer - cd.firstLayer < 2) continue;
      const std::string range = "layers " + std::to_string(cd.firstLayer) + "-" + std::to_string(cd.endLayer - 1);
      EXPECT_NE(table.find(cd.device), std::string::npos) << table;
      EXPECT_NE(table.find(range), std::string::npos) << table;
      EXPECT_NE(plan.reason.find(cd.device + " "), std::string::npos);
      EXPECT_NE(plan.reason.find(range), std::string::npos);
    }
    EXPECT_NE(plan.reason.find("the text encoder does not fit cuda:0 beside the VAE, so its " +
                               std::to_string(k.layers) + " layers are split over the devices"),
              std::string::npos);
    const auto j = planToJson(plan);
    EXPECT_EQ(j["caching"]["split_module"], "text encoder");
    ASSERT_EQ(j["caching"]["layer_device"].size(), k.layers);
    ASSERT_EQ(j["caching"]["devices"].size(), k.cards);
    for (size_t d = 0; d < k.cards; ++d) {
      const auto& jd = j["caching"]["devices"][d];
      EXPECT_EQ(jd["device"], c.devices[d].device);
      EXPECT_EQ(jd["total_bytes"].get<int64_t>(), c.devices[d].totalBytes);
      if (c.devices[d].endLayer > c.devices[d].firstLayer) {
        EXPECT_EQ(jd["split_layers"][0].get<size_t>(), c.devices[d].firstLayer);
        EXPECT_EQ(jd["split_layers"][1].get<size_t>(), c.devices[d].endLayer);
      } else {
        EXPECT_TRUE(jd["split_layers"].empty());
      }
    }
    // The training phase is planned as before: the encoder is freed, only the VAE stays.
    EXPECT_EQ(plan.devices[0].otherBytes, vae);
  }
}

TEST(Planner, AnEncoderTooLargeForAllTheCardsNamesWhatEachMisses) {
  PlannerInput in = uniformInput(4, 100, 1 * kGB);
  in.mode = PlanMode::Memory;
  for (const size_t cards : {2u, 4u}) {
    // Each card 8 GB; the encoder alone is ten cards' worth.
    const int64_t budget = 8 * kGB;
    in.otherModules = {splittableEncoder("text encoder", 40, budget * 10 / 40, 500000000, 0, 300000000),
                       other("VAE", 1, 100000000, 1 * kGB, 0, false, 0)};
    in.devices = gpus(std::vector<int64_t>(cards, budget));
    const Plan plan = planPlacement(in);
    SCOPED_TRACE(plan.reason);
    EXPECT_FALSE(plan.caching.fits);
    EXPECT_FALSE(plan.fits);
    expectCachingSplitConsistent(plan, in, 0);
    // Shared at the same share over budget: every card misses something, and says how much.
    for (const auto& cd : plan.caching.devices) {
      EXPECT_GT(cd.missingBytes, 0) << cd.device;
      EXPECT_NE(plan.reason.find(cd.device + " " + formatBytes(cd.missingBytes) + " missing"), std::string::npos);
    }
    EXPECT_NE(plan.reason.find("in all " + formatBytes(plan.caching.missingBytes) + " missing."), std::string::npos);
    EXPECT_NE(formatPlanTable(plan).find("DOES NOT FIT"), std::string::npos);
    EXPECT_THROW(requireFits(plan), PlacementError);
  }
}

TEST(Planner, ParamCountSplitsTheEncoderEvenlyByLayers) {
  PlannerInput in = uniformInput(8, 100, 0);
  in.otherModules = {splittableEncoder("text encoder", 10, 2 * kGB, 1 * kGB, 0, 1 * kGB)};
  for (const size_t cards : {2u, 3u, 4u}) {
    in.devices = gpus(std::vector<int64_t>(cards, 15 * kGB));
    const Plan plan = planPlacement(in);
    SCOPED_TRACE(plan.reason);
    expectCachingSplitConsistent(plan, in, 0);
    for (const auto& cd : plan.caching.devices)
      EXPECT_NEAR(static_cast<double>(cd.endLayer - cd.firstLayer), 10.0 / static_cast<double>(cards), 1.0)
          << cd.device;
    EXPECT_NE(plan.reason.find("an even count per device"), std::string::npos);
  }
}

TEST(Planner, ACachingSplitNeedsSeveralDevicesAndPartsThatAddUp) {
  PlannerInput in = uniformInput(4, 100, 1 * kGB);
  in.mode = PlanMode::Memory;
  in.otherModules = {splittableEncoder("text encoder", 10, 2 * kGB, 1 * kGB, 0, 1 * kGB)};
  in.devices = gpus({15 * kGB});
  Plan plan = planPlacement(in);
  EXPECT_TRUE(plan.caching.splitModule.empty()) << "one device: nothing to split over";
  EXPECT_FALSE(plan.caching.fits);
  EXPECT_EQ(plan.caching.missingBytes, plan.caching.totalBytes - 15 * kGB);
  in.otherModules[0].weightBytes += 1;
  in.devices = gpus({15 * kGB, 15 * kGB});
  EXPECT_THROW(planPlacement(in), PlacementError);
  in.otherModules[0].weightBytes -= 1;
  in.otherModules[0].layerBytes[3] = -1;
  EXPECT_THROW(planPlacement(in), PlacementError);
}

TEST(Planner, TheVaeDecodePeakCanBeWhatFillsTheFirstDevice) {
  // Blocks without activations: the decode peak is the first device's transient.
  PlannerInput in = uniformInput(4, 100, 1 * kGB);
  in.mode = PlanMode::Memory;
  in.otherModules = {other("VAE", 1, 1 * kGB, 0, 5 * kGB, false, 0)};
  in.devices = gpus({7 * kGB, 7 * kGB});
  const Plan plan = planPlacement(in);
  ASSERT_TRUE(plan.fits) << plan.reason;
  // cuda:0 holds the VAE (1 GB) + 5 GB of decode peak, 86% of its budget; a block
  // there would fill it: the most even fill leaves all four on cuda:1 (57%), and says why.
  EXPECT_TRUE(plan.devices[0].blockIds.empty());
  EXPECT_EQ(plan.devices[0].totalBytes, 6 * kGB);
  EXPECT_EQ(plan.devices[1].blockIds.size(), 4u);
  EXPECT_NE(plan.reason.find("cuda:0 gets no blocks: at the common share of its budget it holds none"),
            std::string::npos)
      << plan.reason;
}

TEST(Planner, ParamCountsReadForPeople) {
  EXPECT_EQ(formatParams(11901408320LL), "11.90B");
  EXPECT_EQ(formatParams(83819683), "83.8M");
  EXPECT_EQ(formatParams(12345), "12.3K");
  EXPECT_EQ(formatParams(512), "512");
}

TEST(Planner, FluxDevLikeSplitOverFourStaysWithinHalfABlockOfTheShare) {
  // FLUX.1-dev block sizes (19 double of 339.8M, 38 single of 141.6M), the other
  // modules of FLUX.1 (T5-XXL, CLIP-L, the VAE: 4.97e9, ai-toolkit's 5e9) x 0.3.
  PlannerInput in;
  in.otherModules = {other("T5", 4762310656LL, 0, 0, 0, true, 1), other("CLIP", 123060480, 0, 0, 0, true, 1),
                     other("VAE", 83819683, 0, 0, 0, false, 0)};
  in.stem = BlockCost{"stem", "stem", 0};
  in.head = BlockCost{"head", "head", 0};
  for (int i = 0; i < 19; ++i)
    in.blocks.push_back(BlockCost{"transformer_blocks." + std::to_string(i), "double", 339831296});
  for (int i = 0; i < 38; ++i)
    in.blocks.push_back(BlockCost{"single_transformer_blocks." + std::to_string(i), "single", 141591808});
  in.devices = gpus({0, 0, 0, 0});
  const Plan plan = planPlacement(in);
  expectContiguous(plan, in);
  const double other = 4969190819.0 * 0.3;
  double total = other;
  for (const auto& b : in.blocks) total += static_cast<double>(b.paramCount);
  const double share = total / 4;
  // Strata: each device within half of the largest block of the share.
  for (size_t d = 0; d < 4; ++d) {
    const double params = static_cast<double>(plan.devices[d].paramCount) + (d == 0 ? other : 0.0);
    EXPECT_LE(std::abs(params - share), 339831296.0 * 0.5) << plan.devices[d].device;
  }
  // ai-toolkit's published rule, for the record of where Strata differs: it moves on
  // after the block that crosses the share and restarts its count at 0, so the first
  // three GPUs are over their share and the last one is short by the sum of the overruns.
  std::vector<double> ai(4, 0.0);
  ai[0] = other;
  int gpu = 0;
  double cur = other;
  for (const auto& b : in.blocks) {
    ai[gpu] += static_cast<double>(b.paramCount);
    cur += static_cast<double>(b.paramCount);
    if (cur > share) {
      gpu = std::min(gpu + 1, 3);
      cur = 0;
    }
  }
  for (int d = 0; d < 3; ++d) EXPECT_GT(ai[d], share);
  EXPECT_LT(ai[3], share);
  const double aiWorst =
      std::max({std::abs(ai[0] - share), std::abs(ai[1] - share), std::abs(ai[2] - share), std::abs(ai[3] - share)});
  EXPECT_GT(aiWorst, 339831296.0 * 0.5);
}

TEST(Planner, MemoryModeFitsUnevenBudgetsAtTheSmallestCommonShare) {
  PlannerInput in = uniformInput(40, 1, 1 * kGB);
  in.mode = PlanMode::Memory;
  in.devices = gpus({24 * kGB, 16 * kGB, 8 * kGB});
  const Plan plan = planPlacement(in);
  expectContiguous(plan, in);
  ASSERT_TRUE(plan.fits) << plan.reason;
  // 40 blocks of 1 GB: at a share of 0.85 at most 20 + 13 + 6 = 39 fit; at 0.875,
  // 21 + 14 + 7 = 42. So the fullest device sits at 87.5%, which this fill reaches.
  double worst = 0;
  for (const auto& dp : plan.devices) {
    EXPECT_LE(dp.totalBytes, dp.budgetBytes) << dp.device;
    EXPECT_EQ(dp.missingBytes, 0);
    worst = std::max(worst, static_cast<double>(dp.totalBytes) / static_cast<double>(dp.budgetBytes));
  }
  EXPECT_DOUBLE_EQ(worst, 0.875);
  EXPECT_EQ(plan.devices[0].blockIds.size(), 21u);
  EXPECT_EQ(plan.devices[1].blockIds.size(), 14u);
  EXPECT_EQ(plan.devices[2].blockIds.size(), 5u);
}

TEST(Planner, MemoryModeFrom1To8Devices) {
  for (int n = 1; n <= 8; ++n) {
    PlannerInput in = uniformInput(57, 1, 400000000LL);  // 22.8 GB of blocks
    in.mode = PlanMode::Memory;
    in.stem.weightBytes = 100000000LL;
    in.devices = gpus(std::vector<int64_t>(n, 30 * kGB));
    const Plan plan = planPlacement(in);
    expectContiguous(plan, in);
    EXPECT_TRUE(plan.fits) << "n=" << n << ": " << plan.reason;
    int64_t sum = 0;
    for (const auto& dp : plan.devices) {
      EXPECT_LE(dp.totalBytes, dp.budgetBytes);
      sum += dp.totalBytes;
      // Balanced: no device holds more than its fair part plus one block and the stem.
      EXPECT_LE(dp.totalBytes, 22900000000LL / n + 400000000LL + 100000000LL) << "n=" << n;
    }
    EXPECT_EQ(sum, 57 * 400000000LL + 100000000LL);
  }
}

TEST(Planner, MemoryModeSaysWhatIsMissingWhere) {
  PlannerInput in = uniformInput(20, 1, 1 * kGB);
  in.mode = PlanMode::Memory;
  in.devices = gpus({8 * kGB, 8 * kGB});  // 20 GB into 16 GB
  const Plan plan = planPlacement(in);
  EXPECT_FALSE(plan.fits);
  int64_t missing = 0;
  for (const auto& dp : plan.devices) missing += dp.missingBytes;
  EXPECT_EQ(missing, 4 * kGB);
  EXPECT_GT(plan.devices[1].missingBytes, 0);
  EXPECT_NE(plan.reason.find("cuda:1 needs 12.0 GB but its budget is 8.0 GB: 4.0 GB missing"), std::string::npos)
      << plan.reason;
  EXPECT_THROW(requireFits(plan), PlacementError);
}

TEST(Planner, MemoryModeStemTooLargeForFirstDevice) {
  PlannerInput in = uniformInput(4, 1, 1 * kGB);
  in.mode = PlanMode::Memory;
  in.stem.weightBytes = 10 * kGB;
  in.devices = gpus({8 * kGB, 8 * kGB});
  const Plan plan = planPlacement(in);
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.devices[0].missingBytes, 2 * kGB);
  EXPECT_EQ(plan.devices[0].blockIds.size(), 0u);  // the blocks go to cuda:1
  EXPECT_EQ(plan.devices[1].blockIds.size(), 4u);
}

TEST(Planner, ABlockLargerThanEveryDeviceDoesNotFit) {
  PlannerInput in = uniformInput(3, 1, 1 * kGB);
  in.blocks[1].weightBytes = 9 * kGB;
  in.mode = PlanMode::Memory;
  in.devices = gpus({8 * kGB, 8 * kGB, 8 * kGB});
  const Plan plan = planPlacement(in);
  EXPECT_FALSE(plan.fits);
  EXPECT_NE(plan.reason.find("missing"), std::string::npos);
}

TEST(Planner, WorkspaceCountsOncePerDevice) {
  PlannerInput in = uniformInput(4, 1, 1 * kGB);
  for (auto& b : in.blocks) b.workspaceBytes = 3 * kGB;
  in.mode = PlanMode::Memory;
  in.devices = gpus({7 * kGB});  // 4 GB resident + 3 GB workspace (once) = 7 GB
  const Plan plan = planPlacement(in);
  EXPECT_TRUE(plan.fits) << plan.reason;
  EXPECT_EQ(plan.devices[0].totalBytes, 7 * kGB);
}

TEST(Planner, CpuIsAValidOffloadDeviceUsedLast) {
  PlannerInput in = uniformInput(10, 1, 1 * kGB);
  in.mode = PlanMode::Memory;
  in.devices = gpus({4 * kGB});
  in.devices.push_back(DeviceBudget{"cpu", "host", 64 * kGB});
  Plan plan = planPlacement(in);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.devices[0].blockIds.size(), 4u);  // the GPU is filled first
  EXPECT_EQ(plan.devices[1].blockIds.size(), 6u);  // the cpu takes the rest
  EXPECT_EQ(plan.deviceOf("blocks.9"), "cpu");
  EXPECT_EQ(plan.deviceOf("stem"), "cuda:0");
  EXPECT_THROW(plan.deviceOf("blocks.99"), PlacementError);
  EXPECT_NE(plan.reason.find("cpu only for what the GPUs cannot hold"), std::string::npos);
  // When the GPUs hold everything, the cpu gets nothing.
  in.devices[0].budgetBytes = 16 * kGB;
  plan = planPlacement(in);
  EXPECT_EQ(plan.devices[1].blockIds.size(), 0u);
  // The cpu alone works too; listed first it also holds the stem.
  in.devices = {DeviceBudget{"cpu", "host", 64 * kGB}, DeviceBudget{"cuda:0", "gpu", 4 * kGB}};
  plan = planPlacement(in);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.stemDevice, "cpu");
  EXPECT_EQ(plan.devices[1].blockIds.size(), 4u);  // the GPU's part at the end, still full
}

TEST(Planner, IsDeterministic) {
  PlannerInput in = uniformInput(57, 123457, 987654321);
  in.blocks[7].weightBytes *= 3;
  in.mode = PlanMode::Memory;
  in.devices = gpus({20 * kGB, 17 * kGB, 19 * kGB});
  const auto a = planToJson(planPlacement(in)).dump();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(planToJson(planPlacement(in)).dump(), a);
}

TEST(Planner, RejectsBadInput) {
  PlannerInput in = uniformInput(3, 1, 1);
  EXPECT_THROW(planPlacement(in), PlacementError);  // no devices
  in.devices = gpus({0});
  in.mode = PlanMode::Memory;
  EXPECT_THROW(planPlacement(in), PlacementError);  // memory mode without a budget
  in.devices = gpus({5, 5});
  in.devices[1].device = "cuda:0";
  EXPECT_THROW(planPlacement(in), PlacementError);  // listed twice
}

// network.dtype bf16: the LoRA, its gradient and AdamW's two moments at 2 bytes each;
// the EMA shadows stay float32.
TEST(Planner, BfloatLoraHalvesItsWeightsGradientsAndMomentsNotItsEmaShadows) {
  UnitShape block{"blocks.0", "layer", 10000, {{64, 128}, {128, 64}}, true};
  CostOptions o;
  o.loraRank = 4;
  o.ema = true;
  o.loraElementBytes = 2;
  o.optimizerBytesPerParam = strata::train::optimizerStateBytesPerParam(false, 2);
  const BlockCost c = estimateCost(block, o);
  // 4 * (64 + 128) * 2 linears = 1536 params.
  EXPECT_EQ(c.adapterBytes, 1536 * 2);
  EXPECT_EQ(c.gradBytes, 1536 * 2);
  EXPECT_EQ(c.optimizerBytes, 1536 * 4);
  EXPECT_EQ(c.emaBytes, 1536 * 4);
  o.loraElementBytes = 4;
  o.optimizerBytesPerParam = strata::train::optimizerStateBytesPerParam(false, 4);
  EXPECT_EQ(estimateCost(block, o).optimizerBytes, 1536 * 8);
  EXPECT_DOUBLE_EQ(strata::train::optimizerStateBytesPerParam(true, 2),
                   strata::train::optimizerStateBytesPerParam(true, 4));  // 8-bit moments either way
}

TEST(Planner, ReportCarriesEveryCostColumn) {
  UnitShape stem{"stem", "stem", 1000, {}, false};
  UnitShape head{"head", "head", 500, {}, false};
  std::vector<UnitShape> blocks;
  for (int i = 0; i < 4; ++i)
    blocks.push_back(UnitShape{"blocks." + std::to_string(i), "layer", 10000, {{64, 128}, {128, 64}}, true});
  CostOptions o;
  o.loraRank = 4;
  o.ema = true;
  o.tokens = 16;
  o.hiddenSize = 64;
  o.gradientCheckpointing = true;
  PlannerInput in = estimateInput(stem, blocks, head, o);
  // LoRA: 4 * (64 + 128) * 2 linears = 1536 params = 6144 bytes fp32.
  EXPECT_EQ(in.blocks[0].adapterBytes, 6144);
  EXPECT_EQ(in.blocks[0].gradBytes, 6144);
  EXPECT_EQ(in.blocks[0].optimizerBytes, 2 * 6144);
  EXPECT_EQ(in.blocks[0].emaBytes, 6144);
  EXPECT_EQ(in.blocks[0].weightBytes, 20000);
  EXPECT_EQ(in.blocks[0].activationBytes, 16 * 64 * 2);  // the block input, bf16
  EXPECT_EQ(in.blocks[0].workspaceBytes, static_cast<int64_t>(16 * 64 * 2 * 18.0));
  EXPECT_EQ(in.stem.activationBytes, 0);
  in.devices = gpus({1 * kGB, 1 * kGB});
  in.mode = PlanMode::Memory;
  const Plan plan = planPlacement(in);
  const auto j = planToJson(plan);
  ASSERT_EQ(j["devices"].size(), 2u);
  for (const char* key : {"weight_bytes", "adapter_bytes", "ema_bytes", "optimizer_bytes", "activation_bytes",
                          "total_bytes", "budget_bytes", "blocks"}) {
    EXPECT_TRUE(j["devices"][0].contains(key)) << key;
  }
  const std::string text = formatPlan(plan);
  EXPECT_NE(text.find("optimizer"), std::string::npos);
  EXPECT_NE(text.find("budget"), std::string::npos);
}

// A small LoRA model for the offloaded-state tests: a stem and a head without adapters,
// `count` blocks of the given LoRA Linears, rank 4, 16 tokens of width 64.
struct SmallLoraModel {
  UnitShape stem{"stem", "stem", 1000, {}, false};
  UnitShape head{"head", "head", 500, {}, false};
  std::vector<UnitShape> blocks;
  CostOptions options;
  SmallLoraModel(int count, const std::vector<LinearShape>& linears) {
    for (int i = 0; i < count; ++i)
      blocks.push_back(UnitShape{"blocks." + std::to_string(i), "layer", 10000, linears, true});
    options.loraRank = 4;
    options.tokens = 16;
    options.hiddenSize = 64;
  }
};

// train.offload_optimizer_state: the optimizer state is host memory; the card holds
// one staged chunk of it during the step, as workspace (the whole state's size when
// that is smaller than the chunk).
TEST(Planner, OffloadedOptimizerStateIsHostMemoryAndOneChunkOfWorkspace) {
  const SmallLoraModel m(4, {{64, 128}, {128, 64}});
  const auto &stem = m.stem, &head = m.head;
  const auto& blocks = m.blocks;
  CostOptions o = m.options;
  const int64_t optimizer = 2 * 6144;                                  // per block: two float32 moments
  const int64_t workspace = static_cast<int64_t>(16 * 64 * 2 * 18.0);  // one block recomputed
  auto plan = [&](const CostOptions& opts, const std::string& device) {
    PlannerInput in = estimateInput(stem, blocks, head, opts);
    in.devices = {DeviceBudget{device, device, 1 * kGB}};
    in.mode = PlanMode::Memory;
    return planPlacement(in);
  };
  const Plan onCard = plan(o, "cuda:0");
  CostOptions off = o;
  off.offloadOptimizerState = true;
  const PlannerInput in = estimateInput(stem, blocks, head, off);
  EXPECT_EQ(in.blocks[0].optimizerBytes, 0);
  EXPECT_EQ(in.blocks[0].hostBytes, optimizer);
  // The default chunk (64 MiB) holds the whole state (4 blocks), more than the recompute's workspace.
  EXPECT_EQ(in.blocks[0].workspaceBytes, 4 * optimizer);
  EXPECT_EQ(in.stem.workspaceBytes, 0);  // no adapters there, nothing staged for it
  const Plan offloaded = plan(off, "cuda:0");
  const DevicePlan &a = onCard.devices[0], &b = offloaded.devices[0];
  EXPECT_EQ(a.optimizerBytes, 4 * optimizer);
  EXPECT_EQ(a.hostBytes, 0);
  EXPECT_EQ(b.optimizerBytes, 0);
  EXPECT_EQ(b.hostBytes, 4 * optimizer);
  EXPECT_EQ(b.workspaceBytes, 4 * optimizer);
  EXPECT_EQ(b.totalBytes, a.totalBytes - 4 * optimizer + (4 * optimizer - workspace));
  // A chunk smaller than the recompute's workspace adds nothing: the card saves the whole state.
  off.optimizerStagingBytes = 1024;
  const Plan small = plan(off, "cuda:0");
  EXPECT_EQ(small.devices[0].workspaceBytes, workspace);
  EXPECT_EQ(small.devices[0].totalBytes, a.totalBytes - 4 * optimizer);
  // Reported: the text and the JSON carry the host figure.
  EXPECT_NE(formatPlan(small).find("in host memory"), std::string::npos) << formatPlan(small);
  EXPECT_EQ(planToJson(small)["devices"][0]["host_bytes"].get<int64_t>(), 4 * optimizer);
  EXPECT_EQ(formatPlan(onCard).find("in host memory"), std::string::npos);
  // On a cpu device host memory is its own: the state still counts there.
  const Plan cpu = plan(o, "cpu"), cpuOff = plan(off, "cpu");
  EXPECT_EQ(cpuOff.devices[0].totalBytes, cpu.devices[0].totalBytes);
}

// A LoRA tensor whose moments exceed the staging chunk is staged alone, and a piece's
// copy back runs while the next piece comes in (two slots): the card's workspace for the
// step is two of the chunk or of the largest tensor's moments, whichever is larger.
TEST(Planner, OffloadedStateWorkspaceCoversATensorLargerThanTheChunk) {
  const SmallLoraModel m(2, {{64, 128}, {4096, 64}});
  const auto &stem = m.stem, &head = m.head;
  const auto& blocks = m.blocks;
  CostOptions o = m.options;
  o.offloadOptimizerState = true;
  o.optimizerStagingBytes = 1024;
  const int64_t largest = 4 * 4096 * 8;  // lora_A of the 4096-wide Linear: rank x in, two float32 moments
  const PlannerInput in = estimateInput(stem, blocks, head, o);
  EXPECT_EQ(in.blocks[0].largestStagedBytes, largest);
  EXPECT_EQ(in.blocks[0].workspaceBytes, std::max<int64_t>(2 * largest, 16 * 64 * 2 * 18));
  // Never more than the whole state.
  o.optimizerStagingBytes = int64_t{1} << 30;
  const PlannerInput whole = estimateInput(stem, blocks, head, o);
  EXPECT_EQ(whole.blocks[0].workspaceBytes, whole.blocks[0].hostBytes + whole.blocks[1].hostBytes);
}

TEST(DeviceSpec, ParsesCountsSizesAndCpu) {
  auto d = device::parseDeviceSpec("4x16GB");
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[3].label(), "cuda:3");
  EXPECT_EQ(d[0].totalBytes, 16 * kGB);
  EXPECT_TRUE(d[0].simulated);
  d = device::parseDeviceSpec("24GB,16GB");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].totalBytes, 24 * kGB);
  EXPECT_EQ(d[1].totalBytes, 16 * kGB);
  d = device::parseDeviceSpec("cpu,2x80GB");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_TRUE(d[0].isCpu());
  EXPECT_EQ(d[1].label(), "cuda:0");
  EXPECT_EQ(d[2].label(), "cuda:1");
  d = device::parseDeviceSpec(" 2 x 1.5GiB , cpu:64GB ");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].totalBytes, 1610612736LL);
  EXPECT_EQ(d[2].totalBytes, 64 * kGB);
}

TEST(DeviceSpec, RejectsBadSpecsWithTheItem) {
  for (const char* bad : {"", "4x", "x16GB", "16", "16XB", "4x16GB,,8GB", "cpu,cpu", "0x16GB", "ax16GB"}) {
    try {
      device::parseDeviceSpec(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--devices"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceSpec, BudgetsUseCapsAndReserve) {
  const auto devs = device::parseDeviceSpec("2x80GB");
  auto b = makeBudgets(devs, {20.0}, 1.0);
  EXPECT_EQ(b[0].budgetBytes, 19 * kGB);
  EXPECT_EQ(b[1].budgetBytes, 19 * kGB);
  b = makeBudgets(devs, {20.0, 30.0}, 0.5);
  EXPECT_EQ(b[1].budgetBytes, 29500000000LL);
  b = makeBudgets(devs, {}, 1.0, {50 * kGB, 0});  // free memory where known, else total
  EXPECT_EQ(b[0].budgetBytes, 49 * kGB);
  EXPECT_EQ(b[1].budgetBytes, 79 * kGB);
  EXPECT_THROW(makeBudgets(devs, {1, 2, 3}, 1.0), ConfigError);
  b = makeBudgets(devs, {100}, 1.0);  // simulated 80 GB cards under a 100 GB cap: 80 GB
  EXPECT_EQ(b[0].budgetBytes, 79 * kGB);
  auto real = devs;
  for (auto& d : real) d.simulated = false;
  EXPECT_THROW(makeBudgets(real, {100}, 1.0), ConfigError);
  EXPECT_THROW(makeBudgets(devs, {}, 90.0), ConfigError);
}

TEST(DeviceInventory, CapsNeedCudaOrARealDevice) {
  // On a CPU build there is nothing to cap; on CUDA, a device that does not exist.
  EXPECT_THROW(device::setMemoryCap(99, 1 * kGB), PlacementError);
  EXPECT_EQ(device::memoryCap(99), 0);
  EXPECT_THROW(device::applyMemoryCaps({0, 1}, {1, 2, 3}), ConfigError);
  EXPECT_EQ(device::parseByteSize("16GB"), 16 * kGB);
  EXPECT_EQ(device::formatBytes(15300000000LL), "15.3 GB");
}

TEST(DeviceInventory, OutOfMemoryBecomesPlacementErrorWithContext) {
  try {
    device::withCapContext("step 3 forward", []() -> int {
      throw std::runtime_error(
          "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 139.8 GiB");
    });
    ADD_FAILURE() << "no throw";
  } catch (const PlacementError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("step 3 forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2.00 GiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cap"), std::string::npos) << msg;
  }
  // Other errors pass through unchanged.
  EXPECT_THROW(device::withCapContext("x", []() -> int { throw std::logic_error("nope"); }), std::logic_error);
  EXPECT_EQ(device::withCapContext("x", [] { return 7; }), 7);
}
