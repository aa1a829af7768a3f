#include "io/SafetensorsCheckpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "common/Error.h"
#include "common/Text.h"
#include "io/DiffusersFolder.h"
#include "io/JsonFile.h"
#include "io/FileBytes.h"

namespace fs = std::filesystem;

namespace strata::io {

namespace {

// tensor -> shard file name, from an index JSON.
std::map<std::string, std::string> readIndex(const fs::path& index) {
  const nlohmann::json j = readJsonFile(index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw IoError(index.string() + ": no 'weight_map' object");
  std::map<std::string, std::string> map;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw IoError(index.string() + ": weight_map['" + tensor + "'] is not a file name");
    const std::string name = file.get<std::string>();
    // A shard is a file next to the index, never a path that leaves the folder, nor
    // a name the OS refuses (an over-long one made std::filesystem throw its own error).
    if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos || name == ".." ||
        name == "." || name.find('\0') != std::string::npos || name.size() > 255)
      throw IoError(index.string() + ": weight_map['" + tensor.substr(0, 200) + "'] = '" + name.substr(0, 80) +
                    (name.size() > 80 ? "..." : "") + "' is not a file in this folder");
    map[tensor] = name;
  }
  if (map.empty()) throw IoError(index.string() + ": 'weight_map' is empty");
  return map;
}

}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const fs::path& path) {
  SafetensorsCheckpoint ckpt;
  ckpt.path_ = path;
  std::vector<fs::path> files;
  std::map<std::string, std::string> indexMap;
  if (fs::is_directory(path)) {
    ckpt.folder_ = path;
    std::vector<fs::path> indexes;
    for (const auto& e : fs::directory_iterator(path)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file()) continue;
      if (endsWith(name, ".safetensors.index.json"))
        indexes.push_back(e.path());
      else if (e.path().extension() == ".safetensors")
        files.push_back(e.path());
    }
    std::sort(indexes.begin(), indexes.end());
    std::sort(files.begin(), files.end());
    if (indexes.size() > 1)
      throw LoadError(path.string() + ": more than one index (" + indexes[0].filename().string() + ", " +
                      indexes[1].filename().string() + "): which weights to load is ambiguous");
    if (!indexes.empty()) {
      ckpt.index_ = indexes[0];
      indexMap = readIndex(ckpt.index_);
      std::set<std::string> shards;
      for (const auto& [_, file] : indexMap) shards.insert(file);
      files.clear();
      for (const auto& s : shards) {
        if (!fs::is_regular_file(path / s))
          throw LoadError(ckpt.index_.string() + ": names the shard " + s + ", which is not in " + path.string());
        files.push_back(path / s);
      }
    }
    if (files.empty()) throw LoadError(path.string() + ": no .safetensors file in this folder");
  } else if (fs::is_regular_file(path)) {
    ckpt.folder_ = path.parent_path();
    files.push_back(path);
  } else {
    const std::string why = pathProblem(path);  // a loop or a permission, not only "absent"
    throw IoError(path.string() + ": " + (why.empty() ? "not a file or folder" : why));
  }

  for (size_t i = 0; i < files.size(); ++i) {
    auto file = std::make_shared<SafetensorsFile>(SafetensorsFile::open(files[i]));
    const std::string fileName = files[i].filename().string();
    for (const auto& name : file->names()) {
      if (!indexMap.empty()) {
        auto it = indexMap.find(name);
        if (it == indexMap.end())
          throw LoadError(files[i].string() + ": holds '" + name + "', which " + ckpt.index_.filename().string() +
                          " does not list");
        if (it->second != fileName)
          throw LoadError(files[i].string() + ": holds '" + name + "', which " + ckpt.index_.filename().string() +
                          " places in " + it->second);
      }
      auto seen = ckpt.fileOf_.find(name);
      if (seen != ckpt.fileOf_.end())
        throw LoadError(files[i].string() + ": tensor '" + name + "' is also in " +
                        ckpt.files_[seen->second]->path().string());
      ckpt.fileOf_[name] = i;
      ckpt.shapes_[name] = file->info(name).shape;
    }
    ckpt.files_.push_back(std::move(file));
  }
  for (const auto& [tensor, file] : indexMap)
    if (!ckpt.fileOf_.count(tensor))
      throw LoadError(ckpt.index_.string() + ": names '" + tensor + "' in " + file + ", which does not hold it");
  return ckpt;
}

std::vector<fs::path> SafetensorsCheckpoint::files() const {
  std::vector<fs::path> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

const TensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  auto it = fileOf_.find(name);
  if (it == fileOf_.end()) throw LoadError(describe() + ": no tensor '" + name + "'");
  return files_[it->second]->info(name);
}

const fs::path& SafetensorsCheckpoint::fileOf(const std::string& name) const {
  auto it = fileOf_.find(name);
  if (it == fileOf_.end()) throw LoadError(describe() + ": no tensor '" + name + "'");
  return files_[it->second]->path();
}

at::Tensor SafetensorsCheckpoint::tensor(const std::string& name) const {
  auto it = fileOf_.find(name);
  if (it == fileOf_.end()) throw LoadError(describe() + ": no tensor '" + name + "'");
  return files_[it->second]->tensor(name);
}

void SafetensorsCheckpoint::releasePages(const std::string& name) const {
  auto it = fileOf_.find(name);
  if (it == fileOf_.end()) throw LoadError(describe() + ": no tensor '" + name + "'");
  files_[it->second]->releasePages(name);
}

std::string SafetensorsCheckpoint::describe() const {
  if (files_.size() == 1 && index_.empty()) return files_[0]->path().string();
  std::string out = folder_.string() + " (" + std::to_string(files_.size()) + " file" + (files_.size() == 1 ? "" : "s");
  if (!index_.empty()) out += " + " + index_.filename().string();
  return out + ")";
}

ComponentWeights openComponentWeights(const fs::path& path, const std::vector<std::string>& classNames) {
  ComponentWeights out;
  fs::path source = path;
  if (fs::is_directory(path)) {
    if (isDiffusersPipelineFolder(path)) source = diffusersComponentFolder(path, classNames);
    if (fs::is_regular_file(source / "config.json")) out.configJson = source / "config.json";
  }
  out.weights = std::make_shared<SafetensorsCheckpoint>(SafetensorsCheckpoint::open(source));
  return out;
}

std::string uniqueKeyPrefix(const SafetensorsCheckpoint& weights, const std::string& anchor,
                            const std::vector<std::string>& companions, const std::string& what) {
  std::vector<std::string> prefixes;
  for (const auto& [name, _] : weights.shapes()) {
    if (!endsWith(name, anchor)) continue;
    const std::string p = name.substr(0, name.size() - anchor.size());
    if (!p.empty() && p.back() != '.') continue;
    if (std::all_of(companions.begin(), companions.end(), [&](const auto& c) { return weights.contains(p + c); }))
      prefixes.push_back(p);
  }
  if (prefixes.empty()) {
    std::string next;
    for (const auto& c : companions) next += " next to '" + c + "'";
    throw LoadError(weights.describe() + ": not a " + what + " checkpoint (no '" + anchor + "'" + next +
                    " under any prefix)");
  }
  if (prefixes.size() > 1)
    throw LoadError(weights.describe() + ": holds more than one " + what + " (under '" + prefixes[0] + "' and '" +
                    prefixes[1] + "')");
  return prefixes[0];
}

}  // namespace strata::io
