#include "ui/widgets/GpuUsagePanel.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QLabel>
#include <QMetaObject>
#include <QPointer>
#include <QScrollArea>
#include <QVBoxLayout>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ui/widgets/Theme.h"
#include "ui/backend/ViewModel.h"

namespace strata::ui {

namespace {
const QColor kBusyColor(0x2f, 0x9a, 0x94);
const QColor kMemoryColor(0x8a, 0x5c, 0xa8);
const QColor kStarvedColor(0xd0, 0x7a, 0x10);
constexpr double kGb = 1e9;
}  // namespace

// The sampling thread: reads the source, posts the reading to the panel, waits
// out the interval (woken at once by stop).
struct GpuUsagePanel::Sampler {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;

  void run(std::shared_ptr<GpuUsageSource> source, int intervalMs, QPointer<GpuUsagePanel> panel, int generation) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      lock.unlock();
      const GpuUsageReadingView reading = source->read();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      QMetaObject::invokeMethod(
          panel.data(),
          [panel, reading, seconds, generation] {
            // A reading of a source that was replaced meanwhile is dropped.
            if (panel && panel->generation_ == generation) panel->addReading(reading, seconds);
          },
          Qt::QueuedConnection);
      lock.lock();
      // Without NVML there is nothing to come: one reading says why.
      if (!reading.available) break;
      wake.wait_for(lock, std::chrono::milliseconds(intervalMs), [this] { return stop; });
    }
  }
  void halt() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (thread.joinable()) thread.join();
  }
};

