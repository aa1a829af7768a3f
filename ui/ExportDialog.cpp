#include "ui/ExportDialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>

namespace strata::ui {

const QStringList& ExportDialog::formatNames() {
  static const QStringList kNames = {"diffusers", "kohya", "comfy"};
  return kNames;
}

ExportDialog::ExportDialog(const QString& runDir, const QStringList& formats, const QString& outDir, QWidget* parent)
    : QDialog(parent), runDir_(runDir) {
  setObjectName("exportDialog");
  setWindowTitle(tr("Export LoRA"));
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(new QLabel(tr("From the last checkpoint of <b>%1</b>").arg(runDir.toHtmlEscaped()), this));
  auto* box = new QGroupBox(tr("Formats"), this);
  auto* fl = new QVBoxLayout(box);
  const QStringList labels = {tr("diffusers / peft (diffusers, sd.cpp)"), tr("kohya (ComfyUI, A1111, Forge)"),
                              tr("ComfyUI (diffusion_model.* BFL names)")};
  for (int i = 0; i < formatNames().size(); ++i) {
    auto* check = new QCheckBox(labels[i], box);
    check->setObjectName("exportFormat_" + formatNames()[i]);
    check->setChecked(formats.contains(formatNames()[i]));
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
  connect(buttons, &QDialogButtonBox::accepted, this, &ExportDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &ExportDialog::reject);
}

QStringList ExportDialog::formats() const {
  QStringList picked;
  for (const QString& n : formatNames())
    if (findChild<QCheckBox*>("exportFormat_" + n)->isChecked()) picked << n;
  return picked;
}

QString ExportDialog::outDir() const { return dir_->text().trimmed(); }

void ExportDialog::accept() {
  QString why;
  if (formats().isEmpty())
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
