#pragma once
// How a data-parallel run spreads, as one value: replicas x cards. A replica is
// the config's device set (one card, or the cards of a split); local rank r
// takes the r-th group of its node's cards (a 1-card config on 4 local ranks:
// rank r on cuda:r; a config on cards [0, 1] on 2 local ranks: rank 1 on [2, 3]).
// On the CPU every rank uses the CPU.
#include <c10/core/Device.h>

#include <vector>

#include "config/RunConfig.h"
#include "dist/LaunchEnv.h"

namespace strata::dist {

struct ParallelDims {
  int replicas = 1;  // WORLD_SIZE: one rank per replica
  int rank = 0;
  int localRank = 0;
  int localReplicas = 1;   // LOCAL_WORLD_SIZE
  std::vector<int> cards;  // this replica's CUDA ordinals; empty = the CPU

  // Where this rank's collectives run: its first card (NCCL), or the CPU (Gloo).
  c10::Device device() const;
};

// This rank's share of the node for `cfg` on a node whose CUDA ordinals are
// `nodeCards` (empty: no CUDA). Throws strata::ConfigError naming LOCAL_RANK and
// the cards when the node has too few for its group.
ParallelDims parallelDimsOf(const config::RunConfig& cfg, const LaunchEnv& env, const std::vector<int>& nodeCards);

// The configs of `nproc` local replicas on a node of `nodeCards`: each rank's group
// of cards as its model.gpu_ids, as the ranks take them (`strata-train plan`, the
// app's plan). Throws as parallelDimsOf when the node has too few cards.
std::vector<config::RunConfig> replicaConfigs(const config::RunConfig& cfg, const std::vector<int>& nodeCards,
                                              int nproc);

}  // namespace strata::dist
