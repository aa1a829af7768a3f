// The plan view (Setup's planned GPU map) in the core's words: the text under
// the map is train::describePlan of the same config and devices, the words
// `strata-train plan` prints, not a second wording in ui/. The tiny demo's
// figures are its own (no fixed 5 B of "other modules"), a split over simulated
// cards leaves no card empty without saying why, and a FLUX.1 images config
// names its text encoders and VAE and the caching phase.
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QTemporaryDir>
#include <QtTest>

#include "GuiTestSupport.h"
#include "config/RunConfig.h"
#include "device/DeviceSelection.h"
#include "train/RunPlanning.h"
#include "ui/backend/ConfigDocument.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/app/MainWindow.h"

using namespace strata;
using namespace strata::ui;
using namespace strata::ui::test;

namespace {

// What the core says for this config on these simulated devices.
QString coreWords(const config::RunConfig& cfg, const QString& spec) {
  train::PrepareOptions po;
  po.preview = true;
  const train::PreparedRun run = train::prepareRun(cfg, device::simulatedInventory(spec.toStdString()), po);
  return QString::fromStdString(train::describePlan(run));
}

}  // namespace

class PlanViewTest : public QObject {
  Q_OBJECT

 private slots:
  void init();
  void demoPlanIsInTheCoresWords();
  void aSplitOverFourCardsLeavesNoneUnexplained();
  void fluxImagesPlanNamesTheEncodersAndTheCaching();

 private:
  // Sets the device list, replans and returns the text under the planned map.
  QString planText(MainWindow& w, const QString& spec);

  QTemporaryDir tmp_;
  QString settings_;
};

void PlanViewTest::init() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("plan-view-test.ini");
  QFile::remove(settings_);
}

QString PlanViewTest::planText(MainWindow& w, const QString& spec) {
  child<QLineEdit>(&w, "deviceSpec")->setText(spec);
  w.replan();
  auto* reason = child<QLabel>(w.plannedMap(), "gpuMapReason");
  return reason ? reason->text() : QString();
}

void PlanViewTest::demoPlanIsInTheCoresWords() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoConfig()));
  const QString text = planText(w, "4x16GB");
  QVERIFY2(w.plannedMap()->placement().error.isEmpty(), qPrintable(w.plannedMap()->placement().error));
  QCOMPARE(text, coreWords(w.configEditor()->document()->config(), "4x16GB"));
  // The demo runs on the cpu whatever the list says, and says so.
  QVERIFY2(text.contains("The run uses the cpu: model.device is cpu (the 4 GPU(s) of the device list are not used)."),
           qPrintable(text));
  QVERIFY2(text.contains("No text encoders or VAE: the shapes dataset"), qPrintable(text));
  // Its own figures: no fixed 5 B of other modules, no "0.00B" for a model of a few MB.
  QVERIFY2(!text.contains("5.00B") && !text.contains("0.00B"), qPrintable(text));
  QVERIFY2(text.contains("parameters in the model, no other modules"), qPrintable(text));
}

void PlanViewTest::aSplitOverFourCardsLeavesNoneUnexplained() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoConfig()));
  ConfigEditor* e = w.configEditor();
  QVERIFY(e->setValueText("model.device", "auto"));
  QString text = planText(w, "4x16GB");
  QCOMPARE(text, coreWords(e->document()->config(), "4x16GB"));
  QVERIFY2(text.contains("split_model_over_gpus is off: the model goes on cuda:0 alone"), qPrintable(text));

  QVERIFY(e->setValueText("model.split_model_over_gpus", "true"));
  text = planText(w, "4x16GB");
  QCOMPARE(text, coreWords(e->document()->config(), "4x16GB"));
  const PlacementView& v = w.plannedMap()->placement();
  QCOMPARE(v.devices.size(), 4);
  // The old plan sent every block to cuda:3 and left cuda:1 and cuda:2 empty, unexplained.
  int last = -1;
  for (int d = 0; d < v.devices.size(); ++d) {
    for (const BlockView& b : v.devices[d].blocks)
      if (b.id != "stem" && b.id != "head") last = d;
  }
  QCOMPARE(last, 3);
  for (int d = 0; d < last; ++d) {
    bool hasBlock = false;
    for (const BlockView& b : v.devices[d].blocks) hasBlock |= b.id != "stem" && b.id != "head";
    if (!hasBlock)
      QVERIFY2(text.contains(v.devices[d].label + " get"), qPrintable(v.devices[d].label + " unexplained: " + text));
  }
  QVERIFY2(!text.contains("5.00B") && !text.contains("0.00B"), qPrintable(text));
}

void PlanViewTest::fluxImagesPlanNamesTheEncodersAndTheCaching() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(sourceFile("configs/flux-dev-split-4x16gb.yaml")));
  ConfigEditor* e = w.configEditor();
  QString error;
  QVERIFY2(e->setValueText("datasets[0].type", "images", &error), qPrintable(error));
  QVERIFY2(e->setValueText("datasets[0].folder_path", "/data/photos", &error), qPrintable(error));
  const QString text = planText(w, "4x16GB");
  QVERIFY2(w.plannedMap()->placement().error.isEmpty(), qPrintable(w.plannedMap()->placement().error));
  QCOMPARE(text, coreWords(e->document()->config(), "4x16GB"));
  QVERIFY2(text.contains("T5 (preset t5-xxl, bf16, 9.5 GB) and CLIP (preset clip-l, bf16, 246.1 MB)"),
           qPrintable(text));
  QVERIFY2(text.contains("are freed before step 1"), qPrintable(text));
  QVERIFY2(text.contains("Caching, before the transformer is placed, on cuda:0"), qPrintable(text));
  QVERIFY2(text.contains("and VAE (167.6 MB) on cuda:0"), qPrintable(text));  // memory mode: the VAE stays
}

STRATA_GUI_TEST_MAIN(PlanViewTest)
#include "PlanViewTest.moc"
