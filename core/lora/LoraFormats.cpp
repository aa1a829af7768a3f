#include "lora/LoraFormats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <unordered_map>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "io/JsonFile.h"
#include "common/Text.h"
#include "io/Safetensors.h"

namespace strata::lora {

namespace {

enum class Role { Down, Up, Alpha };

struct Suffix {
  const char* text;
  Role role;
};

constexpr Suffix kSuffixes[] = {
    {".lora_A.weight", Role::Down}, {".lora_B.weight", Role::Up}, {".lora_down.weight", Role::Down},
    {".lora_up.weight", Role::Up},  {".alpha", Role::Alpha},
};

constexpr const char* kPeftMetadataKey = "lora_adapter_metadata";

std::string numberText(double v) {
  std::ostringstream os;
  os << std::setprecision(12) << v;
  return os.str();
}

// The tensors of one LoRA module in a file, before its name is resolved.
struct RawGroup {
  std::string name;  // the key without its suffix
  at::Tensor down, up;
  std::string downKey, upKey, alphaKey;
  std::optional<double> alpha;
};

// The model's Linears by path, with their index in the model's order.
struct KnownLinear {
  int64_t in = 0;
  int64_t out = 0;
  size_t order = 0;
};

std::unordered_map<std::string, KnownLinear> knownLinears(const nn::LoraNameRules& rules) {
  std::unordered_map<std::string, KnownLinear> out;
  size_t i = 0;
  for (const auto& l : rules.linears()) out[l.path] = {l.inFeatures, l.outFeatures, i++};
  return out;
}

bool hasFormat(const nn::LoraNameRules& rules, LoraFileFormat format) {
  const auto formats = rules.formats();
  return std::find(formats.begin(), formats.end(), format) != formats.end();
}

std::string formatList(const nn::LoraNameRules& rules) {
  std::string out;
  for (const auto f : rules.formats()) out += (out.empty() ? "" : ", ") + std::string(toString(f));
  return out;
}

// BFL-style (shift, scale) <-> (scale, shift): the two halves of the rows swapped.
at::Tensor swappedHalves(const at::Tensor& up) {
  const int64_t half = up.size(0) / 2;
  return at::cat({up.narrow(0, half, up.size(0) - half), up.narrow(0, 0, half)});
}

// Alpha from peft's LoraConfig in the header (diffusers writes its keys with a
// "transformer." prefix; older files without).
struct PeftAlpha {
  std::optional<double> alpha;
  std::vector<std::pair<std::string, double>> pattern;
  bool rslora = false;

