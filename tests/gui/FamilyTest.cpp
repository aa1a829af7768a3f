// The app for a second model family (issue 16 item 8), on the real widgets,
// offscreen: the family is chosen first (new-config dialog and editor), a switch
// asks before it drops settings and names them, the form shows only the keys the
// family reads (the others listed with the validator's words), the dataset view
// previews a jsonl file as the trainer reads it, text samples show as text, the
// GPU map names decoder layers, the export dialog offers the family's forms, and
// a real Llama run (the causal_lm_a fixture, on the CPU) feeds the loss plot,
// the live map and the sample browser.
#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "../families/LmTestSupport.h"
#include "GuiTestSupport.h"
#include "ui/backend/DatasetBackend.h"
#include "config/ConfigSchema.h"
#include "config/RunConfig.h"
#include "ui/backend/ConfigBackend.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/setup/DatasetView.h"
#include "ui/dialogs/ExportDialog.h"
#include "ui/backend/FamilyBackend.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/LossPlot.h"
#include "ui/app/MainWindow.h"
#include "ui/dialogs/NewConfigDialog.h"
#include "ui/backend/PlanBackend.h"
#include "ui/widgets/SampleBrowser.h"
#include "ui/backend/TrainerBridge.h"

using namespace strata;
using namespace strata::ui;
using namespace strata::ui::test;

namespace {

void writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  QVERIFY2(f.open(QIODevice::WriteOnly), qPrintable(path));
  f.write(bytes);
}

QStringList treeColumn(const QTreeWidget* t, int column) {
  QStringList out;
  for (int i = 0; i < t->topLevelItemCount(); ++i) out << t->topLevelItem(i)->text(column);
  return out;
}

// Shown in the form: the row is visible on its page (Basic or Advanced; the tab
// widget hides the page that is not current).
bool rowShown(ConfigEditor* e, const QString& key) {
  QWidget* w = e->fieldFor(key);
  QWidget* page = w;
  while (page && !page->objectName().endsWith("Page")) page = page->parentWidget();
  return w && page && w->isVisibleTo(page) && e->isFieldShown(key);
}

bool hasErrorAt(const QVector<ProblemView>& problems, const QString& key) {
  for (const ProblemView& p : problems)
    if (p.error && p.key == key) return true;
  return false;
}

}  // namespace

class FamilyTest : public QObject {
  Q_OBJECT
 private slots:
  void init();
  void newConfigDialogAsksForTheFamilyFirst();
  void familySwitchAsksAndNamesWhatItDrops();
  void formShowsOnlyTheFamilysKeys();
  void familyChoicesAgreeWithTheValidator();
  void imageFamiliesOfferImagesFirst();
  void jsonlPreviewSplitsLinesAsTheTrainer();
  void textSamplesShowAsText();
  void gpuMapNamesDecoderLayers();
  void exportOffersTheFamilysForms();
  void llamaRunFeedsPlotMapAndSamples();

 private:
  QTemporaryDir tmp_;
  QString settings_;
};

void FamilyTest::init() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("family-test.ini");
  QFile::remove(settings_);
}

void FamilyTest::newConfigDialogAsksForTheFamilyFirst() {
  NewConfigDialog dialog;
  auto* family = child<QComboBox>(&dialog, "newConfigFamily");
  auto* list = child<QListWidget>(&dialog, "templateList");
  QCOMPARE(family->count(), int(backend::modelFamilies().size()));
  QVERIFY(family->itemText(0).contains("FLUX.1") && family->itemText(0).contains("image"));
  QVERIFY(family->itemText(1).contains("Llama") && family->itemText(1).contains("language-model"));
  QVERIFY(family->itemText(2).contains("FLUX.2") && family->itemText(2).contains("[klein]"));
  // FLUX first: only FLUX templates, the demo on top.
  QCOMPARE(dialog.chosen().id, QString("demo"));
  for (int i = 0; i < list->count(); ++i) QVERIFY(!list->item(i)->text().contains("Llama"));
  // The Llama family: only its templates, each a llama config.
  emit family->activated(1);
  QCOMPARE(dialog.family(), std::string("llama"));
  QVERIFY(list->count() >= 1);
  for (int i = 0; i < list->count(); ++i) {
    list->setCurrentRow(i);
    const ConfigTemplate& t = dialog.chosen();
    QCOMPARE(t.family, std::string("llama"));
    const backend::ParseResult parsed = backend::parseYaml(templateText(t).toStdString(), t.id.toStdString());
    QVERIFY2(parsed.ok, qPrintable(t.id));
    QCOMPARE(parsed.config.model.arch, std::string("llama"));
  }
  QVERIFY(!child<QLabel>(&dialog, "templateSummary")->text().isEmpty());
  // FLUX.2: its templates ([klein] 9B and FLUX.2-dev on my images, FLUX.2-dev synthetic), flux2 configs
  // that open valid.
  emit family->activated(2);
  QCOMPARE(dialog.family(), std::string("flux2"));
  QCOMPARE(list->count(), 3);
  for (int i = 0; i < list->count(); ++i) {
    list->setCurrentRow(i);
    const ConfigTemplate& t = dialog.chosen();
    QCOMPARE(t.family, std::string("flux2"));
    const backend::ParseResult parsed = backend::parseYaml(templateText(t).toStdString(), t.id.toStdString());
    QVERIFY2(parsed.ok, qPrintable(t.id));
    QCOMPARE(parsed.config.model.arch, std::string("flux2"));
  }
  // choose() picks the family of the template.
  dialog.choose("flux-dev-1gpu");
  QCOMPARE(dialog.family(), std::string("flux"));
  QCOMPARE(dialog.chosen().id, QString("flux-dev-1gpu"));
}

