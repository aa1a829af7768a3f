#include "io/Safetensors.h"

#include <gtest/gtest.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "io/CheckpointGuard.h"
#include "SafetensorsTestUtil.h"

namespace fs = std::filesystem;
using strata::IoError;
using strata::io::SafetensorsDtype;
using strata::io::SafetensorsFile;
using strata::test::readRaw;
using strata::test::safetensorsBytes;
using strata::test::TempDir;
using strata::test::writeRaw;

namespace {

// Opens `path` and expects exactly one IoError whose one-line message names the
// file and contains `needle`.
::testing::AssertionResult failsWith(const fs::path& path, const std::string& needle) {
  try {
    SafetensorsFile::open(path);
  } catch (const IoError& e) {
    const std::string msg = e.what();
    if (msg.find(path.string()) == std::string::npos)
      return ::testing::AssertionFailure() << "message does not name the file: " << msg;
    if (msg.find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << msg;
    if (msg.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "message is not one line: " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "no error for " << path;
}

::testing::AssertionResult rawFailsWith(const TempDir& dir, const std::string& header, const std::string& data,
                                        const std::string& needle) {
  const fs::path p = dir / "bad.safetensors";
  writeRaw(p, safetensorsBytes(header, data));
  return failsWith(p, needle);
}

const std::string kGoodEntry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  const auto base = at::arange(-6, 6, at::kDouble).reshape({3, 4});
  for (auto type : {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kShort, at::kChar})
    tensors.emplace_back(std::string("t_") + c10::toString(type), base.to(type));
  tensors.emplace_back("t_u8", at::arange(0, 250, 7, at::kLong).to(at::kByte));
  tensors.emplace_back("t_bool", (base > 0));
  tensors.emplace_back("t_scalar", at::scalar_tensor(3.5, at::kFloat));
  tensors.emplace_back("t_empty", at::empty({0, 5}, at::kFloat));
  tensors.emplace_back("t_transposed", base.to(at::kFloat).t());  // not contiguous
#if STRATA_TORCH_AT_LEAST(2, 1)
  tensors.emplace_back("t_f8e4m3", base.to(at::kFloat).to(at::ScalarType::Float8_e4m3fn));
  tensors.emplace_back("t_f8e5m2", base.to(at::kFloat).to(at::ScalarType::Float8_e5m2));
#endif
  const fs::path p = dir / "all.safetensors";
  strata::io::writeSafetensors(p, tensors, {{"format", "pt"}, {"prompt", "a cat, \"quoted\" \xc3\xa9"}});

  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("prompt"), "a cat, \"quoted\" \xc3\xa9");
  const std::vector<std::string> names = f.names();
  ASSERT_EQ(names.size(), tensors.size());
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const auto& [name, expected] : tensors) {
    ASSERT_TRUE(f.contains(name)) << name;
    for (const at::Tensor& got : {f.tensor(name), f.tensorCopy(name)}) {
      EXPECT_EQ(got.scalar_type(), expected.scalar_type()) << name;
      EXPECT_EQ(got.sizes(), expected.sizes()) << name;
      EXPECT_TRUE(at::equal(got.to(at::kDouble), expected.to(at::kDouble))) << name;
    }
    EXPECT_EQ(f.info(name).shape, expected.sizes().vec()) << name;
  }
  EXPECT_EQ(f.info("t_Float").dtype, SafetensorsDtype::F32);
  EXPECT_EQ(f.info("t_bool").dtype, SafetensorsDtype::BOOL);
  EXPECT_FALSE(f.contains("missing"));
  EXPECT_THROW(f.info("missing"), IoError);
  EXPECT_THROW(f.tensor("missing"), IoError);
}

TEST(Safetensors, HeaderIsSortedAlignedAndSpacePadded) {
  TempDir dir;
  const fs::path p = dir / "h.safetensors";
  strata::io::writeSafetensors(p, {{"zeta", at::ones({3}, at::kByte)}, {"alpha", at::ones({2}, at::kDouble)}},
                               {{"k", "v"}});
  const std::string bytes = readRaw(p);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  EXPECT_LT(header.find("\"__metadata__\""), header.find("\"alpha\""));
  EXPECT_LT(header.find("\"alpha\""), header.find("\"zeta\""));
  EXPECT_EQ(bytes.size(), 8 + n + 2 * 8 + 3);
  // the 8-byte elements come first in the data area: aligned
  EXPECT_EQ(SafetensorsFile::open(p).info("alpha").beginBytes, 0u);
}

TEST(Safetensors, ZeroCopyTensorLivesInTheMappingAndOutlivesTheFile) {
  TempDir dir;
  const fs::path p = dir / "z.safetensors";
  const auto w = at::arange(24, at::kFloat).reshape({2, 3, 4});
  strata::io::writeSafetensors(p, {{"w", w}});
  at::Tensor t;
  {
    const SafetensorsFile f = SafetensorsFile::open(p);
    t = f.tensor("w");
    const auto* ptr = static_cast<const std::uint8_t*>(t.data_ptr());
    EXPECT_GE(ptr, f.mappedBytes());
    EXPECT_LE(ptr + t.numel() * 4, f.mappedBytes() + f.mappedSizeBytes());
    EXPECT_EQ(ptr, f.mappedBytes() + f.header().dataOffsetBytes + f.info("w").beginBytes);
    const at::Tensor c = f.tensorCopy("w");
    const auto* cptr = static_cast<const std::uint8_t*>(c.data_ptr());
    EXPECT_TRUE(cptr < f.mappedBytes() || cptr >= f.mappedBytes() + f.mappedSizeBytes());
  }
  EXPECT_TRUE(at::equal(t, w));  // the mapping is still alive
  t.mul_(2);                     // copy-on-write: the file does not change
  EXPECT_TRUE(at::equal(SafetensorsFile::open(p).tensor("w"), w));
}

TEST(Safetensors, UnalignedDataIsCopied) {
  TempDir dir;
  const fs::path p = dir / "u.safetensors";
  const float v[2] = {1.5f, -2.25f};
  std::string data(1, '\x07');
  data.append(reinterpret_cast<const char*>(v), sizeof v);
  // header length 7x8-8 so the data area starts 8-aligned; "b" then starts at 1
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  writeRaw(p, safetensorsBytes(header, data));
  const SafetensorsFile f = SafetensorsFile::open(p);
  const at::Tensor b = f.tensor("b");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data_ptr()) % 4, 0u);
  EXPECT_FLOAT_EQ(b[0].item<float>(), 1.5f);
  EXPECT_FLOAT_EQ(b[1].item<float>(), -2.25f);
}

