#include "events/EventJson.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/Error.h"
#include "events/EventBus.h"

namespace strata::events {

namespace {

using json = nlohmann::json;
// Written in the order the fields are listed ("v" and "type" first), for a person reading the stream.
using ojson = nlohmann::ordered_json;

// Each struct's fields, listed once: the writer and the reader both walk this
// list, so a field added here travels both ways. `v(key, field)`.
template <class V>
void describe(V& v, DeviceMemory& m) {
  v("device", m.device);
  v("allocatedBytes", m.allocatedBytes);
  v("reservedBytes", m.reservedBytes);
  v("capBytes", m.capBytes);
}
template <class V>
void describe(V& v, AttachmentBytes& a) {
  v("kind", a.kind);
  v("count", a.count);
  v("bytes", a.bytes);
}
template <class V>
void describe(V& v, PlacedBlock& b) {
  v("id", b.id);
  v("kind", b.kind);
  v("device", b.device);
  v("paramBytes", b.paramBytes);
  v("attachmentBytes", b.attachmentBytes);
  v("attachments", b.attachments);
  v("hostBytes", b.hostBytes);
  v("hostAttachments", b.hostAttachments);
}
template <class V>
void describe(V& v, AuditIssue& a) {
  v("path", a.path);
  v("expected", a.expected);
  v("actual", a.actual);
}
template <class V>
void describe(V& v, StartedEvent& e) {
  v("runDir", e.runDir);
  v("jobName", e.jobName);
  v("startStep", e.startStep);
  v("totalSteps", e.totalSteps);
  v("resumed", e.resumed);
  v("setup", e.setup);
}
template <class V>
void describe(V& v, StepEvent& e) {
  v("step", e.step);
  v("totalSteps", e.totalSteps);
  v("loss", e.loss);
  v("lossSmoothed", e.lossSmoothed);
  v("lr", e.lr);
  v("gradNorm", e.gradNorm);
  v("stepTimeMs", e.stepTimeMs);
  v("imagesPerSec", e.imagesPerSec);
  v("etaSeconds", e.etaSeconds);
  v("memory", e.memory);
  v("graphReplayed", e.graphReplayed);
}
template <class V>
void describe(V& v, PlacementEvent& e) {
  v("reason", e.reason);
  v("blocks", e.blocks);
  v("memory", e.memory);
  v("audit", e.audit);
  v("checkedTensors", e.checkedTensors);
  v("afterStep", e.afterStep);
}
template <class V>
void describe(V& v, SampleEvent& e) {
  v("path", e.path);
  v("step", e.step);
  v("promptIndex", e.promptIndex);
  v("prompt", e.prompt);
  v("seed", e.seed);
}
template <class V>
void describe(V& v, CheckpointEvent& e) {
  v("path", e.path);
  v("step", e.step);
  v("removed", e.removed);
}
template <class V>
void describe(V& v, ExportEvent& e) {
  v("path", e.path);
  v("format", e.format);
  v("step", e.step);
}
template <class V>
void describe(V& v, WarningEvent& e) {
  v("message", e.message);
  v("step", e.step);
}
template <class V>
void describe(V& v, NoteEvent& e) {
  v("message", e.message);
  v("step", e.step);
}
template <class V>
void describe(V& v, PreflightFailedEvent& e) {
  v("problems", e.problems);
}
template <class V>
void describe(V& v, PausedEvent& e) {
  v("step", e.step);
}
template <class V>
void describe(V& v, ResumedEvent& e) {
  v("step", e.step);
}
template <class V>
void describe(V& v, StoppedEvent& e) {
  v("step", e.step);
  v("checkpoint", e.checkpoint);
}
template <class V>
void describe(V& v, FinishedEvent& e) {
  v("step", e.step);
  v("finalLoss", e.finalLoss);
  v("wallSeconds", e.wallSeconds);
  v("exports", e.exports);
  v("skippedItems", e.skippedItems);
}
template <class V>
void describe(V& v, DatasetEvent& e) {
  v("index", e.index);
  v("images", e.images);
  v("entries", e.entries);
  v("buckets", e.buckets);
  v("skipped", e.skipped);
  v("defaultedCaptions", e.defaultedCaptions);
}
template <class V>
void describe(V& v, CacheProgressEvent& e) {
  v("stage", e.stage);
  v("done", e.done);
  v("total", e.total);
  v("encoded", e.encoded);
  v("itemsPerSecond", e.itemsPerSecond);
  v("devicePeakBytes", e.devicePeakBytes);
}
template <class V>
void describe(V& v, LoadProgressEvent& e) {
  v("what", e.what);
  v("done", e.done);
  v("total", e.total);
}
template <class V>
void describe(V& v, FailedEvent& e) {
  v("message", e.message);
  v("step", e.step);
  v("lastGoodCheckpoint", e.lastGoodCheckpoint);
}

// JSON has no NaN or infinity; a diverged loss is exactly what a failed run reports.
ojson numberToJson(double d) {
  if (std::isfinite(d)) return d;
  if (std::isnan(d)) return "nan";
  return d > 0 ? "inf" : "-inf";
}

class Writer {
 public:
  explicit Writer(ojson& out) : out_(out) {}
  void operator()(const char* key, const std::string& s) { out_[key] = s; }
  void operator()(const char* key, int64_t i) { out_[key] = i; }
  void operator()(const char* key, double d) { out_[key] = numberToJson(d); }
  void operator()(const char* key, bool b) { out_[key] = b; }
  void operator()(const char* key, const std::vector<std::string>& list) { out_[key] = list; }
  void operator()(const char* key, const std::vector<std::pair<std::string, int64_t>>& pairs) {
    ojson a = ojson::array();
    for (const auto& [name, value] : pairs) a.push_back(ojson::array({name, value}));
    out_[key] = std::move(a);
  }
  template <class T>
  void operator()(const char* key, const std::vector<T>& list) {
    ojson a = ojson::array();
    for (const T& item : list) a.push_back(objectOf(item));
    out_[key] = std::move(a);
  }
  template <class T>
  static ojson objectOf(const T& item) {
    ojson o = ojson::object();
    Writer w(o);
    describe(w, const_cast<T&>(item));  // describe() lists fields for both directions; the writer only reads them
    return o;
  }

