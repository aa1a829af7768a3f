// ShardedSafetensors: one name -> tensor map over one file, an index JSON or a folder.
#include <gtest/gtest.h>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/ShardedSafetensors.h"

using namespace strata;
using namespace strata::io;

namespace {

void writeShards(const test::TempDir& dir) {
  writeSafetensors(dir / "a.safetensors", {{"x", at::ones({2})}, {"y", at::zeros({3})}});
  writeSafetensors(dir / "b.safetensors", {{"z", at::full({1}, 7.0)}});
}

}  // namespace

TEST(ShardedSafetensors, FolderIndexAndFileGiveOneMap) {
  test::TempDir dir;
  writeShards(dir);
  const auto folder = ShardedSafetensors::openFolder(dir.path());
  EXPECT_EQ(folder.names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(folder.fileOf("z").filename(), "b.safetensors");
  EXPECT_EQ(folder.tensor("z").item<float>(), 7.0f);
  EXPECT_EQ(folder.info("y").shape, (std::vector<int64_t>{3}));
  EXPECT_THROW(folder.tensor("w"), LoadError);

  // The index decides: "y" is named in b, which does not hold it.
  std::ofstream(dir / "m.safetensors.index.json") << R"({"weight_map": {"x": "a.safetensors", "z": "b.safetensors"}})";
  const auto indexed = ShardedSafetensors::openFolder(dir.path());
  EXPECT_EQ(indexed.names(), (std::vector<std::string>{"x", "z"}));  // a's "y" is not in the index
  std::ofstream(dir / "m.safetensors.index.json", std::ios::trunc) << R"({"weight_map": {"y": "b.safetensors"}})";
  EXPECT_THROW(ShardedSafetensors::openFolder(dir.path()), LoadError);
  std::ofstream(dir / "m.safetensors.index.json", std::ios::trunc) << R"({"weight_map": {"y": "../a.safetensors"}})";
  EXPECT_THROW(ShardedSafetensors::openFolder(dir.path()), IoError);
  std::ofstream(dir / "m.safetensors.index.json", std::ios::trunc) << R"({"nothing": 1})";
  EXPECT_THROW(ShardedSafetensors::openFolder(dir.path()), IoError);
  std::ofstream(dir / "n.safetensors.index.json") << R"({"weight_map": {}})";
  EXPECT_THROW(ShardedSafetensors::openFolder(dir.path()), LoadError);  // two indexes: which one?

  EXPECT_EQ(ShardedSafetensors::openFile(dir / "a.safetensors").names().size(), 2u);
}

TEST(ShardedSafetensors, ATensorInTwoFilesIsAnError) {
  test::TempDir dir;
  writeShards(dir);
  writeSafetensors(dir / "c.safetensors", {{"x", at::ones({2})}});
  try {
    ShardedSafetensors::openFolder(dir.path());
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'x' is also in"), std::string::npos) << e.what();
  }
  test::TempDir empty;
  EXPECT_THROW(ShardedSafetensors::openFolder(empty.path()), LoadError);
  EXPECT_THROW(ShardedSafetensors::openFolder(empty / "nope"), IoError);
}
