#pragma once
// Raw and smoothed loss with the learning rate on a second axis (QCustomPlot).
// Points arrive in batches through appendPoints() and wait in a buffer; a timer
// on the GUI thread drains the buffer and replots once per tick, so a fast run
// costs one repaint per tick, never one per step.
#include <QVector>
#include <QWidget>

#include "ui/backend/ViewModel.h"

class QCustomPlot;
class QCPGraph;
class QCheckBox;
class QLabel;
class QPushButton;
class QTimer;

namespace strata::ui {

class LossPlot : public QWidget {
  Q_OBJECT
 public:
  static constexpr int kFlushIntervalMs = 150;

  explicit LossPlot(QWidget* parent = nullptr);

  // Queues points; they are drawn on the next tick.
  void appendPoints(const QVector<MetricPoint>& points);
  void clear();

  void setLogScale(bool on);
  bool logScale() const;

  int plottedPointCount() const;  // points in the raw-loss graph
  int pendingPointCount() const { return pending_.size(); }
  int replotCount() const { return replotCount_; }
  qint64 lastStep() const { return lastStep_; }
  QCustomPlot* plot() const { return plot_; }

  // Replaces the plot with a run folder's metrics.jsonl (one JSON object per step:
  // step, loss, loss_smoothed, lr). Returns the number of points read.
  int loadMetricsFile(const QString& path);

  // Writes the plot as a PNG (screenshots, reports).
  bool savePng(const QString& path, int width, int height);

 public slots:
  void resetView();  // fit all data and follow new points again

 private slots:
  void flush();

 private:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void changeEvent(QEvent* event) override;
  void rescale();

  QCustomPlot* plot_ = nullptr;
  QCPGraph* rawGraph_ = nullptr;
  QCPGraph* smoothGraph_ = nullptr;
  QCPGraph* lrGraph_ = nullptr;
  QCheckBox* logCheck_ = nullptr;
  QPushButton* resetButton_ = nullptr;
  QLabel* summary_ = nullptr;
  QTimer* timer_ = nullptr;
  QVector<MetricPoint> pending_;
  bool follow_ = true;  // off once the user zooms or pans
  int replotCount_ = 0;
  qint64 lastStep_ = 0;
};

}  // namespace strata::ui