void FamilyTest::familySwitchAsksAndNamesWhatItDrops() {
  ConfigEditor e;
  QVERIFY(e.loadFile(demoConfig()));
  QCOMPARE(e.family(), std::string("flux"));
  const QString before = e.yamlText();
  auto* chooser = qobject_cast<QComboBox*>(e.fieldFor("model.arch"));
  QVERIFY(chooser);
  QCOMPARE(chooser->objectName(), QString("familyChoice"));

  // Cancel: nothing changes, and the question named the keys and the value changes.
  auto answer = answerNext("familySwitchQuestion", "familySwitchCancel");
  emit chooser->activated(1);
  QVERIFY(answer->answered);
  QVERIFY2(answer->text.contains("model.preset: tiny") && answer->text.contains("not used by Llama"),
           qPrintable(answer->text));
  QVERIFY2(answer->text.contains("datasets[0].type: shapes becomes jsonl"), qPrintable(answer->text));
  QCOMPARE(e.family(), std::string("flux"));
  QCOMPARE(chooser->currentIndex(), 0);
  QCOMPARE(e.yamlText(), before);
  QVERIFY(!e.isModified());

  // Keep: the family changes, the FLUX keys stay in the YAML and are listed with the validator's words.
  answer = answerNext("familySwitchQuestion", "familyKeepAndSwitch");
  QVERIFY(e.chooseFamily(std::string("llama")));
  QVERIFY(answer->answered);
  QCOMPARE(e.family(), std::string("llama"));
  QCOMPARE(chooser->currentIndex(), 1);
  QVERIFY(e.isModified());
  QCOMPARE(e.valueText("model.preset"), QString("tiny"));
  QCOMPARE(e.valueText("datasets[0].type"), QString("jsonl"));
  QVERIFY(e.unusedKeys().contains("model.preset"));
  auto* unusedBox = child<QWidget>(&e, "unusedKeys");
  QVERIFY(unusedBox->isVisibleTo(&e));
  auto* list = child<QTreeWidget>(&e, "unusedKeyList");
  const QStringList keys = treeColumn(list, 0);
  QCOMPARE(keys, e.unusedKeys());
  const int at = int(keys.indexOf("model.preset"));
  QCOMPARE(list->topLevelItem(at)->text(1), QString("tiny"));
  const QString why = list->topLevelItem(at)->text(2);
  QVERIFY2(why.startsWith("not used by Llama") && why.contains("ignored: a llama model does not read it"),
           qPrintable(why));

  // Its problem leads to the YAML line (the form has no row for it under Llama).
  auto* problems = child<QTreeWidget>(&e, "problemList");
  QTreeWidgetItem* presetProblem = nullptr;
  for (int i = 0; i < problems->topLevelItemCount(); ++i)
    if (problems->topLevelItem(i)->text(1) == "model.preset") presetProblem = problems->topLevelItem(i);
  QVERIFY(presetProblem);
  emit problems->itemClicked(presetProblem, 0);
  QCOMPARE(child<QTabWidget>(&e, "configTabs")->currentWidget(), child<QWidget>(&e, "yamlEdit"));
  e.showPage("basic");

  // "Drop these settings": back to their defaults, the list gone.
  child<QPushButton>(&e, "dropUnusedKeys")->click();
  QVERIFY(e.unusedKeys().isEmpty());
  QVERIFY(!unusedBox->isVisibleTo(&e));
  QCOMPARE(e.valueText("model.preset"), QString("\"\""));
  QVERIFY(!e.yamlText().contains("preset: tiny"));

  // Back to FLUX with a Llama-only key set: Drop resets it, the export form follows the family.
  QVERIFY(e.setValueText("datasets[0].max_seq_len", "1024"));
  QVERIFY(e.setValueText("save.export_formats", "[peft]"));
  answer = answerNext("familySwitchQuestion", "familyDropAndSwitch");
  QVERIFY(e.chooseFamily(std::string("flux")));
  QVERIFY(answer->answered);
  QVERIFY2(answer->text.contains("datasets[0].max_seq_len: 1024") && answer->text.contains("not used by FLUX.1"),
           qPrintable(answer->text));
  QVERIFY2(answer->text.contains("save.export_formats: [peft] becomes [diffusers]"), qPrintable(answer->text));
  QCOMPARE(e.family(), std::string("flux"));
  QCOMPARE(e.valueText("datasets[0].max_seq_len"), QString("512"));
  QCOMPARE(e.valueText("save.export_formats"), QString("[diffusers]"));
  QCOMPARE(e.valueText("datasets[0].type"), QString("images"));

  // Nothing to drop or change: no question at all.
  ConfigEditor plain;
  plain.newConfig();
  QVERIFY(plain.setValueText("datasets[0].type", "synthetic"));
  QVERIFY(plain.setValueText("save.export_formats", "[]"));
  bool asked = false;
  QTimer guard;  // closes a question, should one come, so the test fails instead of hanging
  connect(&guard, &QTimer::timeout, [&asked] {
    if (QWidget* modal = QApplication::activeModalWidget()) {
      asked = true;
      modal->close();
    }
  });
  guard.start(20);
  QVERIFY(plain.chooseFamily(std::string("llama")));
  guard.stop();
  QVERIFY(!asked);
  QCOMPARE(plain.family(), std::string("llama"));
}

