// The widgets that need no trainer: loss plot batching, sample browser over a
// run folder, GPU map tooltips, and the planner's view of simulated devices.
#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "GuiTestSupport.h"
#include "config/RunConfig.h"
#include "events/Events.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/LossPlot.h"
#include "ui/backend/PlanBackend.h"
#include "ui/widgets/SampleBrowser.h"
#include "ui/backend/TrainerBridge.h"

using namespace strata::ui;

class WidgetsTest : public QObject {
  Q_OBJECT
 private slots:
  void lossPlotDrawsBatchesOnItsTimer();
  void lossPlotLogScaleToggle();
  void sampleFileNames();
  void sampleBrowserReadsRunFolder();
  void gpuMapTooltipsAndMismatches();
  void gpuMapShowsTheRunsMeasuredBlockFigures();
  void gpuMapDrawsTheWordsItIsGiven();
  void plannedPlacementOnSimulatedDevices();
  void plannedPlacementReportsBadSpec();
  void gpuMapFitsOrScrolls();
  void configEditorImportsAnAiToolkitJob();
};

void WidgetsTest::lossPlotDrawsBatchesOnItsTimer() {
  LossPlot plot;
  plot.show();
  QVERIFY(QTest::qWaitForWindowExposed(&plot));
  const int replotsBefore = plot.replotCount();
  // 1000 steps arrive in 20 batches, faster than the timer ticks.
  for (int b = 0; b < 20; ++b) {
    QVector<MetricPoint> batch;
    for (int i = 0; i < 50; ++i) {
      const int step = b * 50 + i + 1;
      batch << MetricPoint{step, 1.0 / step, 1.0 / step, 1e-4};
    }
    plot.appendPoints(batch);
  }
  QCOMPARE(plot.plottedPointCount(), 0);  // nothing drawn until the tick
  QTRY_COMPARE_WITH_TIMEOUT(plot.plottedPointCount(), 1000, 3000);
  QCOMPARE(plot.lastStep(), 1000);
  // One replot for all 1000 points, not one per step.
  QVERIFY2(plot.replotCount() - replotsBefore <= 2, qPrintable(QString::number(plot.replotCount())));
  // A resend of old steps (resume) is dropped.
  plot.appendPoints({MetricPoint{500, 9.0, 9.0, 1e-4}});
  QTest::qWait(2 * LossPlot::kFlushIntervalMs);
  QCOMPARE(plot.plottedPointCount(), 1000);
}

void WidgetsTest::lossPlotLogScaleToggle() {
  LossPlot plot;
  auto* check = plot.findChild<QCheckBox*>("lossLogScale");
  QVERIFY(check);
  QVERIFY(!plot.logScale());
  check->click();
  QVERIFY(plot.logScale());
  check->click();
  QVERIFY(!plot.logScale());
}

void WidgetsTest::sampleFileNames() {
  qint64 step = -1;
  int prompt = -1;
  QVERIFY(SampleBrowser::parseFileName("step_00000010_p03.png", &step, &prompt));
  QCOMPARE(step, 10);
  QCOMPARE(prompt, 3);
  QVERIFY(SampleBrowser::parseFileName("000250_1.png", &step, &prompt));
  QCOMPARE(step, 250);
  QCOMPARE(prompt, 1);
  QVERIFY(SampleBrowser::parseFileName("step_00000200_p00.png", &step, &prompt));
  QCOMPARE(step, 200);
  QCOMPARE(prompt, 0);
  QVERIFY(!SampleBrowser::parseFileName("preview.png", &step, &prompt));
}

