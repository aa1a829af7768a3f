// The config editor on the real window, offscreen, as a user with their own
// model and data meets it: a model path never trains random weights by surprise,
// a dataset that yields nothing blocks Start with the reason, a file with problems
// opens with them listed, an ai-toolkit job keeps what it can (trigger word) and
// says why not the rest, and the form shows only what the dataset reads, with
// problem marks that stay readable.
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>
#include <optional>

#include "GuiTestSupport.h"
#include "ui/backend/DatasetBackend.h"
#include "config/RunConfig.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/setup/DatasetView.h"
#include "ui/app/MainWindow.h"
#include "ui/widgets/Theme.h"

using namespace strata::ui;
using namespace strata::ui::test;

namespace {

void writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  QVERIFY2(f.open(QIODevice::WriteOnly), qPrintable(path));
  f.write(bytes);
}

std::optional<ProblemView> problemAt(const ConfigEditor* e, const QString& key, bool error = true) {
  for (const ProblemView& p : e->problems())
    if (p.key == key && p.error == error) return p;
  return std::nullopt;
}

QString dump(const ConfigEditor* e) {
  QStringList lines;
  for (const ProblemView& p : e->problems())
    lines << QString("%1 %2 %3: %4 (%5)").arg(p.error ? "error" : "warning", p.key).arg(p.line).arg(p.message, p.hint);
  return lines.join('\n');
}

// Types a path into a path field, key by key, as a user does.
void typePath(ConfigEditor* e, const QString& key, const QString& text) {
  auto* line = e->fieldFor(key)->findChild<QLineEdit*>("pathText");
  QVERIFY(line);
  line->selectAll();
  QTest::keyClick(line, Qt::Key_Delete);
  QTest::keyClicks(line, text);
}

// Pixels of `rect` in `image` that stand out from the rect's commonest colour
// (an arrow, a letter), by lightness.
int contrastingPixels(const QImage& image, const QRect& area, int minDiff) {
  const QRect rect = area & image.rect();
  QMap<QRgb, int> counts;
  for (int y = rect.top(); y <= rect.bottom(); ++y)
    for (int x = rect.left(); x <= rect.right(); ++x) ++counts[image.pixel(x, y)];
  QRgb background = 0;
  int most = -1;
  for (auto it = counts.begin(); it != counts.end(); ++it)
    if (it.value() > most) {
      most = it.value();
      background = it.key();
    }
  const int bg = QColor(background).lightness();
  int n = 0;
  for (int y = rect.top(); y <= rect.bottom(); ++y)
    for (int x = rect.left(); x <= rect.right(); ++x)
      n += std::abs(QColor(image.pixel(x, y)).lightness() - bg) >= minDiff;
  return n;
}

// Rows of `rect` that hold part of a glyph (an arrow): some pixels stand out from the
// background, but not a whole row of them (a border line).
int glyphRows(const QImage& image, const QRect& area, int minDiff) {
  const QRect rect = area & image.rect();
  QMap<QRgb, int> counts;  // the background: the commonest colour
  for (int y = rect.top(); y <= rect.bottom(); ++y)
    for (int x = rect.left(); x <= rect.right(); ++x) ++counts[image.pixel(x, y)];
  QRgb background = 0;
  for (auto it = counts.begin(); it != counts.end(); ++it)
    if (it.value() > counts.value(background, -1)) background = it.key();
  const int bg = QColor(background).lightness();
  int rows = 0;
  for (int y = rect.top(); y <= rect.bottom(); ++y) {
    int n = 0;
    for (int x = rect.left(); x <= rect.right(); ++x)
      n += std::abs(QColor(image.pixel(x, y)).lightness() - bg) >= minDiff;
    rows += n > 0 && n < rect.width() * 7 / 10;
  }
  return rows;
}

}  // namespace