void FamilyTest::formShowsOnlyTheFamilysKeys() {
  ConfigEditor e;
  e.newConfig();
  child<QPushButton>(&e, "addDataset")->click();
  const QStringList fluxOnly = {"sample.width",           "sample.guidance_scale",
                                "train.timestep_type",    "datasets[0].folder_path",
                                "datasets[0].resolution", "model.vae_path"};
  const QStringList llamaOnly = {"sample.max_new_tokens",   "sample.temperature",       "datasets[0].file_path",
                                 "datasets[0].max_seq_len", "datasets[0].padding_side", "datasets[0].packing"};
  const QStringList both = {"train.lr", "network.linear", "datasets[0].type", "sample.prompts"};
  for (const QString& k : fluxOnly + both) QVERIFY2(rowShown(&e, k), qPrintable(k));
  for (const QString& k : llamaOnly) QVERIFY2(!rowShown(&e, k), qPrintable(k));
  // Every key of the form follows its schema tag.
  for (const config::KeySpec& spec : config::schema()) {
    if (spec.isDatasetKey() || spec.path == "model.arch") continue;
    QCOMPARE(e.isFieldShown(QString::fromStdString(spec.path)), spec.appliesTo(std::string("flux")));
  }
  QVERIFY(e.fieldFor("model.name_or_path")->toolTip().contains("FLUX checkpoint"));
  QVERIFY(e.fieldFor("save.export_formats")->toolTip().contains("one of: diffusers kohya comfy, default: [diffusers]"));

  answerNext("familySwitchQuestion", "familySwitch");
  QVERIFY(e.chooseFamily(std::string("llama")));
  // A shared key's tooltip is in the family's words: a Llama's base model is a causal LM's folder.
  const QString modelTip = e.fieldFor("model.name_or_path")->toolTip();
  QVERIFY2(modelTip.contains("config.json") && !modelTip.contains("FLUX"), qPrintable(modelTip));
  // The dataset kinds and LoRA forms it names, and their default, are the family's too.
  const QString typeTip = e.fieldFor("datasets[0].type")->toolTip();
  QVERIFY2(typeTip.contains("one of: jsonl synthetic, default: jsonl") && !typeTip.contains("images"),
           qPrintable(typeTip));
  const QString formatTip = e.fieldFor("save.export_formats")->toolTip();
  QVERIFY2(formatTip.contains("one of: peft, default: [peft]") && !formatTip.contains("kohya"), qPrintable(formatTip));
  for (const QString& k : llamaOnly + both) QVERIFY2(rowShown(&e, k), qPrintable(k));
  for (const QString& k : fluxOnly) QVERIFY2(!rowShown(&e, k), qPrintable(k));
  for (const config::KeySpec& spec : config::schema()) {
    if (spec.isDatasetKey() || spec.path == "model.arch") continue;
    QCOMPARE(e.isFieldShown(QString::fromStdString(spec.path)), spec.appliesTo(std::string("llama")));
  }
  // FLUX's model shape has nothing for a causal LM: the group is hidden.
  QVERIFY(!child<QWidget>(&e, "advanced_model_shape")->isVisibleTo(&e));
  // The dataset kinds and LoRA forms offered are the family's.
  auto* type = qobject_cast<QComboBox*>(e.fieldFor("datasets[0].type"));
  QStringList types;
  for (int i = 0; i < type->count(); ++i) types << type->itemData(i).toString();
  QCOMPARE(types, QStringList({"jsonl", "synthetic"}));
  QCOMPARE(type->currentData().toString(), QString("jsonl"));
  auto* formats = e.fieldFor("save.export_formats");
  QVERIFY(!child<QCheckBox>(formats, "choice_peft")->isHidden());
  QVERIFY(child<QCheckBox>(formats, "choice_peft")->isChecked());
  QVERIFY(child<QCheckBox>(formats, "choice_kohya")->isHidden());
  // The jsonl file's chooser is a file chooser.
  QVERIFY(e.fieldFor("datasets[0].file_path")->findChild<QWidget*>("browseFile"));

  // A value the family refuses (typed into the YAML) stays shown, marked, with the validator's error.
  e.setYamlText(e.yamlText().replace("type: jsonl", "type: images"));
  QCOMPARE(type->currentData().toString(), QString("images"));
  QVERIFY2(type->currentText().contains("not for Llama"), qPrintable(type->currentText()));
  QVERIFY(hasErrorAt(e.problems(), "datasets[0].type"));
}

