#include "ui/dialogs/ExportDialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/backend/ConfigViews.h"

namespace strata::ui {

QStringList ExportDialog::formatNames(const std::string& family) {
  return familyView(QString::fromStdString(family)).exportFormats;
}

QString ExportDialog::formatLabel(const QString& format) {
  if (format == "diffusers") return tr("diffusers / peft names, one file (diffusers, sd.cpp)");
  if (format == "kohya") return tr("kohya (ComfyUI, A1111, Forge)");
  if (format == "comfy") return tr("ComfyUI (diffusion_model.* BFL names)");
  if (format == "peft")
    return tr("peft adapter folder (adapter_config.json + adapter_model.safetensors; transformers + peft)");
  return format;
}

ExportDialog::ExportDialog(const QString& runDir, const std::string& family, const QStringList& formats,
                           const QString& outDir, const QVector<ExportCheckpoint>& checkpoints, QWidget* parent)
    : QDialog(parent), runDir_(runDir), family_(family) {
  setObjectName("exportDialog");
  setWindowTitle(tr("Export LoRA"));
  auto* layout = new QVBoxLayout(this);
  auto* from = new QLabel(tr("The LoRA of <b>%1</b> (a %2 run)")
                              .arg(runDir.toHtmlEscaped(), familyView(QString::fromStdString(family)).name),
                          this);
  from->setWordWrap(true);
  layout->addWidget(from);
  // Every checkpoint the run holds, the newest first: compare steps, as ai-toolkit users do.
  auto* pick = new QFormLayout;
  checkpoint_ = new QComboBox(this);
  checkpoint_->setObjectName("exportCheckpoint");
  for (int i = int(checkpoints.size()) - 1; i >= 0; --i) {
    const ExportCheckpoint& c = checkpoints[i];
    QString text = tr("step %1").arg(c.step);
    if (i == checkpoints.size() - 1) text += tr(" (the latest)");
    if (c.manual) text += tr(" (saved by hand)");
    checkpoint_->addItem(text, c.step);
  }
  checkpoint_->setToolTip(tr("The file names carry the step: <job>_step<N>_<format>"));
  pick->addRow(tr("Checkpoint:"), checkpoint_);
  layout->addLayout(pick);
  auto* box = new QGroupBox(tr("Formats"), this);
  auto* fl = new QVBoxLayout(box);
  const QStringList offered = formatNames(family);
  for (const QString& name : offered) {
    auto* check = new QCheckBox(formatLabel(name), box);
    check->setObjectName("exportFormat_" + name);
    // One form only: it is what an export of this family writes.
    check->setChecked(formats.contains(name) || offered.size() == 1);
    fl->addWidget(check);
  }
  layout->addWidget(box);
  auto* row = new QHBoxLayout;
  dir_ = new QLineEdit(outDir, this);
  dir_->setObjectName("exportDir");
  auto* browse = new QToolButton(this);
  browse->setObjectName("exportBrowse");
  browse->setText(tr("Folder..."));
  connect(browse, &QToolButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Export into"), dir_->text());
    if (!d.isEmpty()) dir_->setText(d);
  });
  row->addWidget(new QLabel(tr("Into folder:"), this));
  row->addWidget(dir_, 1);
  row->addWidget(browse);
  layout->addLayout(row);
  message_ = new QLabel(this);
  message_->setObjectName("exportMessage");
  message_->setStyleSheet("color: #c62828;");
  message_->hide();
  layout->addWidget(message_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setObjectName("exportOk");
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Export"));
  buttons->button(QDialogButtonBox::Cancel)->setObjectName("exportCancel");
  layout->addWidget(buttons);
  if (checkpoints.isEmpty()) {
    message_->setText(
        tr("This run has no checkpoint yet: there is nothing to export. A checkpoint is saved at "
           "every save step, on Stop and by Save checkpoint now."));
    message_->show();
    checkpoint_->setEnabled(false);
    buttons->button(QDialogButtonBox::Ok)->setEnabled(false);
  }
  connect(buttons, &QDialogButtonBox::accepted, this, &ExportDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &ExportDialog::reject);
}

QStringList ExportDialog::formats() const {
  QStringList picked;
  for (const QString& n : formatNames(family_))
    if (findChild<QCheckBox*>("exportFormat_" + n)->isChecked()) picked << n;
  return picked;
}

QString ExportDialog::outDir() const { return dir_->text().trimmed(); }

qint64 ExportDialog::step() const { return checkpoint_->count() ? checkpoint_->currentData().toLongLong() : -1; }

void ExportDialog::accept() {
  QString why;
  if (step() < 0)
    why = tr("This run has no checkpoint to export.");
  else if (formats().isEmpty())
    why = tr("Choose at least one format.");
  else if (outDir().isEmpty())
    why = tr("Choose the folder to write into.");
  if (!why.isEmpty()) {
    message_->setText(why);
    message_->show();
    return;
  }
  QDialog::accept();
}

}  // namespace strata::ui
