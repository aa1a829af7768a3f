#include "config/FamilyRegistry.h"

#include "common/Error.h"

#include <algorithm>
#include <list>
#include <mutex>

namespace strata::config {

namespace {

struct Registry {
  // Recursive: building the schema asks for familyIds() (model.arch's choices).
  std::recursive_mutex mutex;
  std::vector<std::shared_ptr<const FamilyDescription>> families;  // registration order
  // Every schema built so far (a KeySpec pointer from an older one stays valid);
  // the last is current unless `stale`.
  std::list<std::vector<KeySpec>> schemas;
  bool stale = true;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The section a key goes to the end of when its anchor is missing: "model.", "datasets[].".
std::string sectionOf(const std::string& path) {
  const size_t dot = path.find('.');
  return dot == std::string::npos ? path : path.substr(0, dot + 1);
}

void addFamily(std::vector<KeySpec>& keys, const FamilyDescription& fam, std::vector<KeyRow>& pending) {
  for (const KeyRow& row : fam.keys) {
    KeyRow r = row;
    r.spec.families = {fam.id};
    for (const auto& [path, doc] : fam.keyDocs)
      if (path == r.spec.path) r.spec.familyDocs.emplace_back(fam.id, doc);
    pending.push_back(std::move(r));
  }
}

// Inserts each pending row after its anchor, anchors that are pending rows
// themselves first; a row whose anchor never appears goes to its section's end.
void placeRows(std::vector<KeySpec>& keys, std::vector<KeyRow> pending) {
  const auto indexOf = [&](const std::string& path) {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i].path == path) return static_cast<std::ptrdiff_t>(i);
    return std::ptrdiff_t{-1};
  };
  bool progress = true;
  while (!pending.empty() && progress) {
    progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      const std::ptrdiff_t at = indexOf(it->after);
      if (at < 0) {
        ++it;
        continue;
      }
      keys.insert(keys.begin() + at + 1, std::move(it->spec));
      it = pending.erase(it);
      progress = true;
    }
  }
  for (KeyRow& r : pending) {
    const std::string section = sectionOf(r.spec.path);
    std::ptrdiff_t last = -1;
    for (size_t i = 0; i < keys.size(); ++i)
      if (sectionOf(keys[i].path) == section) last = static_cast<std::ptrdiff_t>(i);
    keys.insert(last < 0 ? keys.end() : keys.begin() + last + 1, std::move(r.spec));
  }
}

std::vector<KeySpec> buildWithFamilies(const std::vector<std::shared_ptr<const FamilyDescription>>& fams) {
  std::vector<KeySpec> keys = sharedKeyRows();
  std::vector<KeyRow> pending;
  for (const auto& f : fams) addFamily(keys, *f, pending);
  placeRows(keys, std::move(pending));
  for (const auto& f : fams) {
    for (const std::string& path : f->alsoReads)
      for (KeySpec& k : keys)
        if (k.path == path && !k.families.empty() && !k.appliesTo(f->id)) k.families.push_back(f->id);
    // A shared key, or another family's key that this one reads too, in the family's own words
    // (its own keys got theirs in addFamily).
    for (const auto& [path, doc] : f->keyDocs)
      for (KeySpec& k : keys)
        if (k.path == path && (k.families.empty() || (k.appliesTo(f->id) && k.families.front() != f->id)))
          k.familyDocs.emplace_back(f->id, doc);
  }
  return keys;
}

}  // namespace

const std::vector<KeySpec>& schema() {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  if (r.stale) {
    r.schemas.push_back(buildWithFamilies(r.families));
    r.stale = false;
  }
  return r.schemas.back();
}

std::vector<std::string> familyIds() {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& f : r.families) out.push_back(f->id);
  return out;
}

void registerFamily(FamilyDescription family) {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  auto fam = std::make_shared<const FamilyDescription>(std::move(family));
  auto it = std::find_if(r.families.begin(), r.families.end(), [&](const auto& f) { return f->id == fam->id; });
  if (it != r.families.end())
    *it = std::move(fam);
  else
    r.families.push_back(std::move(fam));
  r.stale = true;
}

void unregisterFamily(const std::string& id) {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  const auto it = std::remove_if(r.families.begin(), r.families.end(), [&](const auto& f) { return f->id == id; });
  if (it == r.families.end()) return;
  r.families.erase(it, r.families.end());
  r.stale = true;
}

const FamilyDescription* findFamily(const std::string& id) {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  for (const auto& f : r.families)
    if (f->id == id) return f.get();
  return nullptr;
}

std::vector<const FamilyDescription*> families() {
  auto& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  std::vector<const FamilyDescription*> out;
  for (const auto& f : r.families) out.push_back(f.get());
  return out;
}

std::string familyIdList() {
  std::string out;
  for (const std::string& id : familyIds()) out += (out.empty() ? "" : ", ") + id;
  return out.empty() ? "none" : out;
}

std::vector<std::string> presetNames() {
  std::vector<std::string> out;
  for (const FamilyDescription* f : families())
    for (const std::string& p : f->presets)
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  return out;
}

const FamilyDescription* familyOfPreset(const std::string& preset) {
  for (const FamilyDescription* f : families())
    if (std::find(f->presets.begin(), f->presets.end(), preset) != f->presets.end()) return f;
  return nullptr;
}

const FamilyDescription& family(const std::string& id) {
  if (const FamilyDescription* f = findFamily(id)) return *f;
  throw ConfigError("model.arch: '" + id + "' is not a model family of this program (it has: " + familyIdList() + ")");
}

std::vector<UnreadKey> keysNotRead(const RunConfig& cfg, const std::string& family) {
  RunConfig defaults;
  defaults.datasets.resize(1);
  std::vector<UnreadKey> out;
  for (const KeySpec& spec : schema()) {
    if (spec.appliesTo(family) || spec.quietElsewhere) continue;
    const size_t count = spec.isDatasetKey() ? cfg.datasets.size() : 1;
    for (size_t i = 0; i < count; ++i) {
      Value v = spec.get(cfg, i);
      if (v == spec.get(defaults, 0)) continue;
      const std::string key =
          spec.isDatasetKey() ? "datasets[" + std::to_string(i) + "]" + spec.path.substr(10) : spec.path;
      out.push_back({key, &spec, i, std::move(v)});
    }
  }
  return out;
}

}  // namespace strata::config
