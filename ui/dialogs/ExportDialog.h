#pragma once
// "Export LoRA": which checkpoint of the run (the latest first, every one the run
// folder holds), which formats, into which folder. The files are named with the
// checkpoint's step. The dialog only asks; the window checks for files in the way
// (it asks before replacing one) and starts the export on the bridge.
// It offers the forms the run's model family writes (FamilyView::exportFormats):
// LoRA files (diffusers, kohya, ComfyUI) or a peft adapter folder.
#include <QDialog>
#include <QStringList>
#include <QVector>
#include <string>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;

namespace strata::ui {

// One checkpoint of the run, as the dialog lists it.
struct ExportCheckpoint {
  qint64 step = 0;
  bool manual = false;  // saved by hand
};

class ExportDialog : public QDialog {
  Q_OBJECT
 public:
  // `family`: the run's model.arch (a registered family's id); `formats`: the ones ticked at first ("diffusers",
  // "peft"; those the family does not write are left out); `outDir`: the folder
  // offered (the run folder's exports folder, where the trainer writes too);
  // `checkpoints`: the run's, oldest first (the newest is picked).
  ExportDialog(const QString& runDir, const std::string& family, const QStringList& formats, const QString& outDir,
               const QVector<ExportCheckpoint>& checkpoints, QWidget* parent = nullptr);

  QString runDir() const { return runDir_; }
  const std::string& family() const { return family_; }
  QStringList formats() const;
  QString outDir() const;
  // The step of the checkpoint picked; -1 when the run has none.
  qint64 step() const;

  // The formats offered for `family` ("diffusers", "kohya", "comfy" / "peft").
  static QStringList formatNames(const std::string& family);
  // What a format ("diffusers", "peft") is for, in the dialog's words.
  static QString formatLabel(const QString& format);

 public slots:
  void accept() override;  // stays open, with the reason, when no format is ticked

 private:
  QString runDir_;
  std::string family_;
  QComboBox* checkpoint_ = nullptr;
  QLineEdit* dir_ = nullptr;
  QLabel* message_ = nullptr;
};

}  // namespace strata::ui
