#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "common/Error.h"
#include "events/EventBus.h"
#include "events/EventJson.h"

using namespace strata::events;

namespace strata::events {
// Field-by-field equality, written out here (not taken from the serialiser) so a
// field the writer or the reader drops makes the round trip fail.
bool operator==(const DeviceMemory& a, const DeviceMemory& b) {
  return std::tie(a.device, a.allocatedBytes, a.reservedBytes, a.capBytes) ==
         std::tie(b.device, b.allocatedBytes, b.reservedBytes, b.capBytes);
}
bool operator==(const AttachmentBytes& a, const AttachmentBytes& b) {
  return std::tie(a.kind, a.count, a.bytes) == std::tie(b.kind, b.count, b.bytes);
}
bool operator==(const PlacedBlock& a, const PlacedBlock& b) {
  return std::tie(a.id, a.kind, a.device, a.paramBytes, a.attachmentBytes, a.attachments, a.hostBytes,
                  a.hostAttachments) == std::tie(b.id, b.kind, b.device, b.paramBytes, b.attachmentBytes, b.attachments,
                                                 b.hostBytes, b.hostAttachments);
}
bool operator==(const AuditIssue& a, const AuditIssue& b) {
  return std::tie(a.path, a.expected, a.actual) == std::tie(b.path, b.expected, b.actual);
}
bool operator==(const StartedEvent& a, const StartedEvent& b) {
  return std::tie(a.runDir, a.jobName, a.startStep, a.totalSteps, a.resumed, a.setup) ==
         std::tie(b.runDir, b.jobName, b.startStep, b.totalSteps, b.resumed, b.setup);
}
bool operator==(const StepEvent& a, const StepEvent& b) {
  return std::tie(a.step, a.totalSteps, a.loss, a.lossSmoothed, a.lr, a.gradNorm, a.stepTimeMs, a.imagesPerSec,
                  a.etaSeconds, a.memory, a.graphReplayed) == std::tie(b.step, b.totalSteps, b.loss, b.lossSmoothed,
                                                                       b.lr, b.gradNorm, b.stepTimeMs, b.imagesPerSec,
                                                                       b.etaSeconds, b.memory, b.graphReplayed);
}
bool operator==(const PlacementEvent& a, const PlacementEvent& b) {
  return std::tie(a.reason, a.blocks, a.memory, a.audit, a.checkedTensors, a.afterStep) ==
         std::tie(b.reason, b.blocks, b.memory, b.audit, b.checkedTensors, b.afterStep);
}
bool operator==(const SampleEvent& a, const SampleEvent& b) {
  return std::tie(a.path, a.step, a.promptIndex, a.prompt, a.seed) ==
         std::tie(b.path, b.step, b.promptIndex, b.prompt, b.seed);
}
bool operator==(const CheckpointEvent& a, const CheckpointEvent& b) {
  return std::tie(a.path, a.step, a.removed) == std::tie(b.path, b.step, b.removed);
}
bool operator==(const ExportEvent& a, const ExportEvent& b) {
  return std::tie(a.path, a.format, a.step) == std::tie(b.path, b.format, b.step);
}
bool operator==(const WarningEvent& a, const WarningEvent& b) {
  return std::tie(a.message, a.step) == std::tie(b.message, b.step);
}
bool operator==(const NoteEvent& a, const NoteEvent& b) {
  return std::tie(a.message, a.step) == std::tie(b.message, b.step);
}
bool operator==(const PreflightFailedEvent& a, const PreflightFailedEvent& b) { return a.problems == b.problems; }
bool operator==(const PausedEvent& a, const PausedEvent& b) { return a.step == b.step; }
bool operator==(const ResumedEvent& a, const ResumedEvent& b) { return a.step == b.step; }
bool operator==(const StoppedEvent& a, const StoppedEvent& b) {
  return std::tie(a.step, a.checkpoint) == std::tie(b.step, b.checkpoint);
}
bool operator==(const FinishedEvent& a, const FinishedEvent& b) {
  return std::tie(a.step, a.finalLoss, a.wallSeconds, a.exports, a.skippedItems) ==
         std::tie(b.step, b.finalLoss, b.wallSeconds, b.exports, b.skippedItems);
}
bool operator==(const DatasetEvent& a, const DatasetEvent& b) {
  return std::tie(a.index, a.images, a.entries, a.buckets, a.skipped, a.defaultedCaptions) ==
         std::tie(b.index, b.images, b.entries, b.buckets, b.skipped, b.defaultedCaptions);
}
bool operator==(const CacheProgressEvent& a, const CacheProgressEvent& b) {
  return std::tie(a.stage, a.done, a.total, a.encoded, a.itemsPerSecond, a.devicePeakBytes) ==
         std::tie(b.stage, b.done, b.total, b.encoded, b.itemsPerSecond, b.devicePeakBytes);
}
bool operator==(const LoadProgressEvent& a, const LoadProgressEvent& b) {
  return std::tie(a.what, a.done, a.total) == std::tie(b.what, b.done, b.total);
}
bool operator==(const FailedEvent& a, const FailedEvent& b) {
  return std::tie(a.message, a.step, a.lastGoodCheckpoint) == std::tie(b.message, b.step, b.lastGoodCheckpoint);
}
}  // namespace strata::events

