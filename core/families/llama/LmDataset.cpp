#include "families/llama/LmDataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

#include "common/Error.h"
#include "io/FileBytes.h"

namespace strata::families {

namespace {
// A line's object keeps its fields in the file's order, for messages that list them.
using Json = nlohmann::ordered_json;
}  // namespace

LmDataOptions LmDataOptions::of(const config::DatasetConfig& cfg) {
  LmDataOptions o;
  o.promptField = cfg.promptField;
  o.responseField = cfg.responseField;
  o.textField = cfg.textField;
  o.responseMarker = cfg.responseMarker;
  o.maxSeqLen = cfg.maxSeqLen;
  o.packing = cfg.packing;
  return o;
}

std::string LmDataReport::summary() const {
  std::string s = source + ": " + std::to_string(samples) + " samples";
  if (source != "synthetic") {
    s += " from " + std::to_string(lines) + " lines";
    if (!skipped.empty()) s += " (" + std::to_string(skipped.size()) + " skipped)";
  }
  if (rows != samples) s += ", packed into " + std::to_string(rows) + " rows";
  if (truncated > 0)
    s +=
        ", " + std::to_string(truncated) + " cut to max_seq_len (" + std::to_string(droppedTokens) + " tokens dropped)";
  s += ", " + std::to_string(responseTokens) + " response tokens";
  return s;
}

LmSample tokenizeSample(const text::Tokenizer& tokenizer, const std::string& prompt, const std::string& response,
                        int64_t maxSeqLen, bool addEos, int64_t& dropped) {
  const std::vector<int> promptBody = tokenizer.encodeBody(prompt);
  const std::vector<int> responseBody = tokenizer.encodeBody(response);
  std::vector<int> body = promptBody;
  body.insert(body.end(), responseBody.begin(), responseBody.end());
  const std::vector<int> full = tokenizer.addSpecialTokens(body);
  // Where the body sits among the specials (a bos before it, for most causal LMs).
  size_t offset = 0;
  if (!body.empty()) {
    auto it = std::search(full.begin(), full.end(), body.begin(), body.end());
    if (it == full.end()) throw Error("the tokenizer's special tokens change the text's tokens");
    offset = static_cast<size_t>(it - full.begin());
  }
  LmSample s;
  s.ids.assign(full.begin(), full.end());
  const auto eos = tokenizer.specialTokenIds().eos;
  if (addEos && eos && (s.ids.empty() || s.ids.back() != *eos)) s.ids.push_back(*eos);
  const size_t responseStart = offset + promptBody.size();
  s.labels.assign(s.ids.size(), kIgnoreLabel);
  // The response, the specials after it and the eos carry the loss.
  for (size_t i = responseStart; i < s.ids.size(); ++i) s.labels[i] = s.ids[i];
  dropped = 0;
  if (static_cast<int64_t>(s.ids.size()) > maxSeqLen) {
    dropped = static_cast<int64_t>(s.ids.size()) - maxSeqLen;
    s.ids.resize(static_cast<size_t>(maxSeqLen));
    s.labels.resize(static_cast<size_t>(maxSeqLen));
  }
  // The loss of token i is predicted at i - 1: a response starting at 0 has none for its first token.
  const bool anyLoss = std::any_of(s.labels.begin() + std::min<size_t>(1, s.labels.size()), s.labels.end(),
                                   [](int64_t l) { return l != kIgnoreLabel; });
  if (!anyLoss) return {};
  return s;
}

namespace {

int64_t lossTokensOf(const LmSample& s) {
  int64_t n = 0;
  for (size_t i = 1; i < s.labels.size(); ++i) n += s.labels[i] != kIgnoreLabel;
  return n;
}

// The string field `name` of `obj`, or a reason why not.
std::string stringField(const Json& obj, const std::string& name, std::string& out) {
  auto it = obj.find(name);
  if (it == obj.end()) return "no field '" + name + "'";
  if (!it->is_string()) return "field '" + name + "' is " + std::string(it->type_name()) + ", not a string";
  out = it->get<std::string>();
  if (out.empty()) return "field '" + name + "' is empty";
  return "";
}

// "prompt, answer" for messages: the object's field names (at most 8).
std::string fieldNames(const Json& obj) {
  std::string out;
  size_t n = 0;
  for (auto it = obj.begin(); it != obj.end(); ++it, ++n) {
    if (n == 8) return out + ", ...";
    out += (n ? ", " : "") + it.key();
  }
  return out.empty() ? "no fields" : out;
}

// A chat line (`messages`: [{role, content}, ...]): the prompt is every turn before
// the last assistant turn, written "role: content" a line each and ending "assistant: ",
// the response that turn's content. Returns why not, or "".
std::string readMessages(const Json& messages, std::string& prompt, std::string& response) {
  if (!messages.is_array()) return "field 'messages' is " + std::string(messages.type_name()) + ", not a list";
  size_t last = messages.size();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      return "messages[" + std::to_string(i) + "] is not {\"role\": ..., \"content\": \"...\"}";
    if (m["role"].get<std::string>() == "assistant") last = i;
  }
  if (last == messages.size()) return "'messages' has no assistant turn to train on";
  prompt.clear();
  for (size_t i = 0; i < last; ++i)
    prompt += messages[i]["role"].get<std::string>() + ": " + messages[i]["content"].get<std::string>() + "\n";
  prompt += "assistant: ";
  response = messages[last]["content"].get<std::string>();
  if (response.empty()) return "the last assistant turn of 'messages' is empty";
  return "";
}

// The common layouts of a prompt/response line, for a dataset that names no fields
// of its own (prompt_field, response_field at their defaults, no text_field): the
// layout's name, or "" when the line has none of them.
std::string readKnownLayout(const Json& obj, LmTextRecord& rec, std::string& why) {
  auto has = [&](const char* f) { return obj.contains(f); };
  if (has("prompt") && has("completion")) {
    why = stringField(obj, "prompt", rec.prompt);
    if (why.empty()) why = stringField(obj, "completion", rec.response);
    return "prompt/completion";
  }
  if (has("instruction") && has("output")) {
    std::string input;
    why = stringField(obj, "instruction", rec.prompt);
    if (why.empty() && has("input") && obj["input"].is_string()) input = obj["input"].get<std::string>();
    if (why.empty()) why = stringField(obj, "output", rec.response);
    rec.prompt += (input.empty() ? "" : "\n\n" + input) + "\n\n";
    return "instruction/input/output";
  }
  if (has("messages")) {
    why = readMessages(obj["messages"], rec.prompt, rec.response);
    return "messages";
  }
  return "";
}

std::vector<LmSample> pack(const std::vector<LmSample>& samples, int64_t maxSeqLen) {
  std::vector<LmSample> rows;
  LmSample cur;
  for (const auto& s : samples) {
    if (!cur.ids.empty() && static_cast<int64_t>(cur.ids.size() + s.ids.size()) > maxSeqLen) {
      rows.push_back(std::move(cur));
      cur = {};
    }
    cur.ids.insert(cur.ids.end(), s.ids.begin(), s.ids.end());
    cur.labels.insert(cur.labels.end(), s.labels.begin(), s.labels.end());
  }
  if (!cur.ids.empty()) rows.push_back(std::move(cur));
  return rows;
}

}  // namespace

