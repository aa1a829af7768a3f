#include "ui/backend/ConfigDocument.h"

#include <exception>

#include "config/ConfigSchema.h"
#include "config/RunConfig.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"
#include "ui/backend/ConfigBackend.h"
#include "ui/backend/DatasetBackend.h"
#include "ui/backend/FamilyBackend.h"
#include "ui/backend/TrainerRunner.h"

namespace strata::ui {

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

// `set` on a copy of `cfg`, which replaces it when `set` does not throw; else why, in `error`.
template <class F>
bool setOnCopy(config::RunConfig& cfg, QString* error, F&& set) {
  config::RunConfig next = cfg;
  try {
    set(next);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  cfg = std::move(next);
  return true;
}

}  // namespace

ConfigDocument::ConfigDocument(QObject* parent) : QObject(parent), config_(std::make_unique<config::RunConfig>()) {}

ConfigDocument::~ConfigDocument() = default;

config::RunConfig ConfigDocument::runConfig(const RunOverrides& overrides) const {
  config::RunConfig cfg = *config_;
  if (overrides.steps > 0) cfg.train.steps = overrides.steps;
  if (!overrides.trainingFolder.isEmpty()) cfg.job.trainingFolder = overrides.trainingFolder.toStdString();
  return cfg;
}

QString ConfigDocument::writeYaml() {
  yamlSource_ = qs(backend::toYaml(*config_));
  return yamlSource_;
}

bool ConfigDocument::readYaml(const QString& text, const QString& sourceName, QVector<ProblemView>* problems,
                              bool adoptPartial) {
  backend::ParseResult parsed = backend::parseYaml(text.toStdString(), sourceName.toStdString());
  if (problems) *problems = parsed.problems;
  if (parsed.ok || adoptPartial) {
    *config_ = std::move(parsed.config);
    yamlSource_ = text;
  }
  return parsed.ok;
}

bool ConfigDocument::readRunFolderConfig(const QString& runDir) {
  // Read through the core's reader, which refuses a FIFO or a device there instead of blocking the window.
  try {
    const std::string path = runner::runFolderFiles(runDir.toStdString()).config;
    backend::ParseResult parsed = backend::parseYaml(backend::readText(path), path);
    if (!parsed.ok) return false;
    *config_ = std::move(parsed.config);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void ConfigDocument::resetToDefaults() { *config_ = backend::defaultConfig(); }

bool ConfigDocument::importAiToolkit(const QString& path, QString* error) {
  QVector<ProblemView> notes;
  try {
    *config_ = backend::importAiToolkit(path.toStdString(), &notes);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  importNotes_ = notes;  // problems() lists them with the config's own
  return true;
}

void ConfigDocument::setFilePath(const QString& path) {
  if (filePath_ == path) return;
  filePath_ = path;
  emit filePathChanged(path);
}

void ConfigDocument::setModified(bool modified) {
  if (modified_ == modified) return;
  modified_ = modified;
  emit modifiedChanged(modified);
}

void ConfigDocument::setFieldError(const QString& key, const QString& message) {
  fieldError_ = message;
  fieldErrorKey_ = key;
}

void ConfigDocument::clearFieldError() {
  fieldError_.clear();
  fieldErrorKey_.clear();
}

QVector<ProblemView> ConfigDocument::problems() const {
  QVector<ProblemView> problems = backend::validate(*config_, yamlSource_.toStdString());
  problems += importNotes_;
  if (!fieldError_.isEmpty()) {
    ProblemView p;
    p.error = true;
    p.key = fieldErrorKey_;
    p.message = fieldError_;
    p.hint = tr("the last valid value is kept until this one parses");
    problems.prepend(p);
  }
  return problems;
}

// ---- keys ------------------------------------------------------------------

QString ConfigDocument::valueText(const QString& key) const {
  try {
    return qs(config::getValueText(*config_, key.toStdString()));
  } catch (const std::exception&) {
    return QString();
  }
}

KeyValueView ConfigDocument::value(const QString& key) const {
  KeyValueView out;
  config::Value v;
  try {
    v = config::getValue(*config_, key.toStdString());
  } catch (const std::exception&) {
    return out;  // a dataset entry that no longer exists
  }
  out.exists = true;
  out.text = qs(config::formatValue(v));
  if (const auto* s = std::get_if<std::string>(&v)) {
    out.isString = true;
    out.string = qs(*s);
  } else if (const auto* l = std::get_if<std::vector<int64_t>>(&v)) {
    for (int64_t x : *l) out.items << QString::number(x);
  } else if (const auto* l = std::get_if<std::vector<double>>(&v)) {
    for (double x : *l) out.items << qs(config::formatNumber(x));
  } else if (const auto* l = std::get_if<std::vector<std::string>>(&v)) {
    for (const std::string& x : *l) out.items << qs(x);
  }
  return out;
}

QString ConfigDocument::stringValue(const QString& key) const {
  const KeyValueView v = value(key);
  return v.isString ? v.string : QString();
}

bool ConfigDocument::isDefault(const QString& key) const {
  const auto [pattern, index] = config::splitDatasetPath(key.toStdString());
  const config::KeySpec* spec = config::findKey(pattern);
  if (!spec || (spec->isDatasetKey() && index >= config_->datasets.size())) return true;
  return spec->get(*config_, index) == spec->defaultValue;
}

bool ConfigDocument::setValueText(const QString& key, const QString& text, QString* error) {
  return setOnCopy(*config_, error,
                   [&](config::RunConfig& c) { config::setValueText(c, key.toStdString(), text.toStdString()); });
}

bool ConfigDocument::setBool(const QString& key, bool value, QString* error) {
  return setOnCopy(*config_, error,
                   [&](config::RunConfig& c) { config::setValue(c, key.toStdString(), config::Value(value)); });
}

bool ConfigDocument::setInt(const QString& key, qint64 value, QString* error) {
  return setOnCopy(*config_, error, [&](config::RunConfig& c) {
    config::setValue(c, key.toStdString(), config::Value(int64_t(value)));
  });
}

bool ConfigDocument::setString(const QString& key, const QString& value, QString* error) {
  return setOnCopy(*config_, error, [&](config::RunConfig& c) {
    config::setValue(c, key.toStdString(), config::Value(value.toStdString()));
  });
}

bool ConfigDocument::setStringList(const QString& key, const QStringList& value, QString* error) {
  std::vector<std::string> items;
  for (const QString& s : value) items.push_back(s.toStdString());
  return setOnCopy(*config_, error,
                   [&](config::RunConfig& c) { config::setValue(c, key.toStdString(), config::Value(items)); });
}

// ---- what the pages read ----------------------------------------------------

QString ConfigDocument::family() const { return qs(config_->model.arch); }

qint64 ConfigDocument::trainSteps() const { return config_->train.steps; }

QStringList ConfigDocument::samplePrompts() const {
  QStringList out;
  for (const std::string& p : config_->sample.prompts) out << qs(p);
  return out;
}

QStringList ConfigDocument::exportFormats() const {
  QStringList out;
  for (config::ExportFormat f : config_->save.exportFormats) out << qs(config::enumName(f));
  return out;
}

bool ConfigDocument::randomWeightsOffForModelWeights() {
  config::ModelConfig& m = config_->model;
  if (!m.randomWeights || !config::holdsWeights(m.nameOrPath)) return false;
  m.randomWeights = false;
  return true;
}

// ---- model shape -----------------------------------------------------------

bool ConfigDocument::hasShapeOverrides() const {
  for (const config::KeySpec& spec : config::schema())
    if (spec.modelShape && !(spec.get(*config_, 0) == spec.defaultValue)) return true;
  return false;
}

bool ConfigDocument::clearShapeOverrides() {
  bool changed = false;
  for (const config::KeySpec& spec : config::schema())
    if (spec.modelShape && !(spec.get(*config_, 0) == spec.defaultValue)) {
      spec.set(*config_, 0, spec.defaultValue);
      changed = true;
    }
  return changed;
}

// ---- datasets --------------------------------------------------------------

int ConfigDocument::datasetCount() const { return int(config_->datasets.size()); }

QString ConfigDocument::datasetType(int index) const {
  if (index < 0 || index >= datasetCount()) return QString();
  return qs(config::enumName(config_->datasets[size_t(index)].type));
}

QVector<DatasetEntryView> ConfigDocument::datasets() const {
  QVector<DatasetEntryView> out;
  for (const config::DatasetConfig& d : config_->datasets) out << datasetEntryView(d);
  return out;
}

void ConfigDocument::addDataset() {
  config_->datasets.emplace_back();
  // Of the kind the family offers first (FLUX: images, Llama: jsonl), as a family switch sets it.
  const std::vector<config::DatasetType> types = backend::datasetTypesOf(config_->model.arch);
  if (!types.empty()) config_->datasets.back().type = types.front();
}

bool ConfigDocument::removeLastDataset() {
  if (config_->datasets.empty()) return false;
  config_->datasets.pop_back();
  return true;
}

// ---- the model family --------------------------------------------------------

QVector<UnusedKeyView> ConfigDocument::unusedKeys(const QString& family) const {
  return backend::unusedKeys(*config_, family.toStdString());
}

QVector<FamilyChangeView> ConfigDocument::familyChanges(const QString& family) const {
  return backend::familyChanges(*config_, family.toStdString());
}

void ConfigDocument::dropUnusedKeys() { *config_ = backend::dropUnusedKeys(*config_, config_->model.arch); }

void ConfigDocument::switchFamily(const QString& family, bool dropUnused) {
  *config_ = backend::switchFamily(*config_, family.toStdString(), dropUnused);
}

}  // namespace strata::ui
