#pragma once
// Helpers for the causal-LM family tests: a character-level tokenizer.json small
// enough for the reference fixtures' vocabularies, and JSONL writing.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace strata::test {

// A tokenizer folder (tokenizer.json + tokenizer_config.json) with ids
// <pad> 0, <s> 1, </s> 2 and then one token per printable ASCII character, at
// most `vocabSize` ids in all (the characters past it are left out: they become
// <pad>, the unk token). A TemplateProcessing post-processor puts <s> first.
inline void writeCharTokenizer(const std::filesystem::path& folder, int vocabSize) {
  std::filesystem::create_directories(folder);
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<pad>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  int next = 3;
  for (int c = 32; c < 127 && next < vocabSize; ++c) vocab[std::string(1, static_cast<char>(c))] = next++;
  nlohmann::json added = nlohmann::json::array();
  const std::vector<std::string> specials = {"<pad>", "<s>", "</s>"};
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i},
                     {"content", specials[static_cast<size_t>(i)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  nlohmann::json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Fuse"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<pad>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", nlohmann::json::array()}}}};
  std::ofstream(folder / "tokenizer.json") << tok.dump(2);
  nlohmann::json cfg = {{"bos_token", "<s>"},
                        {"eos_token", "</s>"},
                        {"pad_token", "<pad>"},
                        {"model_max_length", 4096},
                        {"tokenizer_class", "PreTrainedTokenizerFast"}};
  std::ofstream(folder / "tokenizer_config.json") << cfg.dump(2);
}

inline void writeText(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
}

}  // namespace strata::test