int64_t readJsonlDataset(const config::DatasetConfig& dataset, const std::string& text,
                         const train::TextRecordSink& onRecord) {
  return readJsonlRecords(text, LmDataOptions::of(dataset), onRecord);
}

int64_t readJsonlRecords(const std::string& text, const LmDataOptions& o,
                         const std::function<bool(const LmTextRecord&)>& onRecord) {
  size_t pos = 0;
  int64_t lineNo = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    LmTextRecord rec;
    rec.line = lineNo;
    std::string& why = rec.skipReason;
    if (line.find_first_not_of(" \t") == std::string::npos) {
      why = "blank line";
    } else {
      Json obj;
      try {
        obj = Json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        std::string what = e.what();
        const auto colon = what.find("parse error");
        why = "not valid JSON (" + (colon == std::string::npos ? what : what.substr(colon)) + ")";
      }
      if (why.empty() && !obj.is_object()) why = "not a JSON object";
      if (why.empty() && !o.textField.empty()) {
        std::string all;
        rec.layout = o.textField;
        why = stringField(obj, o.textField, all);
        if (why.empty()) {
          const size_t at = all.find(o.responseMarker);
          if (at == std::string::npos) {
            why = "field '" + o.textField + "' has no response marker '" + o.responseMarker + "'";
          } else {
            rec.prompt = all.substr(0, at + o.responseMarker.size());
            rec.response = all.substr(at + o.responseMarker.size());
            if (rec.response.find_first_not_of(" \t\r\n") == std::string::npos)
              why = "nothing after the response marker '" + o.responseMarker + "'";
          }
        }
      } else if (why.empty()) {
        const LmDataOptions defaults;
        const bool named = obj.contains(o.promptField) && obj.contains(o.responseField);
        const bool standard = o.promptField == defaults.promptField && o.responseField == defaults.responseField;
        if (!named && standard) rec.layout = readKnownLayout(obj, rec, why);
        if (rec.layout.empty()) {
          rec.layout = o.promptField + "/" + o.responseField;
          why = stringField(obj, o.promptField, rec.prompt);
          if (why.empty()) why = stringField(obj, o.responseField, rec.response);
          if (!named)
            why += " (the line has: " + fieldNames(obj) +
                   (standard ? "; nor a known layout: prompt/completion, instruction/output, messages)" : ")");
        }
      }
    }
    if (!onRecord(rec)) break;
  }
  return lineNo;
}