class EditorTest : public QObject {
  Q_OBJECT
 private slots:
  void init();
  void aModelPathWithWeightsTurnsRandomWeightsOff();
  void randomWeightsOverWeightsInTheYamlIsAnErrorForEveryFamily();
  void aDatasetThatYieldsNothingBlocksStart();
  void aConfigWithProblemsOpensWithThemListed();
  void importKeepsTheTriggerWordAndSaysWhyNotLowVram();
  void fieldsOfOtherDatasetTypesAreHidden();
  void theProblemListWrapsLongMessages();
  void errorStyledFieldsStayUsable();
  void theFamilySwitchCountsWhatItLists();
  void theDatasetTabDropsJsonlHeadersForAShapesDataset();
  void theDatasetTabSaysWhichLayoutItRead();

 private:
  QTemporaryDir tmp_;
  QString settings_;
  QString demoCopy_;
  QString weights_;    // a model folder with weights and config.json
  QString shapeOnly_;  // a model folder with config.json only
};

void EditorTest::init() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("editor-test.ini");
  QFile::remove(settings_);
  demoCopy_ = writableDemoCopy(tmp_.filePath("demo.yaml"));
  QVERIFY(!demoCopy_.isEmpty());
  QDir(tmp_.path()).mkpath("weights");
  QDir(tmp_.path()).mkpath("shape_only");
  weights_ = tmp_.filePath("weights");
  shapeOnly_ = tmp_.filePath("shape_only");
  writeFile(weights_ + "/config.json", "{}");
  writeFile(weights_ + "/model.safetensors", "x");
  writeFile(shapeOnly_ + "/config.json", "{}");
}

// Issue 31.4: setting a model path that holds weights turns random_weights off, the
// form says so, for every family; a weightless folder (a causal LM's shape) does not.
void EditorTest::aModelPathWithWeightsTurnsRandomWeightsOff() {
  MainWindow w(settings_);
  w.show();
  ConfigEditor* e = w.configEditor();
  auto* note = child<QLabel>(e, "formNote");
  QVERIFY(note);
  for (const QString& config : {demoCopy_, sourceFile("configs/llama3-8b-2x16gb.yaml")}) {
    auto a = answerNext("saveChangesDialog", "saveChangesDiscard");
    QVERIFY(w.openConfig(config));
    e->showPage("basic");
    auto* random = qobject_cast<QCheckBox*>(e->fieldFor("model.random_weights"));
    QVERIFY(random);
    QVERIFY2(random->isChecked(), qPrintable(config));
    QVERIFY(!note->isVisible());
    // A folder with config.json only: the shape of a random model, nothing changes.
    typePath(e, "model.name_or_path", shapeOnly_);
    QCOMPARE(e->valueText("model.name_or_path"), shapeOnly_);
    QVERIFY(random->isChecked());
    QVERIFY(!note->isVisible());
    // A folder with weights: the run trains on them, and the form says so.
    typePath(e, "model.name_or_path", weights_);
    QCOMPARE(e->valueText("model.name_or_path"), weights_);
    QVERIFY2(!random->isChecked(), qPrintable(config));
    QCOMPARE(e->valueText("model.random_weights"), QString("false"));
    QVERIFY(e->yamlText().contains("random_weights: false"));
    QVERIFY(note->isVisible());
    QVERIFY2(note->text().contains(weights_) && note->text().contains("Random weights turned off"),
             qPrintable(note->text()));
    QVERIFY2(!problemAt(e, "model.random_weights"), qPrintable(dump(e)));
    // Ticking it again is the user's choice: allowed, and the conflict is an error.
    random->click();
    QCOMPARE(e->valueText("model.random_weights"), QString("true"));
    QVERIFY(!note->isVisible());
    QVERIFY2(problemAt(e, "model.random_weights"), qPrintable(dump(e)));
    QCOMPARE(random->property("problem").toString(), QString("error"));
    QVERIFY(!child<QPushButton>(&w, "startButton")->isEnabled());
  }
}