void FamilyTest::familyChoicesAgreeWithTheValidator() {
  // What the form offers per family passes the validator; what it holds back is refused.
  for (const std::string& arch : backend::modelFamilies()) {
    const auto types = backend::datasetTypesOf(arch);
    const auto formats = backend::exportFormatsOf(arch);
    for (config::DatasetType t :
         {config::DatasetType::Images, config::DatasetType::Latents, config::DatasetType::Synthetic,
          config::DatasetType::Shapes, config::DatasetType::Jsonl}) {
      config::RunConfig c = backend::defaultConfig();
      c.model.arch = arch;
      c.datasets.resize(1);
      c.datasets[0].type = t;
      const bool offered = std::find(types.begin(), types.end(), t) != types.end();
      QCOMPARE(hasErrorAt(backend::validate(c, ""), "datasets[0].type"), !offered);
    }
    for (config::ExportFormat f : {config::ExportFormat::Diffusers, config::ExportFormat::Kohya,
                                   config::ExportFormat::Comfy, config::ExportFormat::Peft}) {
      config::RunConfig c = backend::defaultConfig();
      c.model.arch = arch;
      c.datasets.resize(1);
      c.save.exportFormats = {f};
      const bool offered = std::find(formats.begin(), formats.end(), f) != formats.end();
      // llama + diffusers is accepted (it writes the peft folder); the app offers peft only.
      if (!offered && arch == std::string("llama") && f == config::ExportFormat::Diffusers) continue;
      QCOMPARE(hasErrorAt(backend::validate(c, ""), "save.export_formats"), !offered);
    }
  }
}

// A family that trains on pictures offers an images dataset first: the user trains
// on their own images; synthetic data is for benchmarks. FLUX.2 on the real widgets:
// a switch to it sets images, the dataset kind's choices and its default put them first.
void FamilyTest::imageFamiliesOfferImagesFirst() {
  for (const std::string& arch : backend::modelFamilies()) {
    const auto types = backend::datasetTypesOf(arch);
    if (std::find(types.begin(), types.end(), config::DatasetType::Images) == types.end()) continue;
    QVERIFY2(types.front() == config::DatasetType::Images,
             qPrintable(QString::fromStdString(arch + " offers " + config::enumName(types.front()) + " first")));
  }

  ConfigEditor e;
  QVERIFY(e.loadFile(demoConfig()));  // FLUX.1 on shapes, which FLUX.2 does not take
  QCOMPARE(e.valueText("datasets[0].type"), QString("shapes"));
  // "Keep them (unused) and switch", or "Switch" where nothing goes unused.
  const QStringList keepAndSwitch = {"familyKeepAndSwitch", "familySwitch"};
  auto answer = answerNext("familySwitchQuestion", keepAndSwitch);
  QVERIFY(e.chooseFamily(std::string("flux2")));
  QVERIFY(answer->answered);
  QVERIFY2(answer->text.contains("datasets[0].type: shapes becomes images"), qPrintable(answer->text));
  QCOMPARE(e.family(), std::string("flux2"));
  QCOMPARE(e.valueText("datasets[0].type"), QString("images"));
  auto* type = qobject_cast<QComboBox*>(e.fieldFor("datasets[0].type"));
  QVERIFY(type);
  QVERIFY(type->count() >= 2);
  QCOMPARE(type->itemData(0).toString(), QString("images"));
  QCOMPARE(type->currentData().toString(), QString("images"));
  QStringList offered;
  for (int i = 0; i < type->count(); ++i) offered << type->itemData(i).toString();
  QVERIFY2(offered.contains("synthetic"), qPrintable(offered.join(' ')));  // still there, for benchmarks
  const QString tip = type->toolTip();
  QVERIFY2(tip.contains("one of: images synthetic, default: images"), qPrintable(tip));
  // The images dataset's own rows show: the folder to train on.
  QVERIFY(rowShown(&e, "datasets[0].folder_path"));

  // Add dataset gives the family's first kind; from a Llama config's jsonl dataset, a switch sets images too.
  child<QPushButton>(&e, "addDataset")->click();
  QCOMPARE(e.valueText("datasets[1].type"), QString("images"));
  ConfigEditor lm;
  lm.newConfig();
  answerNext("familySwitchQuestion", keepAndSwitch);
  QVERIFY(lm.chooseFamily(std::string("llama")));
  child<QPushButton>(&lm, "addDataset")->click();
  QCOMPARE(lm.valueText("datasets[0].type"), QString("jsonl"));
  answer = answerNext("familySwitchQuestion", keepAndSwitch);
  QVERIFY(lm.chooseFamily(std::string("flux2")));
  QVERIFY(answer->answered);
  QCOMPARE(lm.valueText("datasets[0].type"), QString("images"));
}

