#pragma once
// Every sample of a run, sorted by step: images (FLUX.1) or text generations (a
// causal LM's .txt samples, shown as text with their prompt, step and sampling
// settings). The latest samples, a grid of prompt x step, click to enlarge, and
// two steps side by side. It reads the run folder's samples/ (and its
// index.jsonl) and takes new samples from the trainer as they are written.
#include <QMap>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include "ui/backend/ViewModel.h"

class QComboBox;
class QHBoxLayout;
class QLabel;
class QTabWidget;
class QTableWidget;

namespace strata::ui {

// A row of thumbnails of one step; a click opens the image enlarged.
class SampleStrip : public QWidget {
  Q_OBJECT
 public:
  explicit SampleStrip(QWidget* parent = nullptr, int thumbPx = 160);
  void setSamples(const QVector<SampleInfo>& samples);
  int count() const { return shown_.size(); }

 private:
  bool eventFilter(QObject* watched, QEvent* event) override;
  int thumbPx_;
  QHBoxLayout* row_ = nullptr;
  QLabel* title_ = nullptr;
  QVector<SampleInfo> shown_;
  QVector<QLabel*> labels_;
};

class SampleBrowser : public QWidget {
  Q_OBJECT
 public:
  explicit SampleBrowser(QWidget* parent = nullptr);

  // Reads <runDir>/samples/*.png, *.jpg and *.txt (replacing what is shown).
  void setRunDir(const QString& runDir);
  QString runDir() const { return runDir_; }
  void rescan();
  // Prompt texts by index (from the config), used where a sample does not carry one.
  void setPrompts(const QStringList& prompts);
  // One new sample (from the trainer). A second sample of the same step and prompt replaces the first.
  void addSample(const SampleInfo& sample);
  void clear();

  QVector<SampleInfo> samples() const;
  QVector<SampleInfo> latestSamples() const;  // every prompt of the newest step
  QList<qint64> steps() const { return bySteps_.keys(); }
  int promptCount() const;
  // Shows steps a and b side by side on the compare tab.
  void compare(qint64 stepA, qint64 stepB);
  // Opens one image enlarged (non-modal; objectName "sampleViewer"); the arrow
  // keys move to the previous / next step (left, right) or prompt (up, down).
  QWidget* showEnlarged(const SampleInfo& sample);

  // Step and prompt index from a file name: "step_000250_prompt_1.png",
  // "000250_1.png", "s250_p1.png", ... (the first number is the step, the next the prompt).
  static bool parseFileName(const QString& fileName, qint64* step, int* promptIndex);
  // A text sample as the browser shows it (HTML): the prompt under "Prompt", a rule,
  // and the completion under "Answer".
  static QString textHtml(const SampleInfo& sample);

 signals:
  void samplesChanged();

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;  // arrow keys in the enlarged view

 private:
  bool moveViewer(int stepDelta, int promptDelta);
  void rebuild();
  void readIndex(const QString& path);
  void rebuildCompare();
  QString promptText(int index) const;

  QString runDir_;
  QStringList prompts_;
  QMap<qint64, QMap<int, SampleInfo>> bySteps_;  // step -> prompt -> sample
  QTabWidget* tabs_ = nullptr;
  SampleStrip* latest_ = nullptr;
  QTableWidget* grid_ = nullptr;
  QComboBox* stepA_ = nullptr;
  QComboBox* stepB_ = nullptr;
  QTableWidget* compare_ = nullptr;
  QLabel* status_ = nullptr;
};

}  // namespace strata::ui
