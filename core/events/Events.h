#pragma once
// Plain event structs the Trainer reports through (docs/design.md §1, events/). They hold
// no tensor and no Qt type, so the CLI prints them and ui/TrainerBridge copies
// them into queued Qt signals as they are.
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace strata::events {

// Memory of one device at the time of the event.
struct DeviceMemory {
  std::string device;          // "cuda:0", "cpu"
  int64_t allocatedBytes = 0;  // held by live tensors (caching allocator)
  int64_t reservedBytes = 0;   // held by the caching allocator
  int64_t capBytes = 0;        // per-device cap; 0 = none
};

struct StartedEvent {
  std::string runDir;
  std::string jobName;
  int64_t startStep = 0;  // 0 for a new run, the checkpoint's step on resume
  int64_t totalSteps = 0;
  bool resumed = false;
  // How the base is held and the step runs (train::describeRunSetup), said once.
  std::string setup;
  // train.cuda_graph: why the step is not a CUDA graph, where `setup` says so ("" where
  // it is one, or the config or a CPU run leaves it off without a word).
  std::string graphOff;
};

struct StepEvent {
  int64_t step = 0;  // 1-based: the optimizer step just finished
  int64_t totalSteps = 0;
  double loss = 0.0;          // this step's mean loss over its micro-batches
  double lossSmoothed = 0.0;  // exponential moving average (bias corrected)
  double lr = 0.0;
  double gradNorm = 0.0;  // total norm before clipping
  double stepTimeMs = 0.0;
  double imagesPerSec = 0.0;
  double etaSeconds = 0.0;
  std::vector<DeviceMemory> memory;
  bool graphReplayed = false;  // train.cuda_graph: the forward and backward were the recorded graph's
};

// Count and bytes of one kind of attachment on a block.
struct AttachmentBytes {
  std::string kind;  // "lora_adapter", "ema_shadow", "optimizer_state", "quant_scale", ... (open set)
  int64_t count = 0;
  int64_t bytes = 0;
};

// One placement unit (stem, block, head), where it lives and what it holds,
// measured from the live tensors when the event was made.
struct PlacedBlock {
  std::string id;                            // "transformer_blocks.3", "stem", "head"
  std::string kind;                          // "stem", "double", "single", "head"
  std::string device;                        // "cuda:1"
  int64_t paramBytes = 0;                    // parameters and buffers of its modules
  int64_t attachmentBytes = 0;               // sum of `attachments`
  std::vector<AttachmentBytes> attachments;  // per kind, kinds with none left out
  // Registered to the block but kept in host memory (train.offload_optimizer_state):
  // not the device's, and not in attachmentBytes.
  int64_t hostBytes = 0;
  std::vector<AttachmentBytes> hostAttachments;
};

struct AuditIssue {
  std::string path;      // module/parameter/attachment path
  std::string expected;  // where it belongs: its block's device, or "cpu (pinned)" for host-resident state
  std::string actual;
};

// Sent before step 1, and again after step 1 when it made attachment tensors (the
// optimizer state of a new run, kept fp8 transposes): then audited again.
struct PlacementEvent {
  std::string reason;  // the planner's reason, "single device", ...
  std::vector<PlacedBlock> blocks;
  std::vector<DeviceMemory> memory;
  std::vector<AuditIssue> audit;  // empty = clean audit
  int64_t checkedTensors = 0;     // how many tensors the audit looked at
  int64_t afterStep = 0;          // 0: before the first step; else the step whose tensors this audits too
};

struct SampleEvent {
  std::string path;  // PNG file
  int64_t step = 0;
  int64_t promptIndex = 0;
  std::string prompt;
  int64_t seed = 0;
};

struct CheckpointEvent {
  std::string path;  // checkpoint folder
  int64_t step = 0;
  std::vector<std::string> removed;  // older checkpoints deleted to keep the last N
};

struct ExportEvent {
  std::string path;    // LoRA file written
  std::string format;  // "diffusers", "kohya", "comfy"
  int64_t step = 0;
};

struct WarningEvent {
  std::string message;
  int64_t step = 0;
};

// What the run chose once it could see the work (the attention kernel per shape under
// model.attention_backend: auto), said once: not a problem, unlike a warning.
struct NoteEvent {
  std::string message;
  int64_t step = 0;
};

// Preflight found problems: the run does not start. Each entry is one problem.
struct PreflightFailedEvent {
  std::vector<std::string> problems;
};

struct PausedEvent {
  int64_t step = 0;
};

struct ResumedEvent {
  int64_t step = 0;
};

// Stopped on request (stop(), Ctrl-C); a checkpoint of `step` was kept.
struct StoppedEvent {
  int64_t step = 0;
  std::string checkpoint;
};

struct FinishedEvent {
  int64_t step = 0;
  double finalLoss = 0.0;
  double wallSeconds = 0.0;
  std::vector<std::string> exports;
  int64_t skippedItems = 0;  // unreadable dataset items
};

// An `images` dataset was scanned: sent once before caching.
struct DatasetEvent {
  int64_t index = 0;                 // datasets[index]
  int64_t images = 0;                // images used
  int64_t entries = 0;               // views (resolutions x flips), before num_repeats
  std::vector<std::string> buckets;  // "768x1280: 3", one per bucket
  std::vector<std::string> skipped;  // "file: reason", one per skipped file
  int64_t defaultedCaptions = 0;     // images without a caption file
};

// Progress of the latent / text-embedding cache.
struct CacheProgressEvent {
  std::string stage;  // "latents", "text" or "sample prompts"
  int64_t done = 0;   // items ready (reused or encoded)
  int64_t total = 0;
  int64_t encoded = 0;          // of `done`, run through the encoder by this run (0: all came from the cache)
  double itemsPerSecond = 0.0;  // encoded items per second (the encoder's load, on the first batch, included)
  // On a stage's last event, when this run encoded something: the most memory held on
  // each CUDA card during the stage ("cuda:0", bytes; the encoders' weights included).
  std::vector<std::pair<std::string, int64_t>> devicePeakBytes;
};

// The components a run streams in block by block (LoadProgressEvent::what).
inline constexpr const char* kLoadTransformer = "transformer";
inline constexpr const char* kLoadT5 = "T5";  // FLUX.1's T5 text encoder (an images run caching its captions)
inline constexpr const char* kLoadLanguageModel = "language model";  // a Llama-family model, layer by layer
// FLUX.2's text encoder (Mistral-3 or Qwen3: an images run caching its captions)
inline constexpr const char* kLoadFlux2TextEncoder = "FLUX.2 text encoder";

// Progress of a long model load: one component read block by block.
struct LoadProgressEvent {
  std::string what;  // kLoadTransformer, kLoadT5, kLoadLanguageModel, kLoadFlux2TextEncoder
  int64_t done = 0;  // units loaded (blocks, then the rest of the model as one)
  int64_t total = 0;
};

struct FailedEvent {
  std::string message;
  int64_t step = 0;                // step at which it failed; 0 = before step 1
  std::string lastGoodCheckpoint;  // empty when none was written
};

using Event = std::variant<StartedEvent, StepEvent, PlacementEvent, SampleEvent, CheckpointEvent, ExportEvent,
                           WarningEvent, PreflightFailedEvent, PausedEvent, ResumedEvent, StoppedEvent, FinishedEvent,
                           FailedEvent, DatasetEvent, CacheProgressEvent, LoadProgressEvent, NoteEvent>;

// "step", "placement", ... (for logs and tests).
const char* eventName(const Event& event);

}  // namespace strata::events
