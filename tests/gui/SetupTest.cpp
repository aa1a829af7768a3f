// The setup as a user meets it, on the real window driven by objectName,
// offscreen: nothing changes or is lost silently (wheel without focus, the
// modified mark, the questions before open / new / close, what an import
// dropped), the Basic / Advanced form with plain labels and list editors, model
// shape overrides only for a custom model, and templates that are valid as they open.
#include <QCheckBox>
#include <QComboBox>
#include <QStandardItemModel>
#include <QFile>
#include <QDesktopServices>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPointer>
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
#include "ui/backend/ConfigDocument.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/ListEditors.h"
#include "ui/app/MainWindow.h"
#include "ui/dialogs/NewConfigDialog.h"

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

// The demo config made FLUX.1-dev's shape in bf16 at 256 px with checkpointing, on any device.
bool setFluxDevShape(ConfigEditor* e) {
  return e->setValueText("model.preset", "flux-dev") && e->setValueText("model.device", "auto") &&
         e->setValueText("train.dtype", "bf16") && e->setValueText("datasets[0].resolution", "[256]") &&
         e->setValueText("train.batch_size", "1") && e->setValueText("train.gradient_checkpointing", "true");
}

}  // namespace

// Takes the URLs QDesktopServices would open (the test cannot look at a file manager).
class UrlCatcher : public QObject {
  Q_OBJECT
 public:
  QStringList opened;
 public slots:
  void open(const QUrl& url) { opened << QDir::cleanPath(url.toLocalFile()); }
};

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
  void newConfigIsUntitledUnsavedAndOverwritesNothing();
  void firstLaunchOffersTheDemoAndMyImages();
  void outputFolderIsTheConfigsFolderShownInFull();
  void aPlanThatDoesNotFitBlocksStartWithTheWayOut();
  void windowFitsA1024x700Screen();
  void planFitsAt1400AndScrollsAt1000();
  void aSeedAboveTheIntRangeIsShownAndKeptAsWritten();
  void aMultiLinePromptSurvivesAnEditOfThePromptList();
  void replicasChoiceSharesTheCardsOut();

 private:
  QTemporaryDir tmp_;
  QString settings_;
  QString demoCopy_;
};

void SetupTest::init() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("setup-test.ini");
  QFile::remove(settings_);
  demoCopy_ = writableDemoCopy(tmp_.filePath("demo.yaml"));
  QVERIFY(!demoCopy_.isEmpty());
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
  QCOMPARE(e->document()->config().model.nameOrPath, std::string("/models/FLUX.1-dev"));
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
  // need hardware this machine lacks, which the checks then name). A new config
  // is untitled and unsaved: the next New asks first (the test discards it).
  QDir(tmp_.path()).mkpath("my photos");
  for (const ConfigTemplate& t : configTemplates()) {
    QVERIFY2(!templateText(t).isEmpty(), qPrintable(t.resource));
    std::shared_ptr<Answer> asked;
    if (w.isWindowModified()) asked = answerNext("saveChangesDialog", "saveChangesDiscard");
    const QString data = t.dataKey.isEmpty() ? QString() : tmp_.filePath(t.dataIsFolder ? "my photos" : "mine.jsonl");
    QVERIFY2(w.newFromTemplate(t.id, data), qPrintable(t.id));
    if (asked) QVERIFY2(asked->answered, qPrintable(t.id));
    QVERIFY(w.configEditor()->filePath().isEmpty());
    QVERIFY(w.isWindowModified());
    if (!t.dataKey.isEmpty()) {
      // The user's data by its full path, the job named after it; the model is the user's to pick.
      QVERIFY2(w.configEditor()->valueText(t.dataKey).contains(data),
               qPrintable(w.configEditor()->valueText(t.dataKey)));
      QVERIFY(w.configEditor()->valueText("job.name").startsWith(t.dataIsFolder ? "my_photos_lora" : "mine_lora"));
    }
  }
  // File > New: the dialog, the demo first; it opens with no errors.
  auto discard = answerNext("saveChangesDialog", "saveChangesDiscard");
  w.findChild<QAction*>("newConfigAction")->trigger();
  QVERIFY(discard->answered);
  auto* dialog = w.findChild<QDialog*>("newConfigDialog");
  QVERIFY(dialog);
  QTRY_VERIFY(dialog->isVisible());
  auto* list = child<QListWidget>(dialog, "templateList");
  // The family comes first (FLUX.1 until another is chosen): its templates only.
  int fluxTemplates = 0;
  for (const ConfigTemplate& t : configTemplates()) fluxTemplates += t.family == std::string("flux");
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

