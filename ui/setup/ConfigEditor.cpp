// The config editor's shell: its pages and the family chooser, the YAML tab, files,
// and the problem list. The schema form (its rows, editors and the family's rows) is
// ConfigEditorForm.cpp.
#include "ui/setup/ConfigEditor.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QStyle>
#include <QStyledItemDelegate>
#include <QTabWidget>
#include <QTextBlock>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/backend/ConfigDocument.h"
#include "ui/backend/ConfigViews.h"
#include "ui/setup/ConfigEditorParts.h"

namespace strata::ui {

namespace {

QString slug(const QString& group) {
  QString s = group.toLower();
  for (QChar& c : s)
    if (!c.isLetterOrNumber()) c = '_';
  return s;
}

// A tree view asks a row's height with a rect of no width or height, which Qt's style
// reads as "no wrapping": the column's width from the header, and the row fits its
// wrapped text (laid out again when a column's width changes).
class WrappingDelegate : public QStyledItemDelegate {
 public:
  explicit WrappingDelegate(QTreeView* view) : QStyledItemDelegate(view), view_(view) {}
  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override {
    QStyleOptionViewItem o(option);
    // Only the stretched columns wrap (the message, the hint); the others size to their text.
    const int width = view_->header()->sectionResizeMode(index.column()) == QHeaderView::Stretch
                          ? view_->header()->sectionSize(index.column())
                          : 0;
    if (width > 0) o.rect = QRect(0, 0, width, std::max(1, o.rect.height()));
    return QStyledItemDelegate::sizeHint(o, index);
  }

