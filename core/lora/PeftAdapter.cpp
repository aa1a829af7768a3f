#include "lora/PeftAdapter.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "common/Error.h"
#include "io/JsonFile.h"
#include "common/ShapeText.h"
#include "common/Text.h"
#include "io/AtomicFile.h"
#include "io/Safetensors.h"

namespace fs = std::filesystem;

namespace strata::lora {

namespace {

constexpr const char* kPrefix = "base_model.model.";
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

// peft's get_pattern_key: the first key (in file order) with re.match(r"(.*\.)?(key)$", path).
const nlohmann::ordered_json* patternFor(const nlohmann::ordered_json& patterns, const std::string& path,
                                         const std::string& source, const std::string& field) {
  if (!patterns.is_object()) return nullptr;
  for (auto it = patterns.begin(); it != patterns.end(); ++it) {
    std::regex re;
    try {
      re = std::regex("(.*\\.)?(" + it.key() + ")$");
    } catch (const std::regex_error& e) {
      throw ConfigError(source + ": key '" + field + "': '" + it.key() + "' is not a valid pattern: " + e.what());
    }
    if (std::regex_match(path, re)) return &it.value();
  }
  return nullptr;
}

std::string regexEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// 16.0 -> 16 (peft writes integers), 0.5 stays.
nlohmann::ordered_json numberJson(double v) {
  if (std::floor(v) == v && std::abs(v) < 1e15) return static_cast<int64_t>(v);
  return v;
}

std::string lastName(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

std::vector<LoraModuleWeights> readPeftAdapter(const fs::path& folder) {
  const fs::path configPath = folder / kConfigFile;
  const fs::path weightsPath = folder / kWeightsFile;
  const std::string cfgName = configPath.string();
  if (!fs::is_regular_file(configPath)) throw IoError(cfgName + ": no such file (a peft adapter folder holds it)");
  if (!fs::is_regular_file(weightsPath)) {
    const bool pickle = fs::is_regular_file(folder / "adapter_model.bin");
    throw IoError(weightsPath.string() + ": no such file" +
                  std::string(pickle ? " (adapter_model.bin is a pickle file, which Strata does not read)" : ""));
  }
  const nlohmann::ordered_json cfg = io::readOrderedJsonFile(configPath);
  if (!cfg.is_object()) throw ConfigError(cfgName + ": not a JSON object");
  auto fail = [&](const std::string& key, const std::string& what) -> void {
    throw ConfigError(cfgName + ": key '" + key + "': " + what);
  };
  auto has = [&](const char* key) { return cfg.contains(key) && !cfg[key].is_null(); };
  auto flag = [&](const char* key) {
    if (!has(key)) return false;
    if (!cfg[key].is_boolean()) fail(key, "expected true or false, got " + cfg[key].dump());
    return cfg[key].get<bool>();
  };
  auto number = [&](const char* key) {
    if (!has(key)) fail(key, "missing (required)");
    if (!cfg[key].is_number()) fail(key, "expected a number, got " + cfg[key].dump());
    return cfg[key].get<double>();
  };
  const std::string type = has("peft_type") && cfg["peft_type"].is_string() ? cfg["peft_type"].get<std::string>() : "";
  if (type != "LORA") fail("peft_type", "'" + type + "': Strata reads LoRA adapters (LORA) only");
  if (flag("use_dora")) fail("use_dora", "DoRA adapters are not supported");
  if (flag("fan_in_fan_out")) fail("fan_in_fan_out", "transposed (Conv1D) weights are not supported");
  if (flag("lora_bias")) fail("lora_bias", "adapters with a bias are not supported");
  if (has("bias") && cfg["bias"] != "none") fail("bias", cfg["bias"].dump() + ": only \"none\" is supported");
  if (has("modules_to_save") && !(cfg["modules_to_save"].is_array() && cfg["modules_to_save"].empty()))
    fail("modules_to_save", "fully trained extra modules are not supported");
  const double r = number("r");
  const double loraAlpha = number("lora_alpha");
  if (r <= 0) fail("r", "must be positive");
  // A rank is compared with the weights' shapes and printed as an integer: bounded (NaN, 1e300 too).
  constexpr double kMaxRank = 65536;
  if (!(r <= kMaxRank)) fail("r", cfg["r"].dump() + " is more than " + std::to_string(int(kMaxRank)));
  if (!std::isfinite(loraAlpha)) fail("lora_alpha", "must be finite");
  const bool rslora = flag("use_rslora");
  const nlohmann::ordered_json rankPattern =
      has("rank_pattern") ? cfg["rank_pattern"] : nlohmann::ordered_json::object();
  const nlohmann::ordered_json alphaPattern =
      has("alpha_pattern") ? cfg["alpha_pattern"] : nlohmann::ordered_json::object();

  const io::SafetensorsFile file = io::SafetensorsFile::open(weightsPath);
  const std::string fileName = weightsPath.string();
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> byModule;  // path -> (A, B)
  std::vector<std::string> order;
  for (const auto& key : file.names()) {
    std::string rest = key;
    if (rest.compare(0, std::string(kPrefix).size(), kPrefix) == 0) rest = rest.substr(std::string(kPrefix).size());
    bool isA = endsWith(rest, ".lora_A.weight");
    bool isB = endsWith(rest, ".lora_B.weight");
    if (!isA && !isB)
      throw LoadError(fileName + ": tensor '" + key +
                      "' is not a LoRA weight (expected <module>.lora_A.weight / "
                      ".lora_B.weight)");
    const std::string path = rest.substr(0, rest.size() - std::string(".lora_A.weight").size());
    if (!byModule.count(path)) order.push_back(path);
    auto& slot = byModule[path];
    at::Tensor t = file.tensorCopy(key);
    if (t.dim() != 2) throw LoadError(fileName + ": tensor '" + key + "' must be 2-d, got " + shapeText(t.sizes()));
    (isA ? slot.first : slot.second) = t;
  }
  if (order.empty()) throw LoadError(fileName + ": no LoRA tensors");

  std::vector<LoraModuleWeights> out;
  for (const auto& path : order) {
    const auto& [down, up] = byModule[path];
    if (!down.defined()) throw LoadError(fileName + ": '" + kPrefix + path + ".lora_B.weight' has no lora_A partner");
    if (!up.defined()) throw LoadError(fileName + ": '" + kPrefix + path + ".lora_A.weight' has no lora_B partner");
    const int64_t rank = down.size(0);
    if (up.size(1) != rank)
      throw LoadError(fileName + ": '" + kPrefix + path + "': lora_A " + shapeText(down.sizes()) + " and lora_B " +
                      shapeText(up.sizes()) + " disagree on the rank");
    double expectedRank = r, alpha = loraAlpha;
    if (const auto* p = patternFor(rankPattern, path, cfgName, "rank_pattern")) {
      if (!p->is_number()) fail("rank_pattern", "entry for '" + path + "' is not a number");
      expectedRank = p->get<double>();
      if (!(expectedRank > 0 && expectedRank <= kMaxRank))
        fail("rank_pattern",
             "entry for '" + path + "' is " + p->dump() + ", not a rank from 1 to " + std::to_string(int(kMaxRank)));
    }
    if (const auto* p = patternFor(alphaPattern, path, cfgName, "alpha_pattern")) {
      if (!p->is_number()) fail("alpha_pattern", "entry for '" + path + "' is not a number");
      alpha = p->get<double>();
    }
    if (static_cast<double>(rank) != expectedRank)
      throw LoadError(fileName + ": '" + kPrefix + path + "' has rank " + std::to_string(rank) + ", " + cfgName +
                      " says " + std::to_string(static_cast<int64_t>(expectedRank)));
    // Strata scales by alpha / rank; rslora's alpha / sqrt(rank) is that with alpha * sqrt(rank).
    const double scale = rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
    out.push_back({path, down, up, scale * static_cast<double>(rank)});
  }
  return out;
}

void writePeftAdapter(const fs::path& folder, const std::vector<LoraModuleWeights>& modules,
                      const PeftWriteOptions& options) {
  if (modules.empty()) throw Error("writePeftAdapter: no adapters to write to " + folder.string());
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw IoError(folder.string() + ": cannot create the folder: " + ec.message());

  // The most common (rank, alpha) is the config's r / lora_alpha.
  std::map<std::pair<int64_t, double>, int> counts;
  for (const auto& m : modules) ++counts[{m.down.size(0), m.alpha}];
  const auto common = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                        return a.second < b.second;
                      })->first;

