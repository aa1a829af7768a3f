#include "ui/widgets/RunQueuePanel.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QEvent>
#include <QLabel>
#include <QMetaObject>
#include <QPushButton>
#include <QStyle>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "ui/backend/RunQueue.h"
#include "ui/widgets/Theme.h"

namespace strata::ui {

namespace {
QColor stateColor(const QPalette& pal, RunQueue::State s) {
  switch (s) {
    case RunQueue::State::Running:
      return themed(pal, QColor(0x1e, 0x5a, 0xb4), QColor(0x6a, 0xa8, 0xff));
    case RunQueue::State::Finished:
      return themed(pal, QColor(0x2e, 0x7d, 0x32), QColor(0x7e, 0xc8, 0x80));
    case RunQueue::State::Failed:
      return themed(pal, QColor(0xc6, 0x28, 0x28), QColor(0xff, 0x7b, 0x72));
    case RunQueue::State::Stopped:
      return themed(pal, QColor(0x9a, 0x6b, 0x00), QColor(0xe3, 0xb3, 0x41));
    case RunQueue::State::Waiting:
      break;
  }
  return pal.color(QPalette::Text);
}
}  // namespace

RunQueuePanel::RunQueuePanel(RunQueue* queue, QWidget* parent) : QWidget(parent), queue_(queue) {
  setObjectName("runQueuePanel");
  auto* title = new QLabel(tr("Run queue"), this);
  QFont f = title->font();
  f.setBold(true);
  title->setFont(f);
  summary_ = new QLabel(this);
  summary_->setObjectName("runQueueSummary");
  summary_->setWordWrap(true);
  list_ = new QTreeWidget(this);
  list_->setObjectName("runQueueList");
  list_->setColumnCount(3);
  list_->setHeaderLabels({tr("Config"), tr("State"), tr("What happened")});
  list_->setRootIsDecorated(false);
  list_->setSelectionMode(QAbstractItemView::SingleSelection);
  list_->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  list_->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  list_->header()->setStretchLastSection(true);

  auto button = [this](const QString& name, const QString& text, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(name);
    b->setToolTip(tip);
    return b;
  };
  run_ = button("queueRunButton", tr("Run queue"), tr("Train the waiting configs one after another"));
  run_->setCheckable(true);
  remove_ = button("queueRemoveButton", tr("Remove"), tr("Take the selected config off the queue"));
  up_ = button("queueUpButton", tr("Up"), tr("Train it earlier"));
  down_ = button("queueDownButton", tr("Down"), tr("Train it later"));
  again_ = button("queueAgainButton", tr("Run again"), tr("A failed or stopped config waits again (a new run)"));
  clearDone_ = button("queueClearDoneButton", tr("Clear done"), tr("Remove the finished, failed and stopped entries"));
  auto* row = new QHBoxLayout;
  row->addWidget(run_);
  row->addStretch(1);
  for (QPushButton* b : {remove_, up_, down_, again_, clearDone_}) row->addWidget(b);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(title);
  layout->addWidget(summary_);
  layout->addWidget(list_, 1);
  layout->addLayout(row);

  connect(run_, &QPushButton::toggled, this, [this](bool on) {
    running_ = on;
    run_->setText(on ? tr("Pause queue") : tr("Run queue"));
    rebuild();
    emit runToggled(on);
  });
  connect(remove_, &QPushButton::clicked, this, [this] { queue_->remove(selectedId()); });
  connect(up_, &QPushButton::clicked, this, [this] {
    const QString id = selectedId();
    if (queue_->move(id, -1)) select(id);
  });
  connect(down_, &QPushButton::clicked, this, [this] {
    const QString id = selectedId();
    if (queue_->move(id, +1)) select(id);
  });
  connect(again_, &QPushButton::clicked, this, [this] { queue_->requeue(selectedId()); });
  connect(clearDone_, &QPushButton::clicked, this, [this] { queue_->clearDone(); });
  connect(list_, &QTreeWidget::itemSelectionChanged, this, &RunQueuePanel::updateButtons);
  connect(queue_, &RunQueue::changed, this, &RunQueuePanel::rebuild);
  rebuild();
}

void RunQueuePanel::changeEvent(QEvent* event) {
  // The state colours are picked for the palette: a theme change picks them again.
  if (event->type() == QEvent::PaletteChange)
    QMetaObject::invokeMethod(
        this, [this] { rebuild(); }, Qt::QueuedConnection);
  QWidget::changeEvent(event);
}

void RunQueuePanel::setRunning(bool running) {
  if (running_ == running) return;
  const QSignalBlocker block(run_);
  run_->setChecked(running);
  running_ = running;
  run_->setText(running ? tr("Pause queue") : tr("Run queue"));
  rebuild();
}

QString RunQueuePanel::selectedId() const {
  const auto items = list_->selectedItems();
  return items.isEmpty() ? QString() : items.front()->data(0, Qt::UserRole).toString();
}

void RunQueuePanel::select(const QString& id) {
  for (int i = 0; i < list_->topLevelItemCount(); ++i)
    if (list_->topLevelItem(i)->data(0, Qt::UserRole).toString() == id) list_->setCurrentItem(list_->topLevelItem(i));
}

void RunQueuePanel::rebuild() {
  const QString keep = selectedId();
  list_->clear();
  int waiting = 0;
  for (const RunQueue::Entry& e : queue_->entries()) {
    auto* item = new QTreeWidgetItem(list_);
    item->setData(0, Qt::UserRole, e.id);
    item->setText(0, e.name.isEmpty() ? tr("(no name)") : e.name);
    item->setToolTip(0, tr("From %1, queued %2").arg(e.source, e.added.toString(Qt::ISODate)));
    item->setText(1, RunQueue::stateName(e.state));
    if (e.state != RunQueue::State::Waiting) item->setForeground(1, stateColor(palette(), e.state));
    QString detail = e.message;
    if (!e.runDir.isEmpty()) detail += (detail.isEmpty() ? QString() : QString(" - ")) + e.runDir;
    item->setText(2, detail);
    item->setToolTip(2, detail);
    if (e.state == RunQueue::State::Waiting) ++waiting;
  }
  if (!keep.isEmpty()) select(keep);
  QString text = queue_->entries().isEmpty()
                     ? tr("Empty: add configs with Setup's \"Add to queue\" (Run > Add config to queue).")
                     : tr("%1 waiting of %2; %3")
                           .arg(waiting)
                           .arg(queue_->entries().size())
                           .arg(running_ ? tr("the queue is running.") : tr("press Run queue to train them."));
  if (!queue_->loadProblem().isEmpty()) text = queue_->loadProblem() + "\n" + text;
  summary_->setText(text);
  updateButtons();
}

void RunQueuePanel::updateButtons() {
  const RunQueue::Entry* e = queue_->entry(selectedId());
  const int i = e ? queue_->indexOf(e->id) : -1;
  const bool movable = e && e->state != RunQueue::State::Running;
  remove_->setEnabled(movable);
  up_->setEnabled(movable && i > 0);
  down_->setEnabled(movable && i + 1 < queue_->entries().size());
  again_->setEnabled(e && (e->state == RunQueue::State::Failed || e->state == RunQueue::State::Stopped));
  bool anyDone = false;
  for (const RunQueue::Entry& x : queue_->entries())
    anyDone |= x.state == RunQueue::State::Finished || x.state == RunQueue::State::Failed ||
               x.state == RunQueue::State::Stopped;
  clearDone_->setEnabled(anyDone);
}

}  // namespace strata::ui
