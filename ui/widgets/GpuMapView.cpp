#include "ui/widgets/GpuMapView.h"

#include <QEvent>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QPainterPath>
#include <QScrollArea>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/widgets/Theme.h"

namespace strata::ui {

namespace {

constexpr int kWideColumn = 250;  // the widest a column gets
constexpr int kMinColumn = 150;   // below this the map scrolls sideways instead of squeezing
constexpr int kColumnGap = 14;
constexpr int kMargin = 10;
constexpr int kHeaderHeight = 44;
constexpr int kBarHeight = 16;
constexpr int kBarTextHeight = 34;
constexpr int kRowHeight = 20;
constexpr int kRowGap = 2;
constexpr int kMismatchHeight = 34;
constexpr int kLegendLine = 20;  // the legend flows over as many lines as the width needs

QColor kindColor(BlockKind kind) {
  switch (kind) {
    case BlockKind::Stem:
      return QColor(0x6c, 0x8e, 0x5a);
    case BlockKind::Double:
      return QColor(0x3f, 0x6e, 0xb0);
    case BlockKind::Single:
      return QColor(0x2f, 0x9a, 0x94);
    case BlockKind::Head:
      return QColor(0x8a, 0x5c, 0xa8);
    case BlockKind::Layer:
      return QColor(0x3f, 0x6e, 0xb0);
    case BlockKind::Other:
      break;
  }
  return QColor(0x88, 0x88, 0x88);
}

const QColor kAllocatedColor(0x2b, 0x5c, 0x9e);
const QColor kReservedColor(0x8f, 0xb4, 0xe3);
const QColor kPlannedColor(0x4c, 0x9a, 0x6a);
const QColor kOverColor(0xd0, 0x3a, 0x3a);
const QColor kCapColor(0xe0, 0x8a, 0x1e);
const QColor kMismatchColor(0xc6, 0x28, 0x28);

// The family's words for a block's kind (PlacementView::parts); null when it gave none.
const MapPartView* partOf(const QVector<MapPartView>& parts, BlockKind kind) {
  for (const MapPartView& p : parts)
    if (p.kind == kind) return &p;
  return nullptr;
}

// A row's name: a block's kind word and its index ("transformer_blocks.3" -> "double 3",
// "model.layers.5" -> "layer 5"), the stem's and the head's name; the id where the
// family names no such part.
QString shortId(const BlockView& b, const QVector<MapPartView>& parts) {
  const MapPartView* part = partOf(parts, b.kind);
  if (!part) return b.id;
  if (b.kind == BlockKind::Stem || b.kind == BlockKind::Head) return part->row;
  const int dot = b.id.lastIndexOf('.');
  return dot >= 0 ? part->row + " " + b.id.mid(dot + 1) : b.id;
}

qint64 blockBytes(const BlockView& b) {
  return b.weightBytes + b.adapterBytes + b.emaBytes + b.optimizerBytes + b.quantScaleBytes + b.keptTransposeBytes +
         b.otherAttachmentBytes;
}

QString blockTip(const BlockView& b, const QString& device, const QVector<MapPartView>& parts) {
  const MapPartView* part = partOf(parts, b.kind);
  const QString kind = part ? part->tip : blockKindName(b.kind);
  QString tip = QString("<b>%1</b> (%2) on %3<br>weights: %4").arg(b.id, kind, device, formatBytes(b.weightBytes));
  tip += QString("<br>LoRA adapters: %1 (%2)").arg(b.adapterCount).arg(formatBytes(b.adapterBytes));
  tip += QString("<br>EMA shadows: %1").arg(b.emaBytes ? formatBytes(b.emaBytes) : QString("none"));
  tip += QString("<br>optimizer state: %1").arg(b.optimizerBytes ? formatBytes(b.optimizerBytes) : QString("none"));
  if (b.hostOptimizerBytes)
    tip +=
        QString("<br>optimizer state in host memory: %1 (staged for each step)").arg(formatBytes(b.hostOptimizerBytes));
  if (b.quantScaleBytes) tip += QString("<br>quantization scales: %1").arg(formatBytes(b.quantScaleBytes));
  if (b.keptTransposeBytes) tip += QString("<br>kept fp8 transposes: %1").arg(formatBytes(b.keptTransposeBytes));
  if (b.otherAttachmentBytes) tip += QString("<br>other attachments: %1").arg(formatBytes(b.otherAttachmentBytes));
  if (b.activationBytes) tip += QString("<br>activations (planned): %1").arg(formatBytes(b.activationBytes));
  tip += QString("<br><i>total: %1 (%2)</i>")
             .arg(formatBytes(blockBytes(b)), b.measured ? QString("measured in the run") : QString("planned"));
  return tip;
}

}  // namespace

class GpuMapCanvas : public QWidget {
 public:
  explicit GpuMapCanvas(QWidget* parent) : QWidget(parent) {
    setObjectName("gpuMapCanvas");
    setMouseTracking(true);
  }