  std::vector<std::pair<std::string, at::Tensor>> tensors;
  nlohmann::ordered_json rankPattern = nlohmann::ordered_json::object();
  nlohmann::ordered_json alphaPattern = nlohmann::ordered_json::object();
  std::set<std::string> names, paths;
  for (const auto& m : modules) {
    if (!paths.insert(m.modulePath).second) throw Error("writePeftAdapter: two adapters for " + m.modulePath);
    tensors.emplace_back(kPrefix + m.modulePath + ".lora_A.weight", m.down.detach().to(at::kCPU, options.dtype));
    tensors.emplace_back(kPrefix + m.modulePath + ".lora_B.weight", m.up.detach().to(at::kCPU, options.dtype));
    names.insert(lastName(m.modulePath));
    // Exact-path keys: peft's pattern rule matches them to this module only.
    if (m.down.size(0) != common.first) rankPattern[regexEscape(m.modulePath)] = m.down.size(0);
    if (m.alpha != common.second) alphaPattern[regexEscape(m.modulePath)] = numberJson(m.alpha);
  }
  nlohmann::ordered_json targets(std::vector<std::string>(names.begin(), names.end()));
  for (const auto& p : options.modelLinearPaths) {
    if (names.count(lastName(p)) && !paths.count(p)) {
      std::string re;
      for (const auto& q : paths) re += (re.empty() ? "" : "|") + regexEscape(q);
      targets = "^(" + re + ")$";  // peft full-matches a string target
      break;
    }
  }

