// The config editor's schema form: a group box per schema group on the Basic and
// Advanced pages, one row per key with the editor its type calls for, read from and
// written to the document (ui/backend/ConfigDocument.h), the custom model shape, and
// the rows, choices and unused keys of the config's family. The shell (pages, YAML,
// files, problems) is ConfigEditor.cpp.
#include "ui/setup/ConfigEditor.h"

#include <QAbstractSpinBox>
#include <QCheckBox>
#include <QComboBox>
#include <QEvent>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTabWidget>
#include <QToolButton>
#include <QTreeWidget>
#include <algorithm>
#include <limits>

#include "ui/backend/ConfigDocument.h"
#include "ui/backend/ConfigViews.h"
#include "ui/setup/ConfigEditorParts.h"
#include "ui/widgets/ListEditors.h"

namespace strata::ui {

namespace {

// A wheel over a spin box or combo box that does not have focus scrolls the form
// instead of changing the value (one notch flipped a setting while scrolling).
class WheelGuard : public QObject {
 public:
  using QObject::QObject;
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() == QEvent::Wheel) {
      auto* w = qobject_cast<QWidget*>(watched);
      if (w && !w->hasFocus()) {
        event->ignore();  // ignored and filtered: Qt hands the wheel to the parents (the scroll area)
        return true;
      }
    }
    return false;
  }
};

void guardWheel(QWidget* root, QObject* guard) {
  QList<QWidget*> widgets = root->findChildren<QWidget*>();
  widgets << root;
  for (QWidget* w : widgets)
    if (qobject_cast<QAbstractSpinBox*>(w) || qobject_cast<QComboBox*>(w)) {
      w->setFocusPolicy(Qt::StrongFocus);  // a wheel does not give focus either
      w->installEventFilter(guard);
    }
}

// A string list is edited one item per line. A line break inside an item (a chat
// template's prompt) is shown as \n and a backslash as \\, so editing the list
// keeps such an item whole instead of splitting it in two.
QString itemLine(const QString& item) {
  QString s = item;
  s.replace('\\', "\\\\");
  s.replace('\n', "\\n");
  return s;
}

QString lineItem(const QString& line) {
  QString out;
  for (int i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && (line[i + 1] == 'n' || line[i + 1] == '\\')) {
      out += line[i + 1] == 'n' ? QChar('\n') : QChar('\\');
      ++i;
    } else {
      out += line[i];
    }
  }
  return out;
}

}  // namespace

namespace editor {

// The key's doc in the words of the config's family (a Llama's model.name_or_path is not a FLUX
// checkpoint), and for the dataset kinds and LoRA forms the family's choices and default, as the
// editor offers them (a family switch picks the first).
QString keyToolTip(const KeyView& spec, const QString& arch) {
  QString tip = "<b>" + spec.key.toHtmlEscaped() + "</b>";
  const QString doc = spec.docFor(arch);
  if (!doc.isEmpty()) tip += "<br>" + doc.toHtmlEscaped();
  tip += "<br><i>" + spec.typeName;
  if (!spec.unit.isEmpty()) tip += ", " + spec.unit;
  QString range = spec.rangeText;
  QString def = spec.defaultText;
  QStringList offered;
  if (spec.key == "datasets[].type") offered = familyView(arch).datasetTypes;
  if (spec.key == "save.export_formats") offered = familyView(arch).exportFormats;
  if (!offered.isEmpty()) {
    range = "one of:";
    for (const QString& c : offered) range += " " + c;
    bool offersDefault = true;
    for (const QString& c : spec.defaultItems) offersDefault = offersDefault && offered.contains(c);
    if (!offersDefault) def = spec.type == KeyKind::ChoiceList ? "[" + offered.front() + "]" : offered.front();
  }
  if (!range.isEmpty()) tip += ", " + range.toHtmlEscaped();
  tip += ", default: " + (def.isEmpty() ? QString("unset") : def.toHtmlEscaped());
  tip += "</i>";
  return tip;
}

QObject* newWheelGuard(QObject* parent) { return new WheelGuard(parent); }

}  // namespace editor

// ---- form ------------------------------------------------------------------

QGroupBox* ConfigEditor::groupFor(bool basic, const QString& group) {
  return groups_.value((basic ? "basic/" : "advanced/") + group);
}