 private:
  QTreeView* view_;
};

void repolish(QWidget* w) {
  w->style()->unpolish(w);
  w->style()->polish(w);
  w->update();
}

}  // namespace

ConfigEditor::ConfigEditor(QWidget* parent) : QWidget(parent), doc_(new ConfigDocument(this)), keys_(formKeys()) {
  setObjectName("configEditor");
  connect(doc_, &ConfigDocument::filePathChanged, this, &ConfigEditor::filePathChanged);
  connect(doc_, &ConfigDocument::modifiedChanged, this, &ConfigEditor::modifiedChanged);
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName("configTabs");

  wheelGuard_ = editor::newWheelGuard(this);
  auto makePage = [this](const QString& name, const QString& title) {
    auto* scroll = new QScrollArea(this);
    scroll->setObjectName(name + "Scroll");
    scroll->setWidgetResizable(true);
    auto* page = new QWidget(scroll);
    page->setObjectName(name + "Page");
    auto* layout = new QVBoxLayout(page);
    // One group box per schema group, in the schema's order; empty ones stay hidden.
    for (const QString& g : formGroups()) {
      auto* box = new QGroupBox(tr(g.toUtf8().constData()), page);
      box->setObjectName(name + "_" + slug(g));
      new QFormLayout(box);
      box->setVisible(false);
      layout->addWidget(box);
      groups_[name + "/" + g] = box;
    }
    layout->addStretch(1);
    scroll->setWidget(page);
    tabs_->addTab(scroll, title);
    return page;
  };
  basicPage_ = makePage("basic", tr("Basic"));
  advancedPage_ = makePage("advanced", tr("Advanced"));

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
  // Long messages wrap in their column instead of running off to the right.
  problemList_->setWordWrap(true);
  problemList_->setItemDelegate(new WrappingDelegate(problemList_));
  problemList_->setUniformRowHeights(false);
  problemList_->setTextElideMode(Qt::ElideNone);
  problemList_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  problemList_->header()->setStretchLastSection(false);
  for (int c : {0, 1, 2}) problemList_->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  problemList_->header()->setSectionResizeMode(3, QHeaderView::Stretch);
  problemList_->header()->setSectionResizeMode(4, QHeaderView::Stretch);
  // A row's height follows its wrapped text: laid out again when a column's width changes.
  connect(problemList_->header(), &QHeaderView::sectionResized, problemList_, [this] {
    if (!relayoutQueued_) {
      relayoutQueued_ = true;
      QTimer::singleShot(0, this, [this] {
        relayoutQueued_ = false;
        problemList_->doItemsLayout();
      });
    }
  });
  connect(problemList_, &QTreeWidget::itemActivated, this,
          [this](QTreeWidgetItem* item) { goToProblem(problemList_->indexOfTopLevelItem(item)); });
  connect(problemList_, &QTreeWidget::itemClicked, this,
          [this](QTreeWidgetItem* item) { goToProblem(problemList_->indexOfTopLevelItem(item)); });

  auto* bottom = new QWidget(this);
  auto* bottomLayout = new QVBoxLayout(bottom);
  bottomLayout->setContentsMargins(0, 0, 0, 0);
  bottomLayout->addWidget(problemSummary_);
  bottomLayout->addWidget(problemList_, 1);

  // The family first: it decides which keys the form shows.
  family_ = new QComboBox(this);
  family_->setObjectName("familyChoice");
  for (const FamilyView& f : familyViews()) family_->addItem(f.title, f.id);
  family_->setToolTip(
      tr("<b>model.arch</b><br>What the run trains: the form shows the settings this family "
         "reads."));
  connect(family_, qOverload<int>(&QComboBox::activated), this, [this](int index) {
    const QString name = family_->itemData(index).toString();
    for (const FamilyView& f : familyViews())
      if (f.id == name) chooseFamily(f.id.toStdString());
  });
  auto* familyLabel = new QLabel(tr("Model family:"), this);
  familyLabel->setObjectName("label_model.arch");
  familyLabel->setBuddy(family_);
  auto* familyRow = new QHBoxLayout;
  familyRow->addWidget(familyLabel);
  familyRow->addWidget(family_, 1);

  unusedBox_ = new QGroupBox(this);
  unusedBox_->setObjectName("unusedKeys");
  auto* unusedLayout = new QVBoxLayout(unusedBox_);
  unusedList_ = new QTreeWidget(unusedBox_);
  unusedList_->setObjectName("unusedKeyList");
  unusedList_->setColumnCount(3);
  unusedList_->setHeaderLabels({tr("Key"), tr("Value"), tr("Why")});
  unusedList_->setRootIsDecorated(false);
  unusedList_->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
  unusedList_->header()->setStretchLastSection(true);
  unusedList_->setMaximumHeight(110);
  dropUnused_ = new QPushButton(tr("Drop these settings"), unusedBox_);
  dropUnused_->setObjectName("dropUnusedKeys");
  dropUnused_->setToolTip(tr("Set them back to their defaults (they leave the YAML)"));
  connect(dropUnused_, &QPushButton::clicked, this, &ConfigEditor::dropUnused);
  unusedLayout->addWidget(unusedList_);
  unusedLayout->addWidget(dropUnused_, 0, Qt::AlignLeft);
  unusedBox_->hide();

  formLock_ =
      new QLabel(tr("The YAML has errors the form cannot show (listed below): fix them in the YAML tab. The form is "
                    "read-only until then, so that it cannot rewrite your text."),
                 this);
  formLock_->setObjectName("formLocked");
  formLock_->setWordWrap(true);
  formLock_->setProperty("problem", "error");
  formLock_->hide();
  formNote_ = new QLabel(this);
  formNote_->setObjectName("formNote");
  formNote_->setWordWrap(true);
  formNote_->setProperty("problem", "warning");
  formNote_->hide();

  auto* top = new QWidget(this);
  auto* topLayout = new QVBoxLayout(top);
  topLayout->setContentsMargins(0, 0, 0, 0);
  topLayout->addLayout(familyRow);
  topLayout->addWidget(formLock_);
  topLayout->addWidget(formNote_);
  topLayout->addWidget(unusedBox_);
  topLayout->addWidget(tabs_, 1);

  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName("configSplitter");
  split->addWidget(top);
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

void ConfigEditor::setModified(bool modified) { doc_->setModified(modified); }

void ConfigEditor::showPage(const QString& name) {
  if (name == "basic")
    tabs_->setCurrentIndex(0);
  else if (name == "advanced")
    tabs_->setCurrentIndex(1);
  else if (name == "yaml")
    tabs_->setCurrentWidget(yaml_);
}

QWidget* ConfigEditor::fieldFor(const QString& key) const {
  if (key == "model.arch") return family_;
  auto it = fields_.find(key);
  return it == fields_.end() ? nullptr : it->editor;
}

// ---- YAML ------------------------------------------------------------------

void ConfigEditor::refreshYaml() {
  const QString yamlSource = doc_->writeYaml();
  if (yaml_->toPlainText() == yamlSource) return;
  updating_ = true;
  // Keep the reader's place in the text when the form rewrites it.
  const int scroll = yaml_->verticalScrollBar() ? yaml_->verticalScrollBar()->value() : 0;
  yaml_->setPlainText(yamlSource);
  if (yaml_->verticalScrollBar()) yaml_->verticalScrollBar()->setValue(scroll);
  updating_ = false;
}

void ConfigEditor::onYamlEdited() {
  if (updating_) return;
  setModified(true);
  yamlTimer_->start();
}

void ConfigEditor::parseYamlNow() {
  yamlTimer_->stop();
  const QString text = yaml_->toPlainText();
  QVector<ProblemView> problems;
  // A text that reads becomes the config and its source; one that does not changes neither.
  const bool ok = doc_->readYaml(text, doc_->filePath(), &problems, false);
  doc_->clearFieldError();
  if (!ok) {
    setFormLocked(true);  // a form edit now would rewrite the text being fixed
    setProblems(problems);
    return;
  }
  setFormLocked(false);
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
  if (!doc_->setValueText(key, text, error)) return false;
  setModified(true);
  refreshForm();
  refreshYaml();
  validate();
  emit configChanged();
  return true;
}

QString ConfigEditor::valueText(const QString& key) const { return doc_->valueText(key); }

// The document's config was replaced as a whole: the form, the YAML and the problems follow.
void ConfigEditor::configReplaced() {
  doc_->clearFieldError();
  refreshForm();
  refreshYaml();
  validate();
  emit configChanged();
}

// ---- files -----------------------------------------------------------------

void ConfigEditor::newConfig() {
  doc_->setImportNotes({});
  setFormNote(QString());
  setFormLocked(false);
  setFilePath(QString());
  doc_->resetToDefaults();
  configReplaced();
  setModified(false);
}

bool ConfigEditor::loadText(const QString& text, const QString& sourceName, QString* error) {
  (void)error;  // nothing refuses a text: its problems are listed instead
  // What could be read (defaults where a key could not be, or for a syntax error) is the
  // config, and the text its source; the text stays as written, and the form takes no
  // edits until it reads cleanly.
  const bool ok = doc_->readYaml(text, sourceName, nullptr, true);
  doc_->setImportNotes({});
  setFormNote(QString());
  updating_ = true;
  yaml_->setPlainText(text);
  updating_ = false;
  doc_->clearFieldError();
  setFormLocked(!ok);
  refreshForm();
  validate();              // the text's reading problems, then the rules where it could be read
  setFilePath(QString());  // untitled: loadFile names it; a template must never keep the last file's name
  if (!ok) {
    tabs_->setCurrentWidget(yaml_);  // where it is fixed, at the first problem's line
    if (!problems_.isEmpty()) goToProblem(0);
  }
  setModified(false);
  emit configChanged();
  return true;
}

bool ConfigEditor::loadFile(const QString& path, QString* error) {
  QString text;
  if (!readTextFile(path, &text, error)) return false;
  if (!loadText(text, path, error)) return false;
  setFilePath(path);
  return true;
}

bool ConfigEditor::saveFile(const QString& path, QString* error) {
  if (yamlTimer_->isActive()) parseYamlNow();
  if (!writeTextFile(path, yaml_->toPlainText(), error)) return false;
  setFilePath(path);
  setModified(false);
  return true;
}

bool ConfigEditor::importAiToolkit(const QString& path, QString* error) {
  // The import notes are listed by validate() with the config's own problems.
  if (!doc_->importAiToolkit(path, error)) return false;
  setFormNote(QString());
  setFormLocked(false);
  setFilePath(QString());  // an import is a new Strata config until saved
  configReplaced();
  setModified(true);
  return true;
}

void ConfigEditor::setFormLocked(bool locked) {
  formLocked_ = locked;
  formLock_->setVisible(locked);
  basicPage_->setEnabled(!locked);
  advancedPage_->setEnabled(!locked);
  family_->setEnabled(!locked);
  unusedBox_->setEnabled(!locked);
}

void ConfigEditor::setFormNote(const QString& text) {
  formNote_->setText(text);
  formNote_->setVisible(!text.isEmpty());
}

QString ConfigEditor::formNote() const { return formNote_->text(); }

void ConfigEditor::setFilePath(const QString& path) { doc_->setFilePath(path); }

QString ConfigEditor::filePath() const { return doc_->filePath(); }

bool ConfigEditor::isModified() const { return doc_->isModified(); }

QVector<ProblemView> ConfigEditor::importNotes() const { return doc_->importNotes(); }

// ---- validation ------------------------------------------------------------

// The document's problems (the validator's, the import notes, a field that did not parse), shown.
void ConfigEditor::validate() { setProblems(doc_->problems()); }

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
  refreshUnused();
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
    const QString base = editor::keyToolTip(*f.spec, doc_->family());
    f.editor->setToolTip(base + tip);
    f.label->setToolTip(base + tip);
  }
}

