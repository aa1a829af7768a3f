#include "io/DiffusersFolder.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "common/Error.h"
#include "io/JsonFile.h"

namespace fs = std::filesystem;

namespace strata::io {

bool isDiffusersPipelineFolder(const fs::path& dir) {
  return fs::is_directory(dir) && fs::is_regular_file(dir / "model_index.json");
}

fs::path diffusersComponentFolder(const fs::path& root, const std::vector<std::string>& classNames) {
  const fs::path indexPath = root / "model_index.json";
  const nlohmann::json j = readJsonFile(indexPath);
  if (!j.is_object()) throw IoError(indexPath.string() + ": not a JSON object");
  std::vector<std::string> found;
  for (const auto& [name, value] : j.items()) {
    if (!value.is_array() || value.size() != 2 || !value[1].is_string()) continue;  // _class_name, nulls, ...
    const std::string cls = value[1].get<std::string>();
    if (std::find(classNames.begin(), classNames.end(), cls) != classNames.end()) found.push_back(name);
  }
  std::string wanted;
  for (const auto& c : classNames) wanted += (wanted.empty() ? "" : " or ") + c;
  if (found.empty()) throw IoError(indexPath.string() + ": no component of class " + wanted);
  if (found.size() > 1)
    throw IoError(indexPath.string() + ": more than one component of class " + wanted + " (" + found[0] + ", " +
                  found[1] + ")");
  // A component is a folder beside model_index.json: one plain name, never a path
  // ("../x") nor one the OS refuses (an over-long name made is_directory throw).
  const std::string& name = found[0];
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos || name.size() > 255)
    throw IoError(indexPath.string() + ": the component name \"" + name.substr(0, 80) +
                  (name.size() > 80 ? "...\"" : "\"") + " is not a folder name");
  const fs::path folder = root / name;
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    throw IoError(indexPath.string() + ": names the component " + found[0] + ", but " + folder.string() +
                  " is not a folder");
  return folder;
}

DiffusersPipelineInfo diffusersPipelineInfo(const fs::path& root) {
  const fs::path indexPath = root / "model_index.json";
  const nlohmann::json j = readJsonFile(indexPath);
  if (!j.is_object()) throw IoError(indexPath.string() + ": not a JSON object");
  DiffusersPipelineInfo info;
  if (j.contains("_class_name")) {
    if (!j["_class_name"].is_string()) throw IoError(indexPath.string() + ": _class_name is not a string");
    info.className = j["_class_name"].get<std::string>();
  }
  if (j.contains("is_distilled") && !j["is_distilled"].is_null()) {
    if (!j["is_distilled"].is_boolean()) throw IoError(indexPath.string() + ": is_distilled is not true or false");
    info.distilled = j["is_distilled"].get<bool>();
  }
  return info;
}

}  // namespace strata::io