QFormLayout* ConfigEditor::formFor(const KeyView& spec) {
  if (spec.modelShape) return static_cast<QFormLayout*>(shapeFields_->layout());
  QGroupBox* box = groupFor(spec.basic, spec.group);
  box->setVisible(true);
  return static_cast<QFormLayout*>(box->layout());
}

void ConfigEditor::buildForm() {
  // Model shape: the architecture overrides, behind one switch (only a custom model needs them).
  QGroupBox* shapeBox = groupFor(false, "Model shape");
  shapeBox->setVisible(true);
  auto* shapeForm = static_cast<QFormLayout*>(shapeBox->layout());
  customShape_ = new QCheckBox(tr("Custom model shape (override the architecture)"), shapeBox);
  customShape_->setObjectName("customModelShape");
  customShape_->setToolTip(
      tr("Only for a model whose shape differs from its preset. Turning this off sets "
         "every override back to the preset's value."));
  shapeForm->addRow(customShape_);
  shapeFields_ = new QWidget(shapeBox);
  shapeFields_->setObjectName("modelShapeFields");
  auto* inner = new QFormLayout(shapeFields_);
  inner->setContentsMargins(0, 0, 0, 0);
  shapeForm->addRow(shapeFields_);
  shapeFields_->setVisible(false);
  connect(customShape_, &QCheckBox::clicked, this, &ConfigEditor::onCustomShapeToggled);

  for (const KeyView& spec : keys_) {
    if (spec.datasetKey || spec.key == "model.arch") continue;  // the family chooser edits model.arch
    QFormLayout* form = formFor(spec);
    addField(form, spec, spec.key, -1, form->parentWidget());
  }
  // Datasets: one group per entry on each page, rebuilt when the count changes.
  QGroupBox* box = groupFor(true, "Dataset");
  box->setVisible(true);
  box->setTitle(tr("Datasets"));
  groupFor(false, "Dataset")->setTitle(tr("Datasets"));
  datasetButtonsForm_ = static_cast<QFormLayout*>(box->layout());
  auto* buttons = new QHBoxLayout;
  auto* add = new QPushButton(tr("Add dataset"), box);
  add->setObjectName("addDataset");
  auto* remove = new QPushButton(tr("Remove last dataset"), box);
  remove->setObjectName("removeDataset");
  buttons->addWidget(add);
  buttons->addWidget(remove);
  buttons->addStretch(1);
  datasetButtonsForm_->addRow(buttons);
  auto changeDatasets = [this](bool grow) {
    if (grow)
      doc_->addDataset();
    else if (!doc_->removeLastDataset())
      return;
    setModified(true);
    buildDatasetGroups();
    refreshYaml();
    validate();
    emit configChanged();
  };
  connect(add, &QPushButton::clicked, this, [changeDatasets] { changeDatasets(true); });
  connect(remove, &QPushButton::clicked, this, [changeDatasets] { changeDatasets(false); });
}

void ConfigEditor::buildDatasetGroups() {
  if (doc_->datasetCount() * 2 == datasetGroups_.size()) return;
  for (auto it = fields_.begin(); it != fields_.end();) {
    if (it->key.startsWith("datasets["))
      it = fields_.erase(it);
    else
      ++it;
  }
  for (QGroupBox* g : datasetGroups_) {
    g->hide();
    g->deleteLater();
  }
  datasetGroups_.clear();
  QGroupBox* advancedBox = groupFor(false, "Dataset");
  advancedBox->setVisible(doc_->datasetCount() > 0);
  for (int i = 0; i < doc_->datasetCount(); ++i) {
    for (bool basic : {true, false}) {
      QGroupBox* parentBox = groupFor(basic, "Dataset");
      auto* box = new QGroupBox(tr("Dataset %1").arg(i + 1), parentBox);
      box->setObjectName(QString("%1_dataset_%2").arg(basic ? "basic" : "advanced").arg(i));
      auto* form = new QFormLayout(box);
      for (const KeyView& spec : keys_)
        if (spec.datasetKey && spec.basic == basic) addField(form, spec, spec.concreteKey(i), i, box);
      static_cast<QFormLayout*>(parentBox->layout())->insertRow(i, box);
      datasetGroups_ << box;
    }
  }
  const bool wasUpdating = updating_;
  updating_ = true;  // filling the new fields is not an edit
  applyFamily();     // the new rows show only the family's keys
  for (const Field& f : fields_)
    if (f.key.startsWith("datasets[")) refreshField(f);
  updating_ = wasUpdating;
}

