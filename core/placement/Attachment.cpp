#include "placement/Attachment.h"

namespace strata::placement {

const char* toString(AttachmentKind kind) {
  switch (kind) {
    case AttachmentKind::LoraAdapter: return "lora_adapter";
    case AttachmentKind::EmaShadow: return "ema_shadow";
    case AttachmentKind::OptimizerState: return "optimizer_state";
    case AttachmentKind::QuantScale: return "quant_scale";
  }
  return "unknown";
}

}  // namespace strata::placement