GpuUsagePanel::GpuUsagePanel(QWidget* parent) : QWidget(parent) {
  setObjectName("gpuUsagePanel");
  auto* title = new QLabel(tr("GPU use (all processes)"), this);
  title->setObjectName("gpuUsageTitle");
  QFont f = title->font();
  f.setBold(true);
  title->setFont(f);
  status_ = new QLabel(tr("Reading the GPUs..."), this);
  status_->setObjectName("gpuUsageStatus");
  status_->setWordWrap(true);
  cardsWidget_ = new QWidget(this);
  cardsWidget_->setObjectName("gpuUsageCards");
  cardsLayout_ = new QVBoxLayout(cardsWidget_);
  cardsLayout_->setContentsMargins(0, 0, 0, 0);
  cardsLayout_->addStretch(1);
  auto* scroll = new QScrollArea(this);
  scroll->setObjectName("gpuUsageScroll");
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(cardsWidget_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(title);
  layout->addWidget(status_);
  layout->addWidget(scroll, 1);
  setSource(makeNvmlUsageSource());
}

GpuUsagePanel::~GpuUsagePanel() { stopSampling(); }

void GpuUsagePanel::stopSampling() {
  if (sampler_) sampler_->halt();
  sampler_.reset();
}

void GpuUsagePanel::setSource(std::shared_ptr<GpuUsageSource> source, int intervalMs) {
  stopSampling();
  ++generation_;
  for (Card& c : cards_) c.box->deleteLater();
  cards_.clear();
  order_.clear();
  readings_ = 0;
  lastSeconds_ = 0;
  status_->setText(tr("Reading the GPUs..."));
  if (!source) return;
  sampler_ = std::make_shared<Sampler>();
  Sampler* s = sampler_.get();
  s->thread = std::thread([s, source, intervalMs, panel = QPointer<GpuUsagePanel>(this), generation = generation_] {
    s->run(source, std::max(10, intervalMs), panel, generation);
  });
}

GpuUsagePanel::Card& GpuUsagePanel::cardFor(const GpuUsageView& g) {
  auto it = cards_.find(g.label);
  if (it != cards_.end()) return *it;
  Card c;
  c.box = new QWidget(cardsWidget_);
  c.box->setObjectName("gpuUsage_" + QString(g.label).replace(':', '_').replace(' ', '_'));
  auto* l = new QVBoxLayout(c.box);
  l->setContentsMargins(0, 2, 0, 2);
  l->setSpacing(0);
  c.header = new QLabel(c.box);
  c.header->setObjectName("gpuUsageHeader");
  c.plot = new QCustomPlot(c.box);
  c.plot->setObjectName("gpuUsagePlot");
  c.plot->setMinimumHeight(90);
  c.plot->setMaximumHeight(140);
  c.plot->setProperty("gpuLabel", g.label);
  c.plot->yAxis->setRange(0, 100);
  c.plot->yAxis->setLabel("busy %");
  c.plot->yAxis2->setVisible(true);
  c.plot->yAxis2->setLabel("GB");
  c.plot->yAxis2->setProperty("strataOwnColour", true);
  c.plot->yAxis2->setTickLabelColor(kMemoryColor);
  c.plot->yAxis2->setLabelColor(kMemoryColor);
  c.plot->xAxis->setTickLabels(false);  // time runs right to left up to now; the header has the figures
  c.plot->axisRect()->setAutoMargins(QCP::msLeft | QCP::msRight | QCP::msBottom);
  c.plot->axisRect()->setMargins(QMargins(0, 4, 0, 0));
  QCPGraph* busy = c.plot->addGraph(c.plot->xAxis, c.plot->yAxis);
  busy->setName("busy");
  busy->setPen(QPen(kBusyColor, 1.6));
  QColor fill = kBusyColor;
  fill.setAlpha(50);
  busy->setBrush(fill);
  QCPGraph* mem = c.plot->addGraph(c.plot->xAxis, c.plot->yAxis2);
  mem->setName("memory used");
  mem->setPen(QPen(kMemoryColor, 1.6));
  l->addWidget(c.header);
  l->addWidget(c.plot);
  cardsLayout_->insertWidget(cardsLayout_->count() - 1, c.box);
  stylePlot(c.plot);
  order_ << g.label;
  return *cards_.insert(g.label, c);
}

void GpuUsagePanel::addReading(const GpuUsageReadingView& reading, double seconds) {
  ++readings_;
  lastSeconds_ = seconds;
  // Without figures the panel keeps to a narrow column, leaving the width to the loss plot.
  const bool figures = reading.available && !reading.gpus.isEmpty();
  setMaximumWidth(figures ? QWIDGETSIZE_MAX : kNarrowWidth);
  if (!reading.available) {
    status_->setText(tr("No GPU figures: %1.").arg(reading.reason));
    return;
  }
  if (reading.gpus.isEmpty()) {
    status_->setText(reading.reason.isEmpty() ? tr("No GPU on this machine.") : tr("No GPU: %1.").arg(reading.reason));
    return;
  }
  status_->setText(tr("%1 GPU(s), read every second from the NVIDIA driver.").arg(reading.gpus.size()));
  for (const GpuUsageView& g : reading.gpus) {
    Card& c = cardFor(g);
    c.name = g.name;
    c.totalBytes = g.memoryTotalBytes;
    QCPGraph* busy = c.plot->graph(0);
    QCPGraph* mem = c.plot->graph(1);
    busy->addData(seconds, std::clamp(g.utilizationPercent, 0, 100));
    mem->addData(seconds, double(g.memoryUsedBytes) / kGb);
    busy->data()->removeBefore(seconds - kHistorySeconds);
    mem->data()->removeBefore(seconds - kHistorySeconds);
    c.plot->xAxis->setRange(std::max(0.0, seconds - kWindowSeconds), std::max(seconds, 10.0));
    c.plot->yAxis2->setRange(0, std::max(1.0, double(g.memoryTotalBytes) / kGb));
    c.plot->replot(QCustomPlot::rpQueuedReplot);
  }
  updateHeaders();
}

double GpuUsagePanel::averageBusy(const Card& c, double since) const {
  double sum = 0;
  int n = 0;
  for (auto it = c.plot->graph(0)->data()->findBegin(since, false); it != c.plot->graph(0)->data()->constEnd(); ++it) {
    sum += it->value;
    ++n;
  }
  return n ? sum / n : 0;
}

QStringList GpuUsagePanel::starvedGpus() const {
  if (cards_.size() < 2) return {};
  const double since = lastSeconds_ - kStarvedWindowSeconds;
  double busiest = 0;
  for (const Card& c : cards_) busiest = std::max(busiest, averageBusy(c, since));
  QStringList out;
  if (busiest <= kOthersBusyPercent) return out;
  for (const QString& label : order_)
    if (averageBusy(cards_[label], since) < kStarvedBelowPercent) out << label;
  return out;
}

void GpuUsagePanel::updateHeaders() {
  const QStringList starved = starvedGpus();
  for (const QString& label : order_) {
    Card& c = cards_[label];
    QString text = headerFor(label);
    if (starved.contains(label)) text += " " + tr("<b>waiting: little work while the other cards are busy</b>");
    c.header->setText(text);
    c.header->setStyleSheet(
        starved.contains(label)
            ? QString("color: %1;").arg(themed(palette(), kStarvedColor, kStarvedColor.lighter(130)).name())
            : QString());
  }
}

QString GpuUsagePanel::headerFor(const QString& label) const {
  auto it = cards_.find(label);
  if (it == cards_.end()) return QString();
  const Card& c = *it;
  const auto busy = c.plot->graph(0)->data();
  const auto mem = c.plot->graph(1)->data();
  if (busy->isEmpty()) return label;
  const double used = (mem->constEnd() - 1)->value * kGb;
  return tr("<b>%1</b> %2: %3% busy, %4 of %5 used")
      .arg(label, c.name.toHtmlEscaped())
      .arg(int((busy->constEnd() - 1)->value))
      .arg(formatBytes(qint64(used)), formatBytes(c.totalBytes));
}

QStringList GpuUsagePanel::gpuLabels() const { return order_; }

QCustomPlot* GpuUsagePanel::plotFor(const QString& label) const {
  auto it = cards_.find(label);
  return it == cards_.end() ? nullptr : it->plot;
}

QString GpuUsagePanel::statusText() const { return status_->text(); }

void GpuUsagePanel::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    // After the event: the plots' own palettes change in their own events.
    QMetaObject::invokeMethod(
        this,
        [this] {
          for (Card& c : cards_) stylePlot(c.plot);
          updateHeaders();
        },
        Qt::QueuedConnection);
  }
  QWidget::changeEvent(event);
}

}  // namespace strata::ui
