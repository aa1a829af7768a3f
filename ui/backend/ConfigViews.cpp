#include "ui/backend/ConfigViews.h"

#include <exception>

#include "config/ConfigSchema.h"
#include "config/FamilyRegistry.h"
#include "config/RunConfig.h"
#include "train/ConfigTemplates.h"
#include "ui/backend/ConfigBackend.h"
#include "ui/backend/FamilyBackend.h"

namespace strata::ui {

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

KeyKind kindOf(config::KeyType t) {
  switch (t) {
    case config::KeyType::Bool:
      return KeyKind::Bool;
    case config::KeyType::Int:
      return KeyKind::Int;
    case config::KeyType::Float:
      return KeyKind::Float;
    case config::KeyType::String:
      return KeyKind::String;
    case config::KeyType::Path:
      return KeyKind::Path;
    case config::KeyType::Choice:
      return KeyKind::Choice;
    case config::KeyType::IntList:
      return KeyKind::IntList;
    case config::KeyType::FloatList:
      return KeyKind::FloatList;
    case config::KeyType::StringList:
      return KeyKind::StringList;
    case config::KeyType::ChoiceList:
      return KeyKind::ChoiceList;
  }
  return KeyKind::String;
}

KeyPathKind pathKindOf(config::PathKind k) {
  switch (k) {
    case config::PathKind::None:
      return KeyPathKind::None;
    case config::PathKind::File:
      return KeyPathKind::File;
    case config::PathKind::Folder:
      return KeyPathKind::Folder;
    case config::PathKind::FileOrFolder:
      return KeyPathKind::FileOrFolder;
    case config::PathKind::SaveFile:
      return KeyPathKind::SaveFile;
  }
  return KeyPathKind::None;
}

KeyView viewOf(const config::KeySpec& spec) {
  KeyView v;
  v.key = qs(spec.path);
  v.label = qs(spec.label);
  v.group = qs(spec.group);
  v.basic = spec.basic;
  v.modelShape = spec.modelShape;
  v.datasetKey = spec.isDatasetKey();
  v.type = kindOf(spec.type);
  v.pathKind = pathKindOf(spec.pathKind);
  v.typeName = qs(config::keyTypeName(spec.type));
  v.unit = qs(spec.unit);
  v.doc = qs(spec.doc);
  for (const auto& [family, doc] : spec.familyDocs)
    if (!v.familyDocs.contains(qs(family))) v.familyDocs.insert(qs(family), qs(doc));  // the first, as docFor reads
  v.min = spec.min;
  v.max = spec.max;
  v.minExclusive = spec.minExclusive;
  v.nullable = spec.nullable;
  v.listSize = spec.listSize ? int(*spec.listSize) : 0;
  for (const std::string& c : spec.choices) v.choices << qs(c);
  v.rangeText = qs(spec.rangeText());
  v.defaultText = qs(config::formatValue(spec.defaultValue));
  if (const auto* s = std::get_if<std::string>(&spec.defaultValue)) v.defaultItems << qs(*s);
  if (const auto* l = std::get_if<std::vector<std::string>>(&spec.defaultValue))
    for (const std::string& c : *l) v.defaultItems << qs(c);
  for (const std::string& f : spec.families) v.families << qs(f);
  for (config::DatasetType t : spec.datasetTypes) v.datasetTypes << qs(config::enumName(t));
  return v;
}

}  // namespace

QString KeyView::concreteKey(int datasetIndex) const {
  QString p = key;
  if (datasetKey) p.replace("datasets[]", QString("datasets[%1]").arg(datasetIndex));
  return p;
}

QVector<KeyView> formKeys() {
  QVector<KeyView> out;
  for (const config::KeySpec& spec : config::schema()) out << viewOf(spec);
  return out;
}

QStringList formGroups() {
  QStringList out;
  for (const std::string& g : config::keyGroups()) out << qs(g);
  return out;
}

QVector<FamilyView> familyViews() {
  QVector<FamilyView> out;
  for (const std::string& id : backend::modelFamilies()) out << familyView(qs(id));
  return out;
}

FamilyView familyView(const QString& id) {
  const std::string arch = id.toStdString();
  FamilyView v;
  v.id = id;
  v.name = backend::familyName(arch);
  v.title = backend::familyTitle(arch);
  for (config::DatasetType t : backend::datasetTypesOf(arch)) v.datasetTypes << qs(config::enumName(t));
  for (config::ExportFormat f : backend::exportFormatsOf(arch)) v.exportFormats << qs(config::enumName(f));
  return v;
}

QVector<ConfigTemplate> familyTemplates() {
  QVector<ConfigTemplate> out;
  for (const std::string& arch : backend::modelFamilies())
    for (const train::ConfigTemplate& t : train::configTemplates(arch))
      out.push_back({qs(t.id), qs(t.title), qs(t.summary), ":/strata/templates/" + qs(t.file), arch, qs(t.dataKey),
                     t.dataIsFolder, qs(t.dataQuestion), qs(t.modelQuestion), qs(t.modelKey), qs(t.firstLaunch),
                     qs(t.firstLaunchTip)});
  return out;
}

bool readTextFile(const QString& path, QString* text, QString* error) {
  try {
    *text = qs(backend::readText(path.toStdString()));
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  return true;
}

bool writeTextFile(const QString& path, const QString& text, QString* error) {
  try {
    backend::writeText(path.toStdString(), text.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  return true;
}

}  // namespace strata::ui
