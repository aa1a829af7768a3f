#include "io/ContentHash.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "SafetensorsTestUtil.h"

namespace fs = std::filesystem;
using strata::io::fileContentHash;
using strata::io::hashHex;
using strata::io::xxh64;
using strata::io::Xxh64;
using strata::test::TempDir;
using strata::test::writeRaw;

// Published XXH64 values (xxHash's and python-xxhash's documentation).
TEST(ContentHash, Xxh64KnownValues) {
  EXPECT_EQ(hashHex(xxh64("", 0)), "ef46db3751d8e999");
  EXPECT_EQ(hashHex(xxh64("abc", 3)), "44bc2cf5ad770999");
  const std::string nobody = "Nobody inspects the spammish repetition";  // 39 bytes: the 32-byte stripes too
  EXPECT_EQ(hashHex(xxh64(nobody.data(), nobody.size())), "fbcea83c8a378bf1");
  EXPECT_NE(xxh64(nobody.data(), nobody.size(), 1), xxh64(nobody.data(), nobody.size()));  // a seed is another hash
}

TEST(ContentHash, StreamingEqualsOneShotForEverySplit) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) bytes += static_cast<char>(i * 37 + 11);
  const auto whole = xxh64(bytes.data(), bytes.size());
  for (size_t a : {0u, 1u, 7u, 31u, 32u, 33u, 100u}) {
    for (size_t b : {0u, 5u, 64u, 150u}) {
      if (a + b > bytes.size()) continue;
      Xxh64 h;
      h.update(bytes.data(), a);
      h.update(bytes.data() + a, b);
      h.update(bytes.data() + a + b, bytes.size() - a - b);
      EXPECT_EQ(h.digest(), whole) << a << " " << b;
    }
  }
}

// Weights replaced with the same size and the same mtime (cp --preserve, touch -r)
// still change the identity: the hash is of the content, and its memo is keyed by ctime too.
TEST(ContentHash, FileRewrittenWithSameSizeAndMtimeGetsANewHash) {
  TempDir dir;
  const char* oldXdg = std::getenv("XDG_CACHE_HOME");
  const std::string savedXdg = oldXdg ? oldXdg : "";
  ::setenv("XDG_CACHE_HOME", (dir / "xdg").c_str(), 1);
  const fs::path f = dir / "vae.safetensors";
  writeRaw(f, std::string(4096, 'a'));
  const std::string first = fileContentHash(f);
  EXPECT_EQ(first, hashHex(xxh64(std::string(4096, 'a').data(), 4096)));
  EXPECT_TRUE(fs::exists(dir / "xdg" / "strata" / "content-hashes.json"));  // the memo
  EXPECT_EQ(fileContentHash(f), first);
  const auto mtime = fs::last_write_time(f);
  {
    std::string other(4096, 'a');
    other[1000] = 'b';
    FILE* out = std::fopen(f.c_str(), "r+b");  // in place: same inode, same size
    ASSERT_NE(out, nullptr);
    std::fwrite(other.data(), 1, other.size(), out);
    std::fclose(out);
  }
  fs::last_write_time(f, mtime);
  ASSERT_EQ(fs::file_size(f), 4096u);
  EXPECT_NE(fileContentHash(f), first);
  EXPECT_THROW(fileContentHash(dir / "absent"), strata::IoError);
  if (oldXdg)
    ::setenv("XDG_CACHE_HOME", savedXdg.c_str(), 1);
  else
    ::unsetenv("XDG_CACHE_HOME");
}
