#include <QObject>
#include <algorithm>
#include <exception>

#include "config/ConfigSchema.h"
#include "config/FamilyRegistry.h"
#include "config/RunConfigYaml.h"
#include "ui/backend/FamilyBackend.h"

namespace strata::ui::backend {

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

template <class T>
bool contains(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The default of every key, with one dataset entry to compare dataset keys with.
const config::RunConfig& defaults() {
  static const config::RunConfig kDefaults = [] {
    config::RunConfig c;
    c.datasets.resize(1);
    return c;
  }();
  return kDefaults;
}

}  // namespace

std::vector<std::string> modelFamilies() {
  std::vector<std::string> out;
  for (const config::FamilyDescription* f : config::families()) out.push_back(f->id);
  return out;
}

QString familyName(const std::string& arch) {
  const config::FamilyDescription* f = config::findFamily(arch);
  return qs(f ? f->displayName : arch);  // a family this build has not registered: its id
}

QString familyTitle(const std::string& arch) {
  const config::FamilyDescription* f = config::findFamily(arch);
  return f && !f->title.empty() ? qs(f->title) : familyName(arch);
}

std::vector<config::DatasetType> datasetTypesOf(const std::string& arch) {
  const config::FamilyDescription* f = config::findFamily(arch);
  return f ? f->datasetTypes : std::vector<config::DatasetType>{};
}

std::vector<config::ExportFormat> exportFormatsOf(const std::string& arch) {
  const config::FamilyDescription* f = config::findFamily(arch);
  return f ? f->exportFormats : std::vector<config::ExportFormat>{};
}

QVector<UnusedKeyView> unusedKeys(const config::RunConfig& cfg, const std::string& arch) {
  QVector<UnusedKeyView> out;
  for (const config::UnreadKey& k : config::keysNotRead(cfg, arch))
    out.push_back({qs(k.key), qs(config::formatValue(k.value))});
  return out;
}

QVector<FamilyChangeView> familyChanges(const config::RunConfig& cfg, const std::string& arch) {
  QVector<FamilyChangeView> out;
  const std::vector<config::DatasetType> types = datasetTypesOf(arch);
  for (size_t i = 0; i < cfg.datasets.size(); ++i)
    if (!types.empty() && !contains(types, cfg.datasets[i].type))
      out.push_back({QString("datasets[%1].type").arg(i), qs(config::enumName(cfg.datasets[i].type)),
                     qs(config::enumName(types.front()))});
  const std::vector<config::ExportFormat> formats = exportFormatsOf(arch);
  std::vector<config::ExportFormat> kept;
  for (config::ExportFormat f : cfg.save.exportFormats)
    if (contains(formats, f) && !contains(kept, f)) kept.push_back(f);
  if (kept.empty() && !formats.empty() && !cfg.save.exportFormats.empty()) kept.push_back(formats.front());
  if (kept != cfg.save.exportFormats) {
    config::RunConfig a = cfg, b = cfg;
    b.save.exportFormats = kept;
    out.push_back({"save.export_formats", qs(config::getValueText(a, "save.export_formats")),
                   qs(config::getValueText(b, "save.export_formats"))});
  }
  return out;
}

config::RunConfig dropUnusedKeys(const config::RunConfig& cfg, const std::string& arch) {
  config::RunConfig next = cfg;
  for (const UnusedKeyView& u : unusedKeys(cfg, arch)) {
    const auto [pattern, index] = config::splitDatasetPath(u.key.toStdString());
    if (const config::KeySpec* spec = config::findKey(pattern)) spec->set(next, index, spec->get(defaults(), 0));
  }
  return next;
}

config::RunConfig switchFamily(const config::RunConfig& cfg, const std::string& arch, bool dropUnused) {
  config::RunConfig next = dropUnused ? dropUnusedKeys(cfg, arch) : cfg;
  for (const FamilyChangeView& c : familyChanges(cfg, arch))
    config::setValueText(next, c.key.toStdString(), c.to.toStdString());
  next.model.arch = arch;
  return next;
}

QVector<MapPartView> mapPartsOf(const std::string& arch) {
  QVector<MapPartView> out;
  if (const config::FamilyDescription* f = config::findFamily(arch))
    for (const config::MapPart& p : f->mapParts)
      out.push_back({blockKindFromString(qs(p.kind)), qs(p.row), qs(p.tip), qs(p.legend)});
  return out;
}

}  // namespace strata::ui::backend