// The same conflict typed into the YAML is not changed behind the user's back: it
// is an error at random_weights, for FLUX.1 and Llama alike.
void EditorTest::randomWeightsOverWeightsInTheYamlIsAnErrorForEveryFamily() {
  ConfigEditor e;
  for (const QString& family : {"flux", "llama", "flux2"}) {
    e.setYamlText(QString("model:\n"
                          "  arch: %1\n"
                          "  random_weights: true\n"
                          "  device: cpu\n"
                          "  name_or_path: %2\n"
                          "datasets: [{type: synthetic}]\n"
                          "sample: {sample_every: 0}\n")
                      .arg(family, weights_));
    std::optional<ProblemView> p = problemAt(&e, "model.random_weights");
    QVERIFY2(p, qPrintable(family + ":\n" + dump(&e)));
    QCOMPARE(p->line, 3);
    QVERIFY2(p->message.contains("not read"), qPrintable(p->message));
    QVERIFY(e.yamlText().contains("random_weights: true"));
  }
}

// Issue 31.5: a jsonl file with no usable line, an image folder with no image and a
// missing tokenizer are errors in the problem list, with the reason; Start is off.
void EditorTest::aDatasetThatYieldsNothingBlocksStart() {
  MainWindow w(settings_);
  w.show();
  ConfigEditor* e = w.configEditor();
  auto* start = child<QPushButton>(&w, "startButton");
  const QString jsonl = tmp_.filePath("data.jsonl");
  writeFile(jsonl, "{\"question\": \"2+2?\", \"answer\": \"4\"}\n{\"question\": \"3+3?\", \"answer\": \"6\"}\n");
  e->setYamlText(QString("model: {arch: llama, random_weights: true, device: cpu, name_or_path: %1}\n"
                         "datasets:\n"
                         "  - type: jsonl\n"
                         "    file_path: %2\n"  // 4
                         "sample: {sample_every: 0}\n")
                     .arg(shapeOnly_, jsonl));
  std::optional<ProblemView> p = problemAt(e, "datasets[0].file_path");
  QVERIFY2(p, qPrintable(dump(e)));
  QCOMPARE(p->line, 4);
  QVERIFY2(p->message.contains("no usable sample") && p->message.contains("the line has: question, answer"),
           qPrintable(p->message));
  std::optional<ProblemView> tok = problemAt(e, "model.name_or_path");
  QVERIFY2(tok && tok->message.contains("no tokenizer"), qPrintable(dump(e)));
  QVERIFY(!start->isEnabled());
  // The field is marked where the user fixes it.
  QCOMPARE(e->fieldFor("datasets[0].file_path")->property("problem").toString(), QString("error"));

  // A common layout is read: the file's error goes as soon as the file changes.
  writeFile(jsonl, "{\"prompt\": \"2+2?\", \"completion\": \" 4\"}\n");
  QVERIFY(e->setValueText("train.steps", "11"));  // any edit validates again
  QVERIFY2(!problemAt(e, "datasets[0].file_path"), qPrintable(dump(e)));

  // An image folder with nothing to train on.
  QDir(tmp_.path()).mkpath("images");
  writeFile(tmp_.filePath("images/readme.txt"), "no pictures here");
  e->setYamlText(QString("model: {random_weights: true, device: cpu, tokenizer_path: %1}\n"
                         "datasets:\n"
                         "  - type: images\n"
                         "    folder_path: %2\n"  // 4
                         "sample: {sample_every: 0}\n")
                     .arg(shapeOnly_, tmp_.filePath("images")));
  p = problemAt(e, "datasets[0].folder_path");
  QVERIFY2(p && p->message.contains("no image in"), qPrintable(dump(e)));
  QVERIFY(!start->isEnabled());
}