namespace {
// The file dialog that comes up next (Qt's own, offscreen): what it offered, then cancelled.
std::shared_ptr<Answer> cancelNextFileDialog() {
  auto answer = std::make_shared<Answer>();
  auto* timer = new QTimer;
  timer->setInterval(20);
  auto tries = std::make_shared<int>(0);
  QObject::connect(timer, &QTimer::timeout, [=] {
    if (auto* d = qobject_cast<QFileDialog*>(QApplication::activeModalWidget())) {
      answer->answered = true;
      answer->text = d->selectedFiles().value(0);
      d->reject();
    } else if (++*tries <= 250) {
      return;
    }
    timer->stop();
    timer->deleteLater();
  });
  timer->start();
  return answer;
}

// The folder dialogs that come up next, one after the other: `folders` picked in
// turn. `answer->text` gets each dialog's title, a line each.
std::shared_ptr<Answer> pickFoldersInNextDialogs(const QStringList& folders) {
  auto answer = std::make_shared<Answer>();
  auto* timer = new QTimer;
  timer->setInterval(20);
  auto tries = std::make_shared<int>(0);
  auto next = std::make_shared<int>(0);
  auto last = std::make_shared<QPointer<QFileDialog>>();
  QObject::connect(timer, &QTimer::timeout, [=] {
    auto* d = qobject_cast<QFileDialog*>(QApplication::activeModalWidget());
    if (d && last->isNull() && *next < folders.size()) {
      *last = d;
      answer->text += d->windowTitle() + "\n";
      d->setDirectory(folders[*next]);
      d->selectFile(folders[*next]);
      // Typed as a user would: the dialog's file model fills in the background, and
      // on a loaded machine a selection alone could still name the folder above.
      if (auto* typed = d->findChild<QLineEdit*>("fileNameEdit")) typed->setText(folders[*next]);
      ++*next;
      static_cast<QDialog*>(d)->accept();  // QFileDialog::accept, through the public slot
      answer->answered = *next == folders.size();
    }
    if (answer->answered || ++*tries > 500) {
      timer->stop();
      timer->deleteLater();
    }
  });
  timer->start();
  return answer;
}
}  // namespace

// File > New after a config was open: the new one has no file (untitled), counts as
// unsaved, Ctrl+S asks where (named after the job, never the last file), and
// quitting asks. The config that was open stays as it was.
void SetupTest::newConfigIsUntitledUnsavedAndOverwritesNothing() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  QFile before(demoCopy_);
  QVERIFY(before.open(QIODevice::ReadOnly));
  const QByteArray demoText = before.readAll();
  before.close();
  QVERIFY(w.newFromTemplate("llama-my-jsonl", tmp_.filePath("answers.jsonl")));
  ConfigEditor* e = w.configEditor();
  QVERIFY(e->filePath().isEmpty());
  QVERIFY2(w.windowTitle().startsWith("untitled"), qPrintable(w.windowTitle()));
  QVERIFY(w.isWindowModified());
  // Ctrl+S asks where, offering the job's name beside the last config, not the last file.
  auto asked = cancelNextFileDialog();
  w.activateWindow();
  QVERIFY(QTest::qWaitForWindowActive(&w));
  QTest::keyClick(&w, Qt::Key_S, Qt::ControlModifier);
  QTRY_VERIFY(asked->answered);
  QCOMPARE(QFileInfo(asked->text).fileName(), QString("answers_lora.yaml"));
  QVERIFY(e->filePath().isEmpty());
  QVERIFY(w.isWindowModified());
  QFile after(demoCopy_);
  QVERIFY(after.open(QIODevice::ReadOnly));
  QCOMPARE(after.readAll(), demoText);
  // Quitting asks before the new config is dropped.
  auto a = answerNext("saveChangesDialog", "saveChangesCancel");
  w.findChild<QAction*>("quitAction")->trigger();
  QVERIFY(a->answered);
  QVERIFY(a->text.contains("untitled"));
  QVERIFY(w.isVisible());
  a = answerNext("saveChangesDialog", "saveChangesDiscard");
  QVERIFY(w.close());
  QVERIFY(a->answered);
}

