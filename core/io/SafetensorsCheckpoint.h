#pragma once
// One model component's weights on disk, as the Hugging Face tools write them:
// a single .safetensors file, or a folder holding either shards plus the index
// JSON (`*.safetensors.index.json`, "weight_map": tensor -> shard file) or one or
// more .safetensors files. Every model family reads its weights through this, so
// sharding, the index rules and duplicate detection live in one place. Only
// headers are read on open; tensors are views over the memory-mapped files.
#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/Safetensors.h"

namespace strata::io {

class SafetensorsCheckpoint {
 public:
  // `path`: a .safetensors file or a folder (see above). Throws IoError for an
  // absent path or a malformed index, LoadError for a folder without weights, a
  // tensor held by two files or an index entry whose shard lacks the tensor.
  static SafetensorsCheckpoint open(const std::filesystem::path& path);

  // What was opened, and the folder the weight files are in.
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& folder() const { return folder_; }
  // The index JSON, empty when the weights are not sharded with one.
  const std::filesystem::path& indexPath() const { return index_; }
  std::vector<std::filesystem::path> files() const;

  // Tensor names as stored (sorted), with their shapes.
  const std::map<std::string, std::vector<int64_t>>& shapes() const { return shapes_; }
  bool contains(const std::string& name) const { return shapes_.count(name) > 0; }
  // Header entry of a tensor (dtype, shape, span). Throws LoadError if absent.
  const TensorInfo& info(const std::string& name) const;
  // The file holding a tensor. Throws LoadError if absent.
  const std::filesystem::path& fileOf(const std::string& name) const;
  // CPU tensor in the file's dtype, over the mapping (no copy). Throws LoadError if absent.
  at::Tensor tensor(const std::string& name) const;
  // The file pages under a tensor stop counting as this process's memory
  // (SafetensorsFile::releasePages): for loaders that stream tensor by tensor.
  void releasePages(const std::string& name) const;

  // "model.safetensors" or "text_encoder_2 (2 shards + model.safetensors.index.json)":
  // how error messages name these weights.
  std::string describe() const;

 private:
  std::filesystem::path path_;
  std::filesystem::path folder_;
  std::filesystem::path index_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> fileOf_;  // tensor -> index into files_
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// A component's weights as a user points at them: `path` itself (a file or a
// folder), or inside a diffusers pipeline folder the component that
// model_index.json names with one of `classNames`; `configJson` is the folder's
// config.json when it has one (empty for single files).
struct ComponentWeights {
  std::shared_ptr<SafetensorsCheckpoint> weights;
  std::filesystem::path configJson;
};
ComponentWeights openComponentWeights(const std::filesystem::path& path, const std::vector<std::string>& classNames);

// The one key prefix p (empty or ending in '.') for which p + anchor and every
// p + companion are tensors of `weights`: how a component is found inside a file
// that may wrap it ("text_model.", "encoder." ...). LoadError naming the file and
// `what` ("T5 encoder") when there is none or more than one.
std::string uniqueKeyPrefix(const SafetensorsCheckpoint& weights, const std::string& anchor,
                            const std::vector<std::string>& companions, const std::string& what);

}  // namespace strata::io
