// LibTorch first: Qt's `slots` macro breaks its headers.
#include "train/ModelFamily.h"

#include <QObject>
#include <algorithm>
#include <exception>

#include "config/ConfigSchema.h"
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

QString concreteKey(const config::KeySpec& spec, size_t i) {
  return spec.isDatasetKey() ? QString("datasets[%1].%2").arg(i).arg(qs(spec.path.substr(11))) : qs(spec.path);
}

}  // namespace

std::vector<config::ModelArch> modelFamilies() {
  return {config::ModelArch::Flux, config::ModelArch::Llama, config::ModelArch::Flux2};
}

QString familyName(config::ModelArch arch) {
  try {
    return qs(train::modelFamily(arch).displayName());
  } catch (const std::exception&) {
    return qs(config::enumName(arch));  // a family this build has not registered
  }
}

QString familyTitle(config::ModelArch arch) {
  switch (arch) {
    case config::ModelArch::Flux:
      return QObject::tr("%1 image LoRA").arg(familyName(arch));
    case config::ModelArch::Llama:
      return QObject::tr("%1-family language-model LoRA (Llama, Mistral, Qwen2)").arg(familyName(arch));
    case config::ModelArch::Flux2:
      return QObject::tr("%1 image LoRA (synthetic data only)").arg(familyName(arch));
  }
  return familyName(arch);
}

std::vector<config::DatasetType> datasetTypesOf(config::ModelArch arch) {
  using config::DatasetType;
  switch (arch) {
    case config::ModelArch::Flux:
      return {DatasetType::Images, DatasetType::Latents, DatasetType::Synthetic, DatasetType::Shapes};
    case config::ModelArch::Llama:
      return {DatasetType::Jsonl, DatasetType::Synthetic};
    case config::ModelArch::Flux2:
      return {DatasetType::Synthetic};
  }
  return {};
}

std::vector<config::ExportFormat> exportFormatsOf(config::ModelArch arch) {
  using config::ExportFormat;
  switch (arch) {
    case config::ModelArch::Flux:
      return {ExportFormat::Diffusers, ExportFormat::Kohya, ExportFormat::Comfy};
    case config::ModelArch::Llama:
      return {ExportFormat::Peft};
    case config::ModelArch::Flux2:
      return {ExportFormat::Diffusers, ExportFormat::Kohya, ExportFormat::Comfy};
  }
  return {};
}

QVector<UnusedKey> unusedKeys(const config::RunConfig& cfg, config::ModelArch arch) {
  QVector<UnusedKey> out;
  for (const config::KeySpec& spec : config::schema()) {
    if (spec.appliesTo(arch) || spec.path == "model.is_flux") continue;
    const size_t count = spec.isDatasetKey() ? cfg.datasets.size() : 1;
    for (size_t i = 0; i < count; ++i) {
      const config::Value v = spec.get(cfg, i);
      if (v == spec.get(defaults(), 0)) continue;
      out.push_back({concreteKey(spec, i), qs(config::formatValue(v))});
    }
  }
  return out;
}

QVector<FamilyChange> familyChanges(const config::RunConfig& cfg, config::ModelArch arch) {
  QVector<FamilyChange> out;
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

config::RunConfig dropUnusedKeys(const config::RunConfig& cfg, config::ModelArch arch) {
  config::RunConfig next = cfg;
  for (const UnusedKey& u : unusedKeys(cfg, arch)) {
    const auto [pattern, index] = config::splitDatasetPath(u.key.toStdString());
    if (const config::KeySpec* spec = config::findKey(pattern)) spec->set(next, index, spec->get(defaults(), 0));
  }
  return next;
}

config::RunConfig switchFamily(const config::RunConfig& cfg, config::ModelArch arch, bool dropUnused) {
  config::RunConfig next = dropUnused ? dropUnusedKeys(cfg, arch) : cfg;
  for (const FamilyChange& c : familyChanges(cfg, arch))
    config::setValueText(next, c.key.toStdString(), c.to.toStdString());
  next.model.arch = arch;
  return next;
}

}  // namespace strata::ui::backend
