// A data-parallel rank's share of the run's data order (train::DrawShard) and the
// per-sample seeds: W ranks of batch b draw, between them, the items one process
// of batch W x b draws, each sample at the same place of the global batch, and a
// sample's seed depends on that place alone.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "config/RunConfig.h"
#include "train/RunContext.h"

namespace {

using strata::train::DataCursor;
using strata::train::DrawShard;
using strata::train::SampleStream;

// The items `shard` draws in `microBatches` micro-batches of shard.batch, over `n` items.
std::vector<std::vector<size_t>> draws(const strata::config::RunConfig& cfg, size_t n, DrawShard shard,
                                       int microBatches) {
  DataCursor cursor;
  std::vector<std::vector<size_t>> out;
  for (int m = 0; m < microBatches; ++m) {
    std::vector<size_t> batch;
    for (int64_t j = 0; j < shard.batch; ++j) {
      const size_t peeked = strata::train::peekDrawIndex(cursor, cfg, n, shard);
      batch.push_back(strata::train::nextDrawIndex(cursor, cfg, n, shard));
      EXPECT_EQ(peeked, batch.back());
    }
    out.push_back(batch);
  }
  return out;
}

TEST(DataShard, RanksSplitTheGlobalBatchOfOneProcessIntoContiguousSlices) {
  strata::config::RunConfig cfg;
  cfg.train.seed = 11;
  const size_t n = 7;  // epochs end inside a global batch
  for (int64_t world : {2, 3}) {
    for (int64_t batch : {1, 2}) {
      const auto whole = draws(cfg, n, DrawShard{0, 1, world * batch}, 9);
      for (int64_t r = 0; r < world; ++r) {
        const auto mine = draws(cfg, n, DrawShard{r, world, batch}, 9);
        for (size_t m = 0; m < whole.size(); ++m)
          for (int64_t j = 0; j < batch; ++j)
            EXPECT_EQ(mine[m][static_cast<size_t>(j)], whole[m][static_cast<size_t>(r * batch + j)])
                << "world " << world << " batch " << batch << " rank " << r << " micro-batch " << m;
      }
    }
  }
}

TEST(DataShard, OneProcessDrawsAsBefore) {
  // Rank 0 of 1: position = draws so far; an epoch is a permutation of every item.
  strata::config::RunConfig cfg;
  cfg.train.seed = 5;
  const auto d = draws(cfg, 6, DrawShard{0, 1, 3}, 2);
  std::set<size_t> epoch(d[0].begin(), d[0].end());
  epoch.insert(d[1].begin(), d[1].end());
  EXPECT_EQ(epoch.size(), 6u);
  EXPECT_EQ(strata::train::globalDrawPosition(5, DrawShard{}), 5);
  EXPECT_EQ(strata::train::globalDrawPosition(5, DrawShard{1, 2, 2}), 11);  // draw 5 = micro-batch 2, sample 1
}

TEST(SampleSeed, DependsOnSeedStepSampleAndStream) {
  using strata::train::sampleSeed;
  const uint64_t base = sampleSeed(42, 3, 1, SampleStream::Noise);
  EXPECT_EQ(base, sampleSeed(42, 3, 1, SampleStream::Noise));
  EXPECT_NE(base, sampleSeed(43, 3, 1, SampleStream::Noise));
  EXPECT_NE(base, sampleSeed(42, 4, 1, SampleStream::Noise));
  EXPECT_NE(base, sampleSeed(42, 3, 2, SampleStream::Noise));
  EXPECT_NE(base, sampleSeed(42, 3, 1, SampleStream::CaptionDropout));
  // Step and sample are not interchangeable.
  EXPECT_NE(sampleSeed(42, 1, 2, SampleStream::Noise), sampleSeed(42, 2, 1, SampleStream::Noise));
}

}  // namespace