// The editor for one key, chosen by the key's type (and for a path, its kind).
QWidget* ConfigEditor::makeEditor(const KeyView& spec, const QString& key, QWidget* parent) {
  auto edited = [this, key] { onFieldEdited(key); };
  switch (spec.type) {
    case KeyKind::Bool: {
      auto* check = new QCheckBox(parent);
      connect(check, &QCheckBox::clicked, this, edited);
      return check;
    }
    case KeyKind::Int: {
      // A spin box holds an int: a seed above 2^31 - 1 would show (and be saved) as
      // another number. Such keys are typed as text and read back exactly.
      const bool fitsSpin = spec.max && *spec.max <= std::numeric_limits<int>::max();
      if (spec.nullable || !fitsSpin) {
        auto* line = new QLineEdit(parent);
        if (spec.nullable) line->setPlaceholderText(tr("(from the preset)"));
        connect(line, &QLineEdit::textEdited, this, edited);
        return line;
      }
      auto* spin = new QSpinBox(parent);
      const int lo =
          spec.min ? int(std::max<double>(*spec.min + (spec.minExclusive ? 1 : 0), std::numeric_limits<int>::min()))
                   : std::numeric_limits<int>::min();
      const int hi = spec.max ? int(std::min<double>(*spec.max, std::numeric_limits<int>::max()))
                              : std::numeric_limits<int>::max();
      spin->setRange(lo, hi);
      spin->setKeyboardTracking(true);
      connect(spin, qOverload<int>(&QSpinBox::valueChanged), this, edited);
      return spin;
    }
    case KeyKind::Float:
    case KeyKind::String: {
      auto* line = new QLineEdit(parent);
      if (spec.nullable) line->setPlaceholderText(tr("(unset)"));
      connect(line, &QLineEdit::textEdited, this, edited);
      return line;
    }
    case KeyKind::Choice: {
      auto* combo = new QComboBox(parent);
      for (const QString& c : spec.choices) combo->addItem(c.isEmpty() ? tr("(auto)") : c, c);
      connect(combo, qOverload<int>(&QComboBox::currentIndexChanged), this, edited);
      return combo;
    }
    case KeyKind::StringList: {
      auto* text = new QPlainTextEdit(parent);
      text->setPlaceholderText(tr("one per line (\\n for a line break inside one)"));
      text->setTabChangesFocus(true);
      text->setMaximumHeight(90);
      connect(text, &QPlainTextEdit::textChanged, this, edited);
      return text;
    }
    case KeyKind::IntList:
    case KeyKind::FloatList: {
      auto* list = new NumberListEdit(spec.type == KeyKind::IntList, spec.listSize, parent);
      connect(list, &NumberListEdit::edited, this, edited);
      return list;
    }
    case KeyKind::ChoiceList: {
      auto* list = new ChoiceListEdit(spec.choices, parent);
      connect(list, &ChoiceListEdit::edited, this, edited);
      return list;
    }
    case KeyKind::Path: {
      auto* holder = new QWidget(parent);
      auto* row = new QHBoxLayout(holder);
      row->setContentsMargins(0, 0, 0, 0);
      auto* line = new QLineEdit(holder);
      line->setObjectName("pathText");
      connect(line, &QLineEdit::textEdited, this, edited);
      row->addWidget(line, 1);
      const QString title = spec.label;
      // A jsonl dataset's file: the chooser lists JSON lines files first.
      const QString filter =
          spec.key == "datasets[].file_path" ? tr("JSON lines (*.jsonl *.json);;All files (*)") : QString();
      // One chooser per kind the key's spec names (a FLUX model is a folder or one file).
      auto addBrowse = [&](const QString& name, const QString& text, const QString& tip, KeyPathKind kind) {
        auto* browse = new QToolButton(holder);
        browse->setObjectName(name);
        browse->setText(text);
        browse->setToolTip(tip);
        connect(browse, &QToolButton::clicked, this, [this, line, title, kind, filter, edited] {
          QString chosen;
          switch (kind) {
            case KeyPathKind::Folder:
              chosen = QFileDialog::getExistingDirectory(this, title, line->text());
              break;
            case KeyPathKind::SaveFile:
              chosen = QFileDialog::getSaveFileName(this, title, line->text());
              break;
            default:
              chosen = QFileDialog::getOpenFileName(this, title, line->text(), filter);
              break;
          }
          if (chosen.isEmpty()) return;
          line->setText(chosen);
          edited();
        });
        row->addWidget(browse);
      };
      switch (spec.pathKind) {
        case KeyPathKind::Folder:
          addBrowse("browseFolder", tr("Folder..."), tr("Choose a folder"), KeyPathKind::Folder);
          break;
        case KeyPathKind::FileOrFolder:
          addBrowse("browseFolder", tr("Folder..."), tr("Choose a folder"), KeyPathKind::Folder);
          addBrowse("browseFile", tr("File..."), tr("Choose a file"), KeyPathKind::File);
          break;
        case KeyPathKind::SaveFile:
          addBrowse("browseFile", tr("File..."), tr("Choose where to write"), KeyPathKind::SaveFile);
          break;
        case KeyPathKind::File:
        case KeyPathKind::None:
          addBrowse("browseFile", tr("File..."), tr("Choose a file"), KeyPathKind::File);
          break;
      }
      return holder;
    }
  }
  return new QWidget(parent);
}

