#pragma once
// File > New: the model family first (FLUX.1 image LoRA, Llama-family language-
// model LoRA), then a template of that family. Each family brings its own
// (ModelFamily::templates): the CPU demo, a LoRA of the user's own images (one
// GPU, or 4 x 16 GB), of the user's own model on a jsonl file, and random-weight
// configs that show a plan and a speed before anything is downloaded. The
// templates are the shipped configs/ files, built into the app as resources.
#include <QDialog>
#include <QString>
#include <QVector>
#include <string>

#include "ui/backend/ConfigViews.h"

class QComboBox;
class QLabel;
class QListWidget;

namespace strata::ui {

// Every registered family's templates (ConfigTemplate: ui/backend/ConfigViews.h), the
// families in the chooser's order.
const QVector<ConfigTemplate>& configTemplates();
// The template's YAML text; empty when the resource is missing.
QString templateText(const ConfigTemplate& t);

class NewConfigDialog : public QDialog {
  Q_OBJECT
 public:
  explicit NewConfigDialog(QWidget* parent = nullptr);
  // The template picked (the family's first until another is chosen).
  const ConfigTemplate& chosen() const;
  // Picks a template (and its family).
  void choose(const QString& id);
  // Shows the templates of `family`, the first one picked.
  void chooseFamily(const std::string& family);
  const std::string& family() const { return family_; }

 private:
  QVector<int> shown_;  // configTemplates() index of each list row
  std::string family_;  // set by the constructor (the first registered family)
  QComboBox* familyChoice_ = nullptr;
  QListWidget* list_ = nullptr;
  QLabel* summary_ = nullptr;
};

}  // namespace strata::ui
