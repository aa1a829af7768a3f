// The setup as a user meets it, on the real window driven by objectName,
// offscreen: nothing changes or is lost silently (wheel without focus, the
// modified mark, the questions before open / new / close, what an import
// dropped), the Basic / Advanced form with plain labels and list editors, model
// shape overrides only for a custom model, and templates that are valid as they open.
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QToolButton>
#include <QWheelEvent>
#include <QtTest>

#include "GuiTestSupport.h"
#include "config/RunConfig.h"
#include "ui/ConfigEditor.h"
#include "ui/GpuMapView.h"
#include "ui/ListEditors.h"
#include "ui/MainWindow.h"
#include "ui/NewConfigDialog.h"

using namespace strata::ui;
using namespace strata::ui::test;

namespace {

void wheel(QWidget* w, int notches) {
  const QPointF at(w->width() / 2.0, w->height() / 2.0);
  QWheelEvent e(at, w->mapToGlobal(at), QPoint(), QPoint(0, 120 * notches), Qt::NoButton, Qt::NoModifier,
                Qt::NoScrollPhase, false);
  QApplication::sendEvent(w, &e);
}

bool hasWarningAbout(const ConfigEditor* e, const QString& what) {
  for (const ProblemView& p : e->problems())
    if (!p.error && (p.key.contains(what) || p.message.contains(what))) return true;
  return false;
}

}  // namespace

class SetupTest : public QObject {
  Q_OBJECT
 private slots:
  void init();
  void wheelChangesAFieldOnlyWithFocus();
  void titleMarksUnsavedChanges();
  void openingAnotherConfigAsksToSave();
  void closingAsksToSave();
  void importShowsWhatWasDroppedOrChanged();
  void basicAndAdvancedPagesInPlainWords();
  void listKeysHaveListEditors();
  void pathKeysOfferTheirKindOfChooser();
  void modelShapeOnlyForACustomModel();
  void newConfigStartsFromAValidTemplate();
  void planFitsAt1400AndScrollsAt1000();
  void aSeedAboveTheIntRangeIsShownAndKeptAsWritten();
  void aMultiLinePromptSurvivesAnEditOfThePromptList();

 private:
  QTemporaryDir tmp_;
  QString settings_;
  QString demoCopy_;
};

void SetupTest::init() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("setup-test.ini");
  QFile::remove(settings_);
  demoCopy_ = tmp_.filePath("demo.yaml");
  QFile::remove(demoCopy_);
  QVERIFY(QFile::copy(demoConfig(), demoCopy_));
  QFile::setPermissions(demoCopy_, QFile::ReadOwner | QFile::WriteOwner);
}

void SetupTest::wheelChangesAFieldOnlyWithFocus() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  ConfigEditor* e = w.configEditor();
  auto* placement = qobject_cast<QComboBox*>(e->fieldFor("model.placement"));
  auto* rank = qobject_cast<QSpinBox*>(e->fieldFor("network.linear"));
  QVERIFY(placement && rank);
  e->showPage("advanced");
  const QString before = e->valueText("model.placement");
  // Scrolling the form over a combo box and a spin box changes neither.
  placement->clearFocus();
  rank->clearFocus();
  wheel(placement, -1);
  wheel(rank, 3);
  QCOMPARE(e->valueText("model.placement"), before);
  QCOMPARE(e->valueText("network.linear"), QString("16"));
  QVERIFY(!e->isModified());
  QVERIFY(!w.isWindowModified());
  QVERIFY(!placement->hasFocus());  // the wheel does not give focus either
  QCOMPARE(placement->focusPolicy(), Qt::StrongFocus);
  // With focus the wheel is an edit like any other.
  e->showPage("basic");
  w.activateWindow();
  QVERIFY(QTest::qWaitForWindowActive(&w));
  rank->setFocus();
  QTRY_VERIFY(rank->hasFocus());
  wheel(rank, 3);
  QCOMPARE(e->valueText("network.linear"), QString("19"));
  QVERIFY(e->isModified());
}

void SetupTest::titleMarksUnsavedChanges() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  QVERIFY(w.windowTitle().startsWith("demo.yaml[*]"));
  QVERIFY(!w.isWindowModified());
  QVERIFY(w.configEditor()->setValueText("train.steps", "99"));
  QVERIFY(w.isWindowModified());
  QVERIFY(w.saveConfig(demoCopy_));
  QVERIFY(!w.isWindowModified());
  QFile f(demoCopy_);
  QVERIFY(f.open(QIODevice::ReadOnly));
  QVERIFY(f.readAll().contains("steps: 99"));
}

