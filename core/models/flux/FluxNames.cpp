#include "models/flux/FluxNames.h"

#include <algorithm>
#include <cctype>

#include "models/flux/FluxLayout.h"

namespace strata::flux::names {

namespace {

// One name rule: a diffusers module suffix and its BFL suffix, inside a block
// ("transformer_blocks.N." <-> "double_blocks.N.") or at the top level. Rules
// that share a BFL module are its fused parts, in row order by `part`; the rows
// themselves come from the layout (FluxLayout.h).
struct Rule {
  const char* diffusers;
  const char* bfl;
  int part = 0;
  bool rmsNorm = false;     // parameter "weight" is BFL's "scale"
  bool swapHalves = false;  // final layer modulation
};

const std::vector<Rule>& doubleRules() {
  static const std::vector<Rule> rules = {
      {"norm1.linear", "img_mod.lin"},
      {"norm1_context.linear", "txt_mod.lin"},
      {"attn.to_q", "img_attn.qkv", 0},
      {"attn.to_k", "img_attn.qkv", 1},
      {"attn.to_v", "img_attn.qkv", 2},
      {"attn.add_q_proj", "txt_attn.qkv", 0},
      {"attn.add_k_proj", "txt_attn.qkv", 1},
      {"attn.add_v_proj", "txt_attn.qkv", 2},
      {"attn.norm_q", "img_attn.norm.query_norm", 0, true},
      {"attn.norm_k", "img_attn.norm.key_norm", 0, true},
      {"attn.norm_added_q", "txt_attn.norm.query_norm", 0, true},
      {"attn.norm_added_k", "txt_attn.norm.key_norm", 0, true},
      {"attn.to_out.0", "img_attn.proj"},
      {"attn.to_add_out", "txt_attn.proj"},
      {"ff.net.0.proj", "img_mlp.0"},
      {"ff.net.2", "img_mlp.2"},
      {"ff_context.net.0.proj", "txt_mlp.0"},
      {"ff_context.net.2", "txt_mlp.2"},
  };
  return rules;
}

const std::vector<Rule>& singleRules() {
  static const std::vector<Rule> rules = {
      {"norm.linear", "modulation.lin"},
      {"attn.to_q", "linear1", 0},
      {"attn.to_k", "linear1", 1},
      {"attn.to_v", "linear1", 2},
      {"proj_mlp", "linear1", 3},
      {"attn.norm_q", "norm.query_norm", 0, true},
      {"attn.norm_k", "norm.key_norm", 0, true},
      {"proj_out", "linear2"},
  };
  return rules;
}

const std::vector<Rule>& topRules() {
  static const std::vector<Rule> rules = {
      {"x_embedder", "img_in"},
      {"context_embedder", "txt_in"},
      {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer"},
      {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer"},
      {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer"},
      {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer"},
      {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer"},
      {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer"},
      {"norm_out.linear", "final_layer.adaLN_modulation.1", 0, false, true},
      {"proj_out", "final_layer.linear"},
  };
  return rules;
}

// A module path split into its block family, index and the rest.
struct Split {
  enum class Where { Top, Double, Single } where = Where::Top;
  std::string index;  // decimal, empty at the top level
  std::string rest;
};

bool isDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::optional<Split> splitPath(const std::string& path, const std::string& doublePrefix,
                               const std::string& singlePrefix) {
  for (const auto& [prefix, where] :
       {std::pair{doublePrefix, Split::Where::Double}, std::pair{singlePrefix, Split::Where::Single}}) {
    if (path.compare(0, prefix.size() + 1, prefix + ".") != 0) continue;
    const auto dot = path.find('.', prefix.size() + 1);
    if (dot == std::string::npos) return std::nullopt;
    std::string index = path.substr(prefix.size() + 1, dot - prefix.size() - 1);
    if (!isDigits(index)) return std::nullopt;
    return Split{where, index, path.substr(dot + 1)};
  }
  return Split{Split::Where::Top, "", path};
}

const std::vector<Rule>& rulesFor(Split::Where where) {
  switch (where) {
    case Split::Where::Double:
      return doubleRules();
    case Split::Where::Single:
      return singleRules();
    default:
      return topRules();
  }
}

// The layout of the unit a rule table is for; the top-level rules cover stem and head.
std::vector<FluxModuleSpec> layoutFor(Split::Where where, const FluxConfig& cfg) {
  switch (where) {
    case Split::Where::Double:
      return fluxUnitLayout(FluxUnit::Double, cfg);
    case Split::Where::Single:
      return fluxUnitLayout(FluxUnit::Single, cfg);
    case Split::Where::Top:
      break;
  }
  auto layout = fluxUnitLayout(FluxUnit::Stem, cfg);
  for (auto& m : fluxUnitLayout(FluxUnit::Head, cfg)) layout.push_back(std::move(m));
  return layout;
}

// The slot of a rule's module: its rows, and those of the other parts of its BFL
// module, from the layout (0 for a module this config leaves out, e.g. schnell's
// guidance embedder).
BflSlot makeSlot(const Rule& r, Split::Where where, const std::string& bflModule, const FluxConfig& cfg) {
  const auto layout = layoutFor(where, cfg);
  BflSlot s;
  s.module = bflModule;
  s.swapHalves = r.swapHalves;
  s.part = r.part;
  s.parts = 0;
  for (const auto& other : rulesFor(where)) {
    if (std::string(other.bfl) != r.bfl) continue;
    const FluxModuleSpec* spec = findModuleSpec(layout, other.diffusers);
    const int64_t rows = spec ? spec->outFeatures : 0;
    ++s.parts;
    if (other.part < r.part) s.rowOffset += rows;
    if (&other == &r) s.rows = rows;
    s.totalRows += rows;
  }
  return s;
}

struct Found {
  const Rule* rule;
  Split::Where where;
  std::string bflModule;
};

std::optional<Found> findFromDiffusers(const std::string& module) {
  auto split = splitPath(module, "transformer_blocks", "single_transformer_blocks");
  if (!split) return std::nullopt;
  for (const auto& r : rulesFor(split->where)) {
    if (split->rest != r.diffusers) continue;
    std::string bfl = r.bfl;
    if (split->where == Split::Where::Double) bfl = "double_blocks." + split->index + "." + bfl;
    if (split->where == Split::Where::Single) bfl = "single_blocks." + split->index + "." + bfl;
    return Found{&r, split->where, bfl};
  }
  return std::nullopt;
}

// Every rule whose BFL module is `bflModule`, with the diffusers module path.
struct FoundParts {
  Split::Where where = Split::Where::Top;
  std::vector<std::pair<const Rule*, std::string>> parts;  // rule, diffusers module path
};
FoundParts findFromBfl(const std::string& bflModule) {
  FoundParts found;
  auto& out = found.parts;
  auto split = splitPath(bflModule, "double_blocks", "single_blocks");
  if (!split) return found;
  found.where = split->where;
  for (const auto& r : rulesFor(split->where)) {
    if (split->rest != r.bfl) continue;
    std::string diff = r.diffusers;
    if (split->where == Split::Where::Double) diff = "transformer_blocks." + split->index + "." + diff;
    if (split->where == Split::Where::Single) diff = "single_transformer_blocks." + split->index + "." + diff;
    out.emplace_back(&r, diff);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first->part < b.first->part; });
  return found;
}

std::pair<std::string, std::string> splitLeaf(const std::string& key) {
  const auto dot = key.rfind('.');
  if (dot == std::string::npos) return {"", key};
  return {key.substr(0, dot), key.substr(dot + 1)};
}

std::string underscored(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

}  // namespace

std::optional<BflSlot> bflSlotForModule(const std::string& diffusersModule, const FluxConfig& cfg) {
  auto f = findFromDiffusers(diffusersModule);
  if (!f) return std::nullopt;
  return makeSlot(*f->rule, f->where, f->bflModule, cfg);
}

std::vector<std::pair<std::string, BflSlot>> diffusersModulesForBfl(const std::string& bflModule,
                                                                    const FluxConfig& cfg) {
  std::vector<std::pair<std::string, BflSlot>> out;
  const auto found = findFromBfl(bflModule);
  for (const auto& [rule, diff] : found.parts) out.emplace_back(diff, makeSlot(*rule, found.where, bflModule, cfg));
  return out;
}

std::optional<BflParam> bflParamForKey(const std::string& diffusersKey, const FluxConfig& cfg) {
  const auto [module, leaf] = splitLeaf(diffusersKey);
  auto f = findFromDiffusers(module);
  if (!f) return std::nullopt;
  std::string bflLeaf;
  if (f->rule->rmsNorm) {
    if (leaf != "weight") return std::nullopt;
    bflLeaf = "scale";
  } else {
    if (leaf != "weight" && leaf != "bias") return std::nullopt;
    bflLeaf = leaf;
  }
  return BflParam{f->bflModule + "." + bflLeaf, makeSlot(*f->rule, f->where, f->bflModule, cfg)};
}

std::vector<std::pair<std::string, BflSlot>> diffusersKeysForBflKey(const std::string& bflKey, const FluxConfig& cfg) {
  std::vector<std::pair<std::string, BflSlot>> out;
  const auto [module, leaf] = splitLeaf(bflKey);
  const auto found = findFromBfl(module);
  for (const auto& [rule, diff] : found.parts) {
    std::string diffLeaf;
    if (rule->rmsNorm) {
      if (leaf != "scale") continue;
      diffLeaf = "weight";
    } else {
      if (leaf != "weight" && leaf != "bias") continue;
      diffLeaf = leaf;
    }
    out.emplace_back(diff + "." + diffLeaf, makeSlot(*rule, found.where, module, cfg));
  }
  return out;
}

bool isBflModule(const std::string& bflModule) { return !findFromBfl(bflModule).parts.empty(); }

std::string kohyaFromBflModule(const std::string& bflModule) { return kKohyaPrefix + underscored(bflModule); }

std::optional<std::string> bflModuleFromKohya(const std::string& kohyaName) {
  const std::string prefix = kKohyaPrefix;
  if (kohyaName.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string rest = kohyaName.substr(prefix.size());
  // "double_blocks_12_img_attn_qkv": family, index, then a known suffix.
  for (const auto& [family, rules] :
       {std::pair<std::string, const std::vector<Rule>*>{"double_blocks", &doubleRules()},
        std::pair<std::string, const std::vector<Rule>*>{"single_blocks", &singleRules()}}) {
    if (rest.compare(0, family.size() + 1, family + "_") != 0) continue;
    const auto sep = rest.find('_', family.size() + 1);
    if (sep == std::string::npos) return std::nullopt;
    const std::string index = rest.substr(family.size() + 1, sep - family.size() - 1);
    if (!isDigits(index)) return std::nullopt;
    const std::string suffix = rest.substr(sep + 1);
    for (const auto& r : *rules)
      if (underscored(r.bfl) == suffix) return family + "." + index + "." + r.bfl;
    return std::nullopt;
  }
  for (const auto& r : topRules())
    if (underscored(r.bfl) == rest) return std::string(r.bfl);
  return std::nullopt;
}

std::string comfyFromBflModule(const std::string& bflModule) { return kComfyPrefix + bflModule; }

std::optional<std::string> bflModuleFromComfy(const std::string& comfyName) {
  for (const std::string& prefix : {std::string("model.") + kComfyPrefix, std::string(kComfyPrefix)}) {
    if (comfyName.compare(0, prefix.size(), prefix) != 0) continue;
    std::string bfl = comfyName.substr(prefix.size());
    if (isBflModule(bfl)) return bfl;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace strata::flux::names
