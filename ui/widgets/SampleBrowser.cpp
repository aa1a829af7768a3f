#include "ui/widgets/SampleBrowser.h"

#include <QComboBox>
#include <QDialog>
#include <QDir>
#include <QEvent>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMouseEvent>
#include <QPixmap>
#include <QRegularExpression>
#include <QScrollArea>
#include <QTabWidget>
#include <QTableWidget>
#include <QKeyEvent>
#include <QVBoxLayout>

#include "ui/backend/RunFolderFiles.h"

namespace strata::ui {

namespace {

constexpr int kGridThumbPx = 128;
constexpr int kCompareThumbPx = 256;
constexpr int kEnlargedPx = 640;

// Small demo samples are scaled up without smoothing so their pixels stay crisp.
QPixmap scaledImage(const QString& path, int px) {
  QPixmap image(path);
  if (image.isNull()) return image;
  const bool upscale = image.width() < px && image.height() < px;
  return image.scaled(px, px, Qt::KeepAspectRatio, upscale ? Qt::FastTransformation : Qt::SmoothTransformation);
}

// A text sample's file content (small: the prompt and max_new_tokens of text).
QString readText(const QString& path) {
  if (!QFileInfo(path).isFile()) return QString();  // a FIFO or a device would block the window
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return QString();
  return QString::fromUtf8(f.read(1 << 20));
}

// The completion: the index's, else the text after the prompt.
void fillCompletion(SampleInfo& s) {
  if (!s.completion.isEmpty() || s.text.isEmpty()) return;
  s.completion = !s.prompt.isEmpty() && s.text.startsWith(s.prompt) ? s.text.mid(s.prompt.size()) : s.text;
  if (s.completion.endsWith('\n')) s.completion.chop(1);
}

// A table cell of a sample: its picture, or the start of its text.
QTableWidgetItem* sampleItem(const SampleInfo& s, int px) {
  auto* item = s.isText() ? new QTableWidgetItem(s.completion.left(160))
                          : new QTableWidgetItem(QIcon(scaledImage(s.path, px)), QString());
  item->setData(Qt::UserRole, s.step);
  item->setData(Qt::UserRole + 1, s.promptIndex);
  if (s.isText()) item->setTextAlignment(Qt::AlignLeft | Qt::AlignTop);
  return item;
}

}  // namespace

QString SampleBrowser::textHtml(const SampleInfo& s) {
  auto html = [](const QString& t) { return t.toHtmlEscaped().replace('\n', "<br>"); };
  if (s.prompt.isEmpty() && s.completion.isEmpty()) return html(s.text);
  // Apart, each under its name: the prompt (greyed, what the model was given) and
  // the answer (what it wrote), not one run-on line.
  return "<div style=\"color: #707070;\"><small>" + QObject::tr("Prompt") + "</small><br><b>" + html(s.prompt) +
         "</b></div><hr><div><small>" + QObject::tr("Answer") + "</small><br>" + html(s.completion.trimmed()) +
         "</div>";
}

// ---- SampleStrip -----------------------------------------------------------

SampleStrip::SampleStrip(QWidget* parent, int thumbPx) : QWidget(parent), thumbPx_(thumbPx) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  title_ = new QLabel(tr("No samples yet"), this);
  title_->setObjectName("sampleStripTitle");
  layout->addWidget(title_);
  auto* holder = new QWidget(this);
  row_ = new QHBoxLayout(holder);
  row_->setContentsMargins(0, 0, 0, 0);
  row_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  row_->addStretch(1);
  auto* scroll = new QScrollArea(this);
  scroll->setWidget(holder);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setMinimumHeight(thumbPx_ + 50);
  layout->addWidget(scroll, 1);
}