  nlohmann::ordered_json cfg;
  cfg["peft_type"] = "LORA";
  cfg["task_type"] = options.taskType;
  cfg["base_model_name_or_path"] = options.baseModelNameOrPath.empty()
                                       ? nlohmann::ordered_json(nullptr)
                                       : nlohmann::ordered_json(options.baseModelNameOrPath);
  cfg["r"] = common.first;
  cfg["lora_alpha"] = numberJson(common.second);
  cfg["lora_dropout"] = options.dropout;
  cfg["target_modules"] = targets;
  cfg["rank_pattern"] = rankPattern;
  cfg["alpha_pattern"] = alphaPattern;
  cfg["use_rslora"] = false;
  cfg["use_dora"] = false;
  cfg["bias"] = "none";
  cfg["fan_in_fan_out"] = false;
  cfg["init_lora_weights"] = true;
  cfg["inference_mode"] = true;
  cfg["modules_to_save"] = nullptr;
  cfg["layers_to_transform"] = nullptr;
  cfg["layers_pattern"] = nullptr;
  cfg["revision"] = nullptr;
  io::writeSafetensors(folder / kWeightsFile, tensors, {{"format", "pt"}});
  io::writeFileAtomic(folder / kConfigFile, cfg.dump(2) + "\n");
}

std::shared_ptr<LoraNetwork> loadPeftAdapter(torch::nn::Module& model, const fs::path& folder, double dropout) {
  const auto weights = readPeftAdapter(folder);
  try {
    return LoraNetwork::fromWeights(model, weights, dropout);
  } catch (const LoadError& e) {
    throw LoadError(folder.string() + ": " + e.what());
  }
}

}  // namespace strata::lora
