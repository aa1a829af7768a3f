#include "ui/ConfigEditor.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QStyle>
#include <QTabWidget>
#include <QTextBlock>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <limits>

#include "common/Error.h"
#include "config/ConfigSchema.h"
#include "config/RunConfig.h"
#include "ui/ConfigBackend.h"

namespace strata::ui {

using config::KeySpec;
using config::KeyType;

namespace {

QString sectionOf(const QString& path) {
  const int dot = path.indexOf('.');
  QString s = dot < 0 ? path : path.left(dot);
  if (s.startsWith("datasets")) return "datasets";
  return s;
}

QString labelOf(const QString& path) {
  QString rest = path.mid(path.indexOf('.') + 1);
  rest.replace("ema_config.", "ema ");
  rest.replace('_', ' ');
  return rest;
}

QString sectionTitle(const QString& section) {
  static const QMap<QString, QString> titles = {
      {"job", "Job"},         {"model", "Model and placement"}, {"network", "LoRA network"},
      {"train", "Training"},  {"sample", "Samples"},            {"save", "Saving and export"},
      {"datasets", "Datasets"}};
  return titles.value(section, section);
}

// A dataset key pattern "datasets[].x" made concrete for entry i.
QString concreteKey(const KeySpec& spec, int datasetIndex) {
  QString p = QString::fromStdString(spec.path);
  if (spec.isDatasetKey()) p.replace("datasets[]", QString("datasets[%1]").arg(datasetIndex));
  return p;
}

QString toolTipOf(const KeySpec& spec) {
  QString tip = "<b>" + QString::fromStdString(spec.path).toHtmlEscaped() + "</b>";
  if (!spec.doc.empty()) tip += "<br>" + QString::fromStdString(spec.doc).toHtmlEscaped();
  tip += "<br><i>" + QString::fromStdString(config::keyTypeName(spec.type));
  if (!spec.unit.empty()) tip += ", " + QString::fromStdString(spec.unit);
  const std::string range = spec.rangeText();
  if (!range.empty()) tip += ", " + QString::fromStdString(range).toHtmlEscaped();
  const std::string def = config::formatValue(spec.defaultValue);
  tip += ", default: " + (def.empty() ? QString("unset") : QString::fromStdString(def).toHtmlEscaped());
  tip += "</i>";
  return tip;
}

void repolish(QWidget* w) {
  w->style()->unpolish(w);
  w->style()->polish(w);
  w->update();
}

}  // namespace

ConfigEditor::ConfigEditor(QWidget* parent) : QWidget(parent), config_(std::make_unique<config::RunConfig>()) {
  setObjectName("configEditor");
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName("configTabs");

  auto* scroll = new QScrollArea(this);
  scroll->setObjectName("configFormScroll");
  scroll->setWidgetResizable(true);
  formPage_ = new QWidget(scroll);
  formPage_->setObjectName("configForm");
  formLayout_ = new QVBoxLayout(formPage_);
  scroll->setWidget(formPage_);
  tabs_->addTab(scroll, tr("Form"));

  yaml_ = new QPlainTextEdit(this);
  yaml_->setObjectName("yamlEdit");
  QFont mono("monospace");
  mono.setStyleHint(QFont::TypeWriter);
  yaml_->setFont(mono);
  yaml_->setLineWrapMode(QPlainTextEdit::NoWrap);
  tabs_->addTab(yaml_, tr("YAML"));
  yamlTimer_ = new QTimer(this);
  yamlTimer_->setSingleShot(true);
  yamlTimer_->setInterval(300);  // parse once typing pauses
  connect(yamlTimer_, &QTimer::timeout, this, &ConfigEditor::parseYamlNow);
  connect(yaml_, &QPlainTextEdit::textChanged, this, &ConfigEditor::onYamlEdited);

  problemSummary_ = new QLabel(this);
  problemSummary_->setObjectName("problemSummary");
  problemList_ = new QTreeWidget(this);
  problemList_->setObjectName("problemList");
  problemList_->setColumnCount(5);
  problemList_->setHeaderLabels({tr("Severity"), tr("Key"), tr("Line"), tr("Problem"), tr("Hint")});
  problemList_->setRootIsDecorated(false);
  problemList_->setAlternatingRowColors(true);
  problemList_->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
  problemList_->header()->setStretchLastSection(true);
  connect(problemList_, &QTreeWidget::itemActivated, this,
          [this](QTreeWidgetItem* item) { goToProblem(problemList_->indexOfTopLevelItem(item)); });
  connect(problemList_, &QTreeWidget::itemClicked, this,
          [this](QTreeWidgetItem* item) { goToProblem(problemList_->indexOfTopLevelItem(item)); });

  auto* bottom = new QWidget(this);
  auto* bottomLayout = new QVBoxLayout(bottom);
  bottomLayout->setContentsMargins(0, 0, 0, 0);
  bottomLayout->addWidget(problemSummary_);
  bottomLayout->addWidget(problemList_, 1);

  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName("configSplitter");
  split->addWidget(tabs_);
  split->addWidget(bottom);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(split);

  buildForm();
  newConfig();
}

ConfigEditor::~ConfigEditor() = default;

// ---- form ------------------------------------------------------------------

QGroupBox* ConfigEditor::groupFor(const QString& section) {
  if (QGroupBox* g = groups_.value(section)) return g;
  auto* box = new QGroupBox(sectionTitle(section), formPage_);
  box->setObjectName("section_" + section);
  new QFormLayout(box);
  formLayout_->addWidget(box);
  groups_[section] = box;
  return box;
}

void ConfigEditor::buildForm() {
  for (const KeySpec& spec : config::schema()) {
    if (spec.isDatasetKey()) continue;
    const QString path = QString::fromStdString(spec.path);
    QGroupBox* box = groupFor(sectionOf(path));
    addField(static_cast<QFormLayout*>(box->layout()), spec, path, box);
  }
  // Datasets: one group per entry, rebuilt when the count changes.
  auto* box = groupFor("datasets");
  auto* buttons = new QHBoxLayout;
  auto* add = new QPushButton(tr("Add dataset"), box);
  add->setObjectName("addDataset");
  auto* remove = new QPushButton(tr("Remove last dataset"), box);
  remove->setObjectName("removeDataset");
  buttons->addWidget(add);
  buttons->addWidget(remove);
  buttons->addStretch(1);
  static_cast<QFormLayout*>(box->layout())->addRow(buttons);
  connect(add, &QPushButton::clicked, this, [this] {
    config_->datasets.emplace_back();
    modified_ = true;
    buildDatasetGroups();
    refreshYaml();
    validate();
    emit configChanged();
  });
  connect(remove, &QPushButton::clicked, this, [this] {
    if (config_->datasets.empty()) return;
    config_->datasets.pop_back();
    modified_ = true;
    buildDatasetGroups();
    refreshYaml();
    validate();
    emit configChanged();
  });
  formLayout_->addStretch(1);
}

void ConfigEditor::buildDatasetGroups() {
  if (int(config_->datasets.size()) == datasetGroups_.size()) return;
  for (QGroupBox* g : datasetGroups_) {
    for (auto it = fields_.begin(); it != fields_.end();) {
      if (it->key.startsWith("datasets[")) it = fields_.erase(it);
      else ++it;
    }
    g->deleteLater();
  }
  datasetGroups_.clear();
  QGroupBox* parentBox = groups_.value("datasets");
  auto* parentForm = static_cast<QFormLayout*>(parentBox->layout());
  for (size_t i = 0; i < config_->datasets.size(); ++i) {
    auto* box = new QGroupBox(tr("datasets[%1]").arg(i), parentBox);
    box->setObjectName(QString("section_datasets_%1").arg(i));
    auto* form = new QFormLayout(box);
    for (const KeySpec& spec : config::schema())
      if (spec.isDatasetKey()) addField(form, spec, concreteKey(spec, int(i)), box);
    parentForm->insertRow(int(i), box);
    datasetGroups_ << box;
  }
  const bool wasUpdating = updating_;
  updating_ = true;  // filling the new fields is not an edit
  for (const Field& f : fields_)
    if (f.key.startsWith("datasets[")) refreshField(f);
  updating_ = wasUpdating;
}

void ConfigEditor::addField(QFormLayout* form, const KeySpec& spec, const QString& key, QWidget* parent) {
  Field field;
  field.spec = &spec;
  field.key = key;
  const QString tip = toolTipOf(spec);
  QWidget* editor = nullptr;
  switch (spec.type) {
    case KeyType::Bool: {
      auto* check = new QCheckBox(parent);
      connect(check, &QCheckBox::toggled, this, [this, key] { onFieldEdited(key); });
      editor = check;
      break;
    }
    case KeyType::Int: {
      if (spec.nullable) {
        auto* line = new QLineEdit(parent);
        line->setPlaceholderText(tr("(from the preset)"));
        connect(line, &QLineEdit::textEdited, this, [this, key] { onFieldEdited(key); });
        editor = line;
        break;
      }
      auto* spin = new QSpinBox(parent);
      const int lo = spec.min ? int(std::max<double>(*spec.min + (spec.minExclusive ? 1 : 0),
                                                     std::numeric_limits<int>::min()))
                              : std::numeric_limits<int>::min();
      const int hi = spec.max ? int(std::min<double>(*spec.max, std::numeric_limits<int>::max()))
                              : std::numeric_limits<int>::max();
      spin->setRange(lo, hi);
      spin->setKeyboardTracking(true);
      connect(spin, qOverload<int>(&QSpinBox::valueChanged), this, [this, key] { onFieldEdited(key); });
      editor = spin;
      break;
    }
    case KeyType::Choice: {
      auto* combo = new QComboBox(parent);
      for (const std::string& c : spec.choices)
        combo->addItem(c.empty() ? tr("(auto)") : QString::fromStdString(c), QString::fromStdString(c));
      connect(combo, qOverload<int>(&QComboBox::currentIndexChanged), this, [this, key] { onFieldEdited(key); });
      editor = combo;
      break;
    }
    case KeyType::StringList: {
      auto* text = new QPlainTextEdit(parent);
      text->setPlaceholderText(tr("one per line"));
      text->setTabChangesFocus(true);
      text->setMaximumHeight(90);
      connect(text, &QPlainTextEdit::textChanged, this, [this, key] { onFieldEdited(key); });
      editor = text;
      break;
    }
    case KeyType::Path: {
      auto* holder = new QWidget(parent);
      auto* row = new QHBoxLayout(holder);
      row->setContentsMargins(0, 0, 0, 0);
      auto* line = new QLineEdit(holder);
      line->setObjectName("cfg_" + key);
      connect(line, &QLineEdit::textEdited, this, [this, key] { onFieldEdited(key); });
      auto* browse = new QToolButton(holder);
      browse->setObjectName("browse_" + key);
      browse->setText("...");
      browse->setToolTip(tr("Choose a file or folder"));
      const bool folder = key.contains("folder");
      connect(browse, &QToolButton::clicked, this, [this, line, key, folder] {
        const QString chosen = folder ? QFileDialog::getExistingDirectory(this, key, line->text())
                                      : QFileDialog::getOpenFileName(this, key, line->text());
        if (chosen.isEmpty()) return;
        line->setText(chosen);
        onFieldEdited(key);
      });
      row->addWidget(line, 1);
      row->addWidget(browse);
      line->setToolTip(tip);
      field.editor = line;
      auto* label = new QLabel(labelOf(key), parent);
      label->setToolTip(tip);
      field.label = label;
      QWidget* shown = holder;
      if (!spec.unit.empty()) row->addWidget(new QLabel(QString::fromStdString(spec.unit), holder));
      form->addRow(label, shown);
      fields_[key] = field;
      return;
    }
    default: {
      auto* line = new QLineEdit(parent);
      if (spec.type == KeyType::IntList || spec.type == KeyType::FloatList || spec.type == KeyType::ChoiceList)
        line->setPlaceholderText(spec.type == KeyType::ChoiceList
                                     ? QString::fromStdString(spec.rangeText())
                                     : tr("[a, b, ...]"));
      else if (spec.nullable)
        line->setPlaceholderText(tr("(unset)"));
      connect(line, &QLineEdit::textEdited, this, [this, key] { onFieldEdited(key); });
      editor = line;
      break;
    }
  }
  editor->setObjectName("cfg_" + key);
  editor->setToolTip(tip);
  field.editor = editor;
  auto* label = new QLabel(labelOf(key), parent);
  label->setToolTip(tip);
  field.label = label;
  if (spec.unit.empty()) {
    form->addRow(label, editor);
  } else {
    auto* holder = new QWidget(parent);
    auto* row = new QHBoxLayout(holder);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(editor, 1);
    auto* unit = new QLabel(QString::fromStdString(spec.unit), holder);
    unit->setMinimumWidth(44);
    row->addWidget(unit);
    form->addRow(label, holder);
  }
  fields_[key] = field;
}

QWidget* ConfigEditor::fieldFor(const QString& key) const {
  auto it = fields_.find(key);
  return it == fields_.end() ? nullptr : it->editor;
}

void ConfigEditor::refreshField(const Field& f) {
  QString text;
  try {
    text = QString::fromStdString(config::getValueText(*config_, f.key.toStdString()));
  } catch (const std::exception&) {
    return;  // a dataset entry that no longer exists
  }
  if (auto* check = qobject_cast<QCheckBox*>(f.editor)) {
    check->setChecked(text == "true");
  } else if (auto* spin = qobject_cast<QSpinBox*>(f.editor)) {
    spin->setValue(text.toInt());
  } else if (auto* combo = qobject_cast<QComboBox*>(f.editor)) {
    const int i = combo->findData(text);
    combo->setCurrentIndex(i >= 0 ? i : 0);
  } else if (auto* plain = qobject_cast<QPlainTextEdit*>(f.editor)) {
    const config::Value v = config::getValue(*config_, f.key.toStdString());
    QStringList lines;
    if (auto* list = std::get_if<std::vector<std::string>>(&v))
      for (const std::string& s : *list) lines << QString::fromStdString(s);
    if (plain->toPlainText() != lines.join('\n')) plain->setPlainText(lines.join('\n'));
  } else if (auto* line = qobject_cast<QLineEdit*>(f.editor)) {
    // Strings show their value, not its YAML spelling ("" for empty, quotes).
    if (f.spec->type == KeyType::String || f.spec->type == KeyType::Path) {
      const config::Value v = config::getValue(*config_, f.key.toStdString());
      if (auto* str = std::get_if<std::string>(&v)) text = QString::fromStdString(*str);
    }
    if (line->text() != text) line->setText(text);
  }
}

void ConfigEditor::refreshForm() {
  updating_ = true;
  buildDatasetGroups();
  for (const Field& f : fields_) refreshField(f);
  updating_ = false;
}

void ConfigEditor::onFieldEdited(const QString& key) {
  if (updating_) return;
  const Field f = fields_.value(key);
  if (!f.editor) return;
  config::RunConfig next = *config_;
  try {
    if (auto* check = qobject_cast<QCheckBox*>(f.editor)) {
      config::setValueText(next, key.toStdString(), check->isChecked() ? "true" : "false");
    } else if (auto* spin = qobject_cast<QSpinBox*>(f.editor)) {
      config::setValueText(next, key.toStdString(), std::to_string(spin->value()));
    } else if (auto* combo = qobject_cast<QComboBox*>(f.editor)) {
      config::setValue(next, key.toStdString(), config::Value(combo->currentData().toString().toStdString()));
    } else if (auto* plain = qobject_cast<QPlainTextEdit*>(f.editor)) {
      std::vector<std::string> items;
      for (const QString& l : plain->toPlainText().split('\n'))
        if (!l.trimmed().isEmpty()) items.push_back(l.trimmed().toStdString());
      config::setValue(next, key.toStdString(), config::Value(items));
    } else if (auto* line = qobject_cast<QLineEdit*>(f.editor)) {
      if (f.spec->type == KeyType::String || f.spec->type == KeyType::Path)
        config::setValue(next, key.toStdString(), config::Value(line->text().toStdString()));
      else
        config::setValueText(next, key.toStdString(), line->text().toStdString());
    }
  } catch (const std::exception& e) {
    // Not a value of this key's type: keep the last good config, show why.
    fieldError_ = QString::fromUtf8(e.what());
    fieldErrorKey_ = key;
    validate();
    return;
  }
  fieldError_.clear();
  fieldErrorKey_.clear();
  *config_ = std::move(next);
  modified_ = true;
  refreshYaml();
  validate();
  emit configChanged();
}

// ---- YAML ------------------------------------------------------------------

void ConfigEditor::refreshYaml() {
  yamlSource_ = QString::fromStdString(backend::toYaml(*config_));
  if (yaml_->toPlainText() == yamlSource_) return;
  updating_ = true;
  // Keep the reader's place in the text when the form rewrites it.
  const int scroll = yaml_->verticalScrollBar() ? yaml_->verticalScrollBar()->value() : 0;
  yaml_->setPlainText(yamlSource_);
  if (yaml_->verticalScrollBar()) yaml_->verticalScrollBar()->setValue(scroll);
  updating_ = false;
}

void ConfigEditor::onYamlEdited() {
  if (updating_) return;
  modified_ = true;
  yamlTimer_->start();
}

void ConfigEditor::parseYamlNow() {
  yamlTimer_->stop();
  const QString text = yaml_->toPlainText();
  backend::ParseResult parsed = backend::parseYaml(text.toStdString(), filePath_.toStdString());
  fieldError_.clear();
  fieldErrorKey_.clear();
  if (!parsed.ok) {
    QVector<ProblemView> problems;
    for (const auto& p : parsed.problems) problems << p;
    setProblems(problems);
    return;
  }
  *config_ = parsed.config;
  yamlSource_ = text;
  refreshForm();
  validate();
  emit configChanged();
}

void ConfigEditor::setYamlText(const QString& text) {
  updating_ = true;
  yaml_->setPlainText(text);
  updating_ = false;
  parseYamlNow();
}

QString ConfigEditor::yamlText() const { return yaml_->toPlainText(); }

bool ConfigEditor::setValueText(const QString& key, const QString& text, QString* error) {
  config::RunConfig next = *config_;
  try {
    config::setValueText(next, key.toStdString(), text.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  *config_ = std::move(next);
  modified_ = true;
  refreshForm();
  refreshYaml();
  validate();
  emit configChanged();
  return true;
}

QString ConfigEditor::valueText(const QString& key) const {
  try {
    return QString::fromStdString(config::getValueText(*config_, key.toStdString()));
  } catch (const std::exception&) {
    return QString();
  }
}

const config::RunConfig& ConfigEditor::config() const { return *config_; }

void ConfigEditor::setConfig(const config::RunConfig& cfg) {
  *config_ = cfg;
  fieldError_.clear();
  fieldErrorKey_.clear();
  refreshForm();
  refreshYaml();
  validate();
  emit configChanged();
}

// ---- files -----------------------------------------------------------------

void ConfigEditor::newConfig() {
  setFilePath(QString());
  setConfig(backend::defaultConfig());
  modified_ = false;
}

bool ConfigEditor::loadFile(const QString& path, QString* error) {
  std::string text;
  try {
    text = backend::readText(path.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  backend::ParseResult parsed = backend::parseYaml(text, path.toStdString());
  if (!parsed.ok) {
    if (error) {
      QStringList lines;
      for (const auto& p : parsed.problems)
        lines << (p.line ? QString("%1:%2: %3").arg(path).arg(p.line).arg(p.message) : p.message);
      *error = lines.join('\n');
    }
    return false;
  }
  setFilePath(path);
  *config_ = parsed.config;
  updating_ = true;
  yaml_->setPlainText(QString::fromStdString(text));
  updating_ = false;
  yamlSource_ = QString::fromStdString(text);
  fieldError_.clear();
  fieldErrorKey_.clear();
  refreshForm();
  validate();
  modified_ = false;
  emit configChanged();
  return true;
}

bool ConfigEditor::saveFile(const QString& path, QString* error) {
  if (yamlTimer_->isActive()) parseYamlNow();
  try {
    backend::writeText(path.toStdString(), yaml_->toPlainText().toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  setFilePath(path);
  modified_ = false;
  return true;
}

bool ConfigEditor::importAiToolkit(const QString& path, QString* error) {
  config::RunConfig cfg;
  QStringList notes;
  try {
    cfg = backend::importAiToolkit(path.toStdString(), &notes);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  setFilePath(QString());  // an import is a new Strata config until saved
  setConfig(cfg);
  modified_ = true;
  if (error) *error = notes.join('\n');
  return true;
}

void ConfigEditor::setFilePath(const QString& path) {
  if (filePath_ == path) return;
  filePath_ = path;
  emit filePathChanged(path);
}

// ---- validation ------------------------------------------------------------

void ConfigEditor::validate() {
  QVector<ProblemView> problems = backend::validate(*config_, yamlSource_.toStdString());
  if (!fieldError_.isEmpty()) {
    ProblemView p;
    p.error = true;
    p.key = fieldErrorKey_;
    p.message = fieldError_;
    p.hint = tr("the last valid value is kept until this one parses");
    problems.prepend(p);
  }
  setProblems(problems);
}

bool ConfigEditor::hasErrors() const {
  for (const ProblemView& p : problems_)
    if (p.error) return true;
  return false;
}

void ConfigEditor::setProblems(const QVector<ProblemView>& problems) {
  problems_ = problems;
  problemList_->clear();
  int errors = 0, warnings = 0;
  for (const ProblemView& p : problems_) {
    auto* item = new QTreeWidgetItem(problemList_);
    item->setIcon(0, style()->standardIcon(p.error ? QStyle::SP_MessageBoxCritical : QStyle::SP_MessageBoxWarning));
    item->setText(0, p.error ? tr("error") : tr("warning"));
    item->setText(1, p.key);
    item->setText(2, p.line ? QString::number(p.line) : QString());
    item->setText(3, p.message);
    item->setText(4, p.hint);
    item->setToolTip(3, p.message);
    item->setToolTip(4, p.hint);
    (p.error ? errors : warnings)++;
  }
  if (errors == 0 && warnings == 0) {
    problemSummary_->setText(tr("No problems: ready to start."));
    problemSummary_->setStyleSheet("color: #2e7d32;");
  } else {
    problemSummary_->setText(tr("%1 error(s), %2 warning(s)%3")
                                 .arg(errors)
                                 .arg(warnings)
                                 .arg(errors ? tr(": fix the errors to start") : QString()));
    problemSummary_->setStyleSheet(errors ? "color: #c62828; font-weight: bold;" : "color: #9a6b00;");
  }
  markFields();
  emit problemsChanged();
  const bool ok = errors == 0;
  if (ok != lastOk_) {
    lastOk_ = ok;
    emit validityChanged(ok);
  }
}

void ConfigEditor::markFields() {
  for (Field& f : fields_) {
    QString severity, tip;
    for (const ProblemView& p : problems_) {
      if (p.key != f.key && !(f.key.startsWith(p.key + ".") || p.key.startsWith(f.key + "["))) continue;
      if (p.error || severity.isEmpty()) severity = p.error ? "error" : "warning";
      tip += "<br><b>" + (p.error ? tr("error") : tr("warning")) + ":</b> " + p.message.toHtmlEscaped();
      if (!p.hint.isEmpty()) tip += "<br><i>" + p.hint.toHtmlEscaped() + "</i>";
    }
    if (f.editor->property("problem").toString() != severity) {
      f.editor->setProperty("problem", severity);
      f.label->setProperty("problem", severity);
      repolish(f.editor);
      repolish(f.label);
    }
    const QString base = toolTipOf(*f.spec);
    f.editor->setToolTip(base + tip);
    f.label->setToolTip(base + tip);
  }
}

void ConfigEditor::goToProblem(int index) {
  if (index < 0 || index >= problems_.size()) return;
  const ProblemView& p = problems_[index];
  if (tabs_->currentWidget() == yaml_ && p.line > 0) {
    QTextCursor c(yaml_->document()->findBlockByLineNumber(p.line - 1));
    yaml_->setTextCursor(c);
    yaml_->centerCursor();
    yaml_->setFocus();
    return;
  }
  if (QWidget* w = fieldFor(p.key)) {
    tabs_->setCurrentIndex(0);
    if (auto* scroll = qobject_cast<QScrollArea*>(tabs_->widget(0))) scroll->ensureWidgetVisible(w);
    w->setFocus();
  } else if (p.line > 0) {
    tabs_->setCurrentWidget(yaml_);
    QTextCursor c(yaml_->document()->findBlockByLineNumber(p.line - 1));
    yaml_->setTextCursor(c);
    yaml_->centerCursor();
  }
}

}  // namespace strata::ui
