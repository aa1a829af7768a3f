#include "io/SafetensorsCheckpoint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/DiffusersFolder.h"
#include "io/StrictLoad.h"

namespace fs = std::filesystem;
using namespace strata;
using io::SafetensorsCheckpoint;

namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

void writeIndex(const fs::path& path, const std::map<std::string, std::string>& map) {
  nlohmann::json j;
  j["metadata"] = {{"total_size", 0}};
  for (const auto& [k, v] : map) j["weight_map"][k] = v;
  std::ofstream(path) << j.dump();
}

template <class Fn>
std::string loadErrorOf(Fn fn) {
  try {
    fn();
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SafetensorsCheckpoint, OneFile) {
  test::TempDir dir;
  io::writeSafetensors(dir / "model.safetensors", Tensors{{"a", at::ones({2, 3})}, {"b", at::zeros({4})}});
  const auto ckpt = SafetensorsCheckpoint::open(dir / "model.safetensors");
  EXPECT_EQ(ckpt.shapes().size(), 2u);
  EXPECT_EQ(ckpt.shapes().at("a"), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(ckpt.indexPath().empty());
  EXPECT_EQ(ckpt.describe(), (dir / "model.safetensors").string());
  EXPECT_TRUE(test::allClose(ckpt.tensor("a"), at::ones({2, 3}), 0, 0));
  EXPECT_NE(loadErrorOf([&] { ckpt.tensor("zzz"); }).find("no tensor 'zzz'"), std::string::npos);
}

TEST(SafetensorsCheckpoint, ShardsWithIndexAndFilesTheIndexDoesNotName) {
  test::TempDir dir;
  io::writeSafetensors(dir / "model-00001-of-00002.safetensors", Tensors{{"a", at::ones({2})}});
  io::writeSafetensors(dir / "model-00002-of-00002.safetensors", Tensors{{"b", at::ones({3})}});
  // A stray file next to the shards is not part of these weights: the index decides.
  io::writeSafetensors(dir / "other.safetensors", Tensors{{"c", at::ones({1})}});
  writeIndex(dir / "model.safetensors.index.json",
             {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}});
  const auto ckpt = SafetensorsCheckpoint::open(dir.path());
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.shapes().size(), 2u);
  EXPECT_EQ(ckpt.fileOf("b").filename(), "model-00002-of-00002.safetensors");
  EXPECT_NE(ckpt.describe().find("model.safetensors.index.json"), std::string::npos) << ckpt.describe();
}

TEST(SafetensorsCheckpoint, FolderWithoutIndexTakesEveryFile) {
  test::TempDir dir;
  io::writeSafetensors(dir / "x.safetensors", Tensors{{"a", at::ones({2})}});
  io::writeSafetensors(dir / "y.safetensors", Tensors{{"b", at::ones({3})}});
  EXPECT_EQ(SafetensorsCheckpoint::open(dir.path()).shapes().size(), 2u);
  // The same tensor in two files is refused, naming both.
  io::writeSafetensors(dir / "z.safetensors", Tensors{{"a", at::ones({2})}});
  const auto msg = loadErrorOf([&] { SafetensorsCheckpoint::open(dir.path()); });
  EXPECT_NE(msg.find("tensor 'a' is also in"), std::string::npos) << msg;
  EXPECT_NE(msg.find("z.safetensors"), std::string::npos) << msg;
}

TEST(SafetensorsCheckpoint, IndexProblemsAreNamed) {
  test::TempDir dir;
  io::writeSafetensors(dir / "s1.safetensors", Tensors{{"a", at::ones({2})}, {"extra", at::ones({1})}});
  writeIndex(dir / "model.safetensors.index.json", {{"a", "s1.safetensors"}});
  auto msg = loadErrorOf([&] { SafetensorsCheckpoint::open(dir.path()); });
  EXPECT_NE(msg.find("holds 'extra', which model.safetensors.index.json does not list"), std::string::npos) << msg;

  writeIndex(dir / "model.safetensors.index.json",
             {{"a", "s1.safetensors"}, {"extra", "s1.safetensors"}, {"b", "s2.safetensors"}});
  msg = loadErrorOf([&] { SafetensorsCheckpoint::open(dir.path()); });
  EXPECT_NE(msg.find("names the shard s2.safetensors"), std::string::npos) << msg;

  io::writeSafetensors(dir / "s2.safetensors", Tensors{{"c", at::ones({2})}});
  msg = loadErrorOf([&] { SafetensorsCheckpoint::open(dir.path()); });
  EXPECT_NE(msg.find("holds 'c'"), std::string::npos) << msg;

  io::writeSafetensors(dir / "s2.safetensors", Tensors{});
  msg = loadErrorOf([&] { SafetensorsCheckpoint::open(dir.path()); });
  EXPECT_NE(msg.find("names 'b' in s2.safetensors, which does not hold it"), std::string::npos) << msg;

  writeIndex(dir / "model.safetensors.index.json", {{"a", "../s1.safetensors"}});
  EXPECT_THROW(SafetensorsCheckpoint::open(dir.path()), IoError);
  std::ofstream(dir / "model.safetensors.index.json") << "{not json";
  EXPECT_THROW(SafetensorsCheckpoint::open(dir.path()), IoError);

  writeIndex(dir / "model.safetensors.index.json", {{"a", "s1.safetensors"}});
  writeIndex(dir / "other.safetensors.index.json", {{"a", "s1.safetensors"}});
  msg = loadErrorOf([&] { SafetensorsCheckpoint::open(dir.path()); });
  EXPECT_NE(msg.find("more than one index"), std::string::npos) << msg;
}