// Issue 31.6: a syntax error, a bad value or an unknown key opens, with the
// problems listed by key and line; the text is kept as written, and the form
// takes no edits until the YAML reads cleanly.
void EditorTest::aConfigWithProblemsOpensWithThemListed() {
  MainWindow w(settings_);
  w.show();
  ConfigEditor* e = w.configEditor();
  auto* lock = child<QLabel>(e, "formLocked");
  auto* yaml = child<QPlainTextEdit>(e, "yamlEdit");
  QVERIFY(lock && yaml);

  const QString syntax = tmp_.filePath("syntax.yaml");
  const QByteArray syntaxText = "model:\n  preset: tiny\n  random_weights: [true\ntrain:\n  steps: 10\n";
  writeFile(syntax, syntaxText);
  QVERIFY(w.openConfig(syntax));
  QCOMPARE(e->filePath(), syntax);
  QCOMPARE(yaml->toPlainText(), QString::fromUtf8(syntaxText));  // not replaced by the defaults
  QVERIFY(e->hasErrors());
  bool syntaxListed = false;
  for (const ProblemView& p : e->problems()) syntaxListed |= p.message.contains("syntax error") && p.line > 0;
  QVERIFY2(syntaxListed, qPrintable(dump(e)));
  QVERIFY(e->isFormLocked());
  QVERIFY(lock->isVisible());
  QVERIFY(!child<QWidget>(e, "basicPage")->isEnabled());
  QVERIFY(!e->isModified());

  const QString bad = tmp_.filePath("bad.yaml");
  QFile::copy(demoConfig(), bad + ".in");
  QFile in(bad + ".in");
  QVERIFY(in.open(QIODevice::ReadOnly));
  QByteArray text = in.readAll();
  text.replace("steps: 1500", "steps: lots");
  text += "\nmystery_key: 3\n";
  writeFile(bad, text);
  QVERIFY(w.openConfig(bad));
  std::optional<ProblemView> steps = problemAt(e, "train.steps");
  QVERIFY2(steps && steps->line > 0, qPrintable(dump(e)));
  std::optional<ProblemView> unknown = problemAt(e, "mystery_key", false);
  QVERIFY2(unknown && unknown->message.contains("unknown key"), qPrintable(dump(e)));
  QVERIFY(e->isFormLocked());
  // Fixed in the YAML: the form reads it and takes edits again.
  QString fixed = yaml->toPlainText();
  fixed.replace("steps: lots", "steps: 200");
  e->setYamlText(fixed);
  QVERIFY2(!e->isFormLocked(), qPrintable(dump(e)));
  QVERIFY(!lock->isVisible());
  QVERIFY(child<QWidget>(e, "basicPage")->isEnabled());
  QCOMPARE(e->valueText("train.steps"), QString("200"));
  QVERIFY(problemAt(e, "mystery_key", false));  // still said: the trainer ignores it
  // A form edit writes the YAML anew without it, and says so.
  e->showPage("basic");
  auto* steps2 = qobject_cast<QSpinBox*>(e->fieldFor("train.steps"));
  QVERIFY(steps2);
  steps2->setValue(201);
  QVERIFY(!e->yamlText().contains("mystery_key"));
  QVERIFY2(e->formNote().contains("mystery_key"), qPrintable(e->formNote()));
}

// Issue 31.6: ai-toolkit's trigger_word becomes the dataset's, low_vram is not taken
// over (with why), quantize is, and a hub id says how to download the folder.
void EditorTest::importKeepsTheTriggerWordAndSaysWhyNotLowVram() {
  const QString job = tmp_.filePath("job.yaml");
  writeFile(job,
            "job: extension\n"
            "config:\n"
            "  name: my_lora\n"
            "  process:\n"
            "    - type: sd_trainer\n"
            "      trigger_word: ohwx\n"
            "      datasets:\n"
            "        - folder_path: /data/me\n"
            "      model:\n"
            "        name_or_path: black-forest-labs/FLUX.1-dev\n"
            "        is_flux: true\n"
            "        quantize: true\n"
            "        low_vram: true\n");
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.importAiToolkit(job));
  if (auto* report = w.findChild<QMessageBox*>("importReport")) report->close();
  ConfigEditor* e = w.configEditor();
  QCOMPARE(e->valueText("datasets[0].trigger_word"), QString("ohwx"));
  QCOMPARE(qobject_cast<QLineEdit*>(e->fieldFor("datasets[0].trigger_word"))->text(), QString("ohwx"));
  QCOMPARE(e->valueText("model.low_vram"), QString("false"));
  QCOMPARE(e->valueText("model.quantize"), QString("true"));
  bool lowVramSaid = false;
  for (const ProblemView& p : e->problems())
    lowVramSaid |= p.key.contains("low_vram") && !p.error && p.message.contains("one block at a time");
  QVERIFY2(lowVramSaid, qPrintable(dump(e)));
  QVERIFY2(!problemAt(e, "model.low_vram"), qPrintable(dump(e)));
  std::optional<ProblemView> hub = problemAt(e, "model.name_or_path");
  QVERIFY2(hub && hub->hint.contains("huggingface-cli download black-forest-labs/FLUX.1-dev --local-dir"),
           qPrintable(dump(e)));
}

