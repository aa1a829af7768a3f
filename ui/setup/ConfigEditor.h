#pragma once
// The run-config editor: a Basic page (the few settings most runs change), an
// Advanced page (everything else) and a YAML tab, kept in sync. The form is built
// from the config schema: labels in plain words, the YAML key and doc string in
// the tooltip, the editor chosen by the key's type (a list gets a list editor, a
// path key the chooser its spec names). Model shape overrides show only for a
// custom model. A mouse wheel changes a field only when it has focus.
// Every edit is validated at once: the problems are listed (severity, key, line,
// hint), the offending field is marked, and hasErrors() gates Start.
// The model family (model.arch) is chosen first, above the form: the form shows
// only the keys that family reads; a key set in the config that it does not read
// is listed under the chooser (with the validator's words), never dropped unasked.
// The config, its file, unsaved state and problems are a ConfigDocument
// (ui/backend/ConfigDocument.h): this widget is the schema form over it, built
// from the schema's keys as plain Qt values (ui/backend/ConfigViews.h).
#include <QMap>
#include <QString>
#include <QVector>
#include <QWidget>
#include <memory>
#include <string>

#include "ui/backend/ConfigViews.h"
#include "ui/backend/ViewModel.h"

class QCheckBox;
class QComboBox;
class QPushButton;
class QLabel;
class QPlainTextEdit;
class QTabWidget;
class QTimer;
class QTreeWidget;
class QVBoxLayout;
class QGroupBox;
class QFormLayout;

namespace strata::ui {

class ConfigDocument;

class ConfigEditor : public QWidget {
  Q_OBJECT
 public:
  explicit ConfigEditor(QWidget* parent = nullptr);
  ~ConfigEditor() override;

  // Strata YAML. A file that cannot be read (missing, unreadable) changes nothing and
  // `error` says why; a text with problems (a syntax error, a bad value, an unknown
  // key) opens with them listed (see loadText).
  bool loadFile(const QString& path, QString* error = nullptr);
  // Writes the YAML tab's text (atomically). Sets filePath().
  bool saveFile(const QString& path, QString* error = nullptr);
  // An ai-toolkit job file (config: process: [...]) converted to a Strata config.
  // What was dropped or changed stays listed as warnings (importNotes()) until the
  // next open or new config.
  bool importAiToolkit(const QString& path, QString* error = nullptr);
  QVector<ProblemView> importNotes() const;
  // A new config with the schema's defaults.
  void newConfig();
  // A new, untitled config (no file path) from YAML text (a template); unmodified
  // until edited (a caller that makes a new config from it marks it with
  // setModified(true)). A text with reading errors (syntax, a value of the wrong
  // type) is opened as it is: the YAML tab shows it, the problems are listed with
  // their lines, and the form is read-only (isFormLocked) until the YAML reads
  // cleanly, so that a form edit cannot rewrite the user's text. Returns true;
  // `error` is kept for callers.
  bool loadText(const QString& text, const QString& sourceName, QString* error = nullptr);
  // True while the YAML has reading errors: the form shows the last config read and
  // takes no edits (a banner, objectName "formLocked", says why).
  bool isFormLocked() const { return formLocked_; }
  // What the editor changed on its own after an edit (e.g. random_weights turned off
  // when the model path holds weights), shown above the form; "" when nothing.
  QString formNote() const;

  // As if typed into the YAML tab: parsed, the form updated, validated now.
  void setYamlText(const QString& text);
  QString yamlText() const;
  // Sets one key from its YAML text ("model.low_vram", "true"), as a form edit would.
  bool setValueText(const QString& key, const QString& text, QString* error = nullptr);
  QString valueText(const QString& key) const;

  QVector<ProblemView> problems() const { return problems_; }
  bool hasErrors() const;
  QString filePath() const;
  bool isModified() const;
  // Unsaved changes (the title's *, the question before it is dropped): a config
  // made from a template is unsaved until it is saved.
  void setModified(bool modified);
  // Shows the Basic or the Advanced page (or the YAML tab).
  void showPage(const QString& name);  // "basic", "advanced", "yaml"
  // The editor widget of a key ("model.low_vram", "datasets[0].folder_path"); null if none.
  // model.arch's is the family chooser.
  QWidget* fieldFor(const QString& key) const;