TEST(Safetensors, LoadSafetensorsReturnsEveryTensor) {
  TempDir dir;
  const fs::path p = dir / "l.safetensors";
  strata::io::writeSafetensors(p, {{"x", at::ones({2})}, {"y", at::zeros({1, 1}, at::kHalf)}});
  const auto all = strata::io::loadSafetensors(p);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(at::equal(all.at("x"), at::ones({2})));
  EXPECT_EQ(all.at("y").scalar_type(), at::kHalf);
}

TEST(Safetensors, EmptyAndTinyFiles) {
  TempDir dir;
  writeRaw(dir / "empty.safetensors", "");
  EXPECT_TRUE(failsWith(dir / "empty.safetensors", "empty"));
  writeRaw(dir / "seven.safetensors", "1234567");
  EXPECT_TRUE(failsWith(dir / "seven.safetensors", "7 bytes"));
  EXPECT_TRUE(failsWith(dir / "missing.safetensors", "No such file"));
  EXPECT_TRUE(failsWith(dir.path(), "not a regular file"));
}

TEST(Safetensors, HeaderLengthBounds) {
  TempDir dir;
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32 bytes of header
  writeRaw(dir / "huge.safetensors", huge + "{}");
  EXPECT_TRUE(failsWith(dir / "huge.safetensors", "exceeds the limit"));
  std::string beyond = safetensorsBytes("{}", "");
  beyond[0] = 100;  // 100 bytes of header in a 10-byte file
  writeRaw(dir / "beyond.safetensors", beyond);
  EXPECT_TRUE(failsWith(dir / "beyond.safetensors", "beyond the end of the file"));
}

