#include "ui/backend/ConfigDocument.h"

#include <exception>

#include "config/ConfigSchema.h"
#include "config/RunConfig.h"
#include "config/RunConfigYaml.h"
#include "ui/backend/ConfigBackend.h"

namespace strata::ui {

ConfigDocument::ConfigDocument(QObject* parent) : QObject(parent), config_(std::make_unique<config::RunConfig>()) {}

ConfigDocument::~ConfigDocument() = default;

QString ConfigDocument::writeYaml() {
  yamlSource_ = QString::fromStdString(backend::toYaml(*config_));
  return yamlSource_;
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

QString ConfigDocument::valueText(const QString& key) const {
  try {
    return QString::fromStdString(config::getValueText(*config_, key.toStdString()));
  } catch (const std::exception&) {
    return QString();
  }
}

bool ConfigDocument::setValueText(const QString& key, const QString& text, QString* error) {
  config::RunConfig next = *config_;
  try {
    config::setValueText(next, key.toStdString(), text.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  *config_ = std::move(next);
  return true;
}

}  // namespace strata::ui