  PlacementView placement;
  int availableWidth = 0;  // the scroll area's viewport: columns share it (0 = not shown yet)

  // Columns share the visible width, between kMinColumn and kWideColumn each; with
  // more cards than fit at kMinColumn the canvas gets wider and scrolls.
  int columnWidth() const {
    const int n = std::max<int>(1, placement.devices.size());
    if (availableWidth <= 0) return n > 2 ? kMinColumn + 40 : kWideColumn;
    const int share = (availableWidth - 2 * kMargin - (n - 1) * kColumnGap) / n;
    return std::clamp(share, kMinColumn, kWideColumn);
  }
  int legendHeight() const { return legendLines() * kLegendLine + 6; }

  struct Hit {
    QRect rect;
    QString tip;
    QString blockId;
  };
  QVector<Hit> hits;

  QSize sizeHint() const override { return minimumSizeHint(); }
  QSize minimumSizeHint() const override {
    int rows = 0;
    for (const DeviceView& d : placement.devices) rows = std::max(rows, columnHeight(d));
    const int columns = std::max<int>(1, placement.devices.size());
    return QSize(2 * kMargin + columns * columnWidth() + (columns - 1) * kColumnGap,
                 2 * kMargin + legendHeight() + rows);
  }

  static int columnHeight(const DeviceView& d) {
    return kHeaderHeight + kBarHeight + kBarTextHeight + d.blocks.size() * (kRowHeight + kRowGap) +
           (d.mismatches.isEmpty() ? 0 : 22 + d.mismatches.size() * kMismatchHeight);
  }

  void relayout() {
    hits.clear();
    int x = kMargin;
    const int top = kMargin + legendHeight();
    for (const DeviceView& d : placement.devices) {
      hits.push_back({QRect(x, top, columnWidth(), kHeaderHeight), deviceTip(d), QString()});
      hits.push_back(
          {QRect(x, top + kHeaderHeight, columnWidth(), kBarHeight + kBarTextHeight), memoryTip(d), QString()});
      int y = top + kHeaderHeight + kBarHeight + kBarTextHeight;
      for (const BlockView& b : d.blocks) {
        hits.push_back({QRect(x, y, columnWidth(), kRowHeight), blockTip(b, d.label, placement.parts), b.id});
        y += kRowHeight + kRowGap;
      }
      if (!d.mismatches.isEmpty()) {
        y += 22;
        for (const MismatchView& m : d.mismatches) {
          hits.push_back({QRect(x, y, columnWidth(), kMismatchHeight - 2),
                          QString("<b>audit mismatch</b><br>%1<br>expected on %2, found on %3")
                              .arg(m.path.toHtmlEscaped(), m.expected, m.actual),
                          QString()});
          y += kMismatchHeight;
        }
      }
      x += columnWidth() + kColumnGap;
    }
    updateGeometry();
    // As wide as the viewport when the columns fit in it (no sideways scrolling), wider when not.
    const QSize least = minimumSizeHint();
    resize(std::max(least.width(), availableWidth),
           std::max(least.height(), parentWidget() ? parentWidget()->height() : 0));
    update();
  }