TEST(Safetensors, TruncatedFiles) {
  TempDir dir;
  const fs::path good = dir / "good.safetensors";
  strata::io::writeSafetensors(good, {{"a", at::ones({4, 4})}, {"b", at::ones({8})}});
  const std::string bytes = readRaw(good);
  const fs::path cut = dir / "cut.safetensors";
  writeRaw(cut, bytes.substr(0, bytes.size() - 1));  // in the data
  EXPECT_TRUE(failsWith(cut, "outside the data area"));
  writeRaw(cut, bytes.substr(0, 20));  // in the header
  EXPECT_TRUE(failsWith(cut, "beyond the end of the file"));
  writeRaw(cut, bytes.substr(0, 8));  // length only
  EXPECT_TRUE(failsWith(cut, "beyond the end of the file"));
}

TEST(Safetensors, MalformedJson) {
  TempDir dir;
  EXPECT_TRUE(rawFailsWith(dir, "not json at all", "", "not valid JSON"));
  EXPECT_TRUE(rawFailsWith(dir, "", "", "not valid JSON"));
  EXPECT_TRUE(rawFailsWith(dir, "{" + kGoodEntry, "12345678", "not valid JSON"));
  EXPECT_TRUE(rawFailsWith(dir, "{" + kGoodEntry + "} trailing", "12345678", "not valid JSON"));
  EXPECT_TRUE(rawFailsWith(dir, "[1,2]", "", "not a JSON object"));
  EXPECT_TRUE(rawFailsWith(dir, "\"text\"", "", "not a JSON object"));
  EXPECT_TRUE(rawFailsWith(dir, "{\"a\":5}", "", "tensor 'a': entry is a number, not an object"));
  EXPECT_TRUE(rawFailsWith(dir, "{" + kGoodEntry + "," + kGoodEntry + "}", "12345678", "duplicate key 'a'"));
}

TEST(Safetensors, BadEntries) {
  TempDir dir;
  const std::string d8 = "12345678";
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"a":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
  };
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F33\"", "[2]", "[0,8]"), d8, "tensor 'a': unknown dtype 'F33'"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"U64\"", "[1]", "[0,8]"), d8, "unknown dtype 'U64'"));
  EXPECT_TRUE(rawFailsWith(dir, entry("32", "[2]", "[0,8]"), d8, "field 'dtype' is a number"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[3]", "[0,8]"), d8, "needs 12 bytes but data_offsets [0, 8] span 8"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F16\"", "[2]", "[0,8]"), d8, "needs 4 bytes"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[2]", "[4,12]"), d8, "outside the data area of 8 bytes"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[2]", "[8,0]"), d8, "end before they begin"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[2]", "[0]"), d8, "exactly 2 values"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[2]", "[0,4,8]"), d8, "exactly 2 values"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[-2]", "[0,8]"), d8, "negative dimension -2"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[2]", "[-1,8]"), d8, "negative value -1"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[2.5]", "[0,8]"), d8, "not a non-negative integer"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[\"2\"]", "[0,8]"), d8, "shape holds a string"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[4294967296,4294967296,4294967296]", "[0,8]"), d8, "is too large"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[99999999999999999999]", "[0,8]"), d8, "not a non-negative integer"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[0,4]"), d8, "more than 16"));
  EXPECT_TRUE(rawFailsWith(dir, entry("\"F32\"", "2", "[0,8]"), d8, "field 'shape' is a number"));
  EXPECT_TRUE(
      rawFailsWith(dir, R"({"a":{"dtype":"F32","shape":[2]}})", d8, "tensor 'a': missing field 'data_offsets'"));
  EXPECT_TRUE(
      rawFailsWith(dir, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8, "unknown field 'x'"));
  EXPECT_TRUE(rawFailsWith(dir, R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8,
                           "duplicate field 'dtype'"));
}

