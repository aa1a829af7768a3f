#pragma once
// The strict copy of checkpoint tensors into a model, shared by the model
// families: every expected key present with its shape, no key left over that the
// family did not name as known-and-unused, floating-point data only; all of it
// checked before the first tensor is copied, so a bad file never leaves a
// half-loaded model.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "io/SafetensorsCheckpoint.h"

namespace strata::io {

// The checkpoint tensor `key` goes into `target` (a parameter or buffer).
struct WeightSlot {
  std::string key;
  at::Tensor target;
};

struct WeightPlan {
  std::vector<WeightSlot> slots;
  // Checkpoint keys that are known and deliberately not loaded -> why
  // (e.g. "the tied copy of shared.weight"). Anything else not in `slots` is unexpected.
  std::map<std::string, std::string> ignored;
};

// Checks, then copies every slot, converting to the target's dtype and device.
// Throws LoadError "<file(s)> (<label>): N problem(s), nothing loaded" followed by
// one line per missing, mis-shaped, unexpected or non-floating key.
// Returns "key: why" for every ignored key that the checkpoint holds.
// The same checks against expected (key, shape) pairs alone, for a loader that
// builds the model only after the file passed (streamed block by block). Throws
// the same LoadError; returns the ignored keys held, as loadStrict does.
std::vector<std::string> checkStrict(const SafetensorsCheckpoint& ckpt,
                                     const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected,
                                     const std::map<std::string, std::string>& ignored, const std::string& label);

std::vector<std::string> loadStrict(const SafetensorsCheckpoint& ckpt, const WeightPlan& plan,
                                    const std::string& label);

// Fills a model that is built piece by piece from a checkpoint already checked
// against `layout` (checkStrict): each fill() copies the parameters of one module
// (model names under `prefix`) not filled yet, from the file key fileKey(name), and
// lets those file pages go. Throws Error, naming `who`, for a parameter the layout
// does not have with that shape (a loader bug, not a file problem).
class StreamedFill {
 public:
  StreamedFill(const SafetensorsCheckpoint& ckpt,
               const std::vector<std::pair<std::string, std::vector<int64_t>>>& layout, std::string who,
               std::function<std::string(const std::string&)> fileKey = {});
  void fill(torch::nn::Module& module, const std::string& prefix);
  // Throws Error unless every parameter of the layout was filled.
  void requireComplete() const;

 private:
  const SafetensorsCheckpoint& ckpt_;
  std::map<std::string, std::vector<int64_t>> shapeOf_;
  std::string who_;
  std::function<std::string(const std::string&)> fileKey_;
  std::set<std::string> filled_;
};

}  // namespace strata::io
