#include "ui/backend/ViewModel.h"

namespace strata::ui {

BlockKind blockKindFromString(const QString& kind) {
  if (kind == "stem") return BlockKind::Stem;
  if (kind == "double") return BlockKind::Double;
  if (kind == "single") return BlockKind::Single;
  if (kind == "head") return BlockKind::Head;
  if (kind == "layer") return BlockKind::Layer;
  return BlockKind::Other;
}

QString blockKindName(BlockKind kind) {
  switch (kind) {
    case BlockKind::Stem:
      return "stem";
    case BlockKind::Double:
      return "double";
    case BlockKind::Single:
      return "single";
    case BlockKind::Head:
      return "head";
    case BlockKind::Layer:
      return "layer";
    case BlockKind::Other:
      break;
  }
  return "block";
}

QString formatBytes(qint64 bytes) {
  const double b = double(bytes);
  if (bytes >= 1000LL * 1000 * 1000) return QString::number(b / 1e9, 'f', 1) + " GB";
  if (bytes >= 1000LL * 1000) return QString::number(b / 1e6, 'f', 1) + " MB";
  if (bytes >= 1000) return QString::number(b / 1e3, 'f', 1) + " kB";
  return QString::number(bytes) + " B";
}

}  // namespace strata::ui
