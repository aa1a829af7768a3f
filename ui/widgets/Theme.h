#pragma once
// The app's colour themes: the desktop's own (light) palette or a dark one. The
// theme is the application palette, so every widget follows it; QCustomPlot draws
// with its own pens, so each plot is restyled from the palette (stylePlot) when a
// widget sees QEvent::PaletteChange.
#include <QColor>
#include <QPalette>
#include <QString>

class QCustomPlot;

namespace strata::ui {

enum class Theme { Light, Dark };

QString themeName(Theme theme);            // "light", "dark" (the settings value)
Theme themeFromName(const QString& name);  // anything else: Light
// Sets the application palette (and the window's extra style sheet rules through
// themeStyleSheet); the first call remembers the desktop's palette for Light.
void applyTheme(Theme theme);
Theme currentTheme();
// Extra style sheet rules for the theme (config problem marks readable on dark).
QString themeStyleSheet(Theme theme);

bool isDark(const QPalette& palette);
// Axes, grid, tick labels, legend and background of `plot` from its palette.
void stylePlot(QCustomPlot* plot);
// A colour that reads on the palette's base: `light` on a light theme, a darker or
// lighter variant of it on a dark one.
QColor themed(const QPalette& palette, const QColor& light, const QColor& dark);

}  // namespace strata::ui
