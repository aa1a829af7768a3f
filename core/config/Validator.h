#pragma once
// The rules a run config must pass before anything is loaded: every problem at
// once, each with severity, key, line/column (from the SourceMap) and a hint.
// Pure but for one build probe: the caller passes the devices (the CLI from
// device::listDevices(), tests a hand-made list); nothing here queries CUDA or
// the clock. The probe is device::cpuHasHalfMatmul (fp16 on the CPU).
#include "config/Problem.h"
#include "config/RunConfig.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInfo.h"
#include "device/DeviceSelection.h"

#include <optional>
#include <string>
#include <vector>

namespace strata::config {

struct ValidateOptions {
  const SourceMap* where = nullptr;  // positions for the problems; nullptr = none
  // The CUDA devices of the machine that will train (CPU entries are ignored).
  // nullopt = unknown: the gpu-id and bf16 checks are skipped. An empty list
  // means "this machine has no GPU".
  std::optional<std::vector<device::DeviceInfo>> devices;
  bool checkPaths = true;  // model and dataset paths must exist (relative to the working directory)
  // Only what a placement preview needs: the schema's ranges and the model, device
  // and quantization rules (no paths, datasets, sampling or saving, nor what this
  // LibTorch build has: a preview may be for another machine).
  bool placementOnly = false;
};

// Every rule's problems, errors and warnings, in key order of the schema.
std::vector<Problem> validate(const RunConfig& cfg, const ValidateOptions& options = {});

// loaded.problems (reading) followed by validate(loaded.config) with loaded.where.
std::vector<Problem> validateLoaded(const LoadedConfig& loaded,
                                    std::optional<std::vector<device::DeviceInfo>> devices = std::nullopt,
                                    bool checkPaths = true);

// model.device, model.gpu_ids and model.split_model_over_gpus as a device
// request: what device::selectDevices resolves for the validator and prepareRun.
device::DeviceRequest deviceRequestOf(const ModelConfig& m);

// Whether `path` holds model weights: a weights file (.safetensors, .bin, .pt, ...)
// or a folder with one at its top or in its transformer/ folder (diffusers). With
// random_weights such a path is an error for every family: its weights would not
// be read. The editor turns random_weights off when the user sets such a path.
bool holdsWeights(const std::string& path);

// What in the config keeps train.cuda_graph from recording the step (the validator
// refuses each with cuda_graph: true; auto runs eager and says the first): the key
// that conflicts, why, and what to change. Independent of the machine: the devices,
// the build and the data are the trainer's to judge (train::stepGraphObstacle).
struct CudaGraphConflict {
  std::string key;      // "train.dtype"
  std::string setting;  // "dtype fp16"
  std::string why;      // "its loss scale changes between steps, and the graph would keep the first one"
  std::string hint;     // "set dtype: bf16"
};
std::vector<CudaGraphConflict> cudaGraphConflicts(const RunConfig& cfg);

// "black-forest-labs/FLUX.1-dev": owner/name, no leading '/', '.' or '~'.
bool looksLikeHubId(const std::string& path);
// How to get a hub repository's folder (huggingface-cli download ... --local-dir ...).
std::string hubDownloadHint(const std::string& repoId);

// "an images", "a shapes": the article for a word in a message.
std::string withArticle(const std::string& word);

// The quantization types Strata can name, and whether this build can do `qtype`
// (float8 needs LibTorch >= 2.1; int8 works everywhere). docs/quantization.md.
const std::vector<std::string>& knownQtypes();
bool qtypeAvailable(const std::string& qtype);

}  // namespace strata::config
