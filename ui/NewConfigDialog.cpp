#include "ui/NewConfigDialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFile>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

#include "config/RunConfig.h"
#include "ui/FamilyBackend.h"

namespace strata::ui {

const QVector<ConfigTemplate>& configTemplates() {
  static const QVector<ConfigTemplate> kTemplates = {
      {"demo", QObject::tr("CPU demo: a tiny model, no download"),
       QObject::tr("A few-MB model with the FLUX architecture learns coloured shapes on the CPU in minutes. "
                   "Shows the whole loop: loss, samples, checkpoints, LoRA export."),
       ":/strata/templates/demo.yaml", config::ModelArch::Flux},
      {"flux-dev-1gpu", QObject::tr("FLUX.1-dev on one large GPU (40 GB and up)"),
       QObject::tr("The whole model on one card. A 24 GB card falls about 4 GB short until Strata quantizes "
                   "the model (plan it for \"24GB\" on the right to see); split over two cards instead. Starts "
                   "from random weights: set the base model and an image folder for a real LoRA."),
       ":/strata/templates/flux-dev-1gpu.yaml", config::ModelArch::Flux},
      {"flux-dev-split-4x16gb", QObject::tr("FLUX.1-dev split over four 16 GB GPUs"),
       QObject::tr("The blocks are shared out over four cards, each capped at 16 GB. Starts from random "
                   "weights: set the base model and an image folder for a real LoRA."),
       ":/strata/templates/flux-dev-split-4x16gb.yaml", config::ModelArch::Flux},
      {"llama3-8b-2x16gb", QObject::tr("Llama-3-8B split over two 16 GB GPUs (the T4 case)"),
       QObject::tr("An 8 B Llama-architecture model, its decoder layers shared out over two cards, the base in "
                   "bf16 (set train.dtype: fp16 on T4s). Starts from random weights with Llama-3-8B's shape "
                   "(configs/llama3-8b, run from the project folder): set the base model folder and a jsonl "
                   "dataset for a real LoRA."),
       ":/strata/templates/llama3-8b-2x16gb.yaml", config::ModelArch::Llama},
      {"llama3-8b-1gpu-bench", QObject::tr("Llama-3-8B on one GPU (benchmark setting)"),
       QObject::tr("LoRA r 8 on peft's seven projections, batch 2 x 512 tokens, on one card. Starts from random "
                   "weights with Llama-3-8B's shape (configs/llama3-8b, run from the project folder): set the "
                   "base model folder and a jsonl dataset for a real LoRA."),
       ":/strata/templates/llama3-8b-1gpu-bench.yaml", config::ModelArch::Llama},
      {"flux2-dev-4x24gb", QObject::tr("FLUX.2-dev split over four 24 GB GPUs (synthetic data)"),
       QObject::tr("The 32 B FLUX.2-dev transformer, its blocks shared out over four cards capped at 24 GB. "
                   "Trains on random latents and text embeddings of FLUX.2's shapes: Strata has no FLUX.2 "
                   "VAE or text encoder yet, so no images, captions or samples. Starts from random weights: "
                   "set the base model to train on the real transformer."),
       ":/strata/templates/flux2-dev-4x24gb.yaml", config::ModelArch::Flux2},
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
  layout->addWidget(new QLabel(tr("What to train:"), this));
  familyChoice_ = new QComboBox(this);
  familyChoice_->setObjectName("newConfigFamily");
  for (config::ModelArch arch : backend::modelFamilies())
    familyChoice_->addItem(backend::familyTitle(arch), QString::fromStdString(config::enumName(arch)));
  layout->addWidget(familyChoice_);
  layout->addWidget(new QLabel(tr("Start from:"), this));
  list_ = new QListWidget(this);
  list_->setObjectName("templateList");
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
  connect(list_, &QListWidget::currentRowChanged, this, [this](int row) {
    summary_->setText(row >= 0 && row < shown_.size() ? configTemplates()[shown_[row]].summary : QString());
  });
  connect(familyChoice_, qOverload<int>(&QComboBox::activated), this, [this](int index) {
    const QString name = familyChoice_->itemData(index).toString();
    for (config::ModelArch arch : backend::modelFamilies())
      if (QString::fromStdString(config::enumName(arch)) == name) chooseFamily(arch);
  });
  chooseFamily(config::ModelArch::Flux);
  resize(560, 360);
}

void NewConfigDialog::chooseFamily(config::ModelArch family) {
  family_ = family;
  const int at = familyChoice_->findData(QString::fromStdString(config::enumName(family)));
  if (at >= 0) familyChoice_->setCurrentIndex(at);
  const QSignalBlocker block(list_);
  list_->clear();
  shown_.clear();
  for (int i = 0; i < configTemplates().size(); ++i) {
    const ConfigTemplate& t = configTemplates()[i];
    if (t.family != family) continue;
    auto* item = new QListWidgetItem(t.title, list_);
    item->setData(Qt::UserRole, t.id);
    shown_ << i;
  }
  list_->setCurrentRow(shown_.isEmpty() ? -1 : 0);
  summary_->setText(shown_.isEmpty() ? tr("No template for this family yet.") : configTemplates()[shown_[0]].summary);
}

const ConfigTemplate& NewConfigDialog::chosen() const {
  const int row = list_->currentRow();
  if (row >= 0 && row < shown_.size()) return configTemplates()[shown_[row]];
  return configTemplates().front();
}

void NewConfigDialog::choose(const QString& id) {
  for (const ConfigTemplate& t : configTemplates())
    if (t.id == id) {
      chooseFamily(t.family);
      for (int row = 0; row < shown_.size(); ++row)
        if (configTemplates()[shown_[row]].id == id) list_->setCurrentRow(row);
    }
}

}  // namespace strata::ui