void WidgetsTest::sampleBrowserReadsRunFolder() {
  QTemporaryDir run;
  QVERIFY(run.isValid());
  QDir(run.path()).mkpath("samples");
  for (int step : {10, 20, 30})
    for (int p : {0, 1}) {
      QImage img(32, 32, QImage::Format_RGB32);
      img.fill(QColor(step * 8, p * 120, 90));
      QVERIFY(img.save(
          QDir(run.path())
              .filePath(QString("samples/step_%1_p%2.png").arg(step, 8, 10, QChar('0')).arg(p, 2, 10, QChar('0')))));
    }
  QFile index(QDir(run.path()).filePath("samples/index.jsonl"));
  QVERIFY(index.open(QIODevice::WriteOnly));
  index.write("{\"file\":\"step_00000010_p00.png\",\"step\":10,\"prompt_index\":0,\"prompt\":\"a red circle\"}\n");
  index.close();

  SampleBrowser browser;
  browser.resize(900, 600);
  browser.show();
  browser.setRunDir(run.path());
  QCOMPARE(browser.steps(), (QList<qint64>{10, 20, 30}));
  QCOMPARE(browser.promptCount(), 2);
  QCOMPARE(browser.latestSamples().size(), 2);
  QCOMPARE(browser.latestSamples().front().step, 30);
  QCOMPARE(browser.samples().front().prompt, QString("a red circle"));

  auto* grid = browser.findChild<QTableWidget*>("sampleGrid");
  QVERIFY(grid);
  QCOMPARE(grid->rowCount(), 2);
  QCOMPARE(grid->columnCount(), 3);
  QVERIFY(grid->item(1, 2));
  // Click to enlarge.
  emit grid->cellClicked(1, 2);
  auto* viewer = browser.findChild<QDialog*>("sampleViewer");
  QVERIFY(viewer);
  QVERIFY(viewer->isVisible());
  QVERIFY(viewer->windowTitle().contains("step 30"));
  // Arrow keys: left / right move through the steps of this prompt, up / down through the prompts.
  QVERIFY(viewer->windowTitle().contains("prompt 1"));
  QTest::keyClick(viewer, Qt::Key_Left);
  QVERIFY2(viewer->windowTitle().contains("step 20"), qPrintable(viewer->windowTitle()));
  QTest::keyClick(viewer, Qt::Key_Left);
  QTest::keyClick(viewer, Qt::Key_Left);  // at the first step it stays there
  QVERIFY(viewer->windowTitle().contains("step 10"));
  QTest::keyClick(viewer, Qt::Key_Up);
  QVERIFY(viewer->windowTitle().contains("prompt 0"));
  QTest::keyClick(viewer, Qt::Key_Right);
  QVERIFY(viewer->windowTitle().contains("step 20") && viewer->windowTitle().contains("prompt 0"));
  QTest::keyClick(viewer, Qt::Key_Down);
  QVERIFY(viewer->windowTitle().contains("prompt 1"));
  viewer->close();

  // Compare two steps side by side.
  browser.compare(10, 30);
  auto* a = browser.findChild<QComboBox*>("compareStepA");
  auto* b = browser.findChild<QComboBox*>("compareStepB");
  QCOMPARE(a->currentData().toLongLong(), 10);
  QCOMPARE(b->currentData().toLongLong(), 30);
  auto* table = browser.findChild<QTableWidget*>("compareTable");
  QCOMPARE(table->columnCount(), 2);
  QVERIFY(table->item(0, 0) && table->item(0, 1));
  QCOMPARE(table->item(0, 0)->data(Qt::UserRole).toLongLong(), 10);
  QCOMPARE(table->item(0, 1)->data(Qt::UserRole).toLongLong(), 30);

  // A new sample from the trainer becomes the latest.
  SampleInfo s;
  s.step = 40;
  s.promptIndex = 0;
  s.path = QDir(run.path()).filePath("samples/step_00000030_p00.png");
  browser.addSample(s);
  QCOMPARE(browser.latestSamples().front().step, 40);
  QCOMPARE(grid->columnCount(), 4);
}

