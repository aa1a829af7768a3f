// Special files and oversized files are refused before any read (issue 32, point
// 8), and JSON nesting is bounded before parsing (point 5). A FIFO used to block
// the open forever and /dev/zero to grow the reader without end: each case runs
// in a forked child with a time and memory limit, so the old behaviour fails the
// expectation instead of hanging the suite.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "common/Error.h"
#include "common/ForkedChild.h"
#include "common/TestSupport.h"
#include "io/DiffusersFolder.h"
#include "io/FileBytes.h"
#include "io/JsonFile.h"
#include "io/SafetensorsCheckpoint.h"

namespace fs = std::filesystem;
using strata::test::ChildOutcome;
using strata::test::runInChild;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void writeText(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

}  // namespace

TEST(FileBounds, FifoIsRefusedWithoutBlocking) {
  strata::test::TempDir dir;
  const fs::path fifo = dir / "config.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (bool small : {false, true}) {
    const ChildOutcome r =
        runInChild([&] { return small ? strata::io::readSmallFile(fifo) : strata::io::readFileBytes(fifo); }, 5.0);
    ASSERT_EQ(r.kind, ChildOutcome::Kind::TypedError) << r.describe();
    EXPECT_TRUE(contains(r.text, fifo.string())) << r.text;
    EXPECT_TRUE(contains(r.text, "FIFO")) << r.text;
  }
}

TEST(FileBounds, CharacterDeviceIsRefusedBeforeAnyRead) {
  // A queue file linked to /dev/zero grew the app to 9.6 GB.
  strata::test::TempDir dir;
  const fs::path link = dir / "queue.json";
  fs::create_symlink("/dev/zero", link);
  const ChildOutcome r = runInChild([&] { return strata::io::readFileBytes(link); }, 5.0, std::size_t{256} << 20);
  ASSERT_EQ(r.kind, ChildOutcome::Kind::TypedError) << r.describe();
  EXPECT_TRUE(contains(r.text, link.string())) << r.text;
  EXPECT_TRUE(contains(r.text, "character device")) << r.text;
  // JSON files go through the same reader.
  const ChildOutcome j = runInChild([&] { return strata::io::readJsonFile(link).dump(); }, 5.0, std::size_t{256} << 20);
  ASSERT_EQ(j.kind, ChildOutcome::Kind::TypedError) << j.describe();
  EXPECT_TRUE(contains(j.text, "not a regular file")) << j.text;
}

TEST(FileBounds, SmallFileOverItsCapIsRefusedNamingTheFileAndCap) {
  strata::test::TempDir dir;
  const fs::path p = dir / "big.json";
  writeText(p, std::string(strata::io::kMaxSmallFileBytes + 1, ' '));
  try {
    strata::io::readSmallFile(p, strata::io::kMaxSmallFileBytes, "run queue");
    FAIL() << "a file over the cap was read";
  } catch (const strata::IoError& e) {
    EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "1 MB")) << e.what();
    EXPECT_TRUE(contains(e.what(), "run queue")) << e.what();
  }
  writeText(p, std::string(strata::io::kMaxSmallFileBytes, ' '));
  EXPECT_EQ(strata::io::readSmallFile(p).size(), strata::io::kMaxSmallFileBytes);
}

TEST(FileBounds, DeepJsonIsRefusedBeforeParsingNamingTheFile) {
  strata::test::TempDir dir;
  const fs::path p = dir / "config.json";
  const int depth = strata::io::kMaxJsonDepth + 1;
  writeText(p, std::string(depth, '[') + std::string(depth, ']'));
  try {
    strata::io::readJsonFile(p);
    FAIL() << "JSON nested " << depth << " deep was parsed";
  } catch (const strata::IoError& e) {
    EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "nested deeper than")) << e.what();
  }
  // Brackets inside strings are text, not nesting; the limit itself parses.
  writeText(p, "{\"a\": \"" + std::string(1000, '[') + "\\\"[\"}");
  EXPECT_EQ(strata::io::readJsonFile(p).at("a").get<std::string>().size(), 1002u);
  const int ok = strata::io::kMaxJsonDepth;
  writeText(p, std::string(ok, '[') + std::string(ok, ']'));
  EXPECT_NO_THROW(strata::io::readJsonFile(p));
}

TEST(FileBounds, ModelIndexComponentMustBeAFolderName) {
  // Found by FuzzSmoke.ModelIndexJson: a 2,000-character component name made
  // std::filesystem throw its own untyped error; "../x" would leave the folder.
  strata::test::TempDir dir;
  for (const std::string& name : {std::string(2000, 'a'), std::string("../elsewhere"), std::string("")}) {
    writeText(dir / "model_index.json", "{\"" + name + "\": [\"diffusers\", \"FluxTransformer2DModel\"]}");
    try {
      strata::io::diffusersComponentFolder(dir.path(), {"FluxTransformer2DModel"});
      ADD_FAILURE() << "component name \"" << name.substr(0, 20) << "\" accepted";
    } catch (const strata::IoError& e) {
      EXPECT_TRUE(contains(e.what(), (dir / "model_index.json").string())) << e.what();
    }
  }
}

TEST(FileBounds, ShardIndexNamesMustBeFileNames) {
  // Found by FuzzSmoke.ShardIndexJson: a 300-character shard name made
  // std::filesystem throw its own untyped error.
  strata::test::TempDir dir;
  writeText(dir / "model.safetensors.index.json",
            "{\"weight_map\": {\"a.weight\": \"" + std::string(300, 'x') + ".safetensors\"}}");
  try {
    strata::io::SafetensorsCheckpoint::open(dir.path());
    ADD_FAILURE() << "an over-long shard name was accepted";
  } catch (const strata::IoError& e) {
    EXPECT_TRUE(contains(e.what(), (dir / "model.safetensors.index.json").string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "is not a file in this folder")) << e.what();
  }
}