void FamilyTest::jsonlPreviewSplitsLinesAsTheTrainer() {
  const QString file = tmp_.filePath("data.jsonl");
  writeFile(file,
            "{\"q\": \"Colour of the sky?\", \"a\": \" blue\"}\n"
            "{\"q\": broken\n"
            "\n"
            "{\"q\": \"no answer\"}\n"
            "{\"q\": \"Colour of snow?\", \"a\": \" white\"}\n"
            "[1, 2]\n");
  config::DatasetConfig d;
  d.type = config::DatasetType::Jsonl;
  d.filePath = file.toStdString();
  d.promptField = "q";
  d.responseField = "a";
  DatasetView view;
  QSignalSpy done(&view, &DatasetView::scanFinished);
  view.setDatasets({datasetEntryView(d)});
  QTRY_VERIFY_WITH_TIMEOUT(done.count() == 1, 10000);
  const DatasetScanView& scan = view.lastScan();
  QVERIFY(scan.ok && scan.jsonl);
  QCOMPARE(scan.lines, 6);
  QCOMPARE(scan.samples, 2);
  auto* rows = child<QTreeWidget>(&view, "datasetJsonlPreview");
  QVERIFY(rows->isVisibleTo(&view));
  QVERIFY(!child<QWidget>(&view, "datasetThumbnails")->isVisibleTo(&view));
  QCOMPARE(treeColumn(rows, 0), QStringList({"1", "5"}));
  QCOMPARE(treeColumn(rows, 1), QStringList({"Colour of the sky?", "Colour of snow?"}));
  QCOMPARE(treeColumn(rows, 2), QStringList({" blue", " white"}));
  auto* skipped = child<QTreeWidget>(&view, "datasetSkipped");
  QCOMPARE(treeColumn(skipped, 0), QStringList({"line 2", "line 3", "line 4", "line 6"}));
  const QStringList why = treeColumn(skipped, 1);
  QVERIFY2(why[0].startsWith("not valid JSON"), qPrintable(why[0]));
  QCOMPARE(why[1], QString("blank line"));
  QCOMPARE(why[2], QString("no field 'a' (the line has: q)"));  // the fields it has, to set the right ones
  QCOMPARE(why[3], QString("not a JSON object"));
  QVERIFY2(
      view.summaryText().contains("2 sample(s) from 6 line(s)") && view.summaryText().contains("4 line(s) skipped"),
      qPrintable(view.summaryText()));

  // One text field with the seed's marker: the marker stays with the prompt.
  writeFile(file,
            "{\"text\": \"Translate: hello ### OUTPUT: bonjour\"}\n"
            "{\"text\": \"no marker here\"}\n");
  d.textField = "text";
  d.responseMarker = "### OUTPUT:";
  view.setDatasets({datasetEntryView(d)});
  QTRY_VERIFY_WITH_TIMEOUT(done.count() == 2, 10000);
  QCOMPARE(treeColumn(rows, 1), QStringList({"Translate: hello ### OUTPUT:"}));
  QCOMPARE(treeColumn(rows, 2), QStringList({" bonjour"}));
  QCOMPARE(treeColumn(skipped, 0), QStringList({"line 2"}));
  QVERIFY(treeColumn(skipped, 1)[0].contains("no response marker"));

  // A missing file says so, naming it.
  d.filePath = tmp_.filePath("missing.jsonl").toStdString();
  view.setDatasets({datasetEntryView(d)});
  QTRY_VERIFY_WITH_TIMEOUT(done.count() == 3, 10000);
  QVERIFY2(view.summaryText().contains("missing.jsonl"), qPrintable(view.summaryText()));
}