void ConfigEditor::addField(QFormLayout* form, const KeyView& spec, const QString& key, int datasetIndex,
                            QWidget* parent) {
  Field field;
  field.spec = &spec;
  field.key = key;
  field.datasetIndex = datasetIndex;
  QWidget* editor = makeEditor(spec, key, parent);
  editor->setObjectName("cfg_" + key);
  guardWheel(editor, wheelGuard_);
  field.editor = editor;
  const QString labelText = spec.label.isEmpty() ? key : tr(spec.label.toUtf8().constData());
  field.label = new QLabel(labelText, parent);
  field.label->setObjectName("label_" + key);
  field.label->setBuddy(editor);
  field.form = form;
  field.row = editor;
  if (spec.unit.isEmpty()) {
    form->addRow(field.label, editor);
  } else {
    auto* holder = new QWidget(parent);
    auto* row = new QHBoxLayout(holder);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(editor, 1);
    auto* unit = new QLabel(spec.unit, holder);
    unit->setMinimumWidth(44);
    row->addWidget(unit);
    form->addRow(field.label, holder);
    field.row = holder;
  }
  fields_[key] = field;
  const QString tip = editor::keyToolTip(spec, doc_->family());
  editor->setToolTip(tip);
  field.label->setToolTip(tip);
}

void ConfigEditor::onCustomShapeToggled(bool on) {
  shapeFields_->setVisible(on);
  if (on) return;
  // Off: the model takes its preset's shape again. An explicit edit, so it is marked and shown in the YAML.
  if (!doc_->clearShapeOverrides()) return;
  configReplaced();
  setModified(true);
}

void ConfigEditor::updateCustomShape() {
  const bool custom = doc_->hasShapeOverrides();
  // A config with overrides always shows them; without, the user's switch stays as it is.
  if (custom && !customShape_->isChecked()) customShape_->setChecked(true);
  shapeFields_->setVisible(customShape_->isChecked());
}

// ---- model family ----------------------------------------------------------

std::string ConfigEditor::family() const { return doc_->family().toStdString(); }

bool ConfigEditor::isFieldShown(const QString& key) const {
  auto it = fields_.find(key);
  return it != fields_.end() && it->shown;
}

