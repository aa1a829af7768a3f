#pragma once
// What the app's pages read of the config schema and the model families, as plain
// Qt values: the form's keys (config::schema(), one KeyView per row), the families
// (config/FamilyRegistry.h: names, dataset types, LoRA forms), their templates
// (train/ConfigTemplates.h), and the text files a config is read from and written
// to. Filled by strata_ui_backend; no core header here, so ui/app, ui/setup, ui/run
// and ui/dialogs (strata_ui, which cannot include one) build on these.
#include <QMap>
#include <QString>
#include <QStringList>
#include <QVector>
#include <optional>
#include <string>

namespace strata::ui {

// A key's type (config::KeyType): the form picks its editor by it.
enum class KeyKind { Bool, Int, Float, String, Path, Choice, IntList, FloatList, StringList, ChoiceList };

// What a Path key names (config::PathKind): the chooser the form offers.
enum class KeyPathKind { None, File, Folder, FileOrFolder, SaveFile };

// One key of the schema, as the form shows it.
struct KeyView {
  QString key;              // "train.lr"; a dataset key's pattern: "datasets[].folder_path"
  QString label;            // user words: "Rank"
  QString group;            // the form's group: "LoRA"
  bool basic = false;       // on the Basic page (else Advanced)
  bool modelShape = false;  // an architecture override (only a custom model needs it)
  bool datasetKey = false;  // a key of each datasets[] entry
  KeyKind type = KeyKind::String;
  KeyPathKind pathKind = KeyPathKind::None;
  QString typeName;                   // "float", "int list"
  QString unit;                       // "steps", "GB", or empty
  QString doc;                        // the shared words of its tooltip
  QMap<QString, QString> familyDocs;  // a family's own words for the key (model.name_or_path)
  std::optional<double> min, max;     // numbers and number lists (each element)
  bool minExclusive = false;
  bool nullable = false;     // may be unset (architecture overrides)
  int listSize = 0;          // a list's fixed element count; 0 = any
  QStringList choices;       // Choice / ChoiceList
  QString rangeText;         // "[1e-06, 1]", "(0, 1]", "one of: a b", ""
  QString defaultText;       // the default as YAML flow text ("" = unset)
  QStringList defaultItems;  // a string default ([it]) or a string list default (its items); else empty
  QStringList families;      // the families that read it; empty = every family
  QStringList datasetTypes;  // a dataset key: the types that read it; empty = every type

  bool appliesTo(const QString& family) const { return families.isEmpty() || families.contains(family); }
  bool appliesToDataset(const QString& type) const { return datasetTypes.isEmpty() || datasetTypes.contains(type); }
  // The tooltip's words in the family's terms (a Llama's model.name_or_path is not a FLUX checkpoint).
  QString docFor(const QString& family) const { return familyDocs.value(family, doc); }
  // A dataset key made concrete for entry i ("datasets[2].folder_path"); other keys as they are.
  QString concreteKey(int datasetIndex) const;
};

// Every key of the schema, in the saver's order (the families' rows included).
QVector<KeyView> formKeys();
// The form's groups in display order ("Run", "Model", ...).
QStringList formGroups();

// One key's value in a config, for the form.
struct KeyValueView {
  bool exists = false;  // false: no such key (a dataset entry that is gone)
  QString text;         // YAML flow text: "0.0001", "true", "[0, 1]", "" for unset
  bool isString = false;
  QString string;     // a string value as it is (not its YAML spelling)
  QStringList items;  // a list's items (numbers as the config writes them)
};

// A key set away from its default ("datasets[0].folder_path", its value as YAML
// text) that a family does not read (config::keysNotRead, the validator's list).
struct UnusedKeyView {
  QString key;
  QString value;
};

// A value of a key both families read that a family refuses, and what a switch to it sets.
struct FamilyChangeView {
  QString key;
  QString from;
  QString to;
};

// A registered model family, as the choosers and dialogs name it.
struct FamilyView {
  QString id;                 // model.arch: "flux"
  QString name;               // "FLUX.1" (an unregistered family: its id)
  QString title;              // what a run trains: "FLUX.1 image LoRA" (else its name)
  QStringList datasetTypes;   // the dataset types it trains on, the one a switch sets first
  QStringList exportFormats;  // the LoRA forms it writes ("diffusers", "peft"), the one a switch sets first
};

// Every registered family, in the chooser's order.
QVector<FamilyView> familyViews();
// The family `id`; one this build has not registered: its id as its name, nothing offered.
FamilyView familyView(const QString& id);

// A config template a family brings (ModelFamily::templates): a shipped configs/
// file, built into the app as a resource.
struct ConfigTemplate {
  QString id;          // "demo"
  QString title;       // "CPU demo (tiny model, no download)"
  QString summary;     // two lines on what it is for
  QString resource;    // ":/strata/templates/demo.yaml"
  std::string family;  // the template's model.arch
  // A template of the user's own data: the key it goes into, folder or file, and the question.
  QString dataKey;
  bool dataIsFolder = true;
  QString dataQuestion;
  QString modelQuestion;  // the user's base model, asked for after the data (empty: not asked)
  QString modelKey;
  QString firstLaunch;  // the first-launch button's words; empty: not offered there
  QString firstLaunchTip;
};

// Every registered family's templates, the families in familyViews() order.
QVector<ConfigTemplate> familyTemplates();

// A config's text file read with the core's reader (it refuses a FIFO or a device
// instead of blocking, and a file over the config cap); false and why when it cannot be.
bool readTextFile(const QString& path, QString* text, QString* error = nullptr);
// Written atomically (a crash leaves the old file or the new one); false and why when it cannot be.
bool writeTextFile(const QString& path, const QString& text, QString* error = nullptr);

}  // namespace strata::ui