  QString deviceTip(const DeviceView& d) const {
    QString tip = QString("<b>%1</b> %2").arg(d.label, d.name.toHtmlEscaped());
    if (d.simulated) tip += "<br>simulated (not on this machine)";
    if (d.totalBytes) tip += "<br>memory: " + formatBytes(d.totalBytes);
    if (d.capBytes) tip += "<br>cap: " + formatBytes(d.capBytes);
    tip += QString("<br>%1 placement units").arg(d.blocks.size());
    return tip;
  }

  QString memoryTip(const DeviceView& d) const {
    QString tip = QString("<b>%1 memory</b>").arg(d.label);
    if (placement.planned) {
      tip += "<br>planned: " + formatBytes(d.plannedBytes);
      tip += "<br>budget: " + (d.budgetBytes ? formatBytes(d.budgetBytes) : QString("unknown"));
      if (d.missingBytes) tip += "<br><font color='#c62828'>over budget by " + formatBytes(d.missingBytes) + "</font>";
    } else {
      tip += "<br>allocated: " + formatBytes(d.allocatedBytes);
      tip += "<br>reserved: " + formatBytes(d.reservedBytes);
    }
    tip += "<br>cap: " + (d.capBytes ? formatBytes(d.capBytes) : QString("none"));
    tip += "<br>total: " + (d.totalBytes ? formatBytes(d.totalBytes) : QString("unknown"));
    if (d.hostBytes) tip += "<br>in host memory (optimizer state, not counted above): " + formatBytes(d.hostBytes);
    return tip;
  }

