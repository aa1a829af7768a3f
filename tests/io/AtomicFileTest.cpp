#include "io/AtomicFile.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/FileBytes.h"

namespace fs = std::filesystem;
using strata::IoError;
using strata::io::ByteSink;
using strata::io::writeFileAtomic;
using strata::io::writeFileAtomicStream;

namespace {

std::string readAll(const fs::path& path) { return strata::io::readFileBytes(path); }

// Files in `folder` other than `keep` (left-over temp files).
int strayFiles(const fs::path& folder, const std::string& keep) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename() != keep) ++n;
  return n;
}

}  // namespace

TEST(AtomicFile, WritesAndReplaces) {
  strata::test::TempDir dir;
  const fs::path file = dir / "a.txt";
  writeFileAtomic(file, "first");
  EXPECT_EQ(readAll(file), "first");
  writeFileAtomic(file, std::string("sec\0ond", 7));
  EXPECT_EQ(readAll(file), std::string("sec\0ond", 7));
  EXPECT_EQ(strayFiles(dir.path(), "a.txt"), 0);
}

TEST(AtomicFile, StreamingWritesAllChunks) {
  strata::test::TempDir dir;
  const fs::path file = dir / "s.bin";
  writeFileAtomicStream(file, [](const ByteSink& write) {
    for (int i = 0; i < 1000; ++i) write("abc", 3);
    write("", 0);
  });
  const std::string got = readAll(file);
  ASSERT_EQ(got.size(), 3000u);
  EXPECT_EQ(got.substr(2997), "abc");
  EXPECT_EQ(strayFiles(dir.path(), "s.bin"), 0);
}

TEST(AtomicFile, ReadOnlyFolderKeepsOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permission bits do not stop root";
  strata::test::TempDir dir;
  const fs::path sub = dir / "ro";
  fs::create_directory(sub);
  const fs::path file = sub / "keep.txt";
  writeFileAtomic(file, "old");
  ASSERT_EQ(::chmod(sub.c_str(), 0555), 0);
  try {
    writeFileAtomic(file, "new");
    ::chmod(sub.c_str(), 0755);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    ::chmod(sub.c_str(), 0755);
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
  }
  EXPECT_EQ(readAll(file), "old");
  EXPECT_EQ(strayFiles(sub, "keep.txt"), 0);
}

TEST(AtomicFile, MissingFolderThrowsWithPathAndOsError) {
  strata::test::TempDir dir;
  const fs::path file = dir / "nope" / "x.txt";
  try {
    writeFileAtomic(file, "x");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, ThrowingProducerKeepsOldFileAndRemovesTemp) {
  strata::test::TempDir dir;
  const fs::path file = dir / "keep.txt";
  writeFileAtomic(file, "old");
  EXPECT_THROW(writeFileAtomicStream(file,
                                     [](const ByteSink& write) {
                                       write("partial", 7);
                                       throw std::runtime_error("producer failed");
                                     }),
               std::runtime_error);
  EXPECT_EQ(readAll(file), "old");
  EXPECT_EQ(strayFiles(dir.path(), "keep.txt"), 0);
}

TEST(AtomicFile, FailedRenameKeepsTargetAndRemovesTemp) {
  // A non-empty directory cannot be replaced by a file, even by root.
  strata::test::TempDir dir;
  const fs::path target = dir / "target";
  fs::create_directory(target);
  writeFileAtomic(target / "inside.txt", "keep");
  EXPECT_THROW(writeFileAtomic(target, "new"), IoError);
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_EQ(readAll(target / "inside.txt"), "keep");
  EXPECT_EQ(strayFiles(dir.path(), "target"), 0);
}
