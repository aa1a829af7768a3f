#include "ui/dialogs/NewConfigDialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFile>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

namespace strata::ui {

const QVector<ConfigTemplate>& configTemplates() {
  static const QVector<ConfigTemplate> kTemplates = familyTemplates();
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
  const QVector<FamilyView> families = familyViews();
  for (const FamilyView& f : families) familyChoice_->addItem(f.title, f.id);
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
  connect(familyChoice_, qOverload<int>(&QComboBox::activated), this,
          [this](int index) { chooseFamily(familyChoice_->itemData(index).toString().toStdString()); });
  chooseFamily(families.isEmpty() ? std::string() : families.front().id.toStdString());  // the first registered
  resize(560, 360);
}

void NewConfigDialog::chooseFamily(const std::string& family) {
  family_ = family;
  const int at = familyChoice_->findData(QString::fromStdString(family));
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
