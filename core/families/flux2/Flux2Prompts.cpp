#include "families/flux2/Flux2Prompts.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/Error.h"
#include "text/JsonFile.h"
#include "text/Tokenizer.h"
#include "text/TokenizerFactory.h"

namespace fs = std::filesystem;

namespace strata::families {

namespace {

// A chat template file is Jinja text of a few kB (Mistral-Small's is ~10 kB).
constexpr std::uintmax_t kMaxTemplateBytes = 1 << 20;

std::string readTemplateFile(const fs::path& file) {
  std::error_code ec;
  const auto bytes = fs::file_size(file, ec);
  if (ec) throw IoError(file.string() + ": cannot read: " + ec.message());
  if (bytes > kMaxTemplateBytes)
    throw IoError(file.string() + ": " + std::to_string(bytes) + " bytes, more than a chat template's " +
                  std::to_string(kMaxTemplateBytes));
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in && !in.eof()) throw IoError(file.string() + ": cannot read");
  return s.str();
}

// chat_template as tokenizer_config.json / chat_template.json hold it: a string, or
// a list of {"name", "template"} of which "default" is the one apply_chat_template uses.
std::string templateOf(const nlohmann::json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    for (const auto& t : v)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t.at("template").is_string())
        return t.at("template").get<std::string>();
    throw IoError(where + ": chat_template: a list without a \"default\" template");
  }
  throw IoError(where + ": chat_template: expected a string or a list of named templates, got " + v.type_name());
}

std::optional<std::string> tokenName(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const auto& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return std::nullopt;
}

}  // namespace

const char* toString(Flux2TextEncoderKind kind) { return kind == Flux2TextEncoderKind::kQwen3 ? "qwen3" : "mistral3"; }

std::vector<int64_t> flux2DefaultOutLayers(Flux2TextEncoderKind kind) {
  if (kind == Flux2TextEncoderKind::kQwen3) return {9, 18, 27};
  return {10, 20, 30};
}

const char* const kFlux2SystemMessage =
    "You are an AI that reasons about image descriptions. You give structured responses focusing on object "
    "relationships, object\nattribution and actions without speculation.";

std::string flux2TemplatedPrompt(Flux2TextEncoderKind kind, const std::string& prompt, const std::string& bosToken) {
  if (kind == Flux2TextEncoderKind::kQwen3)
    return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  // Flux2Pipeline's format_input removes "[IMG]" from the prompt first (an image
  // placeholder of the Pixtral processor; truncation must not cut one).
  // One left-to-right pass, as Python's str.replace: "[IM[IMG]G]" keeps "[IMG]".
  std::string cleaned;
  size_t from = 0;
  for (size_t at = prompt.find("[IMG]"); at != std::string::npos; at = prompt.find("[IMG]", from)) {
    cleaned.append(prompt, from, at - from);
    from = at + 5;
  }
  cleaned.append(prompt, from, std::string::npos);
  return bosToken + "[SYSTEM_PROMPT]" + kFlux2SystemMessage + "[/SYSTEM_PROMPT][INST]" + cleaned + "[/INST]";
}

std::string flux2ChatTemplateMismatch(Flux2TextEncoderKind kind, const std::string& chatTemplate) {
  const std::vector<std::string> markers =
      kind == Flux2TextEncoderKind::kQwen3
          ? std::vector<std::string>{"<|im_start|>", "<|im_end|>", "<think>", "</think>"}
          : std::vector<std::string>{"bos_token", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]"};
  std::string missing;
  for (const auto& m : markers)
    if (chatTemplate.find(m) == std::string::npos) missing += (missing.empty() ? "" : ", ") + m;
  if (missing.empty()) return {};
  return std::string("the chat template is not the ") +
         (kind == Flux2TextEncoderKind::kQwen3 ? "Qwen3 ChatML" : "Mistral-3") + " template FLUX.2 uses (no " +
         missing + ")";
}