// No config opened before and none given: the window offers the demo and a LoRA
// of your own images; once a config was opened it does not come back.
void SetupTest::firstLaunchOffersTheDemoAndMyImages() {
  {
    MainWindow w(settings_);
    w.show();
    QVERIFY(w.isWelcomeShown());
    QVERIFY(child<QWidget>(&w, "welcomePanel")->isVisible());
    child<QPushButton>(&w, "welcome_demo")->click();
    QVERIFY(!w.isWelcomeShown());
    QCOMPARE(w.configEditor()->valueText("model.preset"), QString("tiny"));
    QVERIFY(w.configEditor()->filePath().isEmpty());
    QVERIFY(!w.configEditor()->hasErrors());
    QVERIFY(child<QPushButton>(&w, "startButton")->isEnabled());
  }
  {
    // New from my images: asks for the folder, then the config reads it.
    QFile::remove(settings_);
    MainWindow w(settings_);
    w.show();
    QVERIFY(w.isWelcomeShown());
    const QString photos = tmp_.filePath("holiday-2024");
    QVERIFY(QDir().mkpath(photos));
    const QString model = tmp_.filePath("FLUX.1-dev");
    QVERIFY(QDir().mkpath(model));
    // The image folder, then the base model.
    auto picked = pickFoldersInNextDialogs({photos, model});
    child<QPushButton>(&w, "welcome_flux-my-images-1gpu")->click();
    QTRY_VERIFY(picked->answered);
    QVERIFY2(picked->text.contains("images") && picked->text.contains("FLUX.1-dev folder"), qPrintable(picked->text));
    QVERIFY(!w.isWelcomeShown());
    ConfigEditor* e = w.configEditor();
    QVERIFY2(e->valueText("datasets[0].folder_path").contains(photos),
             qPrintable(e->valueText("datasets[0].folder_path")));
    QCOMPARE(e->valueText("job.name"), QString("holiday-2024_lora"));
    QVERIFY2(e->valueText("model.name_or_path").contains(model), qPrintable(e->valueText("model.name_or_path")));
    QCOMPARE(e->valueText("model.arch"), QString("flux"));
    QVERIFY(e->filePath().isEmpty());
    QVERIFY(w.isWindowModified());
    // The folder holds no images (nor the model a checkpoint): Start says so in plain words.
    QVERIFY(e->hasErrors());
    QVERIFY(!child<QPushButton>(&w, "startButton")->isEnabled());
    QVERIFY(child<QLabel>(&w, "startBlocker")->isVisible());
    QVERIFY2(w.startBlocker().startsWith("Start is off") && w.startBlocker().contains("marked in red"),
             qPrintable(w.startBlocker()));
    QVERIFY(!w.startBlocker().contains("::"));
    auto discard = answerNext("saveChangesDialog", "saveChangesDiscard");
    QVERIFY(w.close());
  }
  {
    MainWindow w(settings_);
    QVERIFY(w.openConfig(demoCopy_));
  }
  MainWindow again(settings_);
  again.show();
  QVERIFY(!again.isWelcomeShown());
}

// A relative output folder is the config's folder's, not the working folder's:
// shown in full, with a button that opens it.
void SetupTest::outputFolderIsTheConfigsFolderShownInFull() {
  const QString sub = tmp_.filePath("configs-here");
  QVERIFY(QDir().mkpath(sub));
  QFile::remove(sub + "/demo.yaml");
  QVERIFY(QFile::copy(demoConfig(), sub + "/demo.yaml"));
  QVERIFY(QDir::setCurrent(QDir::tempPath()));
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(sub + "/demo.yaml"));
  const QString expected = QDir::cleanPath(sub + "/output/demo_shapes");
  QCOMPARE(w.runFolder(), expected);
  auto* label = child<QLabel>(&w, "runFolderPath");
  QVERIFY2(label->text().contains(QDir::toNativeSeparators(expected)), qPrintable(label->text()));
  // Open folder: the nearest folder of the path that is there (no run yet: the config's folder).
  UrlCatcher catcher;
  QDesktopServices::setUrlHandler("file", &catcher, "open");
  child<QPushButton>(&w, "openOutputFolderButton")->click();
  QDesktopServices::unsetUrlHandler("file");
  QCOMPARE(catcher.opened, QStringList({QDir::cleanPath(sub)}));
  QVERIFY(QDir().mkpath(expected));
  QDesktopServices::setUrlHandler("file", &catcher, "open");
  child<QPushButton>(&w, "openOutputFolderButton")->click();
  QDesktopServices::unsetUrlHandler("file");
  QCOMPARE(catcher.opened.back(), expected);
  // An absolute folder is taken as it is.
  QVERIFY(w.configEditor()->setValueText("job.training_folder", tmp_.filePath("elsewhere")));
  QCOMPARE(w.runFolder(), QDir::cleanPath(tmp_.filePath("elsewhere") + "/demo_shapes"));
  QVERIFY(label->text().contains(QDir::toNativeSeparators(w.runFolder())));
  // Untitled: under ~/Strata until saved, and the label says so.
  auto discard = answerNext("saveChangesDialog", "saveChangesDiscard");
  QVERIFY(w.newFromTemplate("demo"));
  QVERIFY(discard->answered);
  QCOMPARE(w.runFolder(), QDir::cleanPath(QDir::home().filePath("Strata/output/demo_shapes")));
  QVERIFY2(label->text().contains("not saved yet"), qPrintable(label->text()));
}

