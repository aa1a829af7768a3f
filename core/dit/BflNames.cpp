#include "dit/BflNames.h"

#include <algorithm>
#include <cctype>

namespace strata::dit {

namespace {

bool isDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
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

bool startsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

BflNames::BflNames(BflRows rows, const UnitLayout& layout, int64_t numLayers, int64_t numSingleLayers, bool bounded)
    : rows_(std::move(rows)),
      top_(layout(Unit::Stem)),
      double_(layout(Unit::Double)),
      single_(layout(Unit::Single)),
      numLayers_(numLayers),
      numSingleLayers_(numSingleLayers),
      bounded_(bounded) {
  for (auto& m : layout(Unit::Head)) top_.push_back(std::move(m));
}

const std::vector<BflRow>& BflNames::rowsFor(Where where) const {
  switch (where) {
    case Where::Double:
      return rows_.doubleBlock;
    case Where::Single:
      return rows_.singleBlock;
    case Where::Top:
      break;
  }
  return rows_.top;
}

const std::vector<ModuleSpec>& BflNames::layoutFor(Where where) const {
  switch (where) {
    case Where::Double:
      return double_;
    case Where::Single:
      return single_;
    case Where::Top:
      break;
  }
  return top_;
}

// Whether the model of this config has the row's module in block `index` (always, unbounded).
bool BflNames::has(Where where, const std::string& index, const BflRow& row) const {
  if (!bounded_) return true;
  if (where != Where::Top) {
    if (index.size() > 9) return false;
    const int64_t i = std::stoll(index);
    if (i >= (where == Where::Double ? numLayers_ : numSingleLayers_)) return false;
  }
  return findModuleSpec(layoutFor(where), row.diffusers) != nullptr;
}

// The slot of a row's module: its rows, and those of the other parts of its BFL
// module, from the layout (0 for a module this config leaves out).
BflSlot BflNames::makeSlot(const BflRow& r, Where where, const std::string& bflModule) const {
  const auto& layout = layoutFor(where);
  BflSlot s;
  s.module = bflModule;
  s.swapHalves = r.swapHalves;
  s.part = r.part;
  s.parts = 0;
  for (const auto& other : rowsFor(where)) {
    if (std::string(other.bfl) != r.bfl) continue;
    const ModuleSpec* spec = findModuleSpec(layout, other.diffusers);
    const int64_t rows = spec ? spec->outFeatures : 0;
    ++s.parts;
    if (other.part < r.part) s.rowOffset += rows;
    if (&other == &r) s.rows = rows;
    s.totalRows += rows;
  }
  return s;
}

namespace {

// A module path split into its block kind, index and the rest.
template <class Split, class Where>
std::optional<Split> splitPath(const std::string& path, const std::string& doublePrefix,
                               const std::string& singlePrefix) {
  for (const auto& [prefix, where] : {std::pair{doublePrefix, Where::Double}, std::pair{singlePrefix, Where::Single}}) {
    if (path.compare(0, prefix.size() + 1, prefix + ".") != 0) continue;
    const auto dot = path.find('.', prefix.size() + 1);
    if (dot == std::string::npos) return std::nullopt;
    std::string index = path.substr(prefix.size() + 1, dot - prefix.size() - 1);
    if (!isDigits(index)) return std::nullopt;
    return Split{where, index, path.substr(dot + 1)};
  }
  return Split{Where::Top, "", path};
}

}  // namespace

std::optional<BflNames::Found> BflNames::findFromDiffusers(const std::string& module) const {
  auto split = splitPath<Split, Where>(module, "transformer_blocks", "single_transformer_blocks");
  if (!split) return std::nullopt;
  for (const auto& r : rowsFor(split->where)) {
    if (split->rest != r.diffusers) continue;
    if (!has(split->where, split->index, r)) return std::nullopt;
    std::string bfl = r.bfl;
    if (split->where == Where::Double) bfl = "double_blocks." + split->index + "." + bfl;
    if (split->where == Where::Single) bfl = "single_blocks." + split->index + "." + bfl;
    return Found{&r, split->where, bfl};
  }
  return std::nullopt;
}

BflNames::FoundParts BflNames::findFromBfl(const std::string& bflModule) const {
  FoundParts found;
  auto& out = found.parts;
  auto split = splitPath<Split, Where>(bflModule, "double_blocks", "single_blocks");
  if (!split) return found;
  found.where = split->where;
  for (const auto& r : rowsFor(split->where)) {
    if (split->rest != r.bfl || !has(split->where, split->index, r)) continue;
    std::string diff = r.diffusers;
    if (split->where == Where::Double) diff = "transformer_blocks." + split->index + "." + diff;
    if (split->where == Where::Single) diff = "single_transformer_blocks." + split->index + "." + diff;
    out.emplace_back(&r, diff);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first->part < b.first->part; });
  return found;
}

std::optional<BflSlot> BflNames::bflSlotForModule(const std::string& diffusersModule) const {
  auto f = findFromDiffusers(diffusersModule);
  if (!f) return std::nullopt;
  return makeSlot(*f->row, f->where, f->bflModule);
}

std::vector<std::pair<std::string, BflSlot>> BflNames::diffusersModulesForBfl(const std::string& bflModule) const {
  std::vector<std::pair<std::string, BflSlot>> out;
  const auto found = findFromBfl(bflModule);
  for (const auto& [row, diff] : found.parts) out.emplace_back(diff, makeSlot(*row, found.where, bflModule));
  return out;
}

std::optional<BflParam> BflNames::bflParamForKey(const std::string& diffusersKey) const {
  const auto [module, leaf] = splitLeaf(diffusersKey);
  auto f = findFromDiffusers(module);
  if (!f) return std::nullopt;
  std::string bflLeaf;
  if (f->row->rmsNorm) {
    if (leaf != "weight") return std::nullopt;
    bflLeaf = "scale";
  } else {
    if (leaf != "weight" && leaf != "bias") return std::nullopt;
    // A bias only where the layout's Linear has one (FLUX.2 has none).
    const ModuleSpec* spec = findModuleSpec(layoutFor(f->where), f->row->diffusers);
    if (leaf == "bias" && spec && !spec->bias) return std::nullopt;
    bflLeaf = leaf;
  }
  return BflParam{f->bflModule + "." + bflLeaf, makeSlot(*f->row, f->where, f->bflModule)};
}

std::vector<std::pair<std::string, BflSlot>> BflNames::diffusersKeysForBflKey(const std::string& bflKey) const {
  std::vector<std::pair<std::string, BflSlot>> out;
  const auto [module, leaf] = splitLeaf(bflKey);
  const auto found = findFromBfl(module);
  for (const auto& [row, diff] : found.parts) {
    std::string diffLeaf;
    if (row->rmsNorm) {
      if (leaf != "scale") continue;
      diffLeaf = "weight";
    } else {
      if (leaf != "weight" && leaf != "bias") continue;
      diffLeaf = leaf;
    }
    out.emplace_back(diff + "." + diffLeaf, makeSlot(*row, found.where, module));
  }
  return out;
}

bool BflNames::isBflModule(const std::string& bflModule) const { return !findFromBfl(bflModule).parts.empty(); }

std::string BflNames::kohyaFromBflModule(const std::string& bflModule) { return kKohyaPrefix + underscored(bflModule); }

std::optional<std::string> BflNames::bflModuleFromKohya(const std::string& kohyaName) const {
  const std::string prefix = kKohyaPrefix;
  if (!startsWith(kohyaName, prefix)) return std::nullopt;
  const std::string rest = kohyaName.substr(prefix.size());
  std::optional<std::string> bfl;
  // "double_blocks_12_img_attn_qkv": kind, index, then a known suffix.
  for (const auto& [kind, rows] :
       {std::pair<std::string, const std::vector<BflRow>*>{"double_blocks", &rows_.doubleBlock},
        std::pair<std::string, const std::vector<BflRow>*>{"single_blocks", &rows_.singleBlock}}) {
    if (rest.compare(0, kind.size() + 1, kind + "_") != 0) continue;
    const auto sep = rest.find('_', kind.size() + 1);
    if (sep == std::string::npos) return std::nullopt;
    const std::string index = rest.substr(kind.size() + 1, sep - kind.size() - 1);
    if (!isDigits(index)) return std::nullopt;
    const std::string suffix = rest.substr(sep + 1);
    for (const auto& r : *rows)
      if (underscored(r.bfl) == suffix) {
        bfl = kind + "." + index + "." + r.bfl;
        break;
      }
    if (!bfl) return std::nullopt;
    break;
  }
  if (!bfl)
    for (const auto& r : rows_.top)
      if (underscored(r.bfl) == rest) {
        bfl = std::string(r.bfl);
        break;
      }
  if (!bfl || (bounded_ && !isBflModule(*bfl))) return std::nullopt;
  return bfl;
}

std::string BflNames::comfyFromBflModule(const std::string& bflModule) { return kComfyPrefix + bflModule; }

std::optional<std::string> BflNames::bflModuleFromComfy(const std::string& comfyName) const {
  for (const std::string& prefix : {std::string("model.") + kComfyPrefix, std::string(kComfyPrefix)}) {
    if (!startsWith(comfyName, prefix)) continue;
    std::string bfl = comfyName.substr(prefix.size());
    if (isBflModule(bfl)) return bfl;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace strata::dit