// Rows, groups and choices for the config's family; the chooser shows it.
void ConfigEditor::applyFamily() {
  const QString arch = doc_->family();
  const bool wasUpdating = updating_;
  updating_ = true;
  const int at = family_->findData(arch);
  if (at >= 0 && at != family_->currentIndex()) {
    const QSignalBlocker block(family_);
    family_->setCurrentIndex(at);
  }
  QMap<QWidget*, int> shownIn;  // the form's owner (a group box, the shape fields) -> rows shown
  for (Field& f : fields_) {
    f.shown = f.spec->appliesTo(arch) && datasetKeyShown(f);
    f.form->setRowVisible(f.row, f.shown);
    shownIn[f.form->parentWidget()] += f.shown ? 1 : 0;
    updateChoiceItems(f);
  }
  // A group without a row for this family is hidden (the basic Dataset group keeps its buttons).
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    if (it.key().endsWith("/Dataset")) continue;
    if (it.key() == "advanced/Model shape")
      it.value()->setVisible(shownIn.value(shapeFields_) > 0);
    else
      it.value()->setVisible(shownIn.value(it.value()) > 0);
  }
  bool anyAdvancedDataset = false;
  for (QGroupBox* box : datasetGroups_) {
    const bool any = shownIn.value(box) > 0;
    box->setVisible(any);
    if (any && box->objectName().startsWith("advanced")) anyAdvancedDataset = true;
  }
  groupFor(false, "Dataset")->setVisible(anyAdvancedDataset);
  updating_ = wasUpdating;
}

// A dataset key shows for the dataset types that read it (an images dataset's caption
// settings, a jsonl file's fields), and for any other type while it is set away from
// its default, so that the validator's error about it can be fixed in the form.
bool ConfigEditor::datasetKeyShown(const Field& f) const {
  if (!f.spec->datasetKey || f.spec->datasetTypes.isEmpty()) return true;
  if (f.datasetIndex >= doc_->datasetCount()) return true;
  if (f.spec->appliesToDataset(doc_->datasetType(f.datasetIndex))) return true;
  return !doc_->isDefault(f.key);
}

// The dataset types and export formats the config's family takes; a value it
// refuses stays selectable while it is the value (so it is shown, not swapped).
void ConfigEditor::updateChoiceItems(const Field& f) {
  const FamilyView family = familyView(doc_->family());
  if (f.spec->key == "datasets[].type") {
    auto* combo = static_cast<QComboBox*>(f.editor);
    const KeyValueView value = doc_->value(f.key);
    if (!value.exists) return;
    const QString current = value.text;
    const QStringList& offered = family.datasetTypes;
    QStringList items = offered;
    if (!current.isEmpty() && !offered.contains(current)) items << current;
    QStringList have;
    for (int i = 0; i < combo->count(); ++i) have << combo->itemData(i).toString();
    if (have == items) return;
    const QSignalBlocker block(combo);
    combo->clear();
    for (const QString& t : items)
      combo->addItem(offered.contains(t) ? t : tr("%1 (not for %2)").arg(t, family.name), t);
  } else if (f.spec->key == "save.export_formats") {
    static_cast<ChoiceListEdit*>(f.editor)->setOffered(family.exportFormats);
  }
}

QStringList ConfigEditor::unusedKeys() const {
  QStringList keys;
  for (const UnusedKeyView& u : doc_->unusedKeys(doc_->family())) keys << u.key;
  return keys;
}

// The keys the family does not read, with the validator's words about each.
void ConfigEditor::refreshUnused() {
  const QString arch = doc_->family();
  const QString name = familyView(arch).name;
  const QVector<UnusedKeyView> unused = doc_->unusedKeys(arch);
  unusedList_->clear();
  for (const UnusedKeyView& u : unused) {
    QString why = tr("not used by %1").arg(name);
    for (const ProblemView& p : problems_)
      if (p.key == u.key) why += ": " + p.message;
    auto* item = new QTreeWidgetItem(unusedList_, {u.key, u.value, why});
    item->setToolTip(2, why);
  }
  unusedBox_->setTitle(
      tr("Set in this config but not used by %1 (kept in the file; the trainer ignores them)").arg(name));
  unusedBox_->setVisible(!unused.isEmpty());
}

void ConfigEditor::dropUnused() {
  doc_->dropUnusedKeys();
  configReplaced();
  setModified(true);
}