// A plan that does not fit the cards Start would train on turns Start off, and
// the window says why and the ways out, in the same words as strata-train run.
void SetupTest::aPlanThatDoesNotFitBlocksStartWithTheWayOut() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  ConfigEditor* e = w.configEditor();
  // FLUX.1-dev's shape in bf16 (23.8 GB of weights), on whatever device there is.
  QVERIFY(setFluxDevShape(e));
  QVERIFY2(!e->hasErrors(), qPrintable(e->problems().isEmpty() ? QString() : e->problems().front().message));
  // The machine is one 20 GB card (as strata-train run --devices 1x20GB).
  w.setMachineDevices("1x20GB");
  auto* start = child<QPushButton>(&w, "startButton");
  QVERIFY(!start->isEnabled());
  QVERIFY(!child<QPushButton>(&w, "addToQueueButton")->isEnabled());
  auto* blocker = child<QLabel>(&w, "startBlocker");
  QVERIFY(blocker->isVisible());
  const QString text = blocker->text();
  QVERIFY2(text.startsWith("Start is off: the model does not fit 1x20GB"), qPrintable(text));
  QVERIFY2(text.contains("Ways out:") && text.contains("model.quantize: true") && text.contains("split the model"),
           qPrintable(text));
  // Each way out planned again: quantized, it fits this card.
  QVERIFY2(text.contains(QRegularExpression("model.quantize: true, model.qtype: \\w+ \\(this fits\\)")),
           qPrintable(text));
  QCOMPARE(start->toolTip(), text);
  // The way out taken: quantized, it fits, and Start is on.
  QVERIFY(e->setValueText("model.quantize", "true"));
  QVERIFY(e->setValueText("model.qtype", "int8"));
  w.replan();
  QVERIFY2(w.startBlocker().isEmpty(), qPrintable(w.startBlocker()));
  QVERIFY(start->isEnabled());
  QVERIFY(!blocker->isVisible());
}

// The window fits a 1024 x 700 screen: every tab's smallest size fits, so nothing is cut off.
void SetupTest::windowFitsA1024x700Screen() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  const QSize screen(1024, 700);
  // With the first-launch panel, then with a config open (the panel put away).
  for (int pass = 0; pass < 2; ++pass) {
    QCOMPARE(w.isWelcomeShown(), pass == 0);
    for (int tab = 0; tab < w.tabs()->count(); ++tab) {
      w.tabs()->setCurrentIndex(tab);
      QApplication::processEvents();
      const QSize min = w.minimumSizeHint().expandedTo(w.minimumSize());
      QVERIFY2(min.width() <= screen.width() && min.height() <= screen.height(),
               qPrintable(QString("tab %1 needs %2 x %3").arg(tab).arg(min.width()).arg(min.height())));
    }
    if (pass == 0) QVERIFY(w.openConfig(demoCopy_));
  }
  w.resize(screen);
  QTRY_COMPARE(w.size(), screen);
  // Each tab's page gets at least what it asks for.
  for (int tab = 0; tab < w.tabs()->count(); ++tab) {
    w.tabs()->setCurrentIndex(tab);
    QWidget* page = w.tabs()->currentWidget();
    QTRY_VERIFY(page->isVisible());
    const QSize need = page->minimumSizeHint();
    QVERIFY2(page->width() >= need.width() && page->height() >= need.height(),
             qPrintable(QString("tab %1: %2 x %3 of %4 x %5")
                            .arg(tab)
                            .arg(page->width())
                            .arg(page->height())
                            .arg(need.width())
                            .arg(need.height())));
  }
  // Opened the first time on such a screen, the window takes the screen, not 1400 x 900.
  QCOMPARE(MainWindow::defaultWindowSize(screen), screen);
  QCOMPARE(MainWindow::defaultWindowSize(QSize(1920, 1080)), QSize(1400, 900));
  // Start and the blocker line stay on screen.
  w.tabs()->setCurrentIndex(0);
  auto* start = child<QPushButton>(&w, "startButton");
  const QPoint corner = start->mapTo(&w, QPoint(start->width(), start->height()));
  QVERIFY2(corner.x() <= screen.width() && corner.y() <= screen.height(),
           qPrintable(QString("%1,%2").arg(corner.x()).arg(corner.y())));
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
  QCOMPARE(e.document()->config().sample.prompts, want);
  // Typed as the box shows it: \n is a line break inside the prompt.
  box->setPlainText("first\\nsecond line");
  QCOMPARE(e.document()->config().sample.prompts, std::vector<std::string>({"first\nsecond line"}));
  // Module patterns are still trimmed, one per line.
  auto* targets = qobject_cast<QPlainTextEdit*>(e.fieldFor("network.target_modules"));
  QVERIFY(targets);
  targets->setPlainText("  *attn*  \n\n*ff*");
  QCOMPARE(e.document()->config().network.targetModules, std::vector<std::string>({"*attn*", "*ff*"}));
}