// Issue 31.11: a dataset shows the fields its type reads; a field set on a type that
// does not read it stays shown (its error is fixed there).
void EditorTest::fieldsOfOtherDatasetTypesAreHidden() {
  ConfigEditor e;
  QVERIFY(e.loadFile(demoCopy_));  // FLUX.1, a shapes dataset
  for (const char* key : {"datasets[0].trigger_word", "datasets[0].folder_path", "datasets[0].caption_ext",
                          "datasets[0].flip_x", "datasets[0].num_repeats", "datasets[0].default_caption"})
    QVERIFY2(!e.isFieldShown(key), key);
  for (const char* key : {"datasets[0].type", "datasets[0].resolution", "datasets[0].num_items"})
    QVERIFY2(e.isFieldShown(key), key);
  // Another type from the form's own box: its fields come, the others go.
  auto* type = qobject_cast<QComboBox*>(e.fieldFor("datasets[0].type"));
  QVERIFY(type);
  type->setCurrentIndex(type->findData("images"));
  QCOMPARE(e.valueText("datasets[0].type"), QString("images"));
  for (const char* key : {"datasets[0].trigger_word", "datasets[0].folder_path", "datasets[0].caption_ext"})
    QVERIFY2(e.isFieldShown(key), key);
  QVERIFY(!e.isFieldShown("datasets[0].num_items"));
  // Set, then the type changed under it: shown with its error.
  QVERIFY(e.setValueText("datasets[0].trigger_word", "sks"));
  type->setCurrentIndex(type->findData("shapes"));
  QVERIFY(e.isFieldShown("datasets[0].trigger_word"));
  QVERIFY(problemAt(&e, "datasets[0].trigger_word"));
  // A language model: the jsonl fields for jsonl, not for synthetic.
  QVERIFY(e.loadFile(sourceFile("configs/llama3-8b-2x16gb.yaml")));
  const QString kind = e.valueText("datasets[0].type");
  for (const char* key : {"datasets[0].prompt_field", "datasets[0].response_marker", "datasets[0].file_path"})
    QCOMPARE(e.isFieldShown(key), kind == "jsonl");
  QVERIFY(e.isFieldShown("datasets[0].max_seq_len"));
}

// Issue 31.11: a long message wraps in the problem list instead of running off.
void EditorTest::theProblemListWrapsLongMessages() {
  ConfigEditor e;
  e.resize(700, 700);
  e.show();
  QVERIFY(QTest::qWaitForWindowExposed(&e));
  e.setYamlText(QString("model: {random_weights: true, device: cpu, name_or_path: %1}\n"
                        "datasets: [{type: shapes, resolution: [32]}]\n"
                        "sample: {sample_every: 0}\n")
                    .arg(weights_));
  auto* list = child<QTreeWidget>(&e, "problemList");
  QVERIFY(list && list->topLevelItemCount() > 0);
  QTest::qWait(50);  // the view lays its rows out
  QTreeWidgetItem* item = nullptr;
  for (int i = 0; i < list->topLevelItemCount(); ++i)
    if (list->topLevelItem(i)->text(1) == "model.random_weights") item = list->topLevelItem(i);
  QVERIFY(item);
  const QString message = item->text(3);
  const int lineHeight = list->fontMetrics().height();
  QVERIFY2(list->fontMetrics().horizontalAdvance(message) > list->header()->sectionSize(3), "the message is long");
  // Every column within the view: nothing to scroll sideways to.
  QVERIFY(list->header()->length() <= list->viewport()->width() + 1);
  // The row is as tall as the wrapped text.
  QVERIFY2(list->visualItemRect(item).height() >= 2 * lineHeight,
           qPrintable(QString::number(list->visualItemRect(item).height())));
}