 private:
  ojson& out_;
};

class Reader {
 public:
  Reader(const json& object, const std::string& where, std::string prefix)
      : object_(object), where_(where), prefix_(std::move(prefix)) {}

  void operator()(const char* key, std::string& s) {
    if (const json* v = find(key)) s = text(*v, key);
  }
  void operator()(const char* key, int64_t& i) {
    if (const json* v = find(key)) i = integer(*v, key);
  }
  void operator()(const char* key, double& d) {
    const json* v = find(key);
    if (!v) return;
    if (v->is_number()) {
      d = v->get<double>();
    } else if (v->is_string() && (*v == "nan" || *v == "inf" || *v == "-inf")) {
      d = *v == "nan" ? std::numeric_limits<double>::quiet_NaN()
                      : (*v == "inf" ? 1.0 : -1.0) * std::numeric_limits<double>::infinity();
    } else {
      fail(key, "expected a number, got " + v->dump());
    }
  }
  void operator()(const char* key, bool& b) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
    b = v->get<bool>();
  }
  void operator()(const char* key, std::vector<std::string>& list) {
    const json* v = find(key);
    if (!v) return;
    requireArray(*v, key);
    list.clear();
    for (const json& item : *v) list.push_back(text(item, key));
  }
  void operator()(const char* key, std::vector<std::pair<std::string, int64_t>>& pairs) {
    const json* v = find(key);
    if (!v) return;
    requireArray(*v, key);
    pairs.clear();
    for (const json& item : *v) {
      if (!item.is_array() || item.size() != 2) fail(key, "expected [name, number] pairs, got " + item.dump());
      pairs.emplace_back(text(item[0], key), integer(item[1], key));
    }
  }
  template <class T>
  void operator()(const char* key, std::vector<T>& list) {
    const json* v = find(key);
    if (!v) return;
    requireArray(*v, key);
    list.clear();
    size_t index = 0;
    for (const json& item : *v) {
      const std::string at = prefix_ + key + "[" + std::to_string(index++) + "].";
      if (!item.is_object()) throw IoError(where_ + ": key '" + at + "': expected an object, got " + item.dump());
      T value;
      Reader r(item, where_, at);
      describe(r, value);
      list.push_back(std::move(value));
    }
  }

 private:
  // Absent and null keep the default (a field an older writer did not know).
  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw IoError(where_ + ": key '" + prefix_ + key + "': " + what);
  }
  std::string text(const json& v, const char* key) const {
    if (!v.is_string()) fail(key, "expected text, got " + v.dump());
    return v.get<std::string>();
  }
  int64_t integer(const json& v, const char* key) const {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail(key, v.dump() + " is out of range");
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
    return v.get<int64_t>();
  }
  void requireArray(const json& v, const char* key) const {
    if (!v.is_array()) fail(key, "expected a list, got " + v.dump());
  }

  const json& object_;
  const std::string& where_;
  std::string prefix_;
};

// Replace, not throw, on bytes that are not UTF-8 (a file name can hold any byte).
template <class J>
std::string dumpLine(const J& j) {
  return j.dump(-1, ' ', false, J::error_handler_t::replace);
}

