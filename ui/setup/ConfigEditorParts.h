#pragma once
// What the config editor's two files share (ConfigEditor.cpp: the shell;
// ConfigEditorForm.cpp: the schema form).
#include <QString>

class QObject;

namespace strata::ui {

struct KeyView;

namespace editor {

// A key's tooltip: its path, its doc in the words of `family`, its type, unit, range
// or choices (the family's own for the dataset kinds and LoRA forms) and default.
QString keyToolTip(const KeyView& spec, const QString& family);

// An event filter: a wheel over a spin box or combo box without focus scrolls the
// form instead of changing the value.
QObject* newWheelGuard(QObject* parent);

}  // namespace editor

}  // namespace strata::ui