// Issue 31.11: an error-styled spin box keeps its arrows, and an error-styled combo
// box's text stays readable, closed and in its list.
void EditorTest::errorStyledFieldsStayUsable() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  ConfigEditor* e = w.configEditor();
  QVERIFY(w.openConfig(demoCopy_));
  e->showPage("basic");
  auto* rank = qobject_cast<QSpinBox*>(e->fieldFor("network.linear"));
  QVERIFY(rank);
  QVERIFY(e->setValueText("network.linear", "0"));  // out of range: an error on the field
  QCOMPARE(rank->property("problem").toString(), QString("error"));
  const QImage marked = rank->grab().toImage();
  // The rows of arrow in the up and down buttons of a grab, as the box is laid out now.
  auto arrowRows = [rank](const QImage& image) {
    QStyleOptionSpinBox opt;
    opt.initFrom(rank);
    opt.subControls = QStyle::SC_SpinBoxUp | QStyle::SC_SpinBoxDown;
    opt.stepEnabled = QAbstractSpinBox::StepUpEnabled | QAbstractSpinBox::StepDownEnabled;
    int fewest = 1000;
    for (auto sc : {QStyle::SC_SpinBoxUp, QStyle::SC_SpinBoxDown}) {
      const QRect r = rank->style()->subControlRect(QStyle::CC_SpinBox, &opt, sc, rank);
      fewest = std::min(fewest, r.isEmpty() ? 0 : glyphRows(image, r.adjusted(2, 1, -2, -1), 60));
    }
    return fewest;
  };
  QVERIFY2(arrowRows(marked) >= 2, qPrintable(QString("arrow rows: %1").arg(arrowRows(marked))));
  // In the dark theme too (light arrows on the dark error background).
  w.setTheme(Theme::Dark);
  const QImage dark = rank->grab().toImage();
  const int darkRows = arrowRows(dark);
  w.setTheme(Theme::Light);
  QVERIFY2(darkRows >= 2, qPrintable(QString("dark theme arrow rows: %1").arg(darkRows)));
  QVERIFY(arrowRows(rank->grab().toImage()) >= 2);  // and back in the light theme

  // A combo box with an error: its text and its list's selected item stand out.
  QVERIFY(e->setValueText("datasets[0].type", "jsonl"));  // not a FLUX.1 dataset: an error on the box
  auto* optimizer = qobject_cast<QComboBox*>(e->fieldFor("datasets[0].type"));
  QVERIFY(optimizer);
  QCOMPARE(optimizer->property("problem").toString(), QString("error"));
  QTest::qWait(50);  // the box's row is laid out again
  const QImage closed = optimizer->grab().toImage();
  if (qEnvironmentVariableIsSet("EDITOR_TEST_DUMP")) {
    marked.save("/tmp/et_marked.png");
    closed.save("/tmp/et_closed.png");
  }
  const int closedText = contrastingPixels(closed, QRect(6, 4, optimizer->width() / 2, optimizer->height() - 8), 100);
  QVERIFY2(closedText >= 10, qPrintable(QString("text pixels of the closed box: %1").arg(closedText)));
  optimizer->showPopup();
  QAbstractItemView* view = optimizer->view();
  QTRY_VERIFY(view->isVisible());
  const QRect current = view->visualRect(view->model()->index(optimizer->currentIndex(), 0));
  const QImage popup = view->viewport()->grab().toImage();
  if (qEnvironmentVariableIsSet("EDITOR_TEST_DUMP")) popup.save("/tmp/et_popup.png");
  const int text = contrastingPixels(popup, current.adjusted(4, 3, -4, -3), 100);  // inside the item's frame
  optimizer->hidePopup();
  QVERIFY2(text >= 20, qPrintable(QString("text pixels of the selected item: %1").arg(text)));
}