void SetupTest::openingAnotherConfigAsksToSave() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  ConfigEditor* e = w.configEditor();
  QVERIFY(e->setValueText("train.steps", "321"));
  // Cancel: nothing is opened, the edit stays.
  auto a = answerNext("saveChangesDialog", "saveChangesCancel");
  QVERIFY(!w.openConfig(sourceFile("configs/flux-dev-split-4x16gb.yaml")));
  QVERIFY(a->answered);
  QVERIFY(a->text.contains("demo.yaml"));
  QCOMPARE(e->valueText("train.steps"), QString("321"));
  QVERIFY(w.isWindowModified());
  // New asks too.
  a = answerNext("saveChangesDialog", "saveChangesCancel");
  w.findChild<QAction*>("newConfigAction")->trigger();
  QVERIFY(a->answered);
  QVERIFY(!w.findChild<QDialog*>("newConfigDialog"));
  // Save: written to its file, then the other one opens.
  a = answerNext("saveChangesDialog", "saveChangesSave");
  QVERIFY(w.openConfig(sourceFile("configs/flux-dev-split-4x16gb.yaml")));
  QVERIFY(a->answered);
  QFile f(demoCopy_);
  QVERIFY(f.open(QIODevice::ReadOnly));
  QVERIFY(f.readAll().contains("steps: 321"));
  QVERIFY(e->filePath().endsWith("flux-dev-split-4x16gb.yaml"));
  // Discard: the edit is dropped because the user said so.
  QVERIFY(e->setValueText("train.steps", "5"));
  a = answerNext("saveChangesDialog", "saveChangesDiscard");
  QVERIFY(w.openConfig(demoCopy_));
  QVERIFY(a->answered);
  QCOMPARE(e->valueText("train.steps"), QString("321"));
  QVERIFY(!w.isWindowModified());
}

void SetupTest::closingAsksToSave() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  QVERIFY(w.configEditor()->setValueText("train.lr", "0.001"));
  auto a = answerNext("saveChangesDialog", "saveChangesCancel");
  w.findChild<QAction*>("quitAction")->trigger();
  QVERIFY(a->answered);
  QVERIFY(w.isVisible());
  a = answerNext("saveChangesDialog", "saveChangesDiscard");
  QVERIFY(w.close());
  QVERIFY(a->answered);
  QVERIFY(!w.isVisible());
}

void SetupTest::importShowsWhatWasDroppedOrChanged() {
  const QString job = tmp_.filePath("job.yaml");
  QFile f(job);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(
      "job: extension\n"
      "config:\n"
      "  name: my_lora\n"
      "  process:\n"
      "    - type: sd_trainer\n"
      "      trigger_word: ohwx\n"
      "      network:\n"
      "        type: lora\n"
      "        linear: 16\n"
      "        linear_alpha: 16\n"
      "      train:\n"
      "        steps: 100\n"
      "        lr: 1e-4\n"
      "        optimizer: prodigy\n"
      "      model:\n"
      "        name_or_path: black-forest-labs/FLUX.1-dev\n"
      "        is_flux: true\n");
  f.close();
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.importAiToolkit(job));
  // A message says what was dropped or changed, by name.
  auto* report = w.findChild<QMessageBox*>("importReport");
  QVERIFY(report);
  QVERIFY(report->isVisible());
  const QString shown = report->text() + report->informativeText();
  QVERIFY2(shown.contains("trigger_word"), qPrintable(shown));
  QVERIFY2(shown.contains("prodigy"), qPrintable(shown));
  report->close();
  // And the problem list keeps them as warnings (it said "0 warning(s)" before).
  ConfigEditor* e = w.configEditor();
  QVERIFY(hasWarningAbout(e, "trigger_word"));
  QVERIFY(hasWarningAbout(e, "optimizer"));
  QVERIFY(!child<QLabel>(&w, "problemSummary")->text().startsWith("0 error(s), 0 warning"));
  QVERIFY(w.isWindowModified());  // an import is unsaved work
  // Opening something else asks before the import is lost.
  auto a = answerNext("saveChangesDialog", "saveChangesDiscard");
  QVERIFY(w.openConfig(demoCopy_));
  QVERIFY(a->answered);
  QVERIFY(e->importNotes().isEmpty());
}