void WidgetsTest::gpuMapTooltipsAndMismatches() {
  PlacementView v;
  v.planned = false;
  DeviceView d0;
  d0.label = "cuda:0";
  d0.name = "NVIDIA H200";
  d0.totalBytes = 141'000'000'000;
  d0.capBytes = 16'000'000'000;
  d0.allocatedBytes = 9'000'000'000;
  d0.reservedBytes = 10'000'000'000;
  BlockView stem{"stem", BlockKind::Stem, 100'000'000};
  BlockView b0{"transformer_blocks.0", BlockKind::Double, 340'000'000, 12'000'000, 18, 6'000'000, 24'000'000};
  d0.blocks << stem << b0;
  DeviceView d1 = d0;
  d1.label = "cuda:1";
  d1.blocks = {BlockView{"single_transformer_blocks.0", BlockKind::Single, 140'000'000}};
  d1.mismatches << MismatchView{"single_transformer_blocks.0.attn.to_q [lora_adapter] lora_A.weight", "cuda:1",
                                "cuda:0"};
  v.devices << d0 << d1;

  GpuMapView map;
  map.resize(800, 600);
  map.setPlacement(v);
  const QRect r = map.blockRect("transformer_blocks.0");
  QVERIFY(!r.isEmpty());
  const QString tip = map.toolTipAt(r.center());
  QVERIFY2(tip.contains("transformer_blocks.0") && tip.contains("LoRA adapters: 18") && tip.contains("EMA") &&
               tip.contains("optimizer state: 24.0 MB"),
           qPrintable(tip));
  // The mismatch sits below cuda:1's blocks and names the module path.
  const QRect s = map.blockRect("single_transformer_blocks.0");
  QString mismatchTip;
  for (int y = s.bottom(); y < s.bottom() + 120 && mismatchTip.isEmpty(); y += 4) {
    const QString t = map.toolTipAt(QPoint(s.center().x(), y));
    if (t.contains("audit mismatch")) mismatchTip = t;
  }
  QVERIFY2(mismatchTip.contains("single_transformer_blocks.0.attn.to_q"), qPrintable(mismatchTip));

  // Live memory updates reach the device.
  map.updateMemory({MemoryView{"cuda:1", 5'000'000'000, 6'000'000'000, 16'000'000'000}});
  QCOMPARE(map.placement().devices[1].allocatedBytes, 5'000'000'000LL);
}

void WidgetsTest::gpuMapShowsTheRunsMeasuredBlockFigures() {
  strata::events::PlacementEvent e;
  strata::events::PlacedBlock b;
  b.id = "transformer_blocks.0";
  b.kind = "double";
  b.device = "cuda:0";
  b.paramBytes = 340'000'000;
  b.attachments = {{"lora_adapter", 14, 12'000'000},    {"ema_shadow", 28, 12'000'000},
                   {"optimizer_state", 28, 24'000'000}, {"quant_scale", 14, 3'000'000},
                   {"fp8_transpose", 12, 226'000'000},  {"some_future_kind", 1, 1'000'000}};
  b.attachmentBytes = 278'000'000;
  e.blocks.push_back(b);
  PlacementView v = placementViewOf(e);
  QCOMPARE(v.devices.size(), 1);
  const BlockView& bv = v.devices[0].blocks.at(0);
  QVERIFY(bv.measured);
  QCOMPARE(bv.weightBytes, 340'000'000LL);
  QCOMPARE(bv.adapterCount, 14);
  QCOMPARE(bv.adapterBytes, 12'000'000LL);
  QCOMPARE(bv.emaBytes, 12'000'000LL);
  QCOMPARE(bv.optimizerBytes, 24'000'000LL);
  QCOMPARE(bv.quantScaleBytes, 3'000'000LL);
  QCOMPARE(bv.keptTransposeBytes, 226'000'000LL);
  QCOMPARE(bv.otherAttachmentBytes, 1'000'000LL);
  QCOMPARE(v.devices[0].plannedBytes, 618'000'000LL);
  // A re-plan of the config does not replace what the run measured.
  QMap<QString, BlockView> replanned;
  replanned["transformer_blocks.0"] = BlockView{"transformer_blocks.0", BlockKind::Double, 1};
  applyBlockSizes(v, replanned);
  QCOMPARE(v.devices[0].blocks.at(0).weightBytes, 340'000'000LL);

  GpuMapView map;
  map.resize(800, 600);
  map.setPlacement(v);
  const QString tip = map.toolTipAt(map.blockRect("transformer_blocks.0").center());
  QVERIFY2(tip.contains("quantization scales: 3.0 MB") && tip.contains("kept fp8 transposes: 226.0 MB") &&
               tip.contains("measured in the run") && tip.contains("LoRA adapters: 14"),
           qPrintable(tip));
}

// The map names the parts in the words the placement carries (the family's, from its
// description) and guesses none: without them a block goes by its id and its kind.
void WidgetsTest::gpuMapDrawsTheWordsItIsGiven() {
  PlacementView v;
  DeviceView d;
  d.label = "cpu";
  d.blocks = {BlockView{"stem", BlockKind::Stem, 1000}, BlockView{"model.layers.0", BlockKind::Layer, 1000},
              BlockView{"head", BlockKind::Head, 1000}};
  v.devices << d;
  GpuMapView map;
  map.resize(800, 600);
  map.setPlacement(v);
  auto tipOf = [&map](const QString& id) { return map.toolTipAt(map.blockRect(id).center()); };
  QVERIFY2(tipOf("model.layers.0").contains("(layer)"), qPrintable(tipOf("model.layers.0")));
  QVERIFY2(!tipOf("model.layers.0").contains("decoder"), qPrintable(tipOf("model.layers.0")));
  QVERIFY2(tipOf("stem").contains("(stem)") && !tipOf("stem").contains("embedding"), qPrintable(tipOf("stem")));
  // A family's own words, whatever its block kinds.
  v.parts = {{BlockKind::Stem, "stem: patchify", "stem: patchify", "stem: patchify"},
             {BlockKind::Layer, "block", "encoder block", "encoder block"},
             {BlockKind::Head, "head", "head: unpatchify", "head: unpatchify"}};
  map.setPlacement(v);
  QVERIFY2(tipOf("model.layers.0").contains("(encoder block)"), qPrintable(tipOf("model.layers.0")));
  QVERIFY2(tipOf("stem").contains("(stem: patchify)"), qPrintable(tipOf("stem")));
  QVERIFY2(tipOf("head").contains("(head: unpatchify)"), qPrintable(tipOf("head")));

  // A planned config carries its family's words (FamilyDescription::mapParts), planned or not.
  auto legend = [](const PlacementView& p) {
    QStringList out;
    for (const MapPartView& part : p.parts) out << part.legend;
    return out;
  };
  strata::config::RunConfig cfg;
  cfg.model.arch = "flux";
  QCOMPARE(legend(planPlacementView(cfg, "1x16GB")), QStringList({"stem", "double block", "single block", "head"}));
  cfg.model.arch = "flux2";
  QCOMPARE(legend(planPlacementView(cfg, "1x16GB")), QStringList({"stem", "double block", "single block", "head"}));
  cfg.model.arch = "llama";
  QCOMPARE(legend(planPlacementView(cfg, "1x16GB")),
           QStringList({"stem: embedding", "decoder layer", "head: norm + lm_head"}));
  cfg.model.arch = "not-a-family";
  QVERIFY(planPlacementView(cfg, "1x16GB").parts.isEmpty());

  // What `auto` chose, and why, is in the plan's sentence as `strata-train plan` says it.
  cfg.model.arch = "flux";
  cfg.train.gradientCheckpointingAuto = true;
  cfg.train.offloadOptimizerStateAuto = true;
  const QString reason = planPlacementView(cfg, "1x80GB").reason;
  QVERIFY2(reason.contains("train.gradient_checkpointing: auto, off"), qPrintable(reason));
  QVERIFY2(reason.contains("train.offload_optimizer_state: auto, on the card"), qPrintable(reason));
}

// Four cards in the plan panel of a 1400 px and of a 1000 px window: the columns
// share the width (the fourth is not cut off); narrower than four minimum columns
// the map scrolls sideways, and a scroll reaches the last card.
void WidgetsTest::gpuMapFitsOrScrolls() {
  strata::config::RunConfig cfg;
  cfg.model.preset = "flux-dev";
  cfg.model.splitModelOverGpus = true;
  GpuMapView map;
  map.setPlacement(planPlacementView(cfg, "4x16GB"));
  QCOMPARE(map.placement().devices.size(), 4);
  map.show();
  auto* scroll = map.findChild<QScrollArea*>("gpuMapScroll");
  QVERIFY(scroll);
  const QString last = map.placement().devices.back().blocks.back().id;
  for (int width : {700, 900}) {  // the plan side of a 1400 px window; a wider one
    map.resize(width, 700);
    QTRY_COMPARE(map.canvas()->width(), scroll->viewport()->width());
    QVERIFY2(map.blockRect(last).right() < scroll->viewport()->width(), qPrintable(QString::number(width)));
    QVERIFY(!scroll->horizontalScrollBar()->isVisible() || scroll->horizontalScrollBar()->maximum() == 0);
  }
  map.resize(400, 700);  // 1000 px window: four columns do not fit at their least width
  QTRY_VERIFY(map.canvas()->width() > scroll->viewport()->width());
  QVERIFY(scroll->horizontalScrollBar()->maximum() > 0);
  scroll->horizontalScrollBar()->setValue(scroll->horizontalScrollBar()->maximum());
  const QRect r = map.blockRect(last);
  const QPoint inView = map.canvas()->mapTo(scroll->viewport(), r.topRight());
  QVERIFY2(inView.x() <= scroll->viewport()->width(), qPrintable(QString::number(inView.x())));
}

void WidgetsTest::plannedPlacementOnSimulatedDevices() {
  strata::config::RunConfig cfg;
  cfg.model.preset = "flux-dev";
  cfg.model.splitModelOverGpus = true;
  const PlacementView v = planPlacementView(cfg, "4x16GB");
  QVERIFY2(v.error.isEmpty(), qPrintable(v.error));
  QCOMPARE(v.devices.size(), 4);
  int blocks = 0;
  for (const DeviceView& d : v.devices) {
    QVERIFY(d.simulated);
    QCOMPARE(d.totalBytes, 16'000'000'000LL);
    QVERIFY(!d.blocks.isEmpty());
    blocks += d.blocks.size();
  }
  QCOMPARE(blocks, 19 + 38 + 2);  // double + single blocks, stem, head
  QCOMPARE(v.devices.front().blocks.front().kind, BlockKind::Stem);
  // The planner keeps the head with the stem, on the first device.
  QCOMPARE(v.devices.front().blocks.back().kind, BlockKind::Head);
  // Every transformer block carries its adapters in the plan.
  QVERIFY(v.devices[1].blocks.front().adapterCount > 0);
  QVERIFY(v.devices[1].blocks.front().optimizerBytes > 0);
  QVERIFY(!v.reason.isEmpty());

  // Without the split only the first device is used.
  cfg.model.splitModelOverGpus = false;
  QCOMPARE(planPlacementView(cfg, "4x16GB").devices.size(), 1);
}

void WidgetsTest::plannedPlacementReportsBadSpec() {
  strata::config::RunConfig cfg;
  cfg.model.splitModelOverGpus = true;
  const PlacementView v = planPlacementView(cfg, "4xbanana");
  QVERIFY(!v.error.isEmpty());
  QVERIFY(v.devices.isEmpty());
}

void WidgetsTest::configEditorImportsAnAiToolkitJob() {
  QTemporaryDir dir;
  const QString job = dir.filePath("job.yaml");
  QFile f(job);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(
      "job: extension\n"
      "config:\n"
      "  name: my_flux_lora\n"
      "  process:\n"
      "    - type: sd_trainer\n"
      "      training_folder: output\n"
      "      trigger_word: ohwx\n"
      "      network:\n"
      "        type: lora\n"
      "        linear: 32\n"
      "        linear_alpha: 16\n"
      "      train:\n"
      "        steps: 1234\n"
      "        lr: 2e-4\n"
      "        noise_scheduler: flowmatch\n"
      "      model:\n"
      "        name_or_path: black-forest-labs/FLUX.1-dev\n"
      "        is_flux: true\n"
      "        low_vram: true\n");
  f.close();
  ConfigEditor editor;
  QString notes;
  QVERIFY2(editor.importAiToolkit(job, &notes), qPrintable(notes));
  QCOMPARE(editor.valueText("job.name"), QString("my_flux_lora"));
  QCOMPARE(editor.valueText("network.linear"), QString("32"));
  QCOMPARE(qobject_cast<QSpinBox*>(editor.fieldFor("train.steps"))->value(), 1234);
  QVERIFY(editor.yamlText().contains("my_flux_lora"));
  QVERIFY(editor.filePath().isEmpty());  // a new Strata config until saved
  QVERIFY(editor.isModified());
  // What was not carried over is listed with the config's problems, as warnings.
  bool listed = false;
  for (const ProblemView& p : editor.problems()) listed |= !p.error && p.key.contains("trigger_word");
  QVERIFY(listed);
  QVERIFY(!editor.importNotes().isEmpty());
  // Not a job file: refused with the reason, nothing changes.
  const QString bad = dir.filePath("bad.yaml");
  QFile b(bad);
  QVERIFY(b.open(QIODevice::WriteOnly));
  b.write("model: {}\n");
  b.close();
  QString error;
  QVERIFY(!editor.importAiToolkit(bad, &error));
  QVERIFY(!error.isEmpty());
  QCOMPARE(editor.valueText("job.name"), QString("my_flux_lora"));
}

STRATA_GUI_TEST_MAIN(WidgetsTest)
#include "WidgetsTest.moc"
