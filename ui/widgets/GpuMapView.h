#pragma once
// The GPU map: a column per device (each cuda:N and cpu) with its memory bar
// (allocated, reserved, cap, total, or the planned bytes against the budget),
// its blocks in forward order coloured by kind and named in the words of the
// run's family (PlacementView::parts: it guesses none), what hangs off each block (LoRA
// adapters, EMA shadows, optimizer state), and audit mismatches in red. Hover
// shows sizes. Before a run it draws the planner's placement; during a run the
// trainer's, with memory updated live. The columns share the visible width (the
// legend wraps); with more cards than fit, the map scrolls sideways.
#include <QVector>
#include <QWidget>

#include "ui/backend/ViewModel.h"

class QLabel;
class QScrollArea;

namespace strata::ui {

class GpuMapCanvas;

class GpuMapView : public QWidget {
  Q_OBJECT
 public:
  explicit GpuMapView(QWidget* parent = nullptr);

  void setPlacement(const PlacementView& placement);
  // Live figures from a step event; devices not in the placement are ignored.
  void updateMemory(const QVector<MemoryView>& memory);
  const PlacementView& placement() const;

  // The tooltip text at a point of the canvas ("" when none), for tests and hover.
  QString toolTipAt(const QPoint& canvasPos) const;
  // Canvas rectangle of a block ("transformer_blocks.3"), empty when not shown.
  QRect blockRect(const QString& blockId) const;
  QWidget* canvas() const;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  QLabel* title_ = nullptr;
  QLabel* reason_ = nullptr;
  QScrollArea* scroll_ = nullptr;
  GpuMapCanvas* canvas_ = nullptr;
};

}  // namespace strata::ui
