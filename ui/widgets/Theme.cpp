#include "ui/widgets/Theme.h"

#include <qcustomplot.h>

#include <QApplication>
#include <QStyle>

namespace strata::ui {

namespace {

Theme gTheme = Theme::Light;
bool gHaveDesktop = false;
QPalette gDesktopPalette;  // the palette before the first theme change

QPalette darkPalette() {
  QPalette p;
  const QColor window(0x2b, 0x2d, 0x31), base(0x1e, 0x1f, 0x22), text(0xe6, 0xe6, 0xe6);
  const QColor disabled(0x80, 0x80, 0x80), highlight(0x3d, 0x7a, 0xd6);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(0x34, 0x36, 0x3b));
  p.setColor(QPalette::ToolTipBase, QColor(0x3a, 0x3c, 0x41));
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(0x9a, 0x9a, 0x9a));
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, QColor(0xff, 0x6b, 0x6b));
  p.setColor(QPalette::Light, QColor(0x45, 0x47, 0x4c));
  p.setColor(QPalette::Midlight, QColor(0x3a, 0x3c, 0x41));
  p.setColor(QPalette::Mid, QColor(0x55, 0x57, 0x5c));
  p.setColor(QPalette::Dark, QColor(0x18, 0x19, 0x1b));
  p.setColor(QPalette::Shadow, Qt::black);
  p.setColor(QPalette::Highlight, highlight);
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(0x6a, 0xa8, 0xff));
  p.setColor(QPalette::LinkVisited, QColor(0xb0, 0x8c, 0xff));
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, disabled);
  p.setColor(QPalette::Disabled, QPalette::Highlight, QColor(0x50, 0x50, 0x50));
  return p;
}

}  // namespace

QString themeName(Theme theme) { return theme == Theme::Dark ? "dark" : "light"; }

Theme themeFromName(const QString& name) { return name == "dark" ? Theme::Dark : Theme::Light; }

void applyTheme(Theme theme) {
  if (!gHaveDesktop) {
    gDesktopPalette = QApplication::palette();
    gHaveDesktop = true;
  }
  gTheme = theme;
  QApplication::setPalette(theme == Theme::Dark ? darkPalette() : gDesktopPalette);
}

Theme currentTheme() { return gTheme; }

QString themeStyleSheet(Theme theme) {
  if (theme != Theme::Dark) return QString();
  return QStringLiteral(
      "QLineEdit[problem=\"error\"], QSpinBox[problem=\"error\"], QComboBox[problem=\"error\"],"
      " QPlainTextEdit[problem=\"error\"], QCheckBox[problem=\"error\"] { background: #4a1f1f; }\n"
      "QSpinBox[problem=\"error\"]::up-arrow, QSpinBox[problem=\"warning\"]::up-arrow"
      " { image: url(:/strata/arrow-up-light.png); }\n"
      "QSpinBox[problem=\"error\"]::down-arrow, QSpinBox[problem=\"warning\"]::down-arrow"
      " { image: url(:/strata/arrow-down-light.png); }\n"
      "QLabel[problem=\"error\"] { color: #ff7b72; }\n"
      "QLabel[problem=\"warning\"] { color: #e3b341; }\n");
}

bool isDark(const QPalette& palette) { return palette.color(QPalette::Base).lightness() < 128; }

QColor themed(const QPalette& palette, const QColor& light, const QColor& dark) {
  return isDark(palette) ? dark : light;
}

void stylePlot(QCustomPlot* plot) {
  const QPalette pal = plot->palette();
  const QColor text = pal.color(QPalette::Text);
  const QColor grid = isDark(pal) ? QColor(0x44, 0x46, 0x4b) : QColor(0xdc, 0xdc, 0xdc);
  const QColor axis = isDark(pal) ? QColor(0x8a, 0x8c, 0x90) : QColor(0x60, 0x60, 0x60);
  plot->setBackground(pal.color(QPalette::Base));
  for (QCPAxis* a : plot->axisRect()->axes()) {
    a->setBasePen(QPen(axis));
    a->setTickPen(QPen(axis));
    a->setSubTickPen(QPen(axis));
    // The second value axis may carry its own colour (the loss plot's learning rate).
    if (a->property("strataOwnColour").toBool()) continue;
    a->setTickLabelColor(text);
    a->setLabelColor(text);
  }
  for (QCPAxis* a : plot->axisRect()->axes()) {
    a->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    a->grid()->setZeroLinePen(Qt::NoPen);
  }
  QColor legendBack = pal.color(QPalette::Base);
  legendBack.setAlpha(210);
  plot->legend->setBrush(legendBack);
  plot->legend->setBorderPen(QPen(grid));
  plot->legend->setTextColor(text);
  plot->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace strata::ui