TEST(Safetensors, OverlappingSpans) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_TRUE(rawFailsWith(dir, header, std::string(12, 'x'), "overlap"));
  // touching spans and empty tensors inside another span are fine
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                         R"("c":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  writeRaw(dir / "ok.safetensors", safetensorsBytes(ok, std::string(12, 'x')));
  EXPECT_EQ(SafetensorsFile::open(dir / "ok.safetensors").names().size(), 3u);
}

TEST(Safetensors, Metadata) {
  TempDir dir;
  EXPECT_TRUE(rawFailsWith(dir, R"({"__metadata__":{"k":1}})", "", "__metadata__ value of 'k' is a number"));
  EXPECT_TRUE(rawFailsWith(dir, R"({"__metadata__":["k"]})", "", "__metadata__ is an array"));
  EXPECT_TRUE(rawFailsWith(dir, R"({"__metadata__":{"k":"a","k":"b"}})", "", "duplicate key 'k'"));
  EXPECT_TRUE(rawFailsWith(dir, R"({"__metadata__":{"k":{"n":"x"}}})", "", "is an object, not a string"));
  writeRaw(dir / "m.safetensors", safetensorsBytes(R"({"__metadata__":{"b":"2","a":""}})", ""));
  const SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"a", ""}, {"b", "2"}}));
  EXPECT_TRUE(f.names().empty());
}

TEST(Safetensors, BoolBytesMustBeZeroOrOne) {
  TempDir dir;
  const fs::path p = dir / "b.safetensors";
  writeRaw(p, safetensorsBytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                               std::string("\x01\x00\x07", 3)));
  const SafetensorsFile f = SafetensorsFile::open(p);
  try {
    f.tensor("m");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'm'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
  }
}

TEST(Safetensors, Float8ParsesAndLoadsOnlyWhereLibTorchHasIt) {
  TempDir dir;
  const fs::path p = dir / "f8.safetensors";
  writeRaw(p, safetensorsBytes(R"({"q":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]}})",
                               std::string("\x38\x40\x00\xb8", 4)));
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.info("q").dtype, SafetensorsDtype::F8_E4M3);
  EXPECT_EQ(f.info("q").shape, (std::vector<std::int64_t>{2, 2}));
  if (strata::compat::kHasFloat8) {
    const auto t = f.tensor("q").to(at::kFloat);
    EXPECT_FLOAT_EQ(t[0][0].item<float>(), 1.0f);   // 0x38 = 1.0 in e4m3fn
    EXPECT_FLOAT_EQ(t[0][1].item<float>(), 2.0f);   // 0x40
    EXPECT_FLOAT_EQ(t[1][1].item<float>(), -1.0f);  // 0xb8
  } else {
    EXPECT_THROW(f.tensor("q"), IoError);
  }
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const fs::path p = dir / "w.safetensors";
  EXPECT_THROW(strata::io::writeSafetensors(p, {{"a", at::ones({1})}, {"a", at::ones({1})}}), IoError);
  EXPECT_THROW(strata::io::writeSafetensors(p, {{"__metadata__", at::ones({1})}}), IoError);
  EXPECT_THROW(strata::io::writeSafetensors(p, {{"a", at::Tensor()}}), IoError);
  EXPECT_THROW(strata::io::writeSafetensors(p, {{"c", at::ones({1}, at::kComplexFloat)}}), IoError);
  EXPECT_THROW(strata::io::writeSafetensors(p, {{"bad\xff", at::ones({1})}}), IoError);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::is_empty(dir.path()));  // no temp files left either
}

TEST(Safetensors, WriterReplacesAtomically) {
  TempDir dir;
  const fs::path p = dir / "r.safetensors";
  strata::io::writeSafetensors(p, {{"a", at::ones({2})}});
  EXPECT_THROW(strata::io::writeSafetensors(p, {{"a", at::ones({2})}, {"a", at::ones({3})}}), IoError);
  EXPECT_TRUE(at::equal(SafetensorsFile::open(p).tensor("a"), at::ones({2})));
  strata::io::writeSafetensors(p, {{"b", at::zeros({3})}});
  EXPECT_EQ(SafetensorsFile::open(p).names(), std::vector<std::string>{"b"});
}
