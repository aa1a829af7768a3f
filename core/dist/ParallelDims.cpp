#include "dist/ParallelDims.h"

#include <algorithm>
#include <string>

#include "common/Error.h"

namespace strata::dist {

c10::Device ParallelDims::device() const {
  if (cards.empty()) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cards.front()));
}

ParallelDims parallelDimsOf(const config::RunConfig& cfg, const LaunchEnv& env, const std::vector<int>& nodeCards) {
  ParallelDims dims;
  dims.replicas = env.worldSize;
  dims.rank = env.rank;
  dims.localRank = env.localRank;
  dims.localReplicas = env.localWorldSize;
  if (cfg.model.device == config::ComputeDevice::Cpu || nodeCards.empty()) return dims;
  // The first replica's cards: the config's, else every card's share for a split, else the first card.
  std::vector<int> first = cfg.model.gpuIds;
  if (!cfg.model.splitModelOverGpus && first.size() > 1) first.resize(1);  // one card, as device selection takes
  if (first.empty()) {
    const size_t perReplica =
        cfg.model.splitModelOverGpus ? nodeCards.size() / static_cast<size_t>(std::max(env.localWorldSize, 1)) : 1;
    first.assign(nodeCards.begin(), nodeCards.begin() + static_cast<long>(std::min(perReplica, nodeCards.size())));
  }
  if (first.empty())
    throw ConfigError("a split over the node's " + std::to_string(nodeCards.size()) + " card(s) for " +
                      std::to_string(env.localWorldSize) + " local ranks leaves none for each (LOCAL_WORLD_SIZE)");
  // Local rank r: each of those cards moved r groups on in the node's card list.
  const auto step = env.shareCards ? 0L : static_cast<long>(first.size()) * env.localRank;
  for (int card : first) {
    const auto at = std::find(nodeCards.begin(), nodeCards.end(), card);
    const long index = at == nodeCards.end() ? -1 : static_cast<long>(at - nodeCards.begin()) + step;
    if (at == nodeCards.end() || index >= static_cast<long>(nodeCards.size())) {
      std::string have;
      for (int c : nodeCards) have += (have.empty() ? "" : ", ") + std::to_string(c);
      throw ConfigError("LOCAL_RANK " + std::to_string(env.localRank) + " of " + std::to_string(env.localWorldSize) +
                        " takes group " + std::to_string(env.localRank) + " of " + std::to_string(first.size()) +
                        "-card replicas, past this node's cards [" + have + "]");
    }
    dims.cards.push_back(nodeCards[static_cast<size_t>(index)]);
  }
  // Named cards with gaps ([0, 2]) shifted by the group's size would overlap a
  // neighbour's ([2, 4]): two replicas on one card. Refused, naming the card.
  if (!env.shareCards) {
    auto groupOf = [&](long rank) {  // the cards local rank `rank` takes, those past the node's left out
      std::vector<int> cards;
      for (int card : first) {
        const long index = static_cast<long>(std::find(nodeCards.begin(), nodeCards.end(), card) - nodeCards.begin()) +
                           static_cast<long>(first.size()) * rank;
        if (index >= 0 && index < static_cast<long>(nodeCards.size()))
          cards.push_back(nodeCards[static_cast<size_t>(index)]);
      }
      return cards;
    };
    for (const long other : {static_cast<long>(env.localRank) - 1, static_cast<long>(env.localRank) + 1}) {
      if (other < 0 || other >= env.localWorldSize) continue;
      for (int card : groupOf(other))
        if (std::find(dims.cards.begin(), dims.cards.end(), card) != dims.cards.end())
          throw ConfigError("model.gpu_ids: local ranks " + std::to_string(std::min<long>(env.localRank, other)) +
                            " and " + std::to_string(std::max<long>(env.localRank, other)) + " would share card " +
                            std::to_string(card) +
                            " (each local rank takes the configured cards shifted by their count: name consecutive "
                            "cards)");
    }
  }
  return dims;
}

std::vector<config::RunConfig> replicaConfigs(const config::RunConfig& cfg, const std::vector<int>& nodeCards,
                                              int nproc) {
  std::vector<config::RunConfig> out;
  for (int r = 0; r < nproc; ++r) {
    LaunchEnv env;
    env.rank = env.localRank = r;
    env.worldSize = env.localWorldSize = nproc;
    config::RunConfig replica = cfg;
    const ParallelDims dims = parallelDimsOf(cfg, env, nodeCards);
    if (!dims.cards.empty()) replica.model.gpuIds = dims.cards;
    out.push_back(std::move(replica));
  }
  return out;
}

}  // namespace strata::dist