void FamilyTest::textSamplesShowAsText() {
  const QString run = tmp_.filePath("lm-run");
  QVERIFY(QDir().mkpath(run + "/samples"));
  writeFile(run + "/samples/step_00000010_p00.txt", "Colour of the sky? It is blue.\n");
  writeFile(run + "/samples/step_00000005_p00.txt", "Colour of the sky? It is\n");
  writeFile(run + "/samples/index.jsonl",
            "{\"file\": \"step_00000005_p00.txt\", \"step\": 5, \"prompt_index\": 0, \"prompt\": \"Colour of the "
            "sky?\", \"seed\": 42, \"temperature\": 0.0, \"completion\": \" It is\"}\n"
            "{\"file\": \"step_00000010_p00.txt\", \"step\": 10, \"prompt_index\": 0, \"prompt\": \"Colour of the "
            "sky?\", \"seed\": 42, \"temperature\": 0.7, \"completion\": \" It is blue.\"}\n");
  SampleBrowser browser;
  browser.setRunDir(run);
  QCOMPARE(browser.steps(), QList<qint64>({5, 10}));  // sorted by step
  const QVector<SampleInfo> latest = browser.latestSamples();
  QCOMPARE(latest.size(), 1);
  const SampleInfo& s = latest.front();
  QVERIFY(s.isText());
  QCOMPARE(s.step, 10);
  QCOMPARE(s.prompt, QString("Colour of the sky?"));
  QCOMPARE(s.completion, QString(" It is blue."));
  QCOMPARE(s.settings, QString("seed 42, temperature 0.7"));
  QCOMPARE(browser.samples().front().settings, QString("seed 42, greedy"));
  // The latest strip shows the text (prompt in bold), not an empty picture.
  auto* thumb = child<QLabel>(&browser, "sampleThumb0");
  QVERIFY(thumb->pixmap().isNull());
  QVERIFY2(thumb->text().contains("<b>Colour of the sky?</b>") && thumb->text().contains("It is blue."),
           qPrintable(thumb->text()));
  // Prompt and answer apart, each under its name, a rule between: not one run-on line.
  {
    const QString t = thumb->text();
    const int prompt = t.indexOf("Prompt"), rule = t.indexOf("<hr"), answer = t.indexOf("Answer");
    QVERIFY2(
        prompt >= 0 && rule > t.indexOf("Colour of the sky?") && answer > rule && t.indexOf("It is blue.") > answer,
        qPrintable(t));
    QVERIFY(!t.contains("sky?</b> It is"));
  }
  // The grid holds the completions, one column per step.
  auto* grid = child<QTableWidget>(&browser, "sampleGrid");
  QCOMPARE(grid->columnCount(), 2);
  QCOMPARE(grid->item(0, 0)->text(), QString(" It is"));
  QCOMPARE(grid->item(0, 1)->text(), QString(" It is blue."));
  // Enlarged: the whole text, with step, prompt and settings in the caption.
  QWidget* viewer = browser.showEnlarged(s);
  const QString text = child<QLabel>(viewer, "sampleViewerImage")->text();
  QVERIFY2(text.contains("It is blue."), qPrintable(text));
  const QString caption = child<QLabel>(viewer, "sampleViewerCaption")->text();
  QVERIFY2(caption.contains("step 10") && caption.contains("Colour of the sky?") && caption.contains("temperature 0.7"),
           qPrintable(caption));
  viewer->close();

  // A new sample from the trainer: its text and index line are read.
  writeFile(run + "/samples/step_00000015_p00.txt", "Colour of the sky? It is blue!\n");
  QFile index(run + "/samples/index.jsonl");
  QVERIFY(index.open(QIODevice::Append));
  index.write(
      "{\"file\": \"step_00000015_p00.txt\", \"step\": 15, \"prompt_index\": 0, \"prompt\": \"Colour of the "
      "sky?\", \"seed\": 42, \"temperature\": 0.0, \"completion\": \" It is blue!\"}\n");
  index.close();
  SampleInfo live;
  live.path = run + "/samples/step_00000015_p00.txt";
  live.step = 15;
  live.prompt = "Colour of the sky?";
  browser.addSample(live);
  QCOMPARE(browser.latestSamples().front().completion, QString(" It is blue!"));
  QCOMPARE(browser.latestSamples().front().settings, QString("seed 42, greedy"));
}