namespace {

std::vector<DeviceMemory> memory() { return {{"cuda:0", 11, 22, 33}, {"cpu", 4, 5, 0}}; }

// One event of each type with every field away from its default (text with quotes,
// a newline and non-ASCII, numbers past 2^53 where they are integers).
std::vector<Event> everyEventType() {
  PlacedBlock block{
      "transformer_blocks.3",      "double", "cuda:1", int64_t{1} << 40, 77, {{"lora_adapter", 4, 77}}, 99,
      {{"optimizer_state", 2, 99}}};
  return {
      StartedEvent{"out/run \"a\"", "job\nname", 100, 2000, true, "base bf16; attention: flash — ü"},
      StepEvent{7, 2000, 0.25, 0.5, 1e-4, 3.5, 812.5, 4.75, 1234.5, memory(), true},
      PlacementEvent{"split over 2 cards", {block, block}, memory(), {{"a.b", "cuda:0", "cpu"}}, 321, 1},
      SampleEvent{"out/samples/s.png", 50, 2, "a red circle", 424242},
      CheckpointEvent{"out/checkpoint-50", 50, {"out/checkpoint-10", "out/checkpoint-20"}},
      ExportEvent{"out/lora.safetensors", "kohya", 60},
      WarningEvent{"careful", 3},
      PreflightFailedEvent{{"too big", "no dataset"}},
      PausedEvent{8},
      ResumedEvent{9},
      StoppedEvent{10, "out/checkpoint-10"},
      FinishedEvent{2000, 0.125, 99.5, {"a.safetensors", "b.safetensors"}, 3},
      FailedEvent{"NaN loss", 11, "out/checkpoint-10"},
      DatasetEvent{1, 20, 40, {"768x1280: 3"}, {"x.png: unreadable"}, 2},
      CacheProgressEvent{"latents", 5, 9, 4, 2.5, {{"cuda:0", int64_t{1} << 53}, {"cuda:1", 7}}},
      LoadProgressEvent{kLoadTransformer, 3, 58},
      NoteEvent{"attention at 4608 tokens: cuDNN", 1},
  };
}

}  // namespace

TEST(EventJson, EveryEventTypeHasASample) {
  const std::vector<Event> events = everyEventType();
  ASSERT_EQ(events.size(), std::variant_size_v<Event>);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].index(), i) << eventName(events[i]);
}

TEST(EventJson, EveryEventTypeRoundTrips) {
  for (const Event& event : everyEventType()) {
    const std::string line = toJson(event);
    SCOPED_TRACE(line);
    EXPECT_EQ(line.find('\n'), std::string::npos) << "one event, one line";
    EXPECT_NE(line.find(std::string("\"type\":\"") + eventName(event) + "\""), std::string::npos);
    EXPECT_NE(line.find("\"v\":1"), std::string::npos);
    const Event back = fromJson(line, "test line");
    ASSERT_EQ(back.index(), event.index());
    EXPECT_TRUE(back == event);
  }
}

TEST(EventJson, NonFiniteNumbersSurvive) {
  StepEvent step;
  step.loss = std::numeric_limits<double>::quiet_NaN();
  step.lossSmoothed = std::numeric_limits<double>::infinity();
  step.gradNorm = -std::numeric_limits<double>::infinity();
  const auto back = std::get<StepEvent>(fromJson(toJson(step), "x"));
  EXPECT_TRUE(std::isnan(back.loss));
  EXPECT_EQ(back.lossSmoothed, std::numeric_limits<double>::infinity());
  EXPECT_EQ(back.gradNorm, -std::numeric_limits<double>::infinity());
}

TEST(EventJson, UnknownKeysAreIgnoredAndMissingOnesKeepTheDefault) {
  const auto e = std::get<StepEvent>(fromJson(R"({"v":1,"type":"step","step":4,"fromANewerWriter":[1,2]})", "x"));
  EXPECT_EQ(e.step, 4);
  EXPECT_EQ(e.totalSteps, 0);
  EXPECT_TRUE(e.memory.empty());
}

