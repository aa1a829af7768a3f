#pragma once
// Per-GPU utilisation and memory over the last minutes, one small plot per card
// (QCustomPlot: busy % on the left axis, memory used on the right), so a card that
// waits while the others work stands out in a split. A sampling thread reads the
// source every interval and hands each reading to the GUI thread; the panel says
// so in words when there are no figures (no NVIDIA driver, no GPU).
#include <QMap>
#include <QVector>
#include <QWidget>
#include <memory>

#include "ui/backend/GpuUsageSource.h"

class QCustomPlot;
class QLabel;
class QVBoxLayout;

namespace strata::ui {

class GpuUsagePanel : public QWidget {
  Q_OBJECT
 public:
  static constexpr int kDefaultIntervalMs = 1000;
  static constexpr double kHistorySeconds = 600;  // what the plots keep
  static constexpr double kWindowSeconds = 120;   // what they show
  static constexpr double kStarvedWindowSeconds = 30;
  static constexpr int kStarvedBelowPercent = 25;  // busy less than this ...
  static constexpr int kOthersBusyPercent = 60;    // ... while another card is busier than this
  static constexpr int kNarrowWidth = 260;         // the panel's width while it has no figures

  // Reads NVML unless setSource gives another source.
  explicit GpuUsagePanel(QWidget* parent = nullptr);
  ~GpuUsagePanel() override;  // stops and joins the sampling thread

  // Restarts sampling from `source` every `intervalMs`; the history is cleared.
  void setSource(std::shared_ptr<GpuUsageSource> source, int intervalMs = kDefaultIntervalMs);
  void stopSampling();

  int readingCount() const { return readings_; }
  QStringList gpuLabels() const;
  QCustomPlot* plotFor(const QString& label) const;
  QString statusText() const;
  QString headerFor(const QString& label) const;  // "cuda:1  NVIDIA H200: 3% busy, ..."
  // Cards busy less than kStarvedBelowPercent on average over the last
  // kStarvedWindowSeconds while another card averaged over kOthersBusyPercent.
  QStringList starvedGpus() const;

 public slots:
  // One reading at `seconds` since sampling started (GUI thread).
  void addReading(const strata::ui::GpuUsageReadingView& reading, double seconds);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Card {
    QWidget* box = nullptr;
    QLabel* header = nullptr;
    QCustomPlot* plot = nullptr;
    QString name;
    qint64 totalBytes = 0;
  };
  struct Sampler;
  Card& cardFor(const GpuUsageView& g);
  void updateHeaders();
  double averageBusy(const Card& c, double since) const;

  QLabel* status_ = nullptr;
  QWidget* cardsWidget_ = nullptr;
  QVBoxLayout* cardsLayout_ = nullptr;
  QMap<QString, Card> cards_;
  QStringList order_;  // labels in first-seen order
  std::shared_ptr<Sampler> sampler_;
  int readings_ = 0;
  int generation_ = 0;  // of the source; readings of an earlier one are dropped
  double lastSeconds_ = 0;
};

}  // namespace strata::ui
