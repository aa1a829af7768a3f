#pragma once
// strata-train's side of a data-parallel run (docs/data-parallel.md): joining one
// that torchrun (or SLURM, or --nproc) started, and --nproc's own launcher.
#include <optional>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "train/Trainer.h"

namespace strata::cli {

// When torchrun's variables say this process is one rank of several (WORLD_SIZE
// above 1): picks this rank's replica of the config's devices (local rank r
// takes the r-th group of the node's cards; on the CPU every rank uses the CPU),
// joins the others (a fingerprint of `runYaml` and this build compared through
// the store) and sets `opts`' collective and reducer. Returns the exit code of a
// rank that cannot join (the reason printed with `command`), none otherwise.
// Timeouts: STRATA_DIST_CONNECT_TIMEOUT_S (joining, default 300) and
// STRATA_DIST_TIMEOUT_S (each collective and wait on rank 0, default 1800).
std::optional<int> joinDataParallel(config::RunConfig& cfg, const std::string& runYaml, train::TrainerOptions& opts,
                                    const std::string& command);

// `--nproc N`: this program again as N local ranks (`args` its command line after
// the program name), with torchrun's variables, MASTER_ADDR 127.0.0.1 and a free
// port. Rank 0's output is shown as is, the others' errors and warnings with a
// "[rank r]" prefix. Forwards SIGINT, SIGTERM and SIGHUP to every rank, waits for
// all, and returns 0 when all finished, 130 when they stopped, else the first
// failing rank's code, naming it; the others are ended within a bounded time
// once one has failed.
int launchLocalRanks(int nproc, const std::vector<std::string>& args);

}  // namespace strata::cli