json parseObject(std::string_view line, const std::string& where) {
  json j;
  try {
    // No event nests deeper than a few levels; a deeper line (hostile, or not ours)
    // is refused before printing or destroying it could recurse that deep.
    constexpr int kMaxDepth = 16;
    j = json::parse(line.begin(), line.end(), [&where](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw IoError(where + ": nested deeper than " + std::to_string(kMaxDepth) + " levels");
      return true;
    });
  } catch (const json::parse_error& e) {
    throw IoError(where + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw IoError(where + ": expected a JSON object, got " + dumpLine(j).substr(0, 80));
  const auto v = j.find("v");
  if (v == j.end()) throw IoError(where + ": no version key 'v'");
  if (!v->is_number_integer() || v->get<int64_t>() != kEventStreamVersion)
    throw IoError(where + ": version " + v->dump() + ", this build reads version " +
                  std::to_string(kEventStreamVersion));
  return j;
}

// The alternative of Event named `type` (eventName's names), read from `j`.
template <size_t I = 0>
Event decode(const std::string& type, const json& j, const std::string& where) {
  if constexpr (I == std::variant_size_v<Event>) {
    throw IoError(where + ": unknown event type '" + type + "'");
  } else {
    using T = std::variant_alternative_t<I, Event>;
    T value{};
    if (type != eventName(Event(value))) return decode<I + 1>(type, j, where);
    Reader r(j, where, "");
    describe(r, value);
    return value;
  }
}

struct ControlName {
  ControlCommand command;
  const char* name;
};
constexpr ControlName kControlNames[] = {{ControlCommand::Stop, "stop"},
                                         {ControlCommand::Pause, "pause"},
                                         {ControlCommand::Resume, "resume"},
                                         {ControlCommand::SampleNow, "sample"},
                                         {ControlCommand::SaveNow, "save"}};

}  // namespace

std::string toJson(const Event& event, std::optional<int> rank) {
  ojson j = ojson::object();
  j["v"] = kEventStreamVersion;
  j["type"] = eventName(event);
  if (rank) j["rank"] = *rank;
  std::visit(
      [&j](const auto& e) {
        Writer w(j);
        describe(w, const_cast<std::decay_t<decltype(e)>&>(e));  // read only, as in Writer::objectOf
      },
      event);
  return dumpLine(j);
}

namespace {

Event eventOf(const json& j, const std::string& where) {
  const auto type = j.find("type");
  if (type == j.end() || !type->is_string()) throw IoError(where + ": no event type (key 'type')");
  return decode(type->get<std::string>(), j, where);
}

}  // namespace

Event fromJson(std::string_view line, const std::string& where) { return eventOf(parseObject(line, where), where); }

RankedEvent rankedFromJson(std::string_view line, const std::string& where) {
  const json j = parseObject(line, where);
  RankedEvent out{eventOf(j, where), std::nullopt};
  const auto rank = j.find("rank");
  if (rank != j.end() && !rank->is_null()) {
    if (!rank->is_number_integer() || rank->get<int64_t>() < 0 || rank->get<int64_t>() > kMaxRank)
      throw IoError(where + ": key 'rank': expected an integer in 0.." + std::to_string(kMaxRank) + ", got " +
                    rank->dump());
    out.rank = static_cast<int>(rank->get<int64_t>());
  }
  return out;
}

std::string controlToJson(ControlCommand command) {
  for (const auto& c : kControlNames)
    if (c.command == command) return dumpLine(ojson{{"v", kEventStreamVersion}, {"control", c.name}});
  throw Error("controlToJson: unknown command");
}

ControlCommand controlFromJson(std::string_view line, const std::string& where) {
  const json j = parseObject(line, where);
  const auto control = j.find("control");
  if (control == j.end() || !control->is_string()) throw IoError(where + ": no command (key 'control')");
  for (const auto& c : kControlNames)
    if (*control == c.name) return c.command;
  throw IoError(where + ": unknown command " + control->dump() + " (stop, pause, resume, sample, save)");
}

std::vector<LineSplitter::Line> LineSplitter::feed(std::string_view bytes) {
  std::vector<Line> out;
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, newline);
    if (!skipping_) {
      if (partial_.size() + piece.size() > maxBytes_) {
        out.push_back({++lineNumber_, {}, true});
        partial_.clear();
        skipping_ = true;
      } else {
        partial_.append(piece);
      }
    }
    if (newline == std::string_view::npos) break;
    if (skipping_) {
      skipping_ = false;  // the over-long line ends here; it was reported already
    } else {
      if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
      out.push_back({++lineNumber_, std::move(partial_), false});
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
  return out;
}

std::vector<LineSplitter::Line> LineSplitter::finish() {
  std::vector<Line> out;
  if (!skipping_ && !partial_.empty()) out.push_back({++lineNumber_, std::move(partial_), false});
  partial_.clear();
  skipping_ = false;
  return out;
}

}  // namespace strata::events
