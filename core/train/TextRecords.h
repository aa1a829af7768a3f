#pragma once
// A text dataset (datasets[].type jsonl) read line by line as the trainer reads
// it, without naming the family that reads it: the app's dataset preview asks
// here, the family registers its reader (families::registerAll).
#include <cstdint>
#include <functional>
#include <string>

#include "config/RunConfig.h"

namespace strata::train {

// One line of a text dataset before tokenizing: its prompt and response, or why
// the line is skipped.
struct TextRecord {
  int64_t line = 0;  // 1-based
  std::string prompt;
  std::string response;
  std::string skipReason;  // "" = the line gives a sample
  // The fields read: "prompt/response" (prompt_field/response_field), "text" (text_field),
  // or a layout recognised when the dataset names no fields of its own:
  // "prompt/completion", "instruction/input/output", "messages".
  std::string layout;
};

using TextRecordSink = std::function<bool(const TextRecord&)>;
// Reads `text` (the dataset's file) with `dataset`'s settings, handing each line to
// the sink in order until it returns false; returns the lines handed over.
using TextRecordReader =
    std::function<int64_t(const config::DatasetConfig& dataset, const std::string& text, const TextRecordSink&)>;

// A second registration for a type replaces the first.
void registerTextRecordReader(config::DatasetType type, TextRecordReader reader);
// The registered reader of dataset.type. Throws ConfigError naming datasets[].type
// when no family of this program reads that type line by line.
int64_t readTextRecords(const config::DatasetConfig& dataset, const std::string& text, const TextRecordSink& onRecord);

}  // namespace strata::train