void SampleStrip::setSamples(const QVector<SampleInfo>& samples) {
  for (QLabel* l : labels_) l->deleteLater();
  labels_.clear();
  shown_ = samples;
  if (samples.isEmpty()) {
    title_->setText(tr("No samples yet"));
    return;
  }
  title_->setText(tr("Samples at step %1 (click to enlarge)").arg(samples.front().step));
  for (int i = 0; i < samples.size(); ++i) {
    const SampleInfo& s = samples[i];
    auto* label = new QLabel(this);
    label->setObjectName(QString("sampleThumb%1").arg(i));
    if (s.isText()) {
      label->setTextFormat(Qt::RichText);
      label->setText(SampleBrowser::textHtml(s));
      label->setWordWrap(true);
      label->setMargin(4);
    } else {
      label->setPixmap(scaledImage(s.path, thumbPx_));
    }
    label->setToolTip(QString("step %1, prompt %2%3\n%4\n%5")
                          .arg(s.step)
                          .arg(s.promptIndex)
                          .arg(s.settings.isEmpty() ? QString() : " (" + s.settings + ")", s.prompt, s.path));
    label->setCursor(Qt::PointingHandCursor);
    label->setProperty("sampleIndex", i);
    label->installEventFilter(this);
    label->setFrameShape(QFrame::StyledPanel);
    label->setFixedSize(thumbPx_ + 6, thumbPx_ + 6);
    label->setAlignment(s.isText() ? Qt::AlignLeft | Qt::AlignTop : Qt::AlignCenter);
    row_->insertWidget(row_->count() - 1, label);
    labels_ << label;
  }
}