void FamilyTest::gpuMapNamesDecoderLayers() {
  // The planner's view of the 8B Llama over two 16 GB cards (the seed's case).
  backend::ParseResult parsed =
      backend::parseYaml(backend::readText(sourceFile("configs/llama3-8b-2x16gb.yaml").toStdString()), "llama.yaml");
  QVERIFY(parsed.ok);
  parsed.config.model.nameOrPath = sourceFile("configs/llama3-8b").toStdString();
  const PlacementView v = planPlacementView(parsed.config, "2x16GB");
  QVERIFY2(v.error.isEmpty(), qPrintable(v.error));
  QCOMPARE(v.devices.size(), 2);
  int layers = 0;
  QString stemId, headId;
  for (const DeviceView& d : v.devices)
    for (const BlockView& b : d.blocks) {
      layers += b.kind == BlockKind::Layer;
      if (b.kind == BlockKind::Stem) stemId = b.id;
      if (b.kind == BlockKind::Head) headId = b.id;
    }
  QCOMPARE(layers, 32);
  QVERIFY(!stemId.isEmpty() && !headId.isEmpty());

  GpuMapView map;
  map.resize(900, 1400);
  map.setPlacement(v);
  const QString layerTip = map.toolTipAt(map.blockRect("model.layers.0").center());
  QVERIFY2(layerTip.contains("model.layers.0") && layerTip.contains("decoder layer") &&
               layerTip.contains("LoRA adapters: 7"),
           qPrintable(layerTip));
  const QString stemTip = map.toolTipAt(map.blockRect(stemId).center());
  QVERIFY2(stemTip.contains("stem: embedding"), qPrintable(stemTip));
  const QString headTip = map.toolTipAt(map.blockRect(headId).center());
  QVERIFY2(headTip.contains("head: norm + lm_head"), qPrintable(headTip));
}

void FamilyTest::exportOffersTheFamilysForms() {
  ExportDialog flux("run", std::string("flux"), {"diffusers"}, tmp_.path(), {{2, false}, {4, true}, {6, false}});
  for (const QString& f : {"diffusers", "kohya", "comfy"})
    QVERIFY2(flux.findChild<QCheckBox*>("exportFormat_" + f), qPrintable(f));
  QVERIFY(!flux.findChild<QCheckBox*>("exportFormat_peft"));
  QCOMPARE(flux.formats(), QStringList({"diffusers"}));
  // Every checkpoint of the run, the latest first and picked; one saved by hand says so.
  auto* pick = child<QComboBox>(&flux, "exportCheckpoint");
  QCOMPARE(pick->count(), 3);
  QVERIFY2(pick->itemText(0).contains("step 6") && pick->itemText(0).contains("latest"), qPrintable(pick->itemText(0)));
  QVERIFY2(pick->itemText(1).contains("step 4") && pick->itemText(1).contains("by hand"),
           qPrintable(pick->itemText(1)));
  QCOMPARE(flux.step(), qint64(6));
  pick->setCurrentIndex(2);
  QCOMPARE(flux.step(), qint64(2));
  // A run with no checkpoint: nothing to export, said so, Export off.
  ExportDialog none("run", std::string("flux"), {"diffusers"}, tmp_.path(), {});
  QVERIFY(!child<QPushButton>(&none, "exportOk")->isEnabled());
  QVERIFY(child<QLabel>(&none, "exportMessage")->text().contains("no checkpoint"));
  QCOMPARE(none.step(), qint64(-1));

  // A causal LM: the peft folder only, ticked (a FLUX form in the run's config is not offered).
  ExportDialog llama("run", std::string("llama"), {"kohya"}, tmp_.path(), {{1, false}});
  QVERIFY(llama.findChild<QCheckBox*>("exportFormat_peft"));
  for (const QString& f : {"diffusers", "kohya", "comfy"}) QVERIFY(!llama.findChild<QCheckBox*>("exportFormat_" + f));
  QCOMPARE(llama.formats(), QStringList({"peft"}));
  QVERIFY(child<QCheckBox>(&llama, "exportFormat_peft")->text().contains("adapter_config.json"));
}