  // The family the form shows (the config's model.arch).
  std::string family() const;
  // Switches the family as the chooser does. When the config holds settings the
  // new family does not read, or values it refuses, a question (objectName
  // "familySwitchQuestion") lists them: drop them and switch, keep them (listed as
  // unused) and switch, or cancel. Returns false when cancelled (nothing changes).
  bool chooseFamily(const std::string& arch);
  // Keys set in the config that its family does not read, as the list under the
  // chooser shows them ("datasets[0].folder_path").
  QStringList unusedKeys() const;
  // Whether a key's row is shown in the form (it exists and its family reads it).
  bool isFieldShown(const QString& key) const;
  // What the form edits: the config and its file, unsaved state and problems
  // (the config itself: document()->config(), for the backend and the tests).
  ConfigDocument* document() const { return doc_; }

 signals:
  void configChanged();           // after every accepted edit (form or YAML)
  void problemsChanged();         // after every validation
  void validityChanged(bool ok);  // ok = no errors
  void filePathChanged(const QString& path);
  void modifiedChanged(bool modified);

 private:
  struct Field {
    const KeyView* spec = nullptr;  // in keys_
    QString key;                    // concrete path
    int datasetIndex = -1;          // a dataset key's entry
    QWidget* editor = nullptr;
    QLabel* label = nullptr;
    QWidget* row = nullptr;  // what the form holds: the editor, or the editor with its unit
    QFormLayout* form = nullptr;
    bool shown = true;  // read by the config's family
  };

  void buildForm();
  void buildDatasetGroups();
  QGroupBox* groupFor(bool basic, const QString& group);
  QFormLayout* formFor(const KeyView& spec);
  void addField(QFormLayout* form, const KeyView& spec, const QString& key, int datasetIndex, QWidget* parent);
  QWidget* makeEditor(const KeyView& spec, const QString& key, QWidget* parent);
  void onCustomShapeToggled(bool on);
  void updateCustomShape();
  void refreshForm();
  void applyFamily();
  void updateChoiceItems(const Field& field);
  void refreshUnused();
  void dropUnused();
  void refreshField(const Field& field);
  void refreshYaml();
  void configReplaced();
  void onFieldEdited(const QString& key);
  void onYamlEdited();
  void parseYamlNow();
  void validate();
  void setProblems(const QVector<ProblemView>& problems);
  void markFields();
  void goToProblem(int index);
  void setFilePath(const QString& path);
  void setFormLocked(bool locked);
  void setFormNote(const QString& text);
  bool datasetKeyShown(const Field& f) const;

  // The config, its source text, file, unsaved state, import notes and field error.
  ConfigDocument* doc_ = nullptr;
  const QVector<KeyView> keys_;    // the schema's keys, as the form was built from them
  QVector<ProblemView> problems_;  // as shown
  bool updating_ = false;          // set while the editor writes into its own widgets
  bool lastOk_ = true;
  bool formLocked_ = false;
  bool relayoutQueued_ = false;  // the problem list's rows, after a column resize
  QLabel* formLock_ = nullptr;
  QLabel* formNote_ = nullptr;

  QComboBox* family_ = nullptr;
  QGroupBox* unusedBox_ = nullptr;
  QTreeWidget* unusedList_ = nullptr;
  QPushButton* dropUnused_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QWidget* basicPage_ = nullptr;
  QWidget* advancedPage_ = nullptr;
  QMap<QString, QGroupBox*> groups_;  // "basic/Model", "advanced/GPUs"
  QVector<QGroupBox*> datasetGroups_;
  QFormLayout* datasetButtonsForm_ = nullptr;
  QCheckBox* customShape_ = nullptr;
  QWidget* shapeFields_ = nullptr;
  QObject* wheelGuard_ = nullptr;
  QMap<QString, Field> fields_;  // concrete key -> field
  QPlainTextEdit* yaml_ = nullptr;
  QTimer* yamlTimer_ = nullptr;
  QTreeWidget* problemList_ = nullptr;
  QLabel* problemSummary_ = nullptr;
};

}  // namespace strata::ui