void SetupTest::basicAndAdvancedPagesInPlainWords() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  ConfigEditor* e = w.configEditor();
  auto* basic = child<QWidget>(e, "basicPage");
  auto* advanced = child<QWidget>(e, "advancedPage");
  QVERIFY(basic && advanced);
  // The few settings most runs change are on Basic, with user words as labels.
  for (const char* key : {"model.name_or_path", "network.linear", "train.steps", "train.lr", "datasets[0].resolution",
                          "datasets[0].folder_path", "model.gpu_ids", "sample.prompts", "sample.sample_every"}) {
    QWidget* f = e->fieldFor(key);
    QVERIFY2(f, key);
    QVERIFY2(basic->isAncestorOf(f), key);
  }
  for (const char* key : {"model.split_model_other_module_param_count_scale", "train.betas",
                          "train.ema_config.ema_decay", "model.axes_dims_rope", "save.max_step_saves_to_keep"}) {
    QWidget* f = e->fieldFor(key);
    QVERIFY2(f, key);
    QVERIFY2(advanced->isAncestorOf(f), key);
  }
  auto* rankLabel = child<QLabel>(e, "label_network.linear");
  QCOMPARE(rankLabel->text(), QString("Rank"));
  // The YAML key is in the tooltip, not the label.
  QVERIFY(rankLabel->toolTip().contains("network.linear"));
  QVERIFY(e->fieldFor("network.linear")->toolTip().contains("network.linear"));
  QCOMPARE(child<QLabel>(e, "label_train.ema_config.use_ema")->text(), QString("Keep an average of the weights"));
  for (QLabel* l : e->findChildren<QLabel*>())
    if (l->objectName().startsWith("label_")) {
      QVERIFY2(!l->text().contains('_'), qPrintable(l->text()));
      QVERIFY2(!l->text().contains("ema ema"), qPrintable(l->text()));
    }
}

void SetupTest::listKeysHaveListEditors() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  ConfigEditor* e = w.configEditor();
  // Two numbers for the betas, no add / remove.
  auto* betas = qobject_cast<NumberListEdit*>(e->fieldFor("train.betas"));
  QVERIFY(betas);
  QCOMPARE(betas->fieldCount(), 2);
  QVERIFY(!betas->findChild<QToolButton*>("addItem"));
  QCOMPARE(betas->values(), (QStringList{"0.9", "0.999"}));
  betas->field(1)->setText("0.99");
  emit betas->field(1)->textEdited("0.99");
  QCOMPARE(e->valueText("train.betas"), QString("[0.9, 0.99]"));
  // Resolutions: a row that grows.
  auto* res = qobject_cast<NumberListEdit*>(e->fieldFor("datasets[0].resolution"));
  QVERIFY(res);
  QCOMPARE(res->values(), QStringList{"32"});
  child<QToolButton>(res, "addItem")->click();
  QCOMPARE(res->fieldCount(), 2);
  res->field(1)->setText("48");
  emit res->field(1)->textEdited("48");
  QCOMPARE(e->valueText("datasets[0].resolution"), QString("[32, 48]"));
  child<QToolButton>(res, "removeItem")->click();
  QCOMPARE(e->valueText("datasets[0].resolution"), QString("[32]"));
  // A non-number cannot be typed into a number list.
  QTest::keyClicks(res->field(0), "x");
  QCOMPARE(res->field(0)->text(), QString("32"));
  // Export formats: one box per format.
  auto* formats = qobject_cast<ChoiceListEdit*>(e->fieldFor("save.export_formats"));
  QVERIFY(formats);
  QCOMPARE(formats->chosen(), (QStringList{"diffusers", "kohya", "comfy"}));
  child<QCheckBox>(formats, "choice_kohya")->click();
  QCOMPARE(e->valueText("save.export_formats"), QString("[diffusers, comfy]"));
  // Prompts: one per line.
  QVERIFY(qobject_cast<QPlainTextEdit*>(e->fieldFor("sample.prompts")));
}