LmDataset LmDataset::fromJsonlText(const std::string& text, const std::string& source, const text::Tokenizer& tokenizer,
                                   const LmDataOptions& o) {
  LmDataset ds;
  LmDataReport r;
  r.source = source;
  std::vector<LmSample> samples;
  const int64_t lineNo = readJsonlRecords(text, o, [&](const LmTextRecord& rec) {
    auto skip = [&](std::string why) { r.skipped.push_back({rec.line, std::move(why)}); };
    if (!rec.skipReason.empty()) {
      skip(rec.skipReason);
      return true;
    }
    int64_t dropped = 0;
    LmSample s;
    try {
      s = tokenizeSample(tokenizer, rec.prompt, rec.response, o.maxSeqLen, o.addEos, dropped);
    } catch (const std::exception& e) {
      skip(std::string("cannot be tokenized: ") + e.what());
      return true;
    }
    if (s.ids.empty()) {
      skip("the prompt alone fills max_seq_len (" + std::to_string(o.maxSeqLen) + " tokens): no response token left");
      return true;
    }
    if (dropped > 0) {
      ++r.truncated;
      r.droppedTokens += dropped;
    }
    r.responseTokens += lossTokensOf(s);
    samples.push_back(std::move(s));
    return true;
  });
  r.lines = lineNo;
  r.samples = static_cast<int64_t>(samples.size());
  if (samples.empty()) {
    std::string msg = source + ": no usable sample in " + std::to_string(lineNo) + " lines";
    for (size_t i = 0; i < r.skipped.size() && i < 3; ++i)
      msg += "; line " + std::to_string(r.skipped[i].line) + ": " + r.skipped[i].reason;
    throw IoError(msg);
  }
  ds.rows_ = o.packing ? pack(samples, o.maxSeqLen) : std::move(samples);
  r.rows = static_cast<int64_t>(ds.rows_.size());
  ds.reports_.push_back(std::move(r));
  return ds;
}

LmDataset LmDataset::fromJsonl(const std::filesystem::path& file, const text::Tokenizer& tokenizer,
                               const LmDataOptions& options) {
  return fromJsonlText(io::readFileBytes(file), file.string(), tokenizer, options);
}

LmDataset LmDataset::synthetic(int64_t items, int64_t seqLen, int64_t vocabSize, uint64_t seed) {
  LmDataset ds;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tok(0, vocabSize - 1);
  LmDataReport r;
  r.source = "synthetic";
  for (int64_t i = 0; i < items; ++i) {
    LmSample s;
    for (int64_t t = 0; t < seqLen; ++t) s.ids.push_back(tok(rng));
    s.labels = s.ids;
    s.labels[0] = kIgnoreLabel;  // nothing predicts the first token
    r.responseTokens += lossTokensOf(s);
    ds.rows_.push_back(std::move(s));
  }
  r.lines = r.samples = r.rows = items;
  ds.reports_.push_back(r);
  return ds;
}

LmDataset LmDataset::concat(std::vector<LmDataset> parts) {
  LmDataset out;
  for (auto& p : parts) {
    for (auto& r : p.rows_) out.rows_.push_back(std::move(r));
    for (auto& r : p.reports_) out.reports_.push_back(std::move(r));
  }
  return out;
}

int64_t LmDataset::maxRowLength() const {
  size_t m = 0;
  for (const auto& r : rows_) m = std::max(m, r.ids.size());
  return static_cast<int64_t>(m);
}

LmBatch collateLm(const std::vector<const LmSample*>& rows, int64_t padId, config::PaddingSide side,
                  int64_t minLength) {
  if (rows.empty()) throw Error("collateLm: no rows");
  size_t len = static_cast<size_t>(std::max<int64_t>(minLength, 0));
  for (const auto* r : rows) len = std::max(len, r->ids.size());
  const auto b = static_cast<int64_t>(rows.size());
  const auto l = static_cast<int64_t>(len);
  LmBatch out;
  out.inputIds = at::full({b, l}, padId, at::kLong);  // [B, L]
  out.attentionMask = at::zeros({b, l}, at::kLong);
  out.labels = at::full({b, l}, kIgnoreLabel, at::kLong);
  auto ids = out.inputIds.accessor<int64_t, 2>();
  auto mask = out.attentionMask.accessor<int64_t, 2>();
  auto labels = out.labels.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const auto& r = *rows[static_cast<size_t>(i)];
    const int64_t n = static_cast<int64_t>(r.ids.size());
    const int64_t start = side == config::PaddingSide::Left ? l - n : 0;
    for (int64_t t = 0; t < n; ++t) {
      ids[i][start + t] = r.ids[static_cast<size_t>(t)];
      mask[i][start + t] = 1;
      labels[i][start + t] = r.labels[static_cast<size_t>(t)];
    }
    out.lossTokens += lossTokensOf(r);
  }
  return out;
}

}  // namespace strata::families