// Issue 35 point 8: on a machine of several cards (simulated: the plan's device list),
// Setup offers "N cards as R replicas of C cards" for each divisor R of N, greys the
// ones whose replica does not fit its cards (with the planner's reason), and the one
// picked sets the config so the plan shows replicas x cards. Off on one card or the CPU.
void SetupTest::replicasChoiceSharesTheCardsOut() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoCopy_));
  ConfigEditor* e = w.configEditor();
  // FLUX.1-dev's shape in bf16 (23.8 GB of weights): not on one 16 GB card, split over two it fits.
  QVERIFY(setFluxDevShape(e));
  child<QLineEdit>(&w, "deviceSpec")->setText("4x16GB");
  w.replan();
  QComboBox* choice = w.replicasChoice();
  QVERIFY(choice->isEnabled());
  QStringList texts;
  for (int i = 0; i < choice->count(); ++i) texts << choice->itemText(i);
  QCOMPARE(texts, QStringList({"As the config sets them (one process)", "4 cards as 1 replica of 4 cards",
                               "4 cards as 2 replicas of 2 cards", "4 cards as 4 replicas of 1 card (does not fit)"}));
  auto* model = qobject_cast<QStandardItemModel*>(choice->model());
  QVERIFY(model->item(1)->isEnabled());
  QVERIFY(model->item(2)->isEnabled());
  QVERIFY(!model->item(3)->isEnabled());
  QVERIFY2(choice->itemData(3, Qt::ToolTipRole).toString().contains("does not fit"),
           qPrintable(choice->itemData(3, Qt::ToolTipRole).toString()));
  QCOMPARE(choice->currentIndex(), 0);

  // Picked: 2 replicas of 2 cards; the plan shows both replicas on their own cards.
  QVERIFY(QMetaObject::invokeMethod(choice, "activated", Q_ARG(int, 2)));
  QCOMPARE(e->valueText("model.replicas"), QString("2"));
  QCOMPARE(e->valueText("model.split_model_over_gpus"), QString("true"));
  const PlacementView& v = w.plannedMap()->placement();
  QVERIFY2(v.error.isEmpty(), qPrintable(v.error));
  QVERIFY2(v.reason.startsWith("Data parallel: 2 replicas x 2 cards. Each replica: "), qPrintable(v.reason));
  QCOMPARE(v.devices.size(), 4);
  QStringList labels;
  for (const DeviceView& d : v.devices) labels << d.label;
  QCOMPARE(labels, QStringList({"cuda:0", "cuda:1", "cuda:2", "cuda:3"}));
  QVERIFY2(v.devices[0].name.startsWith("replica 0: ") && v.devices[2].name.startsWith("replica 1: "),
           qPrintable(v.devices[2].name));
  QCOMPARE(w.replicasChoice()->currentIndex(), 2);  // the config is that choice now

  // One card: nothing to share out, said why.
  child<QLineEdit>(&w, "deviceSpec")->setText("1x80GB");
  w.replan();
  QVERIFY(!w.replicasChoice()->isEnabled());
  auto* note = child<QLabel>(&w, "replicasNote");
  QVERIFY2(note->isVisible() && note->text().startsWith("One card: nothing to share out"), qPrintable(note->text()));
  // The CPU: the same.
  child<QLineEdit>(&w, "deviceSpec")->setText("4x16GB");
  QVERIFY(e->setValueText("model.device", "cpu"));
  w.replan();
  QVERIFY(!w.replicasChoice()->isEnabled());
  QVERIFY2(note->text().startsWith("The run trains on the CPU"), qPrintable(note->text()));
}

STRATA_GUI_TEST_MAIN(SetupTest)
#include "SetupTest.moc"
