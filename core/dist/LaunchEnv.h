#pragma once
// torchrun's launch contract (also what SLURM scripts and `strata-train run
// --nproc N` set): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT. No c10d here: the variables are read and checked before anything
// connects.
#include <functional>
#include <optional>
#include <string>

namespace strata::dist {

struct LaunchEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  std::string masterAddr;
  int masterPort = 0;
  // For measuring the collective's cost on one machine (docs/data-parallel.md), not
  // for training runs: STRATA_DIST_BACKEND=gloo reduces through Gloo on the host
  // whatever the cards ("" = NCCL on CUDA, Gloo on the CPU); STRATA_DIST_SHARE_CARDS=1
  // puts every local rank on the config's own cards instead of its own group of them.
  std::string backend;
  bool shareCards = false;
  // STRATA_DIST_OVERLAP=0 sums the gradients after the backward instead of during it
  // (dist/AveragingReducer.h), to measure what the overlap gains.
  bool overlap = true;
};

// The names of the variables, in the order above.
inline constexpr const char* kLaunchVariables[] = {"RANK",        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                   "MASTER_ADDR", "MASTER_PORT"};

// The launch of this process from `getenv` (std::getenv by default): none when
// WORLD_SIZE is unset or 1 (one process, no process group), unless
// STRATA_DIST_GROUP_OF_ONE=1 asks for a group of one (the reduce's cost measured
// against a run without one). Throws
// strata::ConfigError naming the variable when one is missing, not a number or
// out of range (RANK not below WORLD_SIZE, LOCAL_RANK not below
// LOCAL_WORLD_SIZE, a port outside 1..65535). LOCAL_RANK and LOCAL_WORLD_SIZE
// default to RANK and WORLD_SIZE (one node).
std::optional<LaunchEnv> launchEnvFrom(const std::function<const char*(const char*)>& getenv = {});

}  // namespace strata::dist