  std::optional<double> forModule(const std::string& path, int64_t rank) const {
    std::optional<double> a = alpha;
    for (const auto& [p, v] : pattern)
      if (LoraTargets::patternMatches(p, path)) a = v;
    if (a && rslora) return *a * std::sqrt(static_cast<double>(rank));  // alpha/sqrt(r) as alpha'/r
    return a;
  }
};

PeftAlpha parsePeftAlpha(const std::map<std::string, std::string>& metadata, const std::string& keyPrefix,
                         const std::string& sourceName) {
  PeftAlpha out;
  const auto it = metadata.find(kPeftMetadataKey);
  if (it == metadata.end()) return out;
  nlohmann::json j;
  try {
    j = io::parseJsonText(it->second, sourceName + ": metadata '" + kPeftMetadataKey + "'");
  } catch (const IoError& e) {
    throw LoadError(e.what());
  } catch (const std::exception& e) {
    throw LoadError(sourceName + ": metadata '" + kPeftMetadataKey + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw LoadError(sourceName + ": metadata '" + kPeftMetadataKey + "' is not a JSON object");
  auto field = [&](const std::string& name) -> const nlohmann::json* {
    for (const std::string& key : {keyPrefix + name, name}) {
      const auto f = j.find(key);
      if (f != j.end() && !f->is_null()) return &*f;
    }
    return nullptr;
  };
  try {
    if (const auto* a = field("lora_alpha")) out.alpha = a->get<double>();
    if (const auto* p = field("alpha_pattern"))
      for (const auto& [k, v] : p->items()) out.pattern.emplace_back(k, v.get<double>());
    if (const auto* r = field("use_rslora")) out.rslora = r->get<bool>();
  } catch (const std::exception& e) {
    throw LoadError(sourceName + ": metadata '" + kPeftMetadataKey + "': " + e.what());
  }
  return out;
}

// Splits a fused LoRA onto the model's modules (exactly; see the header).
void splitFused(const RawGroup& g, double alpha, const std::vector<std::pair<std::string, nn::LoraSlot>>& parts,
                std::vector<LoraModuleWeights>& out) {
  const int64_t rank = g.down.size(0);
  std::vector<at::Tensor> used;  // per part: bool [R], columns of up its rows use
  for (const auto& [path, slot] : parts) used.push_back(g.up.narrow(0, slot.rowOffset, slot.rows).ne(0).any(0));
  const at::Tensor useCount = at::stack(used).to(at::kLong).sum(0);  // [R]
  const bool disjoint = useCount.le(1).all().item<bool>() && useCount.gt(0).any().item<bool>();
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& [path, slot] = parts[i];
    const at::Tensor rows = g.up.narrow(0, slot.rowOffset, slot.rows);  // [rows_i, R]
    if (!disjoint) {
      out.push_back({path, g.down.clone(), rows.clone(), alpha});
      continue;
    }
    const at::Tensor cols = used[i].nonzero().flatten();  // [r_i]
    if (cols.numel() == 0) continue;
    const int64_t partRank = cols.numel();
    out.push_back({path, g.down.index_select(0, cols), rows.index_select(1, cols),
                   alpha * static_cast<double>(partRank) / static_cast<double>(rank)});
  }
}

// One stem's LoRA onto the model's modules it holds.
void convertGroup(const RawGroup& g, const nn::LoraStemMatch& match, double alpha,
                  const std::unordered_map<std::string, KnownLinear>& linears, const std::string& family,
                  const std::string& sourceName, std::vector<LoraModuleWeights>& out) {
  const auto& parts = match.modules;
  for (const auto& [path, slot] : parts) {
    const auto known = linears.find(path);
    if (known == linears.end())
      throw LoadError(sourceName + ": key '" + g.upKey + "' names module '" + g.name + "', which this " + family +
                      " model does not have");
    if (g.down.size(1) != known->second.in || (!slot.fused() && g.up.size(0) != known->second.out)) {
      throw LoadError(sourceName + ": keys '" + g.downKey + "' " + shapeText(g.down.sizes()) + " and '" + g.upKey +
                      "' " + shapeText(g.up.sizes()) + " do not fit Linear '" + path + "' [" +
                      std::to_string(known->second.out) + ", " + std::to_string(known->second.in) + "]");
    }
  }
  const int64_t totalRows = parts.front().second.totalRows;
  if (g.up.size(0) != totalRows) {
    throw LoadError(sourceName + ": key '" + g.upKey + "' has shape " + shapeText(g.up.sizes()) + ", expected " +
                    std::to_string(totalRows) + " rows for '" + g.name + "'");
  }
  if (parts.size() == 1 && !parts.front().second.fused()) {
    const at::Tensor up = parts.front().second.swapHalves ? swappedHalves(g.up) : g.up;
    out.push_back({parts.front().first, g.down, up, alpha});
    return;
  }
  splitFused(g, alpha, parts, out);
}

}  // namespace

LoraFileContent convertLoraTensors(const std::map<std::string, at::Tensor>& tensors,
                                   const std::map<std::string, std::string>& metadata, const nn::LoraNameRules& rules,
                                   const LoraLoadOptions& options, const std::string& sourceName) {
  // Group the keys by module name.
  std::map<std::string, RawGroup> groups;
  for (const auto& [key, tensor] : tensors) {
    const Suffix* suffix = nullptr;
    for (const auto& s : kSuffixes) {
      if (endsWith(key, s.text)) {
        suffix = &s;
        break;
      }
    }
    if (!suffix)
      throw LoadError(sourceName + ": key '" + key +
                      "' is not a LoRA tensor (expected .lora_A/.lora_B/.lora_down/.lora_up.weight or .alpha)");
    const std::string name = key.substr(0, key.size() - std::string(suffix->text).size());
    RawGroup& g = groups[name];
    g.name = name;
    const at::Tensor value = tensor.to(at::kFloat);
    switch (suffix->role) {
      case Role::Down:
        if (g.down.defined()) throw LoadError(sourceName + ": key '" + key + "' duplicates '" + g.downKey + "'");
        g.down = value;
        g.downKey = key;
        break;
      case Role::Up:
        if (g.up.defined()) throw LoadError(sourceName + ": key '" + key + "' duplicates '" + g.upKey + "'");
        g.up = value;
        g.upKey = key;
        break;
      case Role::Alpha:
        if (value.numel() != 1) throw LoadError(sourceName + ": key '" + key + "' must hold one value");
        g.alpha = value.item<double>();
        g.alphaKey = key;
        break;
    }
  }

  const auto linears = knownLinears(rules);
  const std::string family = rules.familyName();
  const PeftAlpha peftAlpha = parsePeftAlpha(metadata, rules.peftMetadataPrefix(), sourceName);
  LoraFileContent content;
  content.metadata = metadata;
  bool first = true;
  for (const auto& [name, g] : groups) {
    if (!g.down.defined() || !g.up.defined()) {
      const std::string& have = g.down.defined() ? g.downKey : !g.upKey.empty() ? g.upKey : g.alphaKey;
      throw LoadError(sourceName + ": key '" + have + "' has no matching " +
                      (g.down.defined() ? "up (lora_B / lora_up)" : "down (lora_A / lora_down)") + " weight");
    }
    if (g.down.dim() != 2 || g.up.dim() != 2 || g.up.size(1) != g.down.size(0)) {
      throw LoadError(sourceName + ": keys '" + g.downKey + "' " + shapeText(g.down.sizes()) + " and '" + g.upKey +
                      "' " + shapeText(g.up.sizes()) + " are not a LoRA pair ([r, in] and [out, r])");
    }
    const int64_t rank = g.down.size(0);

    const auto match = rules.matchStem(name);
    if (!match)
      throw LoadError(sourceName + ": key '" + g.upKey + "' is in none of the " + family + " LoRA forms (" +
                      formatList(rules) + ")");
    if (!hasFormat(rules, match->format))
      throw LoadError(sourceName + ": key '" + g.upKey + "' is in the " + toString(match->format) + " form, which " +
                      family + " LoRAs do not have (" + formatList(rules) + ")");
    if (match->modules.empty())
      throw LoadError(sourceName + ": key '" + g.upKey + "' names no Linear module of the " + family + " model");
    if (first) {
      content.format = match->format;
      first = false;
    }
    double alpha = static_cast<double>(rank);
    if (options.alpha)
      alpha = *options.alpha;
    else if (g.alpha)
      alpha = *g.alpha;
    else if (match->format == LoraFileFormat::Diffusers && match->modules.size() == 1)
      if (const auto a = peftAlpha.forModule(match->modules.front().first, rank)) alpha = *a;
    convertGroup(g, *match, alpha, linears, family, sourceName, content.modules);
  }

  // Model order, so networks built from files are deterministic.
  std::stable_sort(content.modules.begin(), content.modules.end(), [&](const auto& a, const auto& b) {
    return linears.at(a.modulePath).order < linears.at(b.modulePath).order;
  });
  for (size_t i = 1; i < content.modules.size(); ++i) {
    if (content.modules[i].modulePath == content.modules[i - 1].modulePath)
      throw LoadError(sourceName + ": two LoRAs for module '" + content.modules[i].modulePath +
                      "' (e.g. a fused and a per-projection one)");
  }
  return content;
}

LoraFileContent readLoraFile(const std::filesystem::path& path, const nn::LoraNameRules& rules,
                             const LoraLoadOptions& options) {
  const auto file = io::SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& name : file.names()) tensors.emplace(name, file.tensor(name));
  return convertLoraTensors(tensors, file.metadata(), rules, options, "LoRA file " + path.string());
}

std::shared_ptr<LoraNetwork> loadLoraNetwork(torch::nn::Module& model, const nn::LoraNameRules& rules,
                                             const std::filesystem::path& path, const LoraLoadOptions& options) {
  const auto content = readLoraFile(path, rules, options);
  if (content.modules.empty()) throw LoadError("LoRA file " + path.string() + ": holds no LoRA tensor");
  return LoraNetwork::fromWeights(model, content.modules, options.dropout);
}

// ---- export -------------------------------------------------------------------

namespace {

struct FusedLora {
  at::Tensor down;  // [R, in]
  at::Tensor up;    // [out, R] in the file's row order
  double alpha = 0.0;
};

// The LoRAs of the model modules that share one stem, as one LoRA.
FusedLora fuseForStem(const std::vector<std::pair<const LoraModuleWeights*, nn::LoraSlot>>& parts) {
  const auto& firstSlot = parts.front().second;
  if (!firstSlot.fused()) {
    const auto& w = *parts.front().first;
    return {w.down, firstSlot.swapHalves ? swappedHalves(w.up) : w.up, w.alpha};
  }
  const int64_t totalRows = firstSlot.totalRows;
  // One shared down (a fused LoRA split on load and not trained apart): stack the up rows.
  bool sharedDown = true;
  for (const auto& [w, slot] : parts) {
    const auto& w0 = *parts.front().first;
    if (w->down.sizes() != w0.down.sizes() || w->alpha != w0.alpha || !at::equal(w->down, w0.down)) {
      sharedDown = false;
      break;
    }
  }
  if (sharedDown) {
    const auto& w0 = *parts.front().first;
    at::Tensor up = at::zeros({totalRows, w0.down.size(0)}, w0.up.options());
    for (const auto& [w, slot] : parts) up.narrow(0, slot.rowOffset, slot.rows).copy_(w->up);
    return {w0.down, up, w0.alpha};
  }
  // Stacked downs, block-diagonal up: rank = sum of ranks.
  int64_t sumRank = 0;
  bool sameScale = true;
  const double scale0 = parts.front().first->alpha / static_cast<double>(parts.front().first->down.size(0));
  for (const auto& [w, slot] : parts) {
    sumRank += w->down.size(0);
    if (w->alpha / static_cast<double>(w->down.size(0)) != scale0) sameScale = false;
  }
  const double scale = sameScale ? scale0 : 1.0;
  std::vector<at::Tensor> downs;
  at::Tensor up = at::zeros({totalRows, sumRank}, parts.front().first->up.options());
  int64_t col = 0;
  for (const auto& [w, slot] : parts) {
    const int64_t r = w->down.size(0);
    const double partScale = w->alpha / static_cast<double>(r);
    downs.push_back(w->down);
    at::Tensor block = sameScale ? w->up : w->up * (partScale / scale);
    up.narrow(0, slot.rowOffset, slot.rows).narrow(1, col, r).copy_(block);
    col += r;
  }
  return {at::cat(downs, 0), up, scale * static_cast<double>(sumRank)};
}

int64_t mostCommonRank(const std::vector<LoraModuleWeights>& modules, double* alphaOut) {
  std::map<int64_t, int> counts;
  for (const auto& m : modules) ++counts[m.down.size(0)];
  int64_t best = 0;
  int bestCount = -1;
  for (const auto& [r, n] : counts)
    if (n > bestCount) best = r, bestCount = n;
  if (alphaOut) {
    *alphaOut = static_cast<double>(best);
    for (const auto& m : modules)
      if (m.down.size(0) == best) {
        *alphaOut = m.alpha;
        break;
      }
  }
  return best;
}

std::string todayUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> loraTensorsForExport(const std::vector<LoraModuleWeights>& modules,
                                                                     LoraFileFormat format,
                                                                     const nn::LoraNameRules& rules,
                                                                     at::ScalarType dtype) {
  const std::string what = std::string("LoRA export (") + toString(format) + ")";
  if (!hasFormat(rules, format))
    throw Error(what + ": " + rules.familyName() + " LoRAs have no " + toString(format) +
                " form (they have: " + formatList(rules) + ")");
  // Group by stem, in the order of first appearance.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<const LoraModuleWeights*, nn::LoraSlot>>> groups;
  for (const auto& m : modules) {
    const auto slot = rules.slotOf(m.modulePath, format);
    if (!slot)
      throw Error(what + ": module '" + m.modulePath + "' has no " + toString(format) + " name in the " +
                  rules.familyName() + " naming");
    if (m.up.size(0) != slot->rows)
      throw Error(what + ": module '" + m.modulePath + "' has " + std::to_string(m.up.size(0)) +
                  " output rows, its slot in '" + slot->stem + "' expects " + std::to_string(slot->rows));
    auto& group = groups[slot->stem];
    if (group.empty()) order.push_back(slot->stem);
    group.emplace_back(&m, *slot);
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto cast = [&](const at::Tensor& t) { return t.detach().to(at::kCPU, at::kFloat).to(dtype).contiguous(); };
  for (const auto& stem : order) {
    auto parts = groups.at(stem);
    std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.second.part < b.second.part; });
    const FusedLora f = fuseForStem(parts);
    const bool kohya = format == LoraFileFormat::Kohya;
    if (rules.foldsAlphaInto(format)) {
      const double scale = f.alpha / static_cast<double>(f.down.size(0));
      out.emplace_back(stem + (kohya ? ".lora_down.weight" : ".lora_A.weight"), cast(f.down));
      out.emplace_back(stem + (kohya ? ".lora_up.weight" : ".lora_B.weight"),
                       cast(f.up.to(at::kFloat) * scale));  // alpha/r folded in
      continue;
    }
    out.emplace_back(stem + (kohya ? ".lora_down.weight" : ".lora_A.weight"), cast(f.down));
    out.emplace_back(stem + (kohya ? ".lora_up.weight" : ".lora_B.weight"), cast(f.up));
    // float32 whatever `dtype`: loaders read it as a number, and bf16 would round 2.1 to 2.09375.
    out.emplace_back(stem + ".alpha", at::scalar_tensor(f.alpha, at::kFloat));
  }
  return out;
}

std::map<std::string, std::string> loraMetadataForExport(const std::vector<LoraModuleWeights>& modules,
                                                         const nn::LoraNameRules& rules, const LoraExportOptions& o) {
  double commonAlpha = 0.0;
  const int64_t commonRank = mostCommonRank(modules, &commonAlpha);
  const int64_t rank = o.rank > 0 ? o.rank : commonRank;
  const double alpha = o.alpha > 0.0 ? o.alpha : commonAlpha;
  std::map<std::string, std::string> meta;
  meta["format"] = "pt";
  meta["software"] =
      nlohmann::json{{"name", "Strata"}, {"version", o.softwareVersion.empty() ? "unknown" : o.softwareVersion}}.dump();
  meta["strata_lora_format"] = toString(o.format);
  meta["ss_network_dim"] = std::to_string(rank);
  meta["ss_network_alpha"] = numberText(alpha);
  meta["ss_steps"] = std::to_string(o.steps);
  if (!o.baseModel.empty()) meta["ss_sd_model_name"] = o.baseModel;
  if (!o.title.empty()) meta["ss_output_name"] = o.title;
  meta["modelspec.sai_model_spec"] = "1.0.0";
  meta["modelspec.title"] = o.title.empty() ? "Strata LoRA" : o.title;
  meta["modelspec.date"] = todayUtc();
  if (!o.runYaml.empty()) meta["strata_run_config"] = o.runYaml;
  if (o.format == LoraFileFormat::Diffusers) {
    // peft LoraConfig; alpha/r is folded into lora_B, so every alpha equals its rank.
    const std::string p = rules.peftMetadataPrefix();
    nlohmann::json j;
    nlohmann::json targets = nlohmann::json::array();
    nlohmann::json rankPattern = nlohmann::json::object();
    nlohmann::json alphaPattern = nlohmann::json::object();
    for (const auto& m : modules) {
      targets.push_back(m.modulePath);
      if (m.down.size(0) != commonRank) {
        rankPattern[m.modulePath] = m.down.size(0);
        alphaPattern[m.modulePath] = m.down.size(0);
      }
    }
    j[p + "r"] = commonRank;
    j[p + "lora_alpha"] = commonRank;
    j[p + "target_modules"] = targets;
    j[p + "rank_pattern"] = rankPattern;
    j[p + "alpha_pattern"] = alphaPattern;
    meta[kPeftMetadataKey] = j.dump();
  }
  for (const auto& [k, v] : rules.exportMetadata()) meta[k] = v;
  for (const auto& [k, v] : o.extraMetadata) meta[k] = v;
  return meta;
}

void writeLoraFile(const std::filesystem::path& path, const std::vector<LoraModuleWeights>& modules,
                   const nn::LoraNameRules& rules, const LoraExportOptions& options) {
  if (modules.empty()) throw Error("LoRA export to " + path.string() + ": no adapters");
  const auto tensors = loraTensorsForExport(modules, options.format, rules, options.dtype);
  // A LoRA with NaN or Inf (a diverged run, a damaged checkpoint, or values
  // beyond the export dtype) would load and then ruin every image: refused.
  for (const auto& [name, t] : tensors) {
    if (!t.is_floating_point()) continue;
    const int64_t bad = t.numel() - at::isfinite(t).sum().item<int64_t>();
    if (bad == 0) continue;
    const bool nan = at::isnan(t).any().item<bool>();
    throw Error("LoRA export to " + path.string() + " refused: tensor " + name + " holds " + (nan ? "NaN" : "Inf") +
                " (" + std::to_string(bad) + " of " + std::to_string(t.numel()) +
                " values not finite); the run diverged or its checkpoint is damaged");
  }
  io::writeSafetensors(path, tensors, loraMetadataForExport(modules, rules, options));
}

void writeLoraFile(const std::filesystem::path& path, const LoraNetwork& network, const nn::LoraNameRules& rules,
                   const LoraExportOptions& options) {
  writeLoraFile(path, network.moduleWeights(), rules, options);
}

}  // namespace strata::lora