bool ConfigEditor::chooseFamily(const std::string& id) {
  const QString arch = QString::fromStdString(id);
  if (arch == doc_->family()) return true;
  const QVector<UnusedKeyView> unused = doc_->unusedKeys(arch);
  const QVector<FamilyChangeView> changes = doc_->familyChanges(arch);
  bool drop = false;
  if (!unused.isEmpty() || !changes.isEmpty()) {
    const FamilyView family = familyView(arch);
    const QString name = family.name;
    QStringList lines;
    for (const UnusedKeyView& u : unused) lines << tr("  %1: %2 (not used by %3)").arg(u.key, u.value, name);
    for (const FamilyChangeView& c : changes)
      lines << tr("  %1: %2 becomes %3 (%4 does not take %2)").arg(c.key, c.from, c.to, name);
    // The count says what the list below holds: the unused keys and the changed values.
    QString head;
    if (unused.isEmpty())
      head = tr("Switching to %1 changes %n setting(s):", "", int(changes.size())).arg(name);
    else if (changes.isEmpty())
      head = tr("%1 does not read %n setting(s) of this config:", "", int(unused.size())).arg(name);
    else
      head = tr("%1 does not read %2 of this config, and %3 change:")
                 .arg(name, tr("%n setting(s)", "", int(unused.size())), tr("%n value(s)", "", int(changes.size())));
    QMessageBox box(QMessageBox::Question, tr("Switch to %1?").arg(family.title), head, QMessageBox::NoButton, this);
    box.setObjectName("familySwitchQuestion");
    box.setInformativeText(lines.join('\n'));
    QPushButton* dropButton = nullptr;
    QPushButton* keepButton = nullptr;
    if (!unused.isEmpty()) {
      dropButton = box.addButton(tr("Drop them and switch"), QMessageBox::AcceptRole);
      dropButton->setObjectName("familyDropAndSwitch");
      keepButton = box.addButton(tr("Keep them (unused) and switch"), QMessageBox::AcceptRole);
      keepButton->setObjectName("familyKeepAndSwitch");
    } else {
      keepButton = box.addButton(tr("Switch"), QMessageBox::AcceptRole);
      keepButton->setObjectName("familySwitch");
    }
    QPushButton* cancel = box.addButton(QMessageBox::Cancel);
    cancel->setObjectName("familySwitchCancel");
    box.setDefaultButton(cancel);
    box.exec();
    if (box.clickedButton() != dropButton && box.clickedButton() != keepButton) {
      applyFamily();  // the chooser shows the family the config still has
      return false;
    }
    drop = box.clickedButton() == dropButton;
  }
  doc_->switchFamily(arch, drop);
  configReplaced();
  setModified(true);
  return true;
}

// ---- values: the document into the editors, an edit into the document ------

void ConfigEditor::refreshField(const Field& f) {
  const KeyValueView v = doc_->value(f.key);
  if (!v.exists) return;  // a dataset entry that no longer exists
  const QString& text = v.text;
  switch (f.spec->type) {
    case KeyKind::Bool:
      static_cast<QCheckBox*>(f.editor)->setChecked(text == "true");
      break;
    case KeyKind::Int:
      if (auto* spin = qobject_cast<QSpinBox*>(f.editor))
        spin->setValue(text.toInt());
      else if (auto* line = static_cast<QLineEdit*>(f.editor); line->text() != text)
        line->setText(text);
      break;
    case KeyKind::Float: {
      auto* line = static_cast<QLineEdit*>(f.editor);
      if (line->text() != text) line->setText(text);
      break;
    }
    case KeyKind::String:
    case KeyKind::Path: {
      // Strings show their value, not its YAML spelling ("" for empty, quotes).
      auto* line = f.spec->type == KeyKind::Path ? f.editor->findChild<QLineEdit*>("pathText")
                                                 : static_cast<QLineEdit*>(f.editor);
      const QString value = v.isString ? v.string : QString();
      if (line->text() != value) line->setText(value);
      break;
    }
    case KeyKind::Choice: {
      auto* combo = static_cast<QComboBox*>(f.editor);
      const int i = combo->findData(v.isString ? v.string : text);
      combo->setCurrentIndex(i >= 0 ? i : 0);
      break;
    }
    case KeyKind::StringList: {
      auto* plain = static_cast<QPlainTextEdit*>(f.editor);
      QStringList lines;
      for (const QString& item : v.items) lines << itemLine(item);
      const QString joined = lines.join('\n');
      if (plain->toPlainText() != joined) plain->setPlainText(joined);
      break;
    }
    case KeyKind::IntList:
    case KeyKind::FloatList:
      static_cast<NumberListEdit*>(f.editor)->setValues(v.items);
      break;
    case KeyKind::ChoiceList:
      static_cast<ChoiceListEdit*>(f.editor)->setChosen(v.items);
      break;
  }
}