// A data-parallel run's "rank": written after the type, read back, refused when not
// a rank, and a line with one still reads as version 1 (an older reader ignores it).
TEST(EventJson, TheRankTravelsAndOlderReadersIgnoreIt) {
  StepEvent step;
  step.step = 3;
  const std::string line = toJson(step, 1);
  EXPECT_EQ(line.rfind(R"({"v":1,"type":"step","rank":1,"step":3,)", 0), 0u) << line;
  const RankedEvent back = rankedFromJson(line, "x");
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(std::get<StepEvent>(back.event).step, 3);
  EXPECT_EQ(std::get<StepEvent>(fromJson(line, "x")).step, 3);
  EXPECT_FALSE(rankedFromJson(toJson(step), "x").rank.has_value());
  EXPECT_EQ(toJson(step).find("rank"), std::string::npos);
  for (const char* bad :
       {R"({"v":1,"type":"step","rank":-1})", R"({"v":1,"type":"step","rank":"one"})",
        R"({"v":1,"type":"step","rank":1.5})", R"({"v":1,"type":"step","rank":18446744073709551615})"}) {
    try {
      rankedFromJson(bad, "line 4");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const strata::IoError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("line 4: key 'rank': expected an integer in 0..", 0), 0u) << e.what();
    }
  }
}

namespace {
std::string errorOf(const std::string& line) {
  try {
    fromJson(line, "strata-train events, line 12");
  } catch (const strata::IoError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(EventJson, BadLinesAreRefusedNamingTheLine) {
  const std::string where = "strata-train events, line 12: ";
  EXPECT_EQ(errorOf(R"({"v":1,"type":"teleported","step":4})"), where + "unknown event type 'teleported'");
  EXPECT_EQ(errorOf(R"({"v":1,"step":4})"), where + "no event type (key 'type')");
  EXPECT_EQ(errorOf(R"({"type":"step"})"), where + "no version key 'v'");
  EXPECT_EQ(errorOf(R"({"v":2,"type":"step"})"), where + "version 2, this build reads version 1");
  EXPECT_EQ(errorOf(R"({"v":1,"type":"step","step":"four"})"), where + "key 'step': expected an integer, got \"four\"");
  EXPECT_EQ(errorOf(R"({"v":1,"type":"step","loss":true})"), where + "key 'loss': expected a number, got true");
  EXPECT_EQ(errorOf(R"({"v":1,"type":"placement","blocks":[{"id":3}]})"),
            where + "key 'blocks[0].id': expected text, got 3");
  EXPECT_EQ(errorOf(R"([1,2])"), where + "expected a JSON object, got [1,2]");
  EXPECT_EQ(errorOf("step 4 loss 0.3").rfind(where + "not JSON (", 0), 0u) << errorOf("step 4 loss 0.3");
  EXPECT_EQ(errorOf("").rfind(where + "not JSON (", 0), 0u);
  // Deep nesting (100000 levels in 200 KB) refused while parsing, before anything recurses over it.
  const std::string deep =
      R"({"v":1,"type":"step","loss":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(errorOf(deep), where + "nested deeper than 16 levels");
}

TEST(EventJson, ControlCommandsRoundTrip) {
  for (const ControlCommand c : {ControlCommand::Stop, ControlCommand::Pause, ControlCommand::Resume,
                                 ControlCommand::SampleNow, ControlCommand::SaveNow})
    EXPECT_EQ(controlFromJson(controlToJson(c), "x"), c) << controlToJson(c);
  EXPECT_EQ(controlToJson(ControlCommand::Stop), R"({"v":1,"control":"stop"})");
  EXPECT_THROW(controlFromJson(R"({"v":1,"control":"explode"})", "x"), strata::IoError);
  EXPECT_THROW(controlFromJson(R"({"v":1})", "x"), strata::IoError);
  EXPECT_THROW(controlFromJson("stop", "x"), strata::IoError);
}

TEST(LineSplitter, JoinsLinesAcrossChunks) {
  LineSplitter s(100);
  EXPECT_TRUE(s.feed("ab").empty());
  auto lines = s.feed("c\r\nde\n\nf");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].text, "abc");
  EXPECT_EQ(lines[0].number, 1);
  EXPECT_EQ(lines[1].text, "de");
  EXPECT_EQ(lines[2].text, "");
  EXPECT_EQ(lines[2].number, 3);
  lines = s.finish();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "f");
  EXPECT_EQ(lines[0].number, 4);
  EXPECT_TRUE(s.finish().empty());
}

TEST(LineSplitter, ALineOverTheBoundIsReportedOnceAndDropped) {
  LineSplitter s(8);
  auto lines = s.feed("12345");
  EXPECT_TRUE(lines.empty());
  lines = s.feed("6789");  // past 8 bytes with no newline yet: reported now, not when it ends
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].tooLong);
  EXPECT_EQ(lines[0].number, 1);
  EXPECT_TRUE(lines[0].text.empty());
  EXPECT_TRUE(s.feed(std::string(1000, 'x')).empty());  // the rest of it is skipped, not stored
  lines = s.feed("tail\nok\n");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_FALSE(lines[0].tooLong);
  EXPECT_EQ(lines[0].text, "ok");
  EXPECT_EQ(lines[0].number, 2);
  lines = s.feed("12345678\n");  // exactly the bound fits
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "12345678");
}