void SetupTest::pathKeysOfferTheirKindOfChooser() {
  MainWindow w(settings_);
  w.show();
  ConfigEditor* e = w.configEditor();
  QVERIFY(w.openConfig(demoCopy_));
  // From the key's spec: a FLUX model is a folder or one file; a dataset is a folder.
  QWidget* model = e->fieldFor("model.name_or_path");
  QVERIFY(model->findChild<QToolButton*>("browseFolder"));
  QVERIFY(model->findChild<QToolButton*>("browseFile"));
  QWidget* data = e->fieldFor("datasets[0].folder_path");
  QVERIFY(data->findChild<QToolButton*>("browseFolder"));
  QVERIFY(!data->findChild<QToolButton*>("browseFile"));
  QWidget* out = e->fieldFor("job.training_folder");
  QVERIFY(out->findChild<QToolButton*>("browseFolder"));
  QVERIFY(!out->findChild<QToolButton*>("browseFile"));
  // Typing a path is an edit of that key.
  auto* line = model->findChild<QLineEdit*>("pathText");
  line->setText("/models/FLUX.1-dev");
  emit line->textEdited(line->text());
  QCOMPARE(e->config().model.nameOrPath, std::string("/models/FLUX.1-dev"));
}

void SetupTest::modelShapeOnlyForACustomModel() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  ConfigEditor* e = w.configEditor();
  e->showPage("advanced");
  auto* custom = child<QCheckBox>(e, "customModelShape");
  QVERIFY(custom);
  QVERIFY(!custom->isChecked());
  QTRY_VERIFY(!e->fieldFor("model.num_layers")->isVisible());
  QVERIFY(!e->fieldFor("model.axes_dims_rope")->isVisible());
  QVERIFY(e->fieldFor("model.preset")->isVisible());
  // A config that overrides the shape shows the overrides.
  QVERIFY(e->setValueText("model.num_layers", "3"));
  QVERIFY(custom->isChecked());
  QTRY_VERIFY(e->fieldFor("model.num_layers")->isVisible());
  // Switching it off gives the preset's shape back, as a visible edit.
  custom->click();
  QVERIFY(!e->fieldFor("model.num_layers")->isVisible());
  QCOMPARE(e->valueText("model.num_layers"), QString());
  QVERIFY(!e->yamlText().contains("num_layers: 3"));
  QVERIFY(w.isWindowModified());
}

void SetupTest::newConfigStartsFromAValidTemplate() {
  MainWindow w(settings_);
  w.show();
  // Every template reads without a problem of its own (its settings may still
  // need hardware this machine lacks, which the checks then name).
  for (const ConfigTemplate& t : configTemplates()) {
    QVERIFY2(!templateText(t).isEmpty(), qPrintable(t.resource));
    QVERIFY2(w.newFromTemplate(t.id), qPrintable(t.id));
    QVERIFY(w.configEditor()->filePath().isEmpty());
    QVERIFY(!w.isWindowModified());
  }
  // File > New: the dialog, the demo first; it opens with no errors.
  w.findChild<QAction*>("newConfigAction")->trigger();
  auto* dialog = w.findChild<QDialog*>("newConfigDialog");
  QVERIFY(dialog);
  QTRY_VERIFY(dialog->isVisible());
  auto* list = child<QListWidget>(dialog, "templateList");
  // The family comes first (FLUX.1 until another is chosen): its templates only.
  int fluxTemplates = 0;
  for (const ConfigTemplate& t : configTemplates()) fluxTemplates += t.family == strata::config::ModelArch::Flux;
  QCOMPARE(list->count(), fluxTemplates);
  QVERIFY(list->count() >= 3);
  QVERIFY(!child<QLabel>(dialog, "templateSummary")->text().isEmpty());
  child<QPushButton>(dialog, "newConfigOk")->click();
  ConfigEditor* e = w.configEditor();
  QCOMPARE(e->valueText("model.preset"), QString("tiny"));
  QVERIFY2(!e->hasErrors(), qPrintable(e->problems().isEmpty() ? QString() : e->problems().front().message));
  QVERIFY(child<QPushButton>(&w, "startButton")->isEnabled());
  QVERIFY(w.windowTitle().startsWith("untitled"));
}

