#pragma once
// Plain data the widgets and pages draw. ConfigBackend, PlanBackend and TrainerBridge fill
// these from the core's plain structs, so no widget or page header sees LibTorch or the core.
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <QVector>

namespace strata::ui {

// The kind of a placement unit (nn::BlockSlot::kind): the stem, the head, or a
// block kind of a family's plan ("double", "single", "layer"); Other for a kind
// the map has no colour for. The map colours by kind only: what a kind is called
// comes from the run's family (MapPartView).
enum class BlockKind { Stem, Double, Single, Layer, Head, Other };

BlockKind blockKindFromString(const QString& kind);
QString blockKindName(BlockKind kind);

// One placement unit on a device.
struct BlockView {
  QString id;  // "transformer_blocks.3", "stem", "head"
  BlockKind kind = BlockKind::Other;
  qint64 weightBytes = 0;
  qint64 adapterBytes = 0;          // LoRA weights (and their gradients when known)
  int adapterCount = 0;             // LoRA adapters attached to the block
  qint64 emaBytes = 0;              // EMA shadows
  qint64 optimizerBytes = 0;        // optimizer state
  qint64 hostOptimizerBytes = 0;    // optimizer state kept in host memory (train.offload_optimizer_state)
  qint64 quantScaleBytes = 0;       // quantization scales
  qint64 keptTransposeBytes = 0;    // kept transposed fp8 weights (model.fp8_keep_transpose)
  qint64 otherAttachmentBytes = 0;  // attachments of kinds the map has no row for
  qint64 activationBytes = 0;       // planned activations (planner only)
  bool measured = false;            // figures measured from the run's tensors (else planned)
};

// A tensor that is not where its block is (audit).
struct MismatchView {
  QString path;
  QString expected;
  QString actual;
};

// One device column of the GPU map.
struct DeviceView {
  QString label;  // "cuda:0", "cpu"
  QString name;   // "NVIDIA H200", "simulated 16.0 GB"
  bool simulated = false;
  qint64 totalBytes = 0;      // physical memory; 0 = unknown
  qint64 capBytes = 0;        // per-process cap; 0 = none
  qint64 allocatedBytes = 0;  // live (run) figures
  qint64 reservedBytes = 0;
  qint64 plannedBytes = 0;    // planner's estimate for this device
  qint64 budgetBytes = 0;     // planner's budget; 0 = unknown
  qint64 missingBytes = 0;    // planner: over budget by
  qint64 hostBytes = 0;       // host memory its blocks keep (offloaded optimizer state), not in the figures above
  QVector<BlockView> blocks;  // in forward order
  QVector<MismatchView> mismatches;
};

// What the map calls one part of the model (the stem, the head, a block kind), in
// the words of the run's family (config::FamilyDescription::mapParts).
struct MapPartView {
  BlockKind kind = BlockKind::Other;
  QString row;     // a block's row: this and its index ("double 3"); the stem's and the head's: this alone
  QString tip;     // what the block's tooltip calls it ("decoder layer")
  QString legend;  // its line in the legend ("double block")
};

struct PlacementView {
  bool planned = true;  // planner estimate (no weights) vs. live placement
  QString reason;
  QString error;  // why no plan could be made (shown instead of the columns)
  bool fits = true;
  // Why a run of this plan must not start (it does not fit its cards), and the
  // ways out (quantize, split, the cap), each planned again; empty when it may.
  QString refusal;
  QStringList wayOut;
  QVector<DeviceView> devices;
  // The family's words for its parts, in the legend's order; none (a family that is
  // not registered): the map names the blocks by their ids.
  QVector<MapPartView> parts;
};

// Live memory of one device (from a step event).
struct MemoryView {
  QString device;
  qint64 allocatedBytes = 0;
  qint64 reservedBytes = 0;
  qint64 capBytes = 0;
};

// Before a run's first step: a component streamed in block by block.
struct LoadProgressView {
  QString what;   // the trainer's name for it: "transformer", "T5", "language model"
  QString title;  // in the user's words: "the transformer", "the T5 text encoder"
  qint64 done = 0;
  qint64 total = 0;  // units: blocks, then the rest of the component
};

// Before a run's first step: an images run's cache filling.
struct CacheProgressView {
  QString stage;  // the trainer's name for it: "latents", "text", "sample prompts"
  QString title;  // in the user's words: "the image latents", "the caption embeddings"
  qint64 done = 0;
  qint64 total = 0;
  qint64 encoded = 0;  // of `done`, encoded now (0: all from the cache)
  double itemsPerSecond = 0.0;
};

// One optimizer step for the loss plot.
struct MetricPoint {
  qint64 step = 0;
  double loss = 0.0;
  double lossSmoothed = 0.0;
  double lr = 0.0;
};

// One sample image.
// One sample of a run: an image, or a causal LM's text (a .txt file holding the
// prompt and what the model wrote after it).
struct SampleInfo {
  QString path;
  qint64 step = 0;
  int promptIndex = 0;
  QString prompt;
  QString text;        // a text sample's file content (prompt + completion)
  QString completion;  // what the model wrote (from the samples index; else the text after the prompt)
  QString settings;    // how it was drawn: "seed 42, temperature 0.7" (from the samples index)
  bool isText() const { return path.endsWith(".txt", Qt::CaseInsensitive); }
};

// A validation problem of the config being edited.
struct ProblemView {
  bool error = true;  // false = warning
  QString key;        // "model.low_vram"
  int line = 0;       // 1-based YAML line, 0 = unknown
  int column = 0;
  QString message;
  QString hint;
};

// "15.3 GB", "812 MB": decimal units, like the core's formatBytes.
QString formatBytes(qint64 bytes);

}  // namespace strata::ui

Q_DECLARE_METATYPE(strata::ui::PlacementView)
Q_DECLARE_METATYPE(strata::ui::MetricPoint)
Q_DECLARE_METATYPE(strata::ui::SampleInfo)
Q_DECLARE_METATYPE(strata::ui::LoadProgressView)
Q_DECLARE_METATYPE(strata::ui::CacheProgressView)
