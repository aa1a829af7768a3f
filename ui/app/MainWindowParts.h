#pragma once
// What the main window's parts (ui/app, ui/setup, ui/run) share.
#include <QFileInfo>
#include <QString>

namespace strata::ui {

inline const char* const kRecentConfigs = "recent/configs";
inline const char* const kRecentRuns = "recent/runs";

inline QString absolute(const QString& path) { return path.isEmpty() ? path : QFileInfo(path).absoluteFilePath(); }

}  // namespace strata::ui