void SetupTest::planFitsAt1400AndScrollsAt1000() {
  MainWindow w(settings_);
  w.resize(1400, 900);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  QVERIFY(w.openConfig(sourceFile("configs/flux-dev-split-4x16gb.yaml")));
  child<QLineEdit>(&w, "deviceSpec")->setText("4x16GB");
  w.replan();
  GpuMapView* map = w.plannedMap();
  QCOMPARE(map->placement().devices.size(), 4);
  auto* scroll = child<QScrollArea>(map, "gpuMapScroll");
  const QString last = map->placement().devices.back().blocks.back().id;
  QTRY_VERIFY(map->canvas()->width() == scroll->viewport()->width());
  QVERIFY2(map->blockRect(last).right() < scroll->viewport()->width(),
           qPrintable(QString("%1 of %2").arg(map->blockRect(last).right()).arg(scroll->viewport()->width())));
  // At 1000 px the fourth card is reached by scrolling, not cut off.
  w.resize(1000, 800);
  QTRY_VERIFY(map->canvas()->width() > scroll->viewport()->width());
  QVERIFY(scroll->horizontalScrollBar()->maximum() >= map->blockRect(last).right() - scroll->viewport()->width());
}

// train.seed and sample.seed take 64-bit values: a 32-bit spin box showed 3000000000 as 0 and a
// touch of it would have saved another seed. They are text fields that read back exactly.
void SetupTest::aSeedAboveTheIntRangeIsShownAndKeptAsWritten() {
  ConfigEditor e;
  QFile f(demoCopy_);
  QVERIFY(f.open(QIODevice::ReadOnly));
  QString yaml = QString::fromUtf8(f.readAll());
  f.close();
  QVERIFY(e.loadText(yaml + "\n", "demo.yaml"));
  QVERIFY(e.setValueText("train.seed", "3000000000"));
  QVERIFY(e.setValueText("sample.seed", "9000000000000000000"));
  auto* seed = qobject_cast<QLineEdit*>(e.fieldFor("train.seed"));
  auto* sampleSeed = qobject_cast<QLineEdit*>(e.fieldFor("sample.seed"));
  QVERIFY2(seed && sampleSeed, "the seeds are typed as text");
  QCOMPARE(seed->text(), QString("3000000000"));
  QCOMPARE(sampleSeed->text(), QString("9000000000000000000"));
  // Another edit leaves them as they are; typing one sets exactly that value.
  QVERIFY(e.setValueText("train.steps", "12"));
  QCOMPARE(e.valueText("train.seed"), QString("3000000000"));
  seed->setText("4000000001");
  emit seed->textEdited(seed->text());
  QCOMPARE(e.valueText("train.seed"), QString("4000000001"));
  QVERIFY(e.yamlText().contains("seed: 4000000001"));
  // A value out of the key's range is an error on the field, not a silent clamp.
  seed->setText("-5");
  emit seed->textEdited(seed->text());
  QVERIFY(e.hasErrors());
  // Keys whose range fits an int keep their spin box.
  QVERIFY(qobject_cast<QSpinBox*>(e.fieldFor("network.linear")));
}

// A chat template's prompt spans lines; the prompt box shows one prompt per line.
// Adding a prompt used to split it in two (and trim the spaces a causal LM reads).
void SetupTest::aMultiLinePromptSurvivesAnEditOfThePromptList() {
  ConfigEditor e;
  QVERIFY(e.loadFile(demoCopy_));
  QVERIFY(e.setValueText("sample.prompts", "[\"### INPUT: sky?\\n### OUTPUT:\", \" It is\", \"a \\\\ b\"]"));
  auto* box = qobject_cast<QPlainTextEdit*>(e.fieldFor("sample.prompts"));
  QVERIFY(box);
  QCOMPARE(box->toPlainText(), QString("### INPUT: sky?\\n### OUTPUT:\n It is\na \\\\ b"));
  box->setPlainText(box->toPlainText() + "\na red circle");  // the user adds a prompt
  const std::vector<std::string> want = {"### INPUT: sky?\n### OUTPUT:", " It is", "a \\ b", "a red circle"};
  QCOMPARE(e.config().sample.prompts, want);
  // Typed as the box shows it: \n is a line break inside the prompt.
  box->setPlainText("first\\nsecond line");
  QCOMPARE(e.config().sample.prompts, std::vector<std::string>({"first\nsecond line"}));
  // Module patterns are still trimmed, one per line.
  auto* targets = qobject_cast<QPlainTextEdit*>(e.fieldFor("network.target_modules"));
  QVERIFY(targets);
  targets->setPlainText("  *attn*  \n\n*ff*");
  QCOMPARE(e.config().network.targetModules, std::vector<std::string>({"*attn*", "*ff*"}));
}

STRATA_GUI_TEST_MAIN(SetupTest)
#include "SetupTest.moc"
