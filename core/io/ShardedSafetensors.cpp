#include "io/ShardedSafetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "common/Error.h"

namespace fs = std::filesystem;

namespace strata::io {

namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void ShardedSafetensors::addFile(const fs::path& file, const std::map<std::string, std::string>* indexMap) {
  auto st = std::make_shared<SafetensorsFile>(SafetensorsFile::open(file));
  const std::string fileName = file.filename().string();
  const size_t slot = files_.size();
  for (const auto& name : st->names()) {
    if (indexMap) {
      auto it = indexMap->find(name);
      if (it == indexMap->end() || it->second != fileName) continue;  // the index decides
    }
    auto [it, inserted] = entries_.emplace(name, slot);
    if (!inserted)
      throw LoadError(file.string() + ": tensor '" + name + "' is also in " + files_[it->second]->path().string());
  }
  files_.push_back(std::move(st));
}

ShardedSafetensors ShardedSafetensors::openFile(const fs::path& file) {
  if (!fs::is_regular_file(file)) throw IoError(file.string() + ": no such file");
  ShardedSafetensors s;
  s.source_ = file;
  s.addFile(file, nullptr);
  return s;
}

ShardedSafetensors ShardedSafetensors::openIndex(const fs::path& index) {
  nlohmann::json j;
  {
    std::ifstream in(index);
    if (!in) throw IoError(index.string() + ": cannot open");
    try {
      j = nlohmann::json::parse(in);
    } catch (const std::exception& ex) {
      throw IoError(index.string() + ": not valid JSON: " + ex.what());
    }
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw IoError(index.string() + ": no 'weight_map' object");
  std::map<std::string, std::string> indexMap;
  std::set<std::string> shardNames;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw IoError(index.string() + ": weight_map['" + tensor + "'] is not a file name");
    const std::string name = file.get<std::string>();
    if (name.empty() || fs::path(name).filename().string() != name)
      throw IoError(index.string() + ": weight_map['" + tensor + "'] = '" + name + "' is not a file of this folder");
    indexMap[tensor] = name;
    shardNames.insert(name);
  }
  if (shardNames.empty()) throw LoadError(index.string() + ": weight_map is empty");
  ShardedSafetensors s;
  s.source_ = index;
  const fs::path dir = index.parent_path();
  for (const auto& shard : shardNames) {
    if (!fs::is_regular_file(dir / shard))
      throw IoError(index.string() + ": shard " + shard + " (named in weight_map) is not in " + dir.string());
    s.addFile(dir / shard, &indexMap);
  }
  for (const auto& [tensor, file] : indexMap)
    if (!s.entries_.count(tensor))
      throw LoadError(index.string() + ": the index names '" + tensor + "' in " + file + ", which does not hold it");
  return s;
}

ShardedSafetensors ShardedSafetensors::openFolder(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw IoError(dir.string() + ": no such folder");
  std::vector<fs::path> indexes, files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (endsWith(name, ".safetensors.index.json")) indexes.push_back(e.path());
    else if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  if (indexes.size() == 1) return openIndex(indexes.front());
  if (indexes.size() > 1) {
    std::sort(indexes.begin(), indexes.end());
    std::string list;
    for (const auto& i : indexes) list += " " + i.filename().string();
    throw LoadError(dir.string() + ": more than one safetensors index, which one is meant is unclear:" + list);
  }
  if (files.empty()) throw LoadError(dir.string() + ": no .safetensors file in this folder");
  std::sort(files.begin(), files.end());
  ShardedSafetensors s;
  s.source_ = dir;
  for (const auto& f : files) s.addFile(f, nullptr);
  return s;
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, _] : entries_) out.push_back(name);
  return out;
}

const TensorInfo& ShardedSafetensors::info(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw LoadError(source_.string() + ": no tensor '" + name + "'");
  return files_[it->second]->info(name);
}

at::Tensor ShardedSafetensors::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw LoadError(source_.string() + ": no tensor '" + name + "'");
  return files_[it->second]->tensor(name);
}

const fs::path& ShardedSafetensors::fileOf(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw LoadError(source_.string() + ": no tensor '" + name + "'");
  return files_[it->second]->path();
}

std::vector<fs::path> ShardedSafetensors::files() const {
  std::vector<fs::path> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

}  // namespace strata::io
