#pragma once
// A causal LM's training data (datasets[].type jsonl or synthetic), tokenized once
// when the run starts, and the batches made from it.
//
// jsonl: one JSON object per line, either a prompt and a response field
// (prompt_field, response_field) or one text field that holds both with a marker
// where the response starts (text_field, response_marker: the seed's "### OUTPUT:"
// form; the marker stays with the prompt). A sample is
//   tokenizer specials (e.g. bos) + prompt tokens + response tokens + eos
// with prompt and response tokenized apart, and labels = the ids with -100 on
// everything before the response (and on padding): the loss is on the response
// tokens only. A sample longer than max_seq_len is cut at the end and counted;
// one whose prompt alone fills max_seq_len has no response token left and is
// skipped. With prompt_field and response_field at their defaults (and no
// text_field), a line without them is read in the common layouts: prompt /
// completion; instruction / input / output (the prompt is the instruction, a blank
// line and the input when there is one, then a blank line); chat `messages`
// ([{role, content}]: the prompt is each turn before the last assistant turn as
// "role: content" lines, then "assistant: "; the response is that turn; the
// model's own chat template is not applied). A line that is not a JSON object, lacks a field, holds a non-string
// or an empty one, or is blank is skipped; every skipped line is kept with its
// number and reason.
//
// Packing (datasets[].packing): samples are joined in file order into rows of at
// most max_seq_len tokens (a sample that does not fit the current row starts the
// next), as TRL's classic packing does: a sample attends to the earlier ones of
// its row, positions run on through the row.
//
// synthetic: num_items rows of max_seq_len random token ids (seeded), the loss
// on every token: for benchmarks and GPU tests without data or a tokenizer.
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "text/Tokenizer.h"
#include "train/TextRecords.h"

namespace strata::families {

constexpr int64_t kIgnoreLabel = -100;

struct LmSample {
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;  // the id where the loss counts, kIgnoreLabel elsewhere
};

struct LmDataOptions {
  std::string promptField = "prompt";
  std::string responseField = "response";
  std::string textField;  // set: one field with responseMarker inside
  std::string responseMarker = "### OUTPUT:";
  int64_t maxSeqLen = 512;
  bool packing = false;
  bool addEos = true;  // the tokenizer's eos after each response (when it has one)
  static LmDataOptions of(const config::DatasetConfig& cfg);
};

struct SkippedLine {
  int64_t line = 0;  // 1-based
  std::string reason;
};

struct LmDataReport {
  std::string source;          // the file, or "synthetic"
  int64_t lines = 0;           // lines read (blank ones included)
  int64_t samples = 0;         // samples kept (before packing)
  int64_t rows = 0;            // training rows (samples, or packed rows)
  int64_t truncated = 0;       // samples cut to max_seq_len
  int64_t droppedTokens = 0;   // tokens those cuts removed
  int64_t responseTokens = 0;  // tokens with a loss, over all samples
  std::vector<SkippedLine> skipped;
  // "data.jsonl: 98 samples from 100 lines (2 skipped), 3 cut to 512 tokens (41 tokens dropped)"
  std::string summary() const;
};

// One line of a jsonl file as the trainer reads it, before tokenizing (the
// family-neutral record the app's preview reads through train/TextRecords.h).
using LmTextRecord = train::TextRecord;

// Reads `text` line by line as fromJsonlText does (the one reader: the app's
// preview uses it too) and hands each line to `onRecord`, in order; reading
// stops when onRecord returns false. Returns the number of lines handed over.
int64_t readJsonlRecords(const std::string& text, const LmDataOptions& options,
                         const std::function<bool(const LmTextRecord&)>& onRecord);
// readJsonlRecords with `dataset`'s options: the jsonl reader registered as
// train::registerTextRecordReader's (families::registerAll).
int64_t readJsonlDataset(const config::DatasetConfig& dataset, const std::string& text,
                         const train::TextRecordSink& onRecord);

class LmDataset {
 public:
  // Throws IoError naming the file when it cannot be read, and when no line of it
  // gives a sample (the report's first reasons are in the message).
  static LmDataset fromJsonl(const std::filesystem::path& file, const text::Tokenizer& tokenizer,
                             const LmDataOptions& options);
  // The same from text already read (`source` names it in the report).
  static LmDataset fromJsonlText(const std::string& text, const std::string& source, const text::Tokenizer& tokenizer,
                                 const LmDataOptions& options);
  static LmDataset synthetic(int64_t items, int64_t seqLen, int64_t vocabSize, uint64_t seed);

  // Joins several (datasets: [...]) in order.
  static LmDataset concat(std::vector<LmDataset> parts);

  size_t size() const { return rows_.size(); }
  const LmSample& row(size_t i) const { return rows_.at(i); }
  const std::vector<LmDataReport>& reports() const { return reports_; }
  int64_t maxRowLength() const;

 private:
  std::vector<LmSample> rows_;
  std::vector<LmDataReport> reports_;
};

// One sample from a prompt and a response: ids and labels, cut to maxSeqLen
// (`dropped`: tokens cut). Empty ids when nothing of the response is left.
LmSample tokenizeSample(const text::Tokenizer& tokenizer, const std::string& prompt, const std::string& response,
                        int64_t maxSeqLen, bool addEos, int64_t& dropped);

struct LmBatch {
  at::Tensor inputIds;       // [B, L] int64
  at::Tensor attentionMask;  // [B, L] int64: 1 token, 0 padding
  at::Tensor labels;         // [B, L] int64: kIgnoreLabel on prompts and padding
  int64_t lossTokens = 0;    // labels that count after the shift (labels[:, 1:] != -100)
};

// Pads the rows to the longest, and to at least `minLength`, with `padId` on the given
// side (CPU tensors).
LmBatch collateLm(const std::vector<const LmSample*>& rows, int64_t padId, config::PaddingSide side,
                  int64_t minLength = 0);

}  // namespace strata::families