Flux2PromptTokenizer Flux2PromptTokenizer::open(const fs::path& folder, Flux2TextEncoderKind kind) {
  Flux2PromptTokenizer t;
  t.folder_ = folder;
  t.kind_ = kind;
  auto opened = text::openTokenizer(folder, text::TokenizerKind::kCausalLm);
  t.tok_ = std::move(opened.tokenizer);

  nlohmann::json config = nlohmann::json::object();
  const fs::path configFile = folder / "tokenizer_config.json";
  if (fs::is_regular_file(configFile)) config = text::readJsonFile(configFile);
  if (!config.is_object()) throw IoError(configFile.string() + ": expected a JSON object");

  // transformers' defaults: pad and truncate on the right.
  auto side = [&](const char* key) {
    if (!config.contains(key)) return PaddingSide::kRight;
    const auto& v = config.at(key);
    if (v == "left") return PaddingSide::kLeft;
    if (v == "right") return PaddingSide::kRight;
    throw IoError(configFile.string() + ": " + key + ": expected \"left\" or \"right\", got " + v.dump());
  };
  t.paddingSide_ = side("padding_side");
  t.truncateLeft_ = side("truncation_side") == PaddingSide::kLeft;

  const auto pad = t.tok_->specialTokenIds().pad;
  if (!pad)
    throw IoError(configFile.string() + ": pad_token: missing, and " + opened.file.string() +
                  " has no padding.pad_id (FLUX.2 pads every prompt to max_sequence_length)");
  t.padId_ = *pad;
  if (auto bos = tokenName(config, "bos_token")) t.bosToken_ = *bos;
  if (kind == Flux2TextEncoderKind::kMistral3 && !t.tok_->tokenToId(t.bosToken_))
    throw IoError(opened.file.string() + ": the bos token \"" + t.bosToken_ +
                  "\" the Mistral-3 template starts with is not in the vocabulary");

  // The folder's template, only to say whether it is the kind's.
  std::string chatTemplate;
  std::string templateSource;
  if (fs::is_regular_file(folder / "chat_template.jinja")) {
    templateSource = (folder / "chat_template.jinja").string();
    chatTemplate = readTemplateFile(folder / "chat_template.jinja");
  } else if (config.contains("chat_template")) {
    templateSource = configFile.string();
    chatTemplate = templateOf(config.at("chat_template"), templateSource);
  } else if (fs::is_regular_file(folder / "chat_template.json")) {
    templateSource = (folder / "chat_template.json").string();
    const auto j = text::readJsonFile(folder / "chat_template.json");
    if (!j.is_object() || !j.contains("chat_template")) throw IoError(templateSource + ": chat_template: missing");
    chatTemplate = templateOf(j.at("chat_template"), templateSource);
  }
  if (templateSource.empty()) {
    t.notes_.push_back(folder.string() + ": no chat template (chat_template.jinja or tokenizer_config.json's " +
                       "chat_template); FLUX.2's " + toString(kind) + " template is used");
  } else {
    const std::string mismatch = flux2ChatTemplateMismatch(kind, chatTemplate);
    if (!mismatch.empty())
      t.notes_.push_back(templateSource + ": " + mismatch + "; prompts are templated as FLUX.2's " + toString(kind) +
                         " pipeline does");
  }
  return t;
}

int Flux2PromptTokenizer::vocabSize() const { return tok_->vocabSize(); }

Flux2PromptIds Flux2PromptTokenizer::tokenize(const std::vector<std::string>& prompts, int64_t maxLength) const {
  if (prompts.empty()) throw ConfigError("prompt encoding: no prompt given");
  if (maxLength < 1) throw ConfigError("max_sequence_length: must be at least 1, got " + std::to_string(maxLength));
  const auto batch = static_cast<int64_t>(prompts.size());
  Flux2PromptIds out;
  out.ids = at::full({batch, maxLength}, padId_, at::kLong);
  out.mask = at::zeros({batch, maxLength}, at::kLong);
  auto ids = out.ids.accessor<int64_t, 2>();
  auto mask = out.mask.accessor<int64_t, 2>();
  // apply_chat_template tokenizes without adding special tokens (the template has
  // them); Flux2KleinPipeline calls tokenizer(text), which runs the post-processor.
  const bool addSpecials = kind_ == Flux2TextEncoderKind::kQwen3;
  const auto specials = static_cast<int64_t>(addSpecials ? tok_->specialTokenCount() : 0);
  if (specials >= maxLength)
    throw ConfigError("max_sequence_length " + std::to_string(maxLength) + " cannot hold the " +
                      std::to_string(specials) + " special tokens of " + tok_->description());
  for (int64_t b = 0; b < batch; ++b) {
    out.texts.push_back(flux2TemplatedPrompt(kind_, prompts[static_cast<size_t>(b)], bosToken_));
    std::vector<int> body = tok_->encodeBody(out.texts.back());
    out.lengths.push_back(static_cast<int64_t>(body.size()));
    const int64_t room = maxLength - specials;
    int64_t dropped = 0;
    if (static_cast<int64_t>(body.size()) > room) {
      dropped = static_cast<int64_t>(body.size()) - room;
      if (truncateLeft_)
        body.erase(body.begin(), body.begin() + dropped);
      else
        body.resize(static_cast<size_t>(room));
    }
    out.dropped.push_back(dropped);
    const std::vector<int> row = addSpecials ? tok_->addSpecialTokens(std::move(body)) : std::move(body);
    const auto n = static_cast<int64_t>(row.size());
    if (n > maxLength) throw Error("prompt encoding: the post-processor made the row longer than max_sequence_length");
    const int64_t start = paddingSide_ == PaddingSide::kLeft ? maxLength - n : 0;
    for (int64_t i = 0; i < n; ++i) {
      ids[b][start + i] = row[static_cast<size_t>(i)];
      mask[b][start + i] = 1;
    }
  }
  return out;
}

}  // namespace strata::families