// Issue 31.11: the question before a family switch counts what it lists.
void EditorTest::theFamilySwitchCountsWhatItLists() {
  ConfigEditor e;
  e.show();
  QVERIFY(e.loadFile(demoCopy_));  // shapes: both unused keys and changed values for Llama
  auto a = answerNext("familySwitchQuestion", "familySwitchCancel");
  QVERIFY(!e.chooseFamily(std::string("llama")));
  QVERIFY(a->answered);
  const QStringList lines = a->text.split('\n', Qt::SkipEmptyParts);
  QVERIFY(lines.size() >= 2);
  const QString head = lines.front();
  int unused = 0, changes = 0;
  for (const QString& l : lines.mid(1)) (l.contains(" becomes ") ? changes : unused)++;
  QVERIFY2(changes > 0 && unused > 0, qPrintable(a->text));
  QVERIFY2(head.contains(QString("%1 setting").arg(unused)), qPrintable(a->text));
  QVERIFY2(head.contains(QString("%1 value").arg(changes)), qPrintable(a->text));
}

// Issue 31.11: after a jsonl file, a shapes dataset leaves no prompt/response table
// or "Skipped line" header behind.
void EditorTest::theDatasetTabDropsJsonlHeadersForAShapesDataset() {
  const QString jsonl = tmp_.filePath("d.jsonl");
  writeFile(jsonl, "{\"prompt\": \"a\", \"response\": \"b\"}\n{broken\n");
  DatasetView view;
  view.show();
  strata::config::DatasetConfig d;
  d.type = strata::config::DatasetType::Jsonl;
  d.filePath = jsonl.toStdString();
  view.setDatasets({datasetEntryView(d)});
  view.rescan();
  auto* rows = child<QTreeWidget>(&view, "datasetJsonlPreview");
  auto* skipped = child<QTreeWidget>(&view, "datasetSkipped");
  QTRY_VERIFY(rows->isVisible() && rows->topLevelItemCount() == 1);
  QCOMPARE(skipped->headerItem()->text(0), QString("Skipped line"));
  QVERIFY2(view.summaryText().contains("Fields read: prompt/response (1)"), qPrintable(view.summaryText()));
  strata::config::DatasetConfig shapes;
  shapes.type = strata::config::DatasetType::Shapes;
  view.setDatasets({datasetEntryView(shapes)});
  QVERIFY(!rows->isVisible());
  QVERIFY(!skipped->isVisible() || skipped->headerItem()->text(0) != "Skipped line");
  QVERIFY2(view.summaryText().contains("shapes"), qPrintable(view.summaryText()));
}

// Issue 31.5: the Dataset tab reads a chat or prompt/completion file as the trainer
// does, and says which layout it read.
void EditorTest::theDatasetTabSaysWhichLayoutItRead() {
  const QString jsonl = tmp_.filePath("chat.jsonl");
  writeFile(
      jsonl,
      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}]}\n"
      "{\"prompt\": \"2+2=\", \"completion\": \"4\"}\n");
  DatasetView view;
  strata::config::DatasetConfig d;
  d.type = strata::config::DatasetType::Jsonl;
  d.filePath = jsonl.toStdString();
  QSignalSpy done(&view, &DatasetView::scanFinished);
  view.setDatasets({datasetEntryView(d)});
  QTRY_VERIFY_WITH_TIMEOUT(done.count() == 1, 10000);
  auto* rows = child<QTreeWidget>(&view, "datasetJsonlPreview");
  QCOMPARE(rows->topLevelItemCount(), 2);
  QCOMPARE(rows->topLevelItem(0)->text(1), QString("user: Hi\nassistant: "));
  QCOMPARE(rows->topLevelItem(0)->text(2), QString("Hello"));
  QCOMPARE(rows->topLevelItem(1)->text(2), QString("4"));
  QVERIFY2(view.summaryText().contains("Fields read: messages (1), prompt/completion (1)"),
           qPrintable(view.summaryText()));
}

STRATA_GUI_TEST_MAIN(EditorTest)
#include "EditorTest.moc"
