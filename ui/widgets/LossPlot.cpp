#include "ui/widgets/LossPlot.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QHBoxLayout>
#include <QLabel>
#include <QMetaObject>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "ui/widgets/Theme.h"

namespace strata::ui {

namespace {
const QColor kRawColor(120, 160, 220, 110);
const QColor kSmoothColor(30, 90, 200);
const QColor kLrColor(230, 120, 30);
}  // namespace

LossPlot::LossPlot(QWidget* parent) : QWidget(parent) {
  setObjectName("lossPlotPanel");
  plot_ = new QCustomPlot(this);
  plot_->setObjectName("lossPlot");
  plot_->setMinimumSize(320, 220);
  plot_->setNoAntialiasingOnDrag(true);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  // Zoom and drag move the step axis and the loss axis; lr follows its own range.
  plot_->axisRect()->setRangeDragAxes(plot_->xAxis, plot_->yAxis);
  plot_->axisRect()->setRangeZoomAxes(plot_->xAxis, plot_->yAxis);

  plot_->xAxis->setLabel("step");
  plot_->yAxis->setLabel("loss");
  plot_->yAxis2->setVisible(true);
  plot_->yAxis2->setLabel("learning rate");
  plot_->yAxis2->setTickLabelColor(kLrColor);
  plot_->yAxis2->setLabelColor(kLrColor);
  plot_->yAxis2->setProperty("strataOwnColour", true);  // the theme leaves its orange alone
  plot_->yAxis2->setTicker(QSharedPointer<QCPAxisTicker>::create());
  plot_->yAxis2->setNumberFormat("eb");
  plot_->yAxis2->setNumberPrecision(1);

  rawGraph_ = plot_->addGraph(plot_->xAxis, plot_->yAxis);
  rawGraph_->setName("loss");
  rawGraph_->setPen(QPen(kRawColor, 1.0));
  smoothGraph_ = plot_->addGraph(plot_->xAxis, plot_->yAxis);
  smoothGraph_->setName("loss (smoothed)");
  smoothGraph_->setPen(QPen(kSmoothColor, 2.2));
  lrGraph_ = plot_->addGraph(plot_->xAxis, plot_->yAxis2);
  lrGraph_->setName("learning rate");
  lrGraph_->setPen(QPen(kLrColor, 1.5, Qt::DashLine));

  plot_->legend->setVisible(true);
  plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  plot_->xAxis->setRange(0, 10);
  plot_->yAxis->setRange(0, 1);
  plot_->yAxis2->setRange(0, 1e-4);
  plot_->installEventFilter(this);
  stylePlot(plot_);

  logCheck_ = new QCheckBox(tr("Log scale"), this);
  logCheck_->setObjectName("lossLogScale");
  logCheck_->setToolTip(tr("Logarithmic loss axis"));
  connect(logCheck_, &QCheckBox::toggled, this, &LossPlot::setLogScale);
  resetButton_ = new QPushButton(tr("Fit"), this);
  resetButton_->setObjectName("lossResetView");
  resetButton_->setToolTip(tr("Show all points and follow new ones (wheel zooms, drag pans)"));
  connect(resetButton_, &QPushButton::clicked, this, &LossPlot::resetView);
  summary_ = new QLabel(tr("no steps yet"), this);
  summary_->setObjectName("lossSummary");

  auto* bar = new QHBoxLayout;
  bar->addWidget(summary_, 1);
  bar->addWidget(logCheck_);
  bar->addWidget(resetButton_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(bar);
  layout->addWidget(plot_, 1);

  timer_ = new QTimer(this);
  timer_->setInterval(kFlushIntervalMs);
  connect(timer_, &QTimer::timeout, this, &LossPlot::flush);
  timer_->start();
}

void LossPlot::appendPoints(const QVector<MetricPoint>& points) { pending_ += points; }

void LossPlot::clear() {
  pending_.clear();
  rawGraph_->data()->clear();
  smoothGraph_->data()->clear();
  lrGraph_->data()->clear();
  lastStep_ = 0;
  follow_ = true;
  summary_->setText(tr("no steps yet"));
  plot_->replot();
  ++replotCount_;
}

void LossPlot::setLogScale(bool on) {
  if (logCheck_->isChecked() != on) logCheck_->setChecked(on);  // re-enters once
  const bool isLog = plot_->yAxis->scaleType() == QCPAxis::stLogarithmic;
  if (isLog == on) return;
  if (on) {
    plot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
  } else {
    plot_->yAxis->setScaleType(QCPAxis::stLinear);
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
  }
  rescale();
  plot_->replot();
  ++replotCount_;
}

bool LossPlot::logScale() const { return plot_->yAxis->scaleType() == QCPAxis::stLogarithmic; }

int LossPlot::plottedPointCount() const { return rawGraph_->data()->size(); }

void LossPlot::resetView() {
  follow_ = true;
  rescale();
  plot_->replot();
  ++replotCount_;
}

void LossPlot::flush() {
  if (pending_.isEmpty()) return;
  QVector<double> steps, loss, smooth, lr;
  steps.reserve(pending_.size());
  for (const MetricPoint& p : pending_) {
    // A resumed run may resend steps already shown; keep the plot monotonic.
    if (p.step <= lastStep_) continue;
    steps << double(p.step);
    loss << p.loss;
    smooth << (p.lossSmoothed > 0 ? p.lossSmoothed : p.loss);
    lr << p.lr;
    lastStep_ = p.step;
  }
  const MetricPoint last = pending_.back();
  pending_.clear();
  if (steps.isEmpty()) return;
  rawGraph_->addData(steps, loss, true);
  smoothGraph_->addData(steps, smooth, true);
  lrGraph_->addData(steps, lr, true);
  summary_->setText(tr("step %1   loss %2   smoothed %3   lr %4")
                        .arg(last.step)
                        .arg(last.loss, 0, 'f', 4)
                        .arg(last.lossSmoothed, 0, 'f', 4)
                        .arg(last.lr, 0, 'e', 2));
  if (follow_) rescale();
  plot_->replot(QCustomPlot::rpQueuedReplot);
  ++replotCount_;
}

void LossPlot::rescale() {
  if (rawGraph_->data()->isEmpty()) return;
  bool found = false;
  const QCPRange steps = rawGraph_->data()->keyRange(found);
  plot_->xAxis->setRange(steps.lower, std::max(steps.upper, steps.lower + 1.0));
  const QCP::SignDomain domain = logScale() ? QCP::sdPositive : QCP::sdBoth;
  QCPRange loss = rawGraph_->data()->valueRange(found, domain);
  if (found) {
    if (logScale()) {
      plot_->yAxis->setRange(loss.lower / 1.3, loss.upper * 1.3);
    } else {
      const double pad = std::max(1e-6, 0.05 * loss.size());
      plot_->yAxis->setRange(std::max(0.0, loss.lower - pad), loss.upper + pad);
    }
  }
  QCPRange lr = lrGraph_->data()->valueRange(found);
  if (found) plot_->yAxis2->setRange(0.0, std::max(lr.upper * 1.1, 1e-12));
}

void LossPlot::changeEvent(QEvent* event) {
  // The theme changed: restyle once the plot has its new palette too.
  if (event->type() == QEvent::PaletteChange)
    QMetaObject::invokeMethod(
        this, [this] { stylePlot(plot_); }, Qt::QueuedConnection);
  QWidget::changeEvent(event);
}

bool LossPlot::eventFilter(QObject* watched, QEvent* event) {
  if (watched == plot_ && (event->type() == QEvent::Wheel || event->type() == QEvent::MouseButtonPress))
    follow_ = false;  // the user took the view; "Fit" gives it back
  return QWidget::eventFilter(watched, event);
}

int LossPlot::loadMetricsFile(const QString& path) {
  // A regular file only: a FIFO or a device in a run folder would block the window.
  if (!QFileInfo(path).isFile()) return 0;
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return 0;
  clear();
  QVector<MetricPoint> points;
  while (!f.atEnd()) {
    const QJsonObject o = QJsonDocument::fromJson(f.readLine()).object();
    if (!o.contains("step") || !o.contains("loss")) continue;
    MetricPoint p;
    p.step = o.value("step").toVariant().toLongLong();
    p.loss = o.value("loss").toDouble();
    p.lossSmoothed =
        o.contains("loss_smoothed") ? o.value("loss_smoothed").toDouble() : o.value("lossSmoothed").toDouble();
    p.lr = o.value("lr").toDouble();
    points << p;
  }
  appendPoints(points);
  flush();
  resetView();
  return points.size();
}

bool LossPlot::savePng(const QString& path, int width, int height) {
  flush();
  return plot_->savePng(path, width, height);
}

}  // namespace strata::ui
