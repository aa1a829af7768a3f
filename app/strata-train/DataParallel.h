#pragma once
// strata-train's side of a data-parallel run (docs/data-parallel.md): joining one
// that torchrun (or SLURM, or --nproc) started, and --nproc's own launcher.
#include <optional>
#include <string>
#include <vector>

#include "EventStream.h"
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
// A config's model.replicas above 1 that differs from LOCAL_WORLD_SIZE is refused
// unless --nproc's own launcher started this rank (its count wins).
std::optional<int> joinDataParallel(config::RunConfig& cfg, const std::string& runYaml, train::TrainerOptions& opts,
                                    const std::string& command);

// `--nproc N`: this program again as N local ranks (`args` its command line after
// the program name), with torchrun's variables, MASTER_ADDR 127.0.0.1 and a free
// port. Rank 0's output is shown as is, the others' errors and warnings with a
// "[rank r]" prefix. Forwards SIGINT, SIGTERM and SIGHUP to every rank, waits for
// all, and returns 0 when all finished, 130 when they stopped, else the first
// failing rank's code, naming it; the others are ended within a bounded time
// once one has failed.
//
// `stream` with --events jsonl (the app's child process): every rank streams its
// events to the launcher, which writes whole lines on its stdout: all of rank 0's,
// and of the other ranks what the app's GPU maps need (placements; a step's memory
// at most once a second) and their failures. Each line carries its rank
// (EventJson.h). --control-stdin goes to rank 0 alone, which reads the launcher's
// stdin (the ranks agree on its stop, pause, sample and save each step). A rank
// that dies without saying why is a failed event naming it.
int launchLocalRanks(int nproc, const std::vector<std::string>& args, const StreamOptions& stream = {});

// The config's replicas when the command line gave no --nproc (0) and this
// process is not already a rank (WORLD_SIZE unset or 1); else `nproc`.
int localRanksToStart(int nproc, const config::RunConfig& cfg);

}  // namespace strata::cli
