#pragma once
// The demo config opened in a MainWindow for a short run, shared by the GUI tests
// that train it (RunViewTest, TrainerChildTest).
#include <QFile>
#include <QFileInfo>
#include <QString>

#include "GuiTestSupport.h"
#include "ui/app/MainWindow.h"
#include "ui/setup/ConfigEditor.h"

namespace strata::ui::test {

// A writable copy of the demo config at `copy` (made once), opened in `w` with its runs
// below `runs`, samples every `sampleEvery` steps (one prompt, 4 denoising steps: quick),
// no periodic checkpoints and no warm-up. False when a step of that fails.
inline bool openDemoForRun(MainWindow& w, const QString& copy, const QString& runs, int sampleEvery) {
  if (!QFileInfo::exists(copy) && !QFile::copy(demoConfig(), copy)) return false;
  QFile(copy).setPermissions(QFile(copy).permissions() | QFileDevice::WriteOwner);
  if (w.configEditor()->isModified()) answerNext("saveChangesDialog", "saveChangesDiscard");
  if (!w.openConfig(copy)) return false;
  ConfigEditor* e = w.configEditor();
  return e->setValueText("job.training_folder", runs) &&
         e->setValueText("sample.sample_every", QString::number(sampleEvery)) &&
         e->setValueText("save.save_every", "0") && e->setValueText("train.lr_warmup_steps", "0") &&
         e->setValueText("sample.prompts", "[a red circle on a dark background]") &&
         e->setValueText("sample.sample_steps", "4") && !e->hasErrors();
}

}  // namespace strata::ui::test
