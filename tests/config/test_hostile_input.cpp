// Issue 13 on the config side: run names, nearest-key hints from the right
// section, long or binary values quoted short, huge files, symlink loops, and
// the --devices numbers that used to overflow.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "ConfigTestSupport.h"
#include "common/Error.h"
#include "common/TestSupport.h"
#include "config/ConfigSchema.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"
#include "config/YamlValue.h"
#include "device/DeviceInventory.h"

using namespace strata;
using namespace strata::config;
using strata::config::test::dump;
using strata::config::test::hasKey;
namespace fs = std::filesystem;

namespace {

std::vector<Problem> problemsOf(const std::string& yaml) {
  const LoadedConfig loaded = parseRunConfig(yaml, "t.yaml");
  return validateLoaded(loaded, std::nullopt, /*checkPaths=*/false);
}

std::string withName(const std::string& quotedName) {
  return "job:\n  name: " + quotedName +
         "\nmodel:\n  random_weights: true\n  preset: tiny\n  device: cpu\n"
         "datasets:\n  - type: shapes\n";
}

bool hasError(const std::vector<Problem>& problems, const std::string& key) {
  for (const auto& p : problems)
    if (p.isError() && p.key == key) return true;
  return false;
}

}  // namespace

TEST(RunName, MustBeOnePrintableFolderNameInValidateAndTheSchema) {
  const std::vector<std::string> bads = {"\"a/b\"",       "\"../../escape\"", "\"\"",        "\"..\"",
                                         "\"\\x01bell\"", "\"caf\xff\xfe\"",  "\"\xc0\xaf\""};
  for (const std::string& bad : bads) {
    const auto problems = problemsOf(withName(bad));
    EXPECT_TRUE(hasError(problems, "job.name")) << bad << "\n" << dump(problems);
  }
  const std::vector<std::string> goods = {"my_lora", "\"run 2\"", "\"caf\xc3\xa9\"", "\"\xe6\x97\xa5\xe6\x9c\xac\""};
  for (const std::string& good : goods) {
    const auto problems = problemsOf(withName(good));
    EXPECT_FALSE(hasKey(problems, "job.name")) << good << "\n" << dump(problems);
  }
  // The rule lives in the schema: every caller that validates sees it.
  const KeySpec* spec = findKey("job.name");
  ASSERT_NE(spec, nullptr);
  ASSERT_TRUE(spec->check);
  EXPECT_FALSE(spec->check(Value{std::string("a/b")}).empty());
  EXPECT_TRUE(spec->check(Value{std::string("ok")}).empty());
  EXPECT_FALSE(runNameProblem(std::string(kMaxRunNameBytes + 1, 'n')).empty());
}

TEST(KeyHints, ComeFromTheSameSectionOrTheSameName) {
  EXPECT_EQ(YamlReader::suggestKey("train.foo"), "");  // was 'job'
  EXPECT_EQ(YamlReader::suggestKey("train.stesp"), "train.steps");
  EXPECT_EQ(YamlReader::suggestKey("model.lr"), "train.lr");  // the same name in another section
  EXPECT_EQ(YamlReader::suggestKey("trian"), "train");
  const auto problems = problemsOf(withName("ok") + "train:\n  foo: 1\n");
  for (const auto& p : problems) EXPECT_EQ(p.hint.find("did you mean 'job'"), std::string::npos) << p.format();
}

TEST(HostileYaml, ALongOrBinaryScalarIsQuotedShort) {
  std::string blob;
  for (int i = 0; i < 500000; ++i) blob += static_cast<char>('A' + (i * 7) % 26);
  blob[100] = '\x7f';
  const auto loaded = parseRunConfig(blob, "blob.yaml");
  ASSERT_FALSE(loaded.problems.empty());
  for (const auto& p : loaded.problems) EXPECT_LT(p.format().size(), 400u) << p.format().substr(0, 400);
  EXPECT_EQ(excerpt("ab\x01"
                    "c",
                    10),
            "ab\\x01c");
  EXPECT_EQ(excerpt(std::string(50, 'z'), 4), "zzzz... (50 bytes)");
}

TEST(HostileYaml, ManyUnknownKeysGiveAFewWarningsAndACount) {
  std::string yaml = withName("ok") + "train:\n";
  for (int i = 0; i < 500; ++i) yaml += "  unknown_" + std::to_string(i) + ": 1\n";
  const auto loaded = parseRunConfig(yaml, "many.yaml");
  EXPECT_LE(loaded.problems.size(), YamlReader::kListedUnknownKeys + 1) << dump(loaded.problems);
  EXPECT_NE(loaded.problems.back().message.find("480 more unknown keys"), std::string::npos) << dump(loaded.problems);
}

TEST(HostileYaml, HugeFilesAndSymlinkLoopsAreRefusedWithTheRealReason) {
  strata::test::TempDir tmp;
  {
    std::ofstream out(tmp / "huge.yaml");
    for (size_t n = 0; n <= kMaxConfigBytes; n += 16) out << "k" << 1000000 + n << ": 12345\n";
  }
  try {
    loadRunConfig(tmp / "huge.yaml");
    FAIL() << "a file over the limit was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("too large for a run config"), std::string::npos) << e.what();
  }
  fs::create_symlink(tmp / "b.yaml", tmp / "a.yaml");
  fs::create_symlink(tmp / "a.yaml", tmp / "b.yaml");
  try {
    loadRunConfig(tmp / "a.yaml");
    FAIL() << "a symlink loop was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("loop of symbolic links"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  }
  // The validator names it too, for model and dataset paths.
  auto cfg = RunConfig{};
  cfg.model.randomWeights = false;
  cfg.model.nameOrPath = (tmp / "a.yaml").string();
  std::string all;
  for (const auto& p : validate(cfg)) all += p.format() + "\n";
  EXPECT_NE(all.find("loop of symbolic links"), std::string::npos) << all;
}

TEST(DeviceSpec, NumbersThatWouldOverflowAreRefusedAsBadInput) {
  EXPECT_THROW(device::parseDeviceSpec("18446744073709551617x1GB"), ConfigError);  // was std::out_of_range
  EXPECT_THROW(device::parseDeviceSpec("4x99999999999999999999GB"), ConfigError);  // was a negative size
  EXPECT_THROW(device::parseDeviceSpec("1e400GB"), ConfigError);
  EXPECT_THROW(device::parseDeviceSpec("1.2.3GB"), ConfigError);
  EXPECT_THROW(device::parseDeviceSpec("65x16GB"), ConfigError);
  EXPECT_THROW(device::parseDeviceSpec("cpu:99999999999999TB"), ConfigError);
  EXPECT_THROW(device::parseByteSize("0.0000001B"), ConfigError);
  const auto ok = device::parseDeviceSpec("64x80GB,1TB");
  ASSERT_EQ(ok.size(), 65u);
  for (const auto& d : ok) EXPECT_GT(d.totalBytes, 0);
  EXPECT_EQ(ok.back().totalBytes, 1000000000000);
}
