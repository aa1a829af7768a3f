#pragma once
// "Export LoRA": which formats, into which folder, from a run folder's last
// checkpoint. The dialog only asks; the window starts the export on the bridge.
#include <QDialog>
#include <QStringList>

class QCheckBox;
class QLabel;
class QLineEdit;

namespace strata::ui {

class ExportDialog : public QDialog {
  Q_OBJECT
 public:
  // `formats`: the ones ticked at first ("diffusers", "kohya", "comfy"); `outDir`: the
  // folder offered (the run folder's exports folder, where the trainer writes too).
  ExportDialog(const QString& runDir, const QStringList& formats, const QString& outDir, QWidget* parent = nullptr);

  QString runDir() const { return runDir_; }
  QStringList formats() const;
  QString outDir() const;

  static const QStringList& formatNames();

 public slots:
  void accept() override;  // stays open, with the reason, when no format is ticked

 private:
  QString runDir_;
  QLineEdit* dir_ = nullptr;
  QLabel* message_ = nullptr;
};

}  // namespace strata::ui