void ConfigEditor::goToProblem(int index) {
  if (index < 0 || index >= problems_.size()) return;
  const ProblemView& p = problems_[index];
  if ((tabs_->currentWidget() == yaml_ || formLocked_) && p.line > 0) {
    tabs_->setCurrentWidget(yaml_);
    QTextCursor c(yaml_->document()->findBlockByLineNumber(p.line - 1));
    yaml_->setTextCursor(c);
    yaml_->centerCursor();
    yaml_->setFocus();
    return;
  }
  if (QWidget* w = fieldFor(p.key); w && (p.key == "model.arch" || isFieldShown(p.key))) {
    if (p.key == "model.arch") {
      family_->setFocus();
      return;
    }
    // The page the field is on (a shape override also opens its switch).
    const Field f = fields_.value(p.key);
    const int page = f.spec->basic ? 0 : 1;
    if (f.spec->modelShape && !customShape_->isChecked()) {
      customShape_->setChecked(true);
      shapeFields_->setVisible(true);
    }
    tabs_->setCurrentIndex(page);
    if (auto* scroll = qobject_cast<QScrollArea*>(tabs_->widget(page))) scroll->ensureWidgetVisible(w);
    w->setFocus();
  } else if (p.line > 0) {
    tabs_->setCurrentWidget(yaml_);
    QTextCursor c(yaml_->document()->findBlockByLineNumber(p.line - 1));
    yaml_->setTextCursor(c);
    yaml_->centerCursor();
  }
}

}  // namespace strata::ui