TEST(SafetensorsCheckpoint, AbsentOrEmpty) {
  test::TempDir dir;
  EXPECT_THROW(SafetensorsCheckpoint::open(dir / "nope.safetensors"), IoError);
  const auto msg = loadErrorOf([&] { SafetensorsCheckpoint::open(dir.path()); });
  EXPECT_NE(msg.find("no .safetensors file"), std::string::npos) << msg;
}

TEST(StrictLoad, ChecksEverythingBeforeCopying) {
  test::TempDir dir;
  io::writeSafetensors(dir / "w.safetensors", Tensors{{"a", at::full({2}, 3.0)},
                                                      {"b", at::ones({3})},
                                                      {"ids", at::ones({2}, at::kLong)},
                                                      {"old", at::ones({1})},
                                                      {"junk", at::ones({5})}});
  const auto ckpt = SafetensorsCheckpoint::open(dir / "w.safetensors");
  at::Tensor a = at::zeros({2}), b = at::zeros({4}), ids = at::zeros({2}), c = at::zeros({1});
  io::WeightPlan plan;
  plan.slots = {{"a", a}, {"b", b}, {"ids", ids}, {"c", c}};
  plan.ignored["old"] = "an old buffer";
  const auto msg = loadErrorOf([&] { io::loadStrict(ckpt, plan, "test model"); });
  EXPECT_NE(msg.find("w.safetensors (test model): 4 problem(s), nothing loaded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mis-shaped: b expected [4], got [3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not floating point: ids (I64)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: c [1]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: junk [5]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("old"), std::string::npos) << "an ignored key is no problem: " << msg;
  EXPECT_TRUE(test::allClose(a, at::zeros({2}), 0, 0)) << "nothing may load partially";

  // A good plan loads, converting dtype, and reports the ignored key.
  at::Tensor half = at::zeros({2}, at::kBFloat16), bb = at::zeros({3}, at::kDouble);
  io::WeightPlan good;
  good.slots = {{"a", half}, {"b", bb}};
  good.ignored = {{"old", "an old buffer"}, {"junk", "junk"}, {"ids", "ids"}};
  const auto ignored = io::loadStrict(ckpt, good, "test model");
  EXPECT_EQ(ignored.size(), 3u);
  EXPECT_EQ(half.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(test::allClose(half.to(at::kFloat), at::full({2}, 3.0), 0, 0));
  EXPECT_TRUE(test::allClose(bb.to(at::kFloat), at::ones({3}), 0, 0));
}

TEST(DiffusersFolder, FindsTheComponentByClass) {
  test::TempDir dir;
  fs::create_directories(dir / "text_encoder_2");
  std::ofstream(dir / "model_index.json")
      << R"({"_class_name": "FluxPipeline", "text_encoder": ["transformers", "CLIPTextModel"],
            "text_encoder_2": ["transformers", "T5EncoderModel"], "image_encoder": [null, null]})";
  EXPECT_TRUE(io::isDiffusersPipelineFolder(dir.path()));
  EXPECT_EQ(io::diffusersComponentFolder(dir.path(), {"T5EncoderModel"}), dir / "text_encoder_2");
  // Named but absent, and not named at all.
  EXPECT_THROW(io::diffusersComponentFolder(dir.path(), {"CLIPTextModel"}), IoError);
  EXPECT_THROW(io::diffusersComponentFolder(dir.path(), {"AutoencoderKL"}), IoError);
  EXPECT_FALSE(io::isDiffusersPipelineFolder(dir / "text_encoder_2"));
}