 protected:
  bool event(QEvent* e) override {
    if (e->type() == QEvent::ToolTip) {
      auto* help = static_cast<QHelpEvent*>(e);
      const QString tip = tipAt(help->pos());
      if (tip.isEmpty())
        QToolTip::hideText();
      else
        QToolTip::showText(help->globalPos(), tip, this);
      return true;
    }
    return QWidget::event(e);
  }

  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing, true);
    p.fillRect(rect(), palette().base());
    drawLegend(p);
    int x = kMargin;
    const int top = kMargin + legendHeight();
    for (const DeviceView& d : placement.devices) {
      drawColumn(p, d, x, top);
      x += columnWidth() + kColumnGap;
    }
    if (placement.devices.isEmpty()) {
      p.setPen(palette().color(QPalette::PlaceholderText));
      p.drawText(rect().adjusted(kMargin, kMargin + legendHeight(), -kMargin, -kMargin),
                 Qt::AlignTop | Qt::AlignLeft | Qt::TextWordWrap,
                 placement.error.isEmpty() ? tr("No placement yet.") : placement.error);
    }
  }

 public:
  QString tipAt(const QPoint& pos) const {
    for (const Hit& h : hits)
      if (h.rect.contains(pos)) return h.tip;
    return QString();
  }

 private:
  struct LegendItem {
    QColor color;  // invalid: text only
    QString text;
  };
  QVector<LegendItem> legendItems() const {
    // The parts of the model, in the words of its family.
    QVector<LegendItem> items;
    for (const MapPartView& part : placement.parts) items.push_back({kindColor(part.kind), part.legend});
    if (placement.planned) {
      items.push_back({kPlannedColor, tr("planned bytes")});
    } else {
      items.push_back({kAllocatedColor, tr("allocated")});
      items.push_back({kReservedColor, tr("reserved")});
    }
    items.push_back({kCapColor, tr("cap")});
    items.push_back({QColor(), tr("L = LoRA adapters  E = EMA  O = optimizer")});
    return items;
  }
  QFont legendFont() const {
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * 0.9);
    return f;
  }
  int legendWidth() const {
    const int columns = std::max<int>(1, placement.devices.size());
    return std::max(availableWidth, 2 * kMargin + columns * columnWidth() + (columns - 1) * kColumnGap) - 2 * kMargin;
  }
  static int itemWidth(const QFontMetrics& fm, const LegendItem& item) {
    return (item.color.isValid() ? 16 : 0) + fm.horizontalAdvance(item.text) + 14;
  }
  // Items flow left to right and onto the next line when the width runs out.
  int legendLines() const {
    const QFontMetrics fm(legendFont());
    int lines = 1, x = 0;
    for (const LegendItem& item : legendItems()) {
      const int w = itemWidth(fm, item);
      if (x > 0 && x + w > legendWidth()) {
        ++lines;
        x = 0;
      }
      x += w;
    }
    return lines;
  }
  void drawLegend(QPainter& p) {
    p.setFont(legendFont());
    int x = 0, y = kMargin;
    for (const LegendItem& item : legendItems()) {
      const int w = itemWidth(p.fontMetrics(), item);
      if (x > 0 && x + w > legendWidth()) {
        x = 0;
        y += kLegendLine;
      }
      int tx = kMargin + x;
      if (item.color.isValid()) {
        p.setPen(Qt::NoPen);
        p.setBrush(item.color);
        p.drawRoundedRect(QRect(tx, y + 3, 12, 12), 2, 2);
        tx += 16;
      }
      p.setPen(palette().color(QPalette::Text));
      p.drawText(QRect(tx, y, w, 18), Qt::AlignVCenter, item.text);
      x += w;
    }
    p.setFont(font());
  }

  void drawColumn(QPainter& p, const DeviceView& d, int x, int top) {
    const QColor text = palette().color(QPalette::Text);
    QFont bold = font();
    bold.setBold(true);
    QFont small = font();
    small.setPointSizeF(font().pointSizeF() * 0.85);

    // Header.
    p.setPen(Qt::NoPen);
    p.setBrush(palette().color(QPalette::AlternateBase));
    p.drawRoundedRect(QRect(x, top, columnWidth(), kHeaderHeight - 4), 5, 5);
    p.setPen(text);
    p.setFont(bold);
    p.drawText(QRect(x + 8, top + 2, columnWidth() - 16, 20), Qt::AlignVCenter | Qt::AlignLeft, d.label);
    p.setFont(small);
    const QString total = d.totalBytes ? formatBytes(d.totalBytes) : QString();
    p.drawText(QRect(x + 8, top + 2, columnWidth() - 16, 20), Qt::AlignVCenter | Qt::AlignRight, total);
    QString sub = d.name + (d.simulated && !d.name.contains("simulated") ? tr("  (simulated)") : QString());
    p.setPen(d.simulated ? themed(palette(), QColor(0x9a, 0x6b, 0x00), QColor(0xe3, 0xb3, 0x41))
                         : palette().color(QPalette::PlaceholderText));
    p.drawText(QRect(x + 8, top + 20, columnWidth() - 16, 18), Qt::AlignVCenter | Qt::AlignLeft,
               p.fontMetrics().elidedText(sub, Qt::ElideRight, columnWidth() - 16));

    // Memory bar: full width = total (or the largest figure when the total is unknown).
    const QRect bar(x, top + kHeaderHeight, columnWidth(), kBarHeight);
    qint64 scale = d.totalBytes;
    for (qint64 v : {d.capBytes, d.reservedBytes, d.allocatedBytes, d.plannedBytes, d.budgetBytes})
      scale = std::max(scale, v);
    scale = std::max<qint64>(scale, 1);
    auto span = [&](qint64 bytes) { return int(double(bar.width()) * std::min<double>(1.0, double(bytes) / scale)); };
    p.setPen(QPen(palette().color(QPalette::Mid), 1));
    p.setBrush(palette().color(QPalette::Window));
    p.drawRect(bar);
    p.setPen(Qt::NoPen);
    QString figures;
    const bool noAllocator = !placement.planned && d.allocatedBytes == 0 && d.reservedBytes == 0;
    if (placement.planned || noAllocator) {
      const qint64 budget = d.budgetBytes ? d.budgetBytes : (d.capBytes ? d.capBytes : d.totalBytes);
      const bool over = d.missingBytes > 0 || (budget > 0 && d.plannedBytes > budget);
      p.setBrush(over ? kOverColor : kPlannedColor);
      p.drawRect(QRect(bar.left() + 1, bar.top() + 1, std::max(0, span(d.plannedBytes) - 1), bar.height() - 1));
      figures = noAllocator ? tr("weights + attachments %1").arg(formatBytes(d.plannedBytes))
                            : tr("planned %1").arg(formatBytes(d.plannedBytes));
      if (d.budgetBytes) figures += tr(" of %1 budget").arg(formatBytes(d.budgetBytes));
      if (over && d.missingBytes) figures += tr(", %1 over").arg(formatBytes(d.missingBytes));
    } else {
      p.setBrush(kReservedColor);
      p.drawRect(QRect(bar.left() + 1, bar.top() + 1, std::max(0, span(d.reservedBytes) - 1), bar.height() - 1));
      p.setBrush(kAllocatedColor);
      p.drawRect(QRect(bar.left() + 1, bar.top() + 1, std::max(0, span(d.allocatedBytes) - 1), bar.height() - 1));
      figures = tr("allocated %1, reserved %2").arg(formatBytes(d.allocatedBytes), formatBytes(d.reservedBytes));
    }
    if (d.capBytes > 0) {
      const int cx = bar.left() + span(d.capBytes);
      p.setPen(QPen(kCapColor, 3));
      p.drawLine(cx, bar.top() - 3, cx, bar.bottom() + 3);
    }
    QString limits = (d.capBytes ? tr("cap %1").arg(formatBytes(d.capBytes)) : tr("no cap")) +
                     (d.totalBytes ? tr(", total %1").arg(formatBytes(d.totalBytes)) : QString());
    p.setPen(text);
    p.setFont(small);
    p.drawText(QRect(x, bar.bottom() + 2, columnWidth(), 16), Qt::AlignVCenter | Qt::AlignLeft,
               p.fontMetrics().elidedText(figures, Qt::ElideRight, columnWidth()));
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(QRect(x, bar.bottom() + 17, columnWidth(), 16), Qt::AlignVCenter | Qt::AlignLeft, limits);

    // Blocks.
    int y = top + kHeaderHeight + kBarHeight + kBarTextHeight;
    for (const BlockView& b : d.blocks) {
      const QRect row(x, y, columnWidth(), kRowHeight);
      const QColor c = kindColor(b.kind);
      p.setPen(Qt::NoPen);
      p.setBrush(c);
      p.drawRoundedRect(row, 3, 3);
      p.setFont(small);
      p.setPen(Qt::white);
      p.drawText(row.adjusted(6, 0, -6, 0), Qt::AlignVCenter | Qt::AlignLeft, shortId(b, placement.parts));
      // Badges for what hangs off the block, right to left, then its size.
      int bx = row.right() - 4;
      auto badge = [&](const QString& t, bool on) {
        if (!on) return;
        const int w = p.fontMetrics().horizontalAdvance(t) + 8;
        const QRect r(bx - w, row.top() + 3, w, row.height() - 6);
        p.setPen(Qt::NoPen);
        p.setBrush(QColor(255, 255, 255, 215));
        p.drawRoundedRect(r, 3, 3);
        p.setPen(c.darker(150));
        p.drawText(r, Qt::AlignCenter, t);
        bx -= w + 3;
      };
      badge("O", b.optimizerBytes > 0);
      badge("E", b.emaBytes > 0);
      badge(b.adapterCount > 0 ? QString("L%1").arg(b.adapterCount) : QString("L"),
            b.adapterBytes > 0 || b.adapterCount > 0);
      // The size where a narrow column has room for it beside the name (the tooltip always has it).
      const QString size = formatBytes(b.weightBytes);
      if (p.fontMetrics().horizontalAdvance(shortId(b, placement.parts) + "  " + size) + 10 <= bx - row.left()) {
        p.setPen(QColor(255, 255, 255, 220));
        p.drawText(QRect(row.left(), row.top(), bx - row.left() - 4, row.height()), Qt::AlignVCenter | Qt::AlignRight,
                   size);
      }
      y += kRowHeight + kRowGap;
    }

    // Audit mismatches.
    if (!d.mismatches.isEmpty()) {
      p.setFont(bold);
      p.setPen(kMismatchColor);
      p.drawText(QRect(x, y + 2, columnWidth(), 18), Qt::AlignVCenter | Qt::AlignLeft,
                 tr("%1 audit mismatch(es)").arg(d.mismatches.size()));
      y += 22;
      p.setFont(small);
      for (const MismatchView& m : d.mismatches) {
        const QRect r(x, y, columnWidth(), kMismatchHeight - 2);
        p.setPen(QPen(kMismatchColor, 1.5));
        p.setBrush(themed(palette(), QColor(0xfd, 0xec, 0xea), QColor(0x4a, 0x1f, 0x1f)));
        p.drawRoundedRect(r, 3, 3);
        p.setPen(kMismatchColor);
        p.drawText(r.adjusted(6, 1, -6, -r.height() / 2), Qt::AlignVCenter | Qt::AlignLeft,
                   p.fontMetrics().elidedText(m.path, Qt::ElideMiddle, r.width() - 12));
        p.drawText(r.adjusted(6, r.height() / 2, -6, -1), Qt::AlignVCenter | Qt::AlignLeft,
                   tr("expected %1, on %2").arg(m.expected, m.actual));
        y += kMismatchHeight;
      }
    }
  }
};

