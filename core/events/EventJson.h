#pragma once
// The trainer's events as JSON lines, and the controls a parent process sends back
// (docs/app.md "The training process"). `strata-train run|resume --events jsonl`
// writes one line per event, {"v":1,"type":"step",...}; the app reads them and
// hands the decoded events to the same views an in-process trainer fed. Field
// names are the structs' own (Events.h); a key the reader does not know is
// ignored and a missing one keeps the struct's default, so a newer writer's extra
// fields do not break an older reader. A different "v", an unknown "type", a key of
// the wrong type or a line that is not JSON is refused with a message naming the line.
//
// A data-parallel run's lines carry "rank" (after "type"): the rank that sent the
// event (docs/data-parallel.md). It is optional and additive, so version 1 stays:
// a reader that does not know it ignores it and sees rank 0's stream as one run's.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "events/Events.h"

namespace strata::events {

// The version every line carries; a reader refuses other versions.
inline constexpr int kEventStreamVersion = 1;
// The longest event line a reader accepts (a placement of a few hundred blocks
// with their attachments is tens of KB); longer lines are refused unread.
inline constexpr size_t kMaxEventLineBytes = size_t{4} << 20;
// The longest control line (they are a few dozen bytes).
inline constexpr size_t kMaxControlLineBytes = 4096;

// One line of JSON, without the newline. Non-finite numbers (a diverged loss)
// are written as the strings "nan", "inf", "-inf"; text that is not UTF-8 has
// its bad bytes replaced (a JSON line must be UTF-8).
// `rank`: the data-parallel rank that sent it ("rank" key); none for a run of one process.
std::string toJson(const Event& event, std::optional<int> rank = std::nullopt);
// The event of one line; strata::Error "<where>: ..." when it cannot be read
// (`where` names the stream and line: "strata-train events, line 12").
Event fromJson(std::string_view line, const std::string& where);

// An event and the rank that sent it (none: a line without "rank").
struct RankedEvent {
  Event event;
  std::optional<int> rank;
};
// As fromJson, with the line's "rank" (an integer in 0..kMaxRank, else refused naming it).
RankedEvent rankedFromJson(std::string_view line, const std::string& where);
inline constexpr int kMaxRank = 1 << 20;

// What the app asks of a running trainer (train::Trainer's request* calls).
enum class ControlCommand { Stop, Pause, Resume, SampleNow, SaveNow };

// {"v":1,"control":"stop"}; the names are "stop", "pause", "resume", "sample", "save".
std::string controlToJson(ControlCommand command);
ControlCommand controlFromJson(std::string_view line, const std::string& where);

// Splits a byte stream into lines, bounded: a line longer than `maxBytes` is
// reported as too long (once, as soon as it passes the bound) and the rest of it
// is dropped up to its newline, so a runaway writer cannot grow the reader's memory.
class LineSplitter {
 public:
  struct Line {
    int64_t number = 0;  // 1-based
    std::string text;    // without the newline (and a trailing '\r'); empty when tooLong
    bool tooLong = false;
  };
  explicit LineSplitter(size_t maxBytes) : maxBytes_(maxBytes) {}
  // The lines `bytes` completes (and those found too long), in order.
  std::vector<Line> feed(std::string_view bytes);
  // The unterminated rest at the end of the stream, as a last line (none when empty).
  std::vector<Line> finish();

 private:
  size_t maxBytes_;
  std::string partial_;
  bool skipping_ = false;  // inside a line already reported too long
  int64_t lineNumber_ = 0;
};

}  // namespace strata::events
