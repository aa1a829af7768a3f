#pragma once
// File > New: a new config starts from a template that is valid as it opens
// (the CPU demo; FLUX.1-dev on one GPU; FLUX.1-dev split over 4 x 16 GB). The
// templates are the shipped configs/ files, built into the app as resources.
#include <QDialog>
#include <QString>
#include <QVector>

class QLabel;
class QListWidget;

namespace strata::ui {

struct ConfigTemplate {
  QString id;        // "demo"
  QString title;     // "CPU demo (tiny model, no download)"
  QString summary;   // two lines on what it is for
  QString resource;  // ":/strata/templates/demo.yaml"
};

const QVector<ConfigTemplate>& configTemplates();
// The template's YAML text; empty when the resource is missing.
QString templateText(const ConfigTemplate& t);

class NewConfigDialog : public QDialog {
  Q_OBJECT
 public:
  explicit NewConfigDialog(QWidget* parent = nullptr);
  // The template picked (the demo until another is chosen).
  const ConfigTemplate& chosen() const;
  void choose(const QString& id);

 private:
  QListWidget* list_ = nullptr;
  QLabel* summary_ = nullptr;
};

}  // namespace strata::ui
