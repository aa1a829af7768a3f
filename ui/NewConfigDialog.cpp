#include "ui/NewConfigDialog.h"

#include <QDialogButtonBox>
#include <QFile>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

namespace strata::ui {

const QVector<ConfigTemplate>& configTemplates() {
  static const QVector<ConfigTemplate> kTemplates = {
      {"demo", QObject::tr("CPU demo: a tiny model, no download"),
       QObject::tr("A few-MB model with the FLUX architecture learns coloured shapes on the CPU in minutes. "
                   "Shows the whole loop: loss, samples, checkpoints, LoRA export."),
       ":/strata/templates/demo.yaml"},
      {"flux-dev-1gpu", QObject::tr("FLUX.1-dev on one large GPU (40 GB and up)"),
       QObject::tr("The whole model on one card. A 24 GB card falls about 4 GB short until Strata quantizes "
                   "the model (plan it for \"24GB\" on the right to see); split over two cards instead. Starts "
                   "from random weights: set the base model and an image folder for a real LoRA."),
       ":/strata/templates/flux-dev-1gpu.yaml"},
      {"flux-dev-split-4x16gb", QObject::tr("FLUX.1-dev split over four 16 GB GPUs"),
       QObject::tr("The blocks are shared out over four cards, each capped at 16 GB. Starts from random "
                   "weights: set the base model and an image folder for a real LoRA."),
       ":/strata/templates/flux-dev-split-4x16gb.yaml"},
  };
  return kTemplates;
}

QString templateText(const ConfigTemplate& t) {
  QFile f(t.resource);
  if (!f.open(QIODevice::ReadOnly)) return QString();
  return QString::fromUtf8(f.readAll());
}

NewConfigDialog::NewConfigDialog(QWidget* parent) : QDialog(parent) {
  setObjectName("newConfigDialog");
  setWindowTitle(tr("New run config"));
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(new QLabel(tr("Start from:"), this));
  list_ = new QListWidget(this);
  list_->setObjectName("templateList");
  for (const ConfigTemplate& t : configTemplates()) {
    auto* item = new QListWidgetItem(t.title, list_);
    item->setData(Qt::UserRole, t.id);
  }
  layout->addWidget(list_, 1);
  summary_ = new QLabel(this);
  summary_->setObjectName("templateSummary");
  summary_->setWordWrap(true);
  summary_->setMinimumHeight(60);
  layout->addWidget(summary_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Create"));
  buttons->button(QDialogButtonBox::Ok)->setObjectName("newConfigOk");
  buttons->button(QDialogButtonBox::Cancel)->setObjectName("newConfigCancel");
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(list_, &QListWidget::itemDoubleClicked, this, &QDialog::accept);
  connect(list_, &QListWidget::currentRowChanged, this,
          [this](int row) { summary_->setText(configTemplates().value(row).summary); });
  list_->setCurrentRow(0);
  resize(520, 320);
}

const ConfigTemplate& NewConfigDialog::chosen() const {
  const int row = std::max(0, list_->currentRow());
  return configTemplates()[std::min<int>(row, configTemplates().size() - 1)];
}

void NewConfigDialog::choose(const QString& id) {
  for (int i = 0; i < configTemplates().size(); ++i)
    if (configTemplates()[i].id == id) list_->setCurrentRow(i);
}

}  // namespace strata::ui
