#pragma once
// Editors for list-valued config keys, so a list is never typed as YAML text:
// a row of number fields with add / remove (resolution, gpu_ids, betas: a fixed
// count has no add / remove), and one check box per choice (export formats; the
// config's family may offer only some of them).
#include <QStringList>
#include <QVector>
#include <QWidget>

class QCheckBox;
class QHBoxLayout;
class QLineEdit;
class QToolButton;

namespace strata::ui {

class NumberListEdit : public QWidget {
  Q_OBJECT
 public:
  // `fixedCount` > 0: exactly that many fields, no add / remove buttons.
  NumberListEdit(bool integers, int fixedCount, QWidget* parent = nullptr);

  // The element texts ("512", "0.9"); empty fields are left out.
  QStringList values() const;
  void setValues(const QStringList& values);
  // "[512, 768]" for the config's text setter.
  QString yamlText() const;
  int fieldCount() const { return fields_.size(); }
  QLineEdit* field(int i) const { return fields_.value(i); }

 signals:
  void edited();

 private:
  void addField(const QString& text);
  void removeLast();
  void updateButtons();

  bool integers_;
  int fixedCount_;
  QHBoxLayout* row_ = nullptr;
  QVector<QLineEdit*> fields_;
  QToolButton* add_ = nullptr;
  QToolButton* remove_ = nullptr;
};

class ChoiceListEdit : public QWidget {
  Q_OBJECT
 public:
  ChoiceListEdit(const QStringList& choices, QWidget* parent = nullptr);

  QStringList chosen() const;  // in the order of the choices
  void setChosen(const QStringList& chosen);
  // The choices offered (empty = all): the others are hidden unless ticked, so a
  // value the config holds is shown (and can be unticked), never dropped.
  void setOffered(const QStringList& offered);
  QString yamlText() const;

 signals:
  void edited();

 private:
  void updateShown();

  QVector<QCheckBox*> boxes_;
  QStringList offered_;
};

}  // namespace strata::ui
