#include "ui/widgets/ListEditors.h"

#include <QCheckBox>
#include <QDoubleValidator>
#include <QHBoxLayout>
#include <QIntValidator>
#include <QLineEdit>
#include <QToolButton>

namespace strata::ui {

NumberListEdit::NumberListEdit(bool integers, int fixedCount, QWidget* parent)
    : QWidget(parent), integers_(integers), fixedCount_(fixedCount) {
  row_ = new QHBoxLayout(this);
  row_->setContentsMargins(0, 0, 0, 0);
  row_->setSpacing(4);
  if (fixedCount_ <= 0) {
    add_ = new QToolButton(this);
    add_->setObjectName("addItem");
    add_->setText("+");
    add_->setToolTip(tr("Add a value"));
    remove_ = new QToolButton(this);
    remove_->setObjectName("removeItem");
    remove_->setText(QString::fromUtf8("\u2212"));
    remove_->setToolTip(tr("Remove the last value"));
    row_->addWidget(add_);
    row_->addWidget(remove_);
    connect(add_, &QToolButton::clicked, this, [this] {
      addField(QString());
      fields_.back()->setFocus();
    });
    connect(remove_, &QToolButton::clicked, this, [this] {
      removeLast();
      emit edited();
    });
  }
  row_->addStretch(1);
  for (int i = 0; i < fixedCount_; ++i) addField(QString());
  updateButtons();
}

void NumberListEdit::addField(const QString& text) {
  auto* f = new QLineEdit(text, this);
  f->setObjectName(QString("item%1").arg(fields_.size()));
  f->setMaximumWidth(integers_ ? 80 : 110);
  // Keyboard input is restricted to numbers; the config's own range check still decides.
  if (integers_)
    f->setValidator(new QIntValidator(f));
  else
    f->setValidator(new QDoubleValidator(f));
  connect(f, &QLineEdit::textEdited, this, &NumberListEdit::edited);
  row_->insertWidget(fields_.size(), f);
  fields_ << f;
  updateButtons();
}

void NumberListEdit::removeLast() {
  if (fields_.isEmpty() || fixedCount_ > 0) return;
  delete fields_.takeLast();
  updateButtons();
}

void NumberListEdit::updateButtons() {
  if (remove_) remove_->setEnabled(!fields_.isEmpty());
}

QStringList NumberListEdit::values() const {
  QStringList out;
  for (QLineEdit* f : fields_)
    if (!f->text().trimmed().isEmpty()) out << f->text().trimmed();
  return out;
}

void NumberListEdit::setValues(const QStringList& values) {
  if (fixedCount_ <= 0) {
    while (fields_.size() > values.size()) removeLast();
    while (fields_.size() < values.size()) addField(QString());
  }
  for (int i = 0; i < fields_.size(); ++i) {
    const QString text = values.value(i);
    if (fields_[i]->text() != text) fields_[i]->setText(text);
  }
}

QString NumberListEdit::yamlText() const { return "[" + values().join(", ") + "]"; }

ChoiceListEdit::ChoiceListEdit(const QStringList& choices, QWidget* parent) : QWidget(parent) {
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  for (const QString& c : choices) {
    auto* box = new QCheckBox(c, this);
    box->setObjectName("choice_" + c);
    box->setProperty("choice", c);
    connect(box, &QCheckBox::clicked, this, [this] {
      updateShown();
      emit edited();
    });
    row->addWidget(box);
    boxes_ << box;
  }
  row->addStretch(1);
}

QStringList ChoiceListEdit::chosen() const {
  QStringList out;
  for (QCheckBox* b : boxes_)
    if (b->isChecked()) out << b->property("choice").toString();
  return out;
}

void ChoiceListEdit::setChosen(const QStringList& chosen) {
  for (QCheckBox* b : boxes_) b->setChecked(chosen.contains(b->property("choice").toString()));
  updateShown();
}

void ChoiceListEdit::setOffered(const QStringList& offered) {
  offered_ = offered;
  updateShown();
}

void ChoiceListEdit::updateShown() {
  for (QCheckBox* b : boxes_)
    b->setHidden(!offered_.isEmpty() && !offered_.contains(b->property("choice").toString()) && !b->isChecked());
}

QString ChoiceListEdit::yamlText() const { return "[" + chosen().join(", ") + "]"; }

}  // namespace strata::ui
