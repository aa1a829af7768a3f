#pragma once
// The run-config editor: a form built from the config schema (a group per
// section, tooltips from the doc strings, units) and a YAML tab, kept in sync.
// Every edit is validated at once: the problems are listed (severity, key, line,
// hint), the offending field is marked, and hasErrors() gates Start.
#include <QMap>
#include <QString>
#include <QVector>
#include <QWidget>
#include <memory>

#include "ui/ViewModel.h"

class QLabel;
class QPlainTextEdit;
class QTabWidget;
class QTimer;
class QTreeWidget;
class QVBoxLayout;
class QGroupBox;
class QFormLayout;

namespace strata::config {
struct RunConfig;
struct KeySpec;
}  // namespace strata::config

namespace strata::ui {

class ConfigEditor : public QWidget {
  Q_OBJECT
 public:
  explicit ConfigEditor(QWidget* parent = nullptr);
  ~ConfigEditor() override;

  // Strata YAML. On failure nothing changes and `error` says why (file, line).
  bool loadFile(const QString& path, QString* error = nullptr);
  // Writes the YAML tab's text (atomically). Sets filePath().
  bool saveFile(const QString& path, QString* error = nullptr);
  // An ai-toolkit job file (config: process: [...]) converted to a Strata config.
  bool importAiToolkit(const QString& path, QString* error = nullptr);
  // A new config with the schema's defaults.
  void newConfig();

  // As if typed into the YAML tab: parsed, the form updated, validated now.
  void setYamlText(const QString& text);
  QString yamlText() const;
  // Sets one key from its YAML text ("model.low_vram", "true"), as a form edit would.
  bool setValueText(const QString& key, const QString& text, QString* error = nullptr);
  QString valueText(const QString& key) const;

  const config::RunConfig& config() const;
  void setConfig(const config::RunConfig& cfg);

  QVector<ProblemView> problems() const { return problems_; }
  bool hasErrors() const;
  QString filePath() const { return filePath_; }
  bool isModified() const { return modified_; }
  // The editor widget of a key ("model.low_vram", "datasets[0].folder_path"); null if none.
  QWidget* fieldFor(const QString& key) const;

 signals:
  void configChanged();           // after every accepted edit (form or YAML)
  void problemsChanged();         // after every validation
  void validityChanged(bool ok);  // ok = no errors
  void filePathChanged(const QString& path);

 private:
  struct Field {
    const config::KeySpec* spec = nullptr;
    QString key;  // concrete path
    QWidget* editor = nullptr;
    QLabel* label = nullptr;
  };

  void buildForm();
  void buildDatasetGroups();
  QGroupBox* groupFor(const QString& section);
  void addField(QFormLayout* form, const config::KeySpec& spec, const QString& key, QWidget* parent);
  void refreshForm();
  void refreshField(const Field& field);
  void refreshYaml();
  void onFieldEdited(const QString& key);
  void onYamlEdited();
  void parseYamlNow();
  void validate();
  void setProblems(const QVector<ProblemView>& problems);
  void markFields();
  void goToProblem(int index);
  void setFilePath(const QString& path);

  std::unique_ptr<config::RunConfig> config_;
  QString yamlSource_;     // the text the config (and its line numbers) came from
  QVector<ProblemView> problems_;
  QString fieldError_;     // a form value that could not be parsed
  QString fieldErrorKey_;
  QString filePath_;
  bool modified_ = false;
  bool updating_ = false;  // set while the editor writes into its own widgets
  bool lastOk_ = true;

  QTabWidget* tabs_ = nullptr;
  QWidget* formPage_ = nullptr;
  QVBoxLayout* formLayout_ = nullptr;
  QMap<QString, QGroupBox*> groups_;
  QVector<QGroupBox*> datasetGroups_;
  QMap<QString, Field> fields_;  // concrete key -> field
  QPlainTextEdit* yaml_ = nullptr;
  QTimer* yamlTimer_ = nullptr;
  QTreeWidget* problemList_ = nullptr;
  QLabel* problemSummary_ = nullptr;
};

}  // namespace strata::ui
