#pragma once
// The Setup page's document: the config being edited, the YAML text it was read
// from (for the problems' lines), its file, whether it is saved, what an
// ai-toolkit import changed, and a form value that did not parse; and the
// problems of all of these. The schema form (ui/setup/ConfigEditor) shows and
// edits it; this holds no widget. Qt types only in this header (the config
// itself is core's, reached through strata_ui_backend).
#include <QObject>
#include <QString>
#include <QVector>
#include <memory>

#include "ui/backend/ViewModel.h"

namespace strata::config {
struct RunConfig;
}

namespace strata::ui {

class ConfigDocument : public QObject {
  Q_OBJECT
 public:
  explicit ConfigDocument(QObject* parent = nullptr);
  ~ConfigDocument() override;

  config::RunConfig& config() { return *config_; }
  const config::RunConfig& config() const { return *config_; }

  // The text the config (and its problems' line numbers) came from.
  QString yamlSource() const { return yamlSource_; }
  void setYamlSource(const QString& text) { yamlSource_ = text; }
  // The config written as YAML, which becomes the source.
  QString writeYaml();

  QString filePath() const { return filePath_; }
  void setFilePath(const QString& path);
  bool isModified() const { return modified_; }
  void setModified(bool modified);

  // What an ai-toolkit import dropped or changed (warnings), until the next open or new config.
  QVector<ProblemView> importNotes() const { return importNotes_; }
  void setImportNotes(const QVector<ProblemView>& notes) { importNotes_ = notes; }

  // A form value that could not be parsed: listed first; the last good config is kept.
  void setFieldError(const QString& key, const QString& message);
  void clearFieldError();

  // The field error, the reading and rule problems of the config (lines from
  // yamlSource), then the import notes.
  QVector<ProblemView> problems() const;

  // One key's YAML text ("model.low_vram" -> "true"); "" when there is none.
  QString valueText(const QString& key) const;
  // Sets one key from its YAML text; false (and why) when it does not parse, the config unchanged.
  bool setValueText(const QString& key, const QString& text, QString* error);

 signals:
  void filePathChanged(const QString& path);
  void modifiedChanged(bool modified);

 private:
  std::unique_ptr<config::RunConfig> config_;
  QString yamlSource_;
  QString filePath_;
  bool modified_ = false;
  QVector<ProblemView> importNotes_;
  QString fieldError_;  // a form value that could not be parsed
  QString fieldErrorKey_;
};

}  // namespace strata::ui
