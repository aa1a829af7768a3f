#pragma once
// The Setup page's document: the config being edited, the YAML text it was read
// from (for the problems' lines), its file, whether it is saved, what an
// ai-toolkit import changed, and a form value that did not parse; and the
// problems of all of these. The schema form (ui/setup/ConfigEditor) shows and
// edits it through the Qt-typed calls below; this holds no widget. Qt types only
// in this header (the config itself is core's, reached through strata_ui_backend:
// config() is for the backend and the tests, which link the core).
// A document also holds a config that is not edited (a queued run's, a run
// folder's), for the trainer bridge and the planner.
#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>
#include <memory>

#include "ui/backend/ConfigViews.h"
#include "ui/backend/DatasetScanView.h"
#include "ui/backend/ViewModel.h"

namespace strata::config {
struct RunConfig;
}

namespace strata::ui {

// What a run changes in the copy of a document's config it trains (the document
// itself is not changed): the window's step limit and the resolved output folder.
struct RunOverrides {
  qint64 steps = 0;        // train.steps; 0 = the config's
  QString trainingFolder;  // job.training_folder; empty = the config's
};

class ConfigDocument : public QObject {
  Q_OBJECT
 public:
  explicit ConfigDocument(QObject* parent = nullptr);
  ~ConfigDocument() override;

  // The core's config (strata_ui_backend and the tests; the pages use the calls below).
  config::RunConfig& config() { return *config_; }
  const config::RunConfig& config() const { return *config_; }
  // The config a run of this document trains: a copy with `overrides` applied.
  config::RunConfig runConfig(const RunOverrides& overrides) const;

  // The text the config (and its problems' line numbers) came from.
  QString yamlSource() const { return yamlSource_; }
  void setYamlSource(const QString& text) { yamlSource_ = text; }
  // The config written as YAML, which becomes the source.
  QString writeYaml();
  // Reads YAML text (`sourceName` names it in the problems): true when it reads
  // without errors, and `problems` gets its reading problems. The config and the
  // source become the text's when it reads; with `adoptPartial` also when it does
  // not (what could be read, defaults for the rest); else they stay as they are.
  bool readYaml(const QString& text, const QString& sourceName, QVector<ProblemView>* problems, bool adoptPartial);
  // The config.yaml of a run folder, as the run used it; false (nothing changed) when it
  // cannot be read (not a regular file, over the config cap, reading errors).
  bool readRunFolderConfig(const QString& runDir);
  // The schema's defaults.
  void resetToDefaults();
  // An ai-toolkit job file converted to a Strata config; what was dropped or changed
  // becomes the import notes. False and why (nothing changed) when it cannot be imported.
  bool importAiToolkit(const QString& path, QString* error);

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

  // ---- keys ----
  // One key's YAML text ("model.low_vram" -> "true"); "" when there is none.
  QString valueText(const QString& key) const;
  // One key's value for the form; exists = false when there is no such key.
  KeyValueView value(const QString& key) const;
  // A string key's value as it is ("job.name" -> "my_run"); "" when unset or not a string.
  QString stringValue(const QString& key) const;
  // Whether a key ("datasets[1].caption_ext") holds its default.
  bool isDefault(const QString& key) const;
  // Sets one key from its YAML text; false (and why) when it does not parse, the config unchanged.
  bool setValueText(const QString& key, const QString& text, QString* error);
  // Sets one key from a form's value; false (and why) when the key does not take it, the config unchanged.
  bool setBool(const QString& key, bool value, QString* error);
  bool setInt(const QString& key, qint64 value, QString* error);
  bool setString(const QString& key, const QString& value, QString* error);
  bool setStringList(const QString& key, const QStringList& value, QString* error);

  // ---- what the pages read ----
  QString family() const;             // model.arch
  qint64 trainSteps() const;          // train.steps
  QStringList samplePrompts() const;  // sample.prompts
  QStringList exportFormats() const;  // save.export_formats ("diffusers", "peft")
  // model.random_weights on while model.name_or_path holds weights (config::holdsWeights,
  // the validator's rule, the same for every family): turns it off, true when it did.
  bool randomWeightsOffForModelWeights();

  // ---- model shape ----
  // Whether an architecture override (a model-shape key) is set.
  bool hasShapeOverrides() const;
  // Every override back to its preset's value; true when one was set.
  bool clearShapeOverrides();

  // ---- datasets ----
  int datasetCount() const;
  QString datasetType(int index) const;  // "images", "jsonl"; "" when there is no such entry
  QVector<DatasetEntryView> datasets() const;
  void addDataset();         // a default entry at the end, of the family's first dataset kind
  bool removeLastDataset();  // false when there is none

  // ---- the model family ----
  // The keys set in the config that `family` does not read (config::keysNotRead).
  QVector<UnusedKeyView> unusedKeys(const QString& family) const;
  // The values a switch to `family` changes (a dataset type or a LoRA form it does not take).
  QVector<FamilyChangeView> familyChanges(const QString& family) const;
  // The keys the config's family does not read, back at their defaults.
  void dropUnusedKeys();
  // model.arch = `family` and its familyChanges; with `dropUnused` its unusedKeys go
  // back to their defaults too (else they stay, listed as unused).
  void switchFamily(const QString& family, bool dropUnused);

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