void ConfigEditor::refreshForm() {
  updating_ = true;
  buildDatasetGroups();
  applyFamily();
  for (const Field& f : fields_) refreshField(f);
  updateCustomShape();
  updating_ = false;
}

void ConfigEditor::onFieldEdited(const QString& key) {
  if (updating_) return;
  const Field f = fields_.value(key);
  if (!f.editor) return;
  QString error;
  bool set = false;
  switch (f.spec->type) {
    case KeyKind::Bool:
      set = doc_->setBool(key, static_cast<QCheckBox*>(f.editor)->isChecked(), &error);
      break;
    case KeyKind::Int:
      if (auto* spin = qobject_cast<QSpinBox*>(f.editor))
        set = doc_->setInt(key, spin->value(), &error);
      else
        set = doc_->setValueText(key, static_cast<QLineEdit*>(f.editor)->text(), &error);
      break;
    case KeyKind::Float:
      set = doc_->setValueText(key, static_cast<QLineEdit*>(f.editor)->text(), &error);
      break;
    case KeyKind::String:
      set = doc_->setString(key, static_cast<QLineEdit*>(f.editor)->text(), &error);
      break;
    case KeyKind::Path:
      set = doc_->setString(key, f.editor->findChild<QLineEdit*>("pathText")->text(), &error);
      break;
    case KeyKind::Choice:
      set = doc_->setString(key, static_cast<QComboBox*>(f.editor)->currentData().toString(), &error);
      break;
    case KeyKind::StringList: {
      // A prompt is kept as typed (its spaces count for a causal LM); module patterns are trimmed.
      const bool asTyped = f.spec->key == "sample.prompts";
      QStringList items;
      for (const QString& l : static_cast<QPlainTextEdit*>(f.editor)->toPlainText().split('\n'))
        if (!l.trimmed().isEmpty()) items << lineItem(asTyped ? l : l.trimmed());
      set = doc_->setStringList(key, items, &error);
      break;
    }
    case KeyKind::IntList:
    case KeyKind::FloatList:
      set = doc_->setValueText(key, static_cast<NumberListEdit*>(f.editor)->yamlText(), &error);
      break;
    case KeyKind::ChoiceList:
      set = doc_->setValueText(key, static_cast<ChoiceListEdit*>(f.editor)->yamlText(), &error);
      break;
  }
  if (!set) {
    // Not a value of this key's type: the last good config is kept, and the form says why.
    doc_->setFieldError(key, error);
    validate();
    return;
  }
  doc_->clearFieldError();
  // The YAML is written anew from the form: keys it could not read leave it. Said, not silent.
  QStringList unknown;
  for (const ProblemView& p : problems_)
    if (!p.error && p.message.startsWith("unknown key") && !p.key.isEmpty()) unknown << p.key;
  if (!unknown.isEmpty())
    setFormNote(tr("The form wrote the YAML anew: the unknown key(s) %1 left it (the trainer ignored them).")
                    .arg(unknown.join(", ")));
  // A model path that holds weights turns random_weights off, and the form says so:
  // the run trains on what the user chose, never on random values by surprise. The
  // rule is the validator's (config::holdsWeights), the same for every family.
  if (key == "model.name_or_path" && doc_->randomWeightsOffForModelWeights()) {
    setFormNote(
        tr("Random weights turned off: %1 holds model weights, and the run now trains on them. For a "
           "random model, clear the model path and tick \"%2\" again.")
            .arg(doc_->stringValue("model.name_or_path"), fields_.value("model.random_weights").label
                                                              ? fields_.value("model.random_weights").label->text()
                                                              : QString("random_weights")));
  } else if (key == "model.random_weights" && unknown.isEmpty()) {
    setFormNote(QString());
  }
  const bool typeChanged = f.spec->key == "datasets[].type";
  setModified(true);
  if (auto it = fields_.find("model.random_weights"); it != fields_.end() && key == "model.name_or_path") {
    updating_ = true;
    refreshField(*it);
    updating_ = false;
  }
  if (typeChanged) applyFamily();  // the new type's keys show, the old type's hide
  refreshYaml();
  validate();
  emit configChanged();
}

}  // namespace strata::ui
