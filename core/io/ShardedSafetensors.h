#pragma once
// Weights split over several .safetensors files, read as one name -> tensor map:
// one file, an index JSON ("weight_map": tensor -> shard file, as diffusers and
// transformers write *.safetensors.index.json), or every *.safetensors of a
// folder. Headers only until a tensor is asked for (files are memory-mapped).
// Model families build their checkpoints on it (prefixes, name maps, formats).
#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/Safetensors.h"

namespace strata::io {

class ShardedSafetensors {
 public:
  // One safetensors file.
  static ShardedSafetensors openFile(const std::filesystem::path& file);
  // An index JSON: the shards it names, in its folder; the index decides which
  // shard holds each tensor. Throws IoError for bad JSON or a missing shard, and
  // LoadError for a tensor the index places in a shard that does not hold it.
  static ShardedSafetensors openIndex(const std::filesystem::path& indexJson);
  // A folder: its *.safetensors.index.json when there is exactly one, else every
  // *.safetensors in it (a tensor in two files is a LoadError). Throws LoadError
  // when the folder holds no safetensors file, IoError when it is no folder.
  static ShardedSafetensors openFolder(const std::filesystem::path& dir);

  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // Dtype, shape and span; throws LoadError naming the source when absent.
  const TensorInfo& info(const std::string& name) const;
  // CPU tensor in the file's dtype, over the mapping (no copy). LoadError when absent.
  at::Tensor tensor(const std::string& name) const;
  // The shard that holds `name`.
  const std::filesystem::path& fileOf(const std::string& name) const;
  // The files in the order they were opened.
  std::vector<std::filesystem::path> files() const;
  // What was opened (a file, an index JSON or a folder), for messages.
  const std::filesystem::path& source() const { return source_; }

 private:
  void addFile(const std::filesystem::path& file, const std::map<std::string, std::string>* indexMap);

  std::filesystem::path source_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> entries_;  // tensor -> index into files_
};

}  // namespace strata::io
