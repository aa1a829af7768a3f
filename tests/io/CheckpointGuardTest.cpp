#include "io/CheckpointGuard.h"

#include <gtest/gtest.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "SafetensorsTestUtil.h"

namespace fs = std::filesystem;
using strata::IoError;
using strata::test::TempDir;
using strata::test::writeRaw;

namespace {

::testing::AssertionResult refused(const fs::path& path, const std::string& needle) {
  try {
    strata::io::SafetensorsFile::open(path);
  } catch (const IoError& e) {
    const std::string msg = e.what();
    for (const std::string& want : {path.string(), std::string("arbitrary code"), std::string(".safetensors"), needle})
      if (msg.find(want) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks '" << want << "': " << msg;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "not refused: " << path;
}

}  // namespace

TEST(CheckpointGuard, RefusesPickleExtensionsEvenIfAbsent) {
  TempDir dir;
  for (const char* name : {"model.ckpt", "model.pt", "model.PTH", "pytorch_model.bin", "x.pkl"}) {
    EXPECT_TRUE(refused(dir / name, "pickle checkpoint")) << name;
    EXPECT_THROW(strata::io::refuseUnsafeCheckpoint(dir / name), IoError) << name;
  }
}

TEST(CheckpointGuard, RefusesByContentWhenTheExtensionLies) {
  TempDir dir;
  writeRaw(dir / "zip.safetensors", std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + std::string(100, 'z'));
  EXPECT_TRUE(refused(dir / "zip.safetensors", "zip archive"));
  writeRaw(dir / "pickle.safetensors",
           std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20", 10) + std::string(50, 'p'));
  EXPECT_TRUE(refused(dir / "pickle.safetensors", "pickle stream (protocol 2)"));
  writeRaw(dir / "p4", std::string("\x80\x04\x95\x00\x00\x00\x00\x00\x00", 9));
  EXPECT_TRUE(strata::io::unsafeCheckpointReason(dir / "p4").has_value());
}

TEST(CheckpointGuard, SafetensorsWhoseLengthLooksLikePickleIsAccepted) {
  // A header of 0x280 bytes starts with 0x80 0x02 — the pickle protocol-2 magic.
  TempDir dir;
  std::string header = "{}";
  header.append(0x280 - header.size(), ' ');
  writeRaw(dir / "ok.safetensors", strata::test::safetensorsBytes(header, ""));
  EXPECT_FALSE(strata::io::unsafeCheckpointReason(dir / "ok.safetensors").has_value());
  EXPECT_NO_THROW(strata::io::SafetensorsFile::open(dir / "ok.safetensors"));
}

TEST(CheckpointGuard, OrdinaryFilesAndFoldersPass) {
  TempDir dir;
  EXPECT_FALSE(strata::io::unsafeCheckpointReason(dir.path()).has_value());
  EXPECT_FALSE(strata::io::unsafeCheckpointReason(dir / "absent.safetensors").has_value());
  writeRaw(dir / "t.txt", "hello");
  EXPECT_FALSE(strata::io::unsafeCheckpointReason(dir / "t.txt").has_value());
}