GpuMapView::GpuMapView(QWidget* parent) : QWidget(parent) {
  setObjectName("gpuMap");
  title_ = new QLabel(this);
  title_->setObjectName("gpuMapTitle");
  QFont f = title_->font();
  f.setBold(true);
  title_->setFont(f);
  reason_ = new QLabel(this);
  reason_->setObjectName("gpuMapReason");
  reason_->setWordWrap(true);
  reason_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  canvas_ = new GpuMapCanvas(this);
  scroll_ = new QScrollArea(this);
  scroll_->setObjectName("gpuMapScroll");
  scroll_->setWidget(canvas_);
  scroll_->setWidgetResizable(false);
  scroll_->setBackgroundRole(QPalette::Base);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(title_);
  layout->addWidget(reason_);
  layout->addWidget(scroll_, 1);
  scroll_->viewport()->installEventFilter(this);  // columns follow the visible width
  setPlacement(PlacementView{});
}

bool GpuMapView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == scroll_->viewport() && event->type() == QEvent::Resize) {
    const int width = scroll_->viewport()->width();
    if (width != canvas_->availableWidth) {
      canvas_->availableWidth = width;
      canvas_->relayout();
    }
  }
  return QWidget::eventFilter(watched, event);
}

void GpuMapView::setPlacement(const PlacementView& placement) {
  canvas_->placement = placement;
  int mismatches = 0;
  for (const DeviceView& d : placement.devices) mismatches += d.mismatches.size();
  QString title = placement.planned ? tr("Planned placement (planner only, no weights loaded)") : tr("Live placement");
  if (!placement.planned) title += mismatches ? tr(": %1 audit mismatch(es)").arg(mismatches) : tr(": audit clean");
  if (placement.planned && !placement.fits) title += tr(": does not fit");
  title_->setText(title);
  title_->setStyleSheet(mismatches || !placement.fits ? "color: #c62828;" : QString());
  reason_->setText(placement.error.isEmpty() ? placement.reason : placement.error);
  reason_->setStyleSheet(placement.error.isEmpty() ? QString() : "color: #c62828;");
  canvas_->relayout();
}

void GpuMapView::updateMemory(const QVector<MemoryView>& memory) {
  bool changed = false;
  for (const MemoryView& m : memory) {
    for (DeviceView& d : canvas_->placement.devices) {
      if (d.label != m.device) continue;
      d.allocatedBytes = m.allocatedBytes;
      d.reservedBytes = m.reservedBytes;
      if (m.capBytes) d.capBytes = m.capBytes;
      changed = true;
    }
  }
  if (changed) canvas_->relayout();
}

const PlacementView& GpuMapView::placement() const { return canvas_->placement; }

QString GpuMapView::toolTipAt(const QPoint& canvasPos) const { return canvas_->tipAt(canvasPos); }

QRect GpuMapView::blockRect(const QString& blockId) const {
  for (const auto& h : canvas_->hits)
    if (h.blockId == blockId) return h.rect;
  return QRect();
}

QWidget* GpuMapView::canvas() const { return canvas_; }

}  // namespace strata::ui