bool SampleStrip::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::MouseButtonRelease) {
    const int i = watched->property("sampleIndex").toInt();
    if (i >= 0 && i < shown_.size()) {
      // The browser owns the viewer; find it up the parent chain, else open a plain one.
      for (QWidget* w = parentWidget(); w; w = w->parentWidget()) {
        if (auto* browser = qobject_cast<SampleBrowser*>(w)) {
          browser->showEnlarged(shown_[i]);
          return true;
        }
      }
      auto* dialog = new QDialog(window());
      dialog->setObjectName("sampleViewer");
      dialog->setAttribute(Qt::WA_DeleteOnClose);
      auto* l = new QLabel(dialog);
      if (shown_[i].isText())
        l->setText(SampleBrowser::textHtml(shown_[i]));
      else
        l->setPixmap(scaledImage(shown_[i].path, kEnlargedPx));
      (new QVBoxLayout(dialog))->addWidget(l);
      dialog->show();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

// ---- SampleBrowser ---------------------------------------------------------

SampleBrowser::SampleBrowser(QWidget* parent) : QWidget(parent) {
  setObjectName("sampleBrowser");
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName("sampleTabs");

  latest_ = new SampleStrip(this, 256);
  latest_->setObjectName("latestSamples");
  tabs_->addTab(latest_, tr("Latest"));

  grid_ = new QTableWidget(this);
  grid_->setObjectName("sampleGrid");
  grid_->setIconSize(QSize(kGridThumbPx, kGridThumbPx));
  grid_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  grid_->setSelectionMode(QAbstractItemView::SingleSelection);
  grid_->horizontalHeader()->setDefaultSectionSize(kGridThumbPx + 12);
  grid_->verticalHeader()->setDefaultSectionSize(kGridThumbPx + 12);
  grid_->setToolTip(tr("Rows: prompts, columns: steps. Click an image to enlarge it."));
  connect(grid_, &QTableWidget::cellClicked, this, [this](int row, int column) {
    const QTableWidgetItem* item = grid_->item(row, column);
    if (!item) return;
    const qint64 step = item->data(Qt::UserRole).toLongLong();
    const int prompt = item->data(Qt::UserRole + 1).toInt();
    if (bySteps_.contains(step) && bySteps_[step].contains(prompt)) showEnlarged(bySteps_[step][prompt]);
  });
  tabs_->addTab(grid_, tr("Grid"));

  auto* comparePage = new QWidget(this);
  auto* compareLayout = new QVBoxLayout(comparePage);
  auto* pick = new QHBoxLayout;
  stepA_ = new QComboBox(comparePage);
  stepA_->setObjectName("compareStepA");
  stepB_ = new QComboBox(comparePage);
  stepB_->setObjectName("compareStepB");
  pick->addWidget(new QLabel(tr("Compare step"), comparePage));
  pick->addWidget(stepA_);
  pick->addWidget(new QLabel(tr("with step"), comparePage));
  pick->addWidget(stepB_);
  pick->addStretch(1);
  compareLayout->addLayout(pick);
  compare_ = new QTableWidget(comparePage);
  compare_->setObjectName("compareTable");
  compare_->setIconSize(QSize(kCompareThumbPx, kCompareThumbPx));
  compare_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  compare_->horizontalHeader()->setDefaultSectionSize(kCompareThumbPx + 16);
  compare_->verticalHeader()->setDefaultSectionSize(kCompareThumbPx + 16);
  compareLayout->addWidget(compare_, 1);
  connect(stepA_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { rebuildCompare(); });
  connect(stepB_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { rebuildCompare(); });
  connect(compare_, &QTableWidget::cellClicked, this, [this](int row, int column) {
    const QTableWidgetItem* item = compare_->item(row, column);
    if (!item) return;
    const qint64 step = item->data(Qt::UserRole).toLongLong();
    const int prompt = item->data(Qt::UserRole + 1).toInt();
    if (bySteps_.contains(step) && bySteps_[step].contains(prompt)) showEnlarged(bySteps_[step][prompt]);
  });
  tabs_->addTab(comparePage, tr("Compare"));

  status_ = new QLabel(tr("No run folder"), this);
  status_->setObjectName("sampleStatus");
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(status_);
  layout->addWidget(tabs_, 1);
}

bool SampleBrowser::parseFileName(const QString& fileName, qint64* step, int* promptIndex) {
  const QString base = QFileInfo(fileName).completeBaseName();
  // Named parts first ("step_250", "prompt_1" / "p1"), then bare numbers in order.
  static const QRegularExpression stepRe(R"((?:^|[_-])(?:step|s)[_-]?(\d+))",
                                         QRegularExpression::CaseInsensitiveOption);
  static const QRegularExpression promptRe(R"((?:^|[_-])(?:prompt|p)[_-]?(\d+))",
                                           QRegularExpression::CaseInsensitiveOption);
  static const QRegularExpression numberRe(R"((\d+))");
  QVector<qint64> numbers;
  for (auto it = numberRe.globalMatch(base); it.hasNext();) numbers << it.next().captured(1).toLongLong();
  if (numbers.isEmpty()) return false;
  const auto sm = stepRe.match(base);
  const auto pm = promptRe.match(base);
  qint64 s = sm.hasMatch() ? sm.captured(1).toLongLong() : numbers[0];
  int p = 0;
  if (pm.hasMatch()) {
    p = pm.captured(1).toInt();
  } else {
    for (qint64 n : numbers)
      if (n != s) {
        p = int(n);
        break;
      }
  }
  if (step) *step = s;
  if (promptIndex) *promptIndex = p;
  return true;
}

void SampleBrowser::setRunDir(const QString& runDir) {
  runDir_ = runDir;
  rescan();
}

void SampleBrowser::rescan() {
  bySteps_.clear();
  const runner::RunFolderFiles files = runner::runFolderFiles(runDir_.toStdString());
  const QDir dir(QString::fromStdString(files.samplesDir));
  if (!runDir_.isEmpty() && dir.exists()) {
    // Images (FLUX.1) and text generations (a causal LM) alike.
    const QStringList found = dir.entryList({"*.png", "*.jpg", "*.txt"}, QDir::Files, QDir::Name);
    for (const QString& f : found) {
      SampleInfo s;
      if (!parseFileName(f, &s.step, &s.promptIndex)) continue;
      s.path = dir.filePath(f);
      s.prompt = promptText(s.promptIndex);
      if (s.isText()) s.text = readText(s.path);
      bySteps_[s.step][s.promptIndex] = s;
    }
    readIndex(QString::fromStdString(files.samplesIndex));
    for (auto& step : bySteps_)
      for (auto& s : step) fillCompletion(s);
  }
  rebuild();
}

// samples/index.jsonl: one JSON object per sample (file, step, prompt index, prompt).
// Gives the prompt texts; files not on disk are left out.
void SampleBrowser::readIndex(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return;
  while (!f.atEnd()) {
    const QJsonObject o = QJsonDocument::fromJson(f.readLine()).object();
    if (o.isEmpty()) continue;
    QString file = o.value("file").toString(o.value("path").toString());
    const qint64 step = o.value("step").toVariant().toLongLong();
    const int prompt = o.contains("prompt_index") ? o.value("prompt_index").toInt() : o.value("promptIndex").toInt();
    const QString text = o.value("prompt").toString();
    if (!text.isEmpty() && prompt >= 0 && prompt < 4096) {
      while (prompts_.size() <= prompt) prompts_ << QString();
      if (prompts_[prompt].isEmpty()) prompts_[prompt] = text;
    }
    if (!bySteps_.contains(step) || !bySteps_[step].contains(prompt)) continue;
    SampleInfo& s = bySteps_[step][prompt];
    if (!file.isEmpty() && QFileInfo(s.path).fileName() != QFileInfo(file).fileName()) continue;
    if (s.prompt.isEmpty()) s.prompt = text;
    // How it was drawn; a causal LM's line also holds the completion.
    QStringList settings;
    if (o.contains("seed")) settings << tr("seed %1").arg(o.value("seed").toVariant().toLongLong());
    if (o.contains("temperature")) {
      const double t = o.value("temperature").toDouble();
      settings << (t == 0 ? tr("greedy") : tr("temperature %1").arg(t));
    }
    if (o.contains("max_new_tokens")) settings << tr("%1 new tokens at most").arg(o.value("max_new_tokens").toInt());
    if (!settings.isEmpty()) s.settings = settings.join(", ");
    if (o.contains("completion")) s.completion = o.value("completion").toString();
  }
  for (auto& step : bySteps_)
    for (auto& s : step)
      if (s.prompt.isEmpty()) s.prompt = promptText(s.promptIndex);
}

void SampleBrowser::setPrompts(const QStringList& prompts) {
  prompts_ = prompts;
  for (auto& step : bySteps_)
    for (auto& s : step)
      if (s.prompt.isEmpty()) s.prompt = promptText(s.promptIndex);
  rebuild();
}

void SampleBrowser::addSample(const SampleInfo& sample) {
  SampleInfo s = sample;
  if (s.prompt.isEmpty()) s.prompt = promptText(s.promptIndex);
  if (s.isText() && s.text.isEmpty()) s.text = readText(s.path);
  if (s.promptIndex >= 0 && s.promptIndex < 4096 && !s.prompt.isEmpty()) {
    while (prompts_.size() <= s.promptIndex) prompts_ << QString();
    if (prompts_[s.promptIndex].isEmpty()) prompts_[s.promptIndex] = s.prompt;
  }
  bySteps_[s.step][s.promptIndex] = s;
  // The trainer writes the index line before it announces the sample: its settings and completion.
  if (!runDir_.isEmpty()) readIndex(QString::fromStdString(runner::runFolderFiles(runDir_.toStdString()).samplesIndex));
  fillCompletion(bySteps_[s.step][s.promptIndex]);
  rebuild();
}

void SampleBrowser::clear() {
  bySteps_.clear();
  runDir_.clear();
  rebuild();
}

QVector<SampleInfo> SampleBrowser::samples() const {
  QVector<SampleInfo> out;
  for (const auto& step : bySteps_)
    for (const auto& s : step) out << s;
  return out;
}

QVector<SampleInfo> SampleBrowser::latestSamples() const {
  QVector<SampleInfo> out;
  if (bySteps_.isEmpty()) return out;
  for (const auto& s : bySteps_.last()) out << s;
  return out;
}

int SampleBrowser::promptCount() const {
  int n = 0;
  for (const auto& step : bySteps_)
    if (!step.isEmpty()) n = std::max(n, step.lastKey() + 1);
  return n;
}

QString SampleBrowser::promptText(int index) const {
  return index >= 0 && index < prompts_.size() ? prompts_[index] : QString();
}

void SampleBrowser::rebuild() {
  const int prompts = promptCount();
  const QList<qint64> stepList = bySteps_.keys();
  int total = 0;
  for (const auto& step : bySteps_) total += step.size();
  status_->setText(total == 0 ? (runDir_.isEmpty() ? tr("No samples yet") : tr("No samples in %1").arg(runDir_))
                              : tr("%1 samples, %2 steps x %3 prompts%4")
                                    .arg(total)
                                    .arg(stepList.size())
                                    .arg(prompts)
                                    .arg(runDir_.isEmpty() ? QString() : "   " + runDir_));
  latest_->setSamples(latestSamples());

  grid_->clear();
  grid_->setRowCount(prompts);
  grid_->setColumnCount(stepList.size());
  for (int c = 0; c < stepList.size(); ++c)
    grid_->setHorizontalHeaderItem(c, new QTableWidgetItem(tr("step %1").arg(stepList[c])));
  for (int r = 0; r < prompts; ++r) {
    QString text = promptText(r);
    auto* header = new QTableWidgetItem(QString("%1  %2").arg(r).arg(text.left(44)));
    header->setToolTip(text);
    grid_->setVerticalHeaderItem(r, header);
  }
  for (int c = 0; c < stepList.size(); ++c) {
    for (const SampleInfo& s : bySteps_[stepList[c]]) {
      if (s.promptIndex < 0 || s.promptIndex >= prompts) continue;
      auto* item = sampleItem(s, kGridThumbPx);
      item->setToolTip(QString("step %1, prompt %2: %3").arg(s.step).arg(s.promptIndex).arg(s.prompt));
      grid_->setItem(s.promptIndex, c, item);
    }
  }

  // Keep the chosen steps where they still exist; default to first vs. latest.
  const qint64 a = stepA_->currentData().isValid() ? stepA_->currentData().toLongLong() : -1;
  const qint64 b = stepB_->currentData().isValid() ? stepB_->currentData().toLongLong() : -1;
  const bool hadChoice = stepA_->count() > 0;
  const qint64 previousLast = stepB_->count() > 0 ? stepB_->itemData(stepB_->count() - 1).toLongLong() : -1;
  QSignalBlocker blockA(stepA_), blockB(stepB_);
  stepA_->clear();
  stepB_->clear();
  for (qint64 s : stepList) {
    stepA_->addItem(tr("step %1").arg(s), s);
    stepB_->addItem(tr("step %1").arg(s), s);
  }
  if (!stepList.isEmpty()) {
    const int ia = hadChoice ? stepA_->findData(a) : 0;
    // B follows the newest step unless the user picked an older one.
    const int ib = (hadChoice && b != previousLast) ? stepB_->findData(b) : stepB_->count() - 1;
    stepA_->setCurrentIndex(ia >= 0 ? ia : 0);
    stepB_->setCurrentIndex(ib >= 0 ? ib : stepB_->count() - 1);
  }
  rebuildCompare();
  emit samplesChanged();
}

void SampleBrowser::compare(qint64 stepA, qint64 stepB) {
  const int ia = stepA_->findData(stepA), ib = stepB_->findData(stepB);
  if (ia >= 0) stepA_->setCurrentIndex(ia);
  if (ib >= 0) stepB_->setCurrentIndex(ib);
  tabs_->setCurrentIndex(2);
  rebuildCompare();
}

void SampleBrowser::rebuildCompare() {
  compare_->clear();
  const int prompts = promptCount();
  compare_->setRowCount(prompts);
  compare_->setColumnCount(2);
  const qint64 steps[2] = {stepA_->currentData().toLongLong(), stepB_->currentData().toLongLong()};
  for (int c = 0; c < 2; ++c) compare_->setHorizontalHeaderItem(c, new QTableWidgetItem(tr("step %1").arg(steps[c])));
  for (int r = 0; r < prompts; ++r) {
    auto* header = new QTableWidgetItem(QString("%1  %2").arg(r).arg(promptText(r).left(44)));
    header->setToolTip(promptText(r));
    compare_->setVerticalHeaderItem(r, header);
  }
  if (stepA_->count() == 0) return;
  for (int c = 0; c < 2; ++c) {
    if (!bySteps_.contains(steps[c])) continue;
    for (const SampleInfo& s : bySteps_[steps[c]]) {
      if (s.promptIndex < 0 || s.promptIndex >= prompts) continue;
      auto* item = sampleItem(s, kCompareThumbPx);
      compare_->setItem(s.promptIndex, c, item);
    }
  }
}

QWidget* SampleBrowser::showEnlarged(const SampleInfo& sample) {
  auto* dialog = findChild<QDialog*>("sampleViewer", Qt::FindDirectChildrenOnly);
  if (!dialog) {
    dialog = new QDialog(this);
    dialog->setObjectName("sampleViewer");
    auto* layout = new QVBoxLayout(dialog);
    auto* image = new QLabel(dialog);
    image->setObjectName("sampleViewerImage");
    image->setAlignment(Qt::AlignCenter);
    auto* caption = new QLabel(dialog);
    caption->setObjectName("sampleViewerCaption");
    caption->setWordWrap(true);
    layout->addWidget(image, 1);
    layout->addWidget(caption);
    auto* keys = new QLabel(tr("Left / Right: earlier / later step. Up / Down: other prompt."), dialog);
    keys->setObjectName("sampleViewerKeys");
    keys->setEnabled(false);
    layout->addWidget(keys);
    dialog->installEventFilter(this);
  }
  dialog->setProperty("step", sample.step);
  dialog->setProperty("prompt", sample.promptIndex);
  dialog->setWindowTitle(tr("Sample: step %1, prompt %2").arg(sample.step).arg(sample.promptIndex));
  auto* image = dialog->findChild<QLabel*>("sampleViewerImage");
  if (sample.isText()) {
    // A text sample: the prompt in bold, then what the model wrote.
    image->setPixmap(QPixmap());
    image->setTextFormat(Qt::RichText);
    image->setText(textHtml(sample));
    image->setWordWrap(true);
    image->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    image->setMinimumWidth(kEnlargedPx);
  } else {
    image->setText(QString());
    image->setWordWrap(false);
    image->setAlignment(Qt::AlignCenter);
    image->setPixmap(scaledImage(sample.path, kEnlargedPx));
  }
  dialog->findChild<QLabel*>("sampleViewerCaption")
      ->setText(QString("<b>step %1</b> &nbsp; prompt %2: %3%4<br><small>%5</small>")
                    .arg(sample.step)
                    .arg(sample.promptIndex)
                    .arg(sample.prompt.toHtmlEscaped(),
                         sample.settings.isEmpty() ? QString() : " &nbsp; (" + sample.settings.toHtmlEscaped() + ")",
                         sample.path.toHtmlEscaped()));
  dialog->show();
  dialog->raise();
  return dialog;
}

bool SampleBrowser::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::KeyPress && watched->objectName() == "sampleViewer") {
    switch (static_cast<QKeyEvent*>(event)->key()) {
      case Qt::Key_Left:
        return moveViewer(-1, 0);
      case Qt::Key_Right:
        return moveViewer(1, 0);
      case Qt::Key_Up:
        return moveViewer(0, -1);
      case Qt::Key_Down:
        return moveViewer(0, 1);
      default:
        break;
    }
  }
  return QWidget::eventFilter(watched, event);
}

// The enlarged view moves to the neighbouring step (same prompt) or prompt (same
// step); at the ends it stays where it is.
bool SampleBrowser::moveViewer(int stepDelta, int promptDelta) {
  auto* dialog = findChild<QDialog*>("sampleViewer", Qt::FindDirectChildrenOnly);
  if (!dialog || bySteps_.isEmpty()) return false;
  const qint64 step = dialog->property("step").toLongLong();
  const int prompt = dialog->property("prompt").toInt();
  const QList<qint64> steps = bySteps_.keys();
  int si = int(steps.indexOf(step));
  if (si < 0) return false;
  if (stepDelta != 0) {
    // The next step that has this prompt.
    for (int i = si + stepDelta; i >= 0 && i < steps.size(); i += stepDelta)
      if (bySteps_[steps[i]].contains(prompt)) {
        showEnlarged(bySteps_[steps[i]][prompt]);
        return true;
      }
    return true;
  }
  const QList<int> prompts = bySteps_[steps[si]].keys();
  const int pi = int(prompts.indexOf(prompt)) + promptDelta;
  if (pi >= 0 && pi < prompts.size()) showEnlarged(bySteps_[steps[si]][prompts[pi]]);
  return true;
}

}  // namespace strata::ui