void FamilyTest::llamaRunFeedsPlotMapAndSamples() {
  const QString model = sourceFile("tests/fixtures/reference/causal_lm_a/model");
  if (!QFile::exists(model + "/config.json")) QSKIP("no causal_lm_a fixture");
  QFile cfgFile(model + "/config.json");
  QVERIFY(cfgFile.open(QIODevice::ReadOnly));
  const int vocab = QJsonDocument::fromJson(cfgFile.readAll()).object().value("vocab_size").toInt();
  QVERIFY(vocab > 3);
  strata::test::writeCharTokenizer(tmp_.filePath("tok").toStdString(), vocab);
  writeFile(tmp_.filePath("qa.jsonl"),
            "{\"question\": \"Colour of the sky?\", \"answer\": \" It is blue.\"}\n"
            "{\"question\": \"Colour of grass?\", \"answer\": \" It is green.\"}\n"
            "{\"question\": \"Colour of snow?\", \"answer\": \" It is white.\"}\n"
            "{\"question\": \"Colour of coal?\", \"answer\": \" It is black.\"}\n");
  const QString yaml = QString(R"(job:
  name: lm_gui
  training_folder: %1
model:
  arch: llama
  name_or_path: %2
  tokenizer_path: %3
  device: cpu
network:
  linear: 4
  linear_alpha: 16
train:
  steps: 4
  batch_size: 2
  lr: 0.01
  dtype: fp32
datasets:
  - type: jsonl
    file_path: %4
    prompt_field: question
    response_field: answer
    max_seq_len: 48
sample:
  sample_every: 2
  prompts: ["Colour of the sky?"]
  max_new_tokens: 4
save:
  save_every: 0
  dtype: fp32
  export_formats: [peft]
)")
                           .arg(tmp_.filePath("runs"), model, tmp_.filePath("tok"), tmp_.filePath("qa.jsonl"));
  MainWindow w(settings_);
  w.show();
  ConfigEditor* e = w.configEditor();
  e->setYamlText(yaml);
  QCOMPARE(e->family(), std::string("llama"));
  QVERIFY2(!e->hasErrors(), qPrintable(e->problems().isEmpty() ? QString() : e->problems().front().message));
  QVERIFY(e->unusedKeys().isEmpty());
  // The Setup tab's dataset view previews the run's jsonl.
  QTRY_VERIFY_WITH_TIMEOUT(w.datasetView()->lastScan().jsonl && w.datasetView()->lastScan().samples == 4, 10000);

  QSignalSpy finished(w.bridge(), &TrainerBridge::finished);
  child<QPushButton>(&w, "startButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 240000);
  QTRY_VERIFY(!w.bridge()->isActive());
  // Loss plot: one point per step (drained from the trainer on the GUI's timer).
  QTRY_COMPARE_WITH_TIMEOUT(w.lossPlot()->lastStep(), 4, 10000);
  QVERIFY(w.lossPlot()->plottedPointCount() >= 4);
  // Live map: the run's embedding, decoder layers and head.
  int layers = 0;
  bool stem = false, head = false;
  for (const DeviceView& d : w.liveMap()->placement().devices)
    for (const BlockView& b : d.blocks) {
      layers += b.kind == BlockKind::Layer;
      stem |= b.kind == BlockKind::Stem;
      head |= b.kind == BlockKind::Head;
    }
  QVERIFY(layers >= 1 && stem && head);
  // Samples: text, sorted by step, with their prompt and settings.
  QTRY_VERIFY_WITH_TIMEOUT(!w.sampleBrowser()->steps().isEmpty() && w.sampleBrowser()->steps().back() == 4, 10000);
  const QVector<SampleInfo> samples = w.sampleBrowser()->samples();
  QVERIFY(samples.size() >= 2);
  for (const SampleInfo& s : samples) {
    QVERIFY2(s.isText(), qPrintable(s.path));
    QCOMPARE(s.prompt, QString("Colour of the sky?"));
    QVERIFY2(s.settings.contains("greedy"), qPrintable(s.settings));
  }
  QCOMPARE(w.sampleBrowser()->steps().back(), 4);

  // Export: the run folder's config says llama, so the dialog offers the peft folder only, and it is written.
  child<QPushButton>(&w, "exportButton")->click();
  auto* dialog = w.findChild<ExportDialog*>("exportDialog");
  QVERIFY(dialog);
  QCOMPARE(dialog->family(), std::string("llama"));
  QVERIFY(!dialog->findChild<QCheckBox*>("exportFormat_kohya"));
  QCOMPARE(dialog->formats(), QStringList({"peft"}));
  const QString out = tmp_.filePath("exported");
  child<QLineEdit>(dialog, "exportDir")->setText(out);
  QSignalSpy exported(w.bridge(), &TrainerBridge::exportFinished);
  child<QPushButton>(dialog, "exportOk")->click();
  QTRY_VERIFY_WITH_TIMEOUT(exported.count() == 1, 60000);
  QVERIFY2(exported.front().at(0).toBool(), qPrintable(exported.front().at(1).toString()));
  // Named with the checkpoint's step (the last one, step 4).
  QVERIFY(QFile::exists(out + "/lm_gui_step4_peft/adapter_config.json"));
  QVERIFY(QFile::exists(out + "/lm_gui_step4_peft/adapter_model.safetensors"));
}

STRATA_GUI_TEST_MAIN(FamilyTest)
#include "FamilyTest.moc"
