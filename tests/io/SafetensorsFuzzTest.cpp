// Bounded random-mutation fuzzing of the safetensors header parser: thousands of
// mutated copies of a valid file (fixed seed, so failures reproduce). The only
// acceptable outcomes are a parsed header that satisfies every invariant, or a
// strata::IoError. Any other exception, a crash or a slow parse fails the test.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "SafetensorsTestUtil.h"

namespace fs = std::filesystem;
using strata::IoError;
using strata::io::SafetensorsHeader;

namespace {

constexpr std::uint64_t kSeed = 0x5afe7e45;
constexpr int kIterations = 30000;

std::string validFile(const strata::test::TempDir& dir) {
  const fs::path p = dir / "seed.safetensors";
  strata::io::writeSafetensors(p,
                               {{"double_blocks.0.img_attn.qkv.weight", at::ones({6, 2}, at::kBFloat16)},
                                {"bias", at::arange(4, at::kFloat)},
                                {"steps", at::scalar_tensor(7, at::kLong)},
                                {"mask", at::ones({3}, at::kBool)},
                                {"empty", at::empty({0}, at::kHalf)}},
                               {{"format", "pt"}, {"ss_network_dim", "16"}});
  return strata::test::readRaw(p);
}

// Every accepted header must describe spans the reader can trust.
void checkInvariants(const SafetensorsHeader& h, std::size_t sizeBytes) {
  ASSERT_EQ(h.dataOffsetBytes, 8 + h.headerSizeBytes);
  ASSERT_LE(h.dataOffsetBytes, sizeBytes);
  ASSERT_EQ(h.dataSizeBytes, sizeBytes - h.dataOffsetBytes);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& [name, info] : h.tensors) {
    ASSERT_EQ(name, info.name);
    ASSERT_LE(info.beginBytes, info.endBytes);
    ASSERT_LE(info.endBytes, h.dataSizeBytes);
    ASSERT_EQ(static_cast<std::uint64_t>(info.numel()) * strata::io::dtypeSizeBytes(info.dtype), info.sizeBytes());
    if (info.sizeBytes() > 0) spans.emplace_back(info.beginBytes, info.endBytes);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) ASSERT_LE(spans[i - 1].second, spans[i].first);
}

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  std::string mutate(std::string s) {
    const int rounds = 1 + static_cast<int>(pick(3));
    for (int r = 0; r < rounds; ++r) {
      switch (pick(8)) {
        case 0:
          bitFlip(s);
          break;
        case 1:
          truncate(s);
          break;
        case 2:
          editLength(s);
          break;
        case 3:
          editNumber(s);
          break;
        case 4:
          insertToken(s);
          break;
        case 5:
          eraseSpan(s);
          break;
        case 6:
          replaceToken(s);
          break;
        default:
          duplicateSpan(s);
          break;
      }
    }
    return s;
  }

 private:
  std::uint64_t pick(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  // A position biased to the length field and the JSON header.
  std::size_t headerPos(const std::string& s) {
    if (s.empty()) return 0;
    const std::size_t headerEnd = std::min<std::size_t>(s.size(), 8 + headerLength(s));
    return pick(4) == 0 ? pick(s.size()) : pick(std::max<std::size_t>(headerEnd, 1));
  }
  static std::uint64_t headerLength(const std::string& s) {
    if (s.size() < 8) return 0;
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(s[i]);
    return std::min<std::uint64_t>(n, s.size());
  }
  void setLength(std::string& s, std::uint64_t n) {
    if (s.size() < 8) return;
    for (int i = 0; i < 8; ++i, n >>= 8) s[i] = static_cast<char>(n & 0xff);
  }

  void bitFlip(std::string& s) {
    if (s.empty()) return;
    s[headerPos(s) % s.size()] ^= static_cast<char>(1u << pick(8));
  }
  void truncate(std::string& s) { s.resize(pick(s.size() + 1)); }
  void editLength(std::string& s) {
    const std::uint64_t n = headerLength(s);
    switch (pick(5)) {
      case 0:
        setLength(s, n + 1 + pick(16));
        break;
      case 1:
        setLength(s, n > 16 ? n - 1 - pick(16) : 0);
        break;
      case 2:
        setLength(s, rng_());
        break;
      case 3:
        setLength(s, strata::io::kMaxHeaderBytes + pick(3) - 1);
        break;
      default:
        setLength(s, pick(s.size() + 8));
        break;
    }
  }
  void editNumber(std::string& s) {
    static const char* kNumbers[] = {"0",
                                     "-1",
                                     "1e3",
                                     "2.5",
                                     "18446744073709551615",
                                     "18446744073709551616",
                                     "9223372036854775807",
                                     "4294967296",
                                     "99999999999999999999999",
                                     "-0",
                                     "1"};
    std::vector<std::size_t> digits;
    const std::size_t end = std::min<std::size_t>(s.size(), 8 + headerLength(s));
    for (std::size_t i = 8; i < end; ++i)
      if (std::isdigit(static_cast<unsigned char>(s[i]))) digits.push_back(i);
    if (digits.empty()) return;
    std::size_t i = digits[pick(digits.size())];
    std::size_t j = i;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    while (i > 8 && std::isdigit(static_cast<unsigned char>(s[i - 1]))) --i;
    const std::string repl = kNumbers[pick(std::size(kNumbers))];
    s.replace(i, j - i, repl);
    if (pick(2)) setLength(s, headerLength(s) + repl.size() - (j - i));  // keep the length consistent
  }
  void insertToken(std::string& s) {
    static const char* kTokens[] = {"{",
                                    "}",
                                    "[",
                                    "]",
                                    "\"",
                                    ",",
                                    ":",
                                    " ",
                                    "null",
                                    "true",
                                    "\\",
                                    "\\u0000",
                                    "\"__metadata__\":{}",
                                    "\"x\":",
                                    "\xff",
                                    "\xc3",
                                    "[[[[[[[[",
                                    "{\"a\":"};
    const std::string tok = kTokens[pick(std::size(kTokens))];
    s.insert(std::min(headerPos(s), s.size()), tok);
    if (pick(2)) setLength(s, headerLength(s) + tok.size());
  }
  void eraseSpan(std::string& s) {
    if (s.empty()) return;
    const std::size_t i = headerPos(s) % s.size();
    s.erase(i, 1 + pick(8));
  }
  void replaceToken(std::string& s) {
    static const char* kFrom[] = {"BF16",  "F32",   "I64",          "BOOL",         "F16",
                                  "dtype", "shape", "data_offsets", "__metadata__", "\"pt\""};
    static const char* kTo[] = {"F64", "F8_E4M3", "F8_E5M2", "U8", "I8", "XX", "", "BF16", "shapes", "16", "{}", "[]"};
    const std::string from = kFrom[pick(std::size(kFrom))];
    const std::size_t at = s.find(from);
    if (at == std::string::npos) return;
    const std::string to = kTo[pick(std::size(kTo))];
    s.replace(at, from.size(), to);
    if (pick(2)) setLength(s, headerLength(s) + to.size() - from.size());
  }
  void duplicateSpan(std::string& s) {
    if (s.size() < 9) return;
    const std::size_t i = 8 + pick(s.size() - 8);
    const std::string part = s.substr(i, 1 + pick(40));
    s.insert(headerPos(s) % s.size(), part);
  }

  std::mt19937_64 rng_;
};

}  // namespace

TEST(SafetensorsFuzz, MutatedHeadersOnlyEverThrowIoError) {
  strata::test::TempDir dir;
  const std::string seed = validFile(dir);
  ASSERT_NO_THROW(
      strata::io::parseSafetensorsHeader(reinterpret_cast<const std::uint8_t*>(seed.data()), seed.size(), "seed"));
  Mutator mutator(kSeed);
  int accepted = 0;
  int rejected = 0;
  double slowestMs = 0;
  for (int it = 0; it < kIterations; ++it) {
    const std::string bytes = mutator.mutate(seed);
    const auto start = std::chrono::steady_clock::now();
    try {
      const SafetensorsHeader h = strata::io::parseSafetensorsHeader(
          reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), "mutant");
      checkInvariants(h, bytes.size());
      ++accepted;
    } catch (const IoError& e) {
      ASSERT_NE(std::string(e.what()).find("mutant"), std::string::npos) << e.what();
      ++rejected;
    } catch (const std::exception& e) {
      FAIL() << "iteration " << it << ": non-IoError exception: " << e.what();
    } catch (...) {
      FAIL() << "iteration " << it << ": non-std exception";
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    slowestMs = std::max(slowestMs, ms);
    ASSERT_LT(ms, 1000.0) << "iteration " << it << " took " << ms << " ms";
    if (HasFatalFailure()) FAIL() << "invariant broken at iteration " << it;
  }
  // Both outcomes must be reached, or the mutations are not exercising the parser.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, kIterations / 2);
  std::cout << "[ fuzz ] " << kIterations << " mutants: " << accepted << " accepted, " << rejected
            << " rejected, slowest parse " << slowestMs << " ms\n";
}

TEST(SafetensorsFuzz, MutatedFilesOpenAndLoadOrThrowIoError) {
  // Fewer, through the whole path: open (mmap), then every tensor and copy.
  strata::test::TempDir dir;
  const std::string seed = validFile(dir);
  Mutator mutator(kSeed + 1);
  const fs::path p = dir / "mutant.safetensors";
  int loaded = 0;
  for (int it = 0; it < 500; ++it) {
    strata::test::writeRaw(p, mutator.mutate(seed));
    try {
      const auto file = strata::io::SafetensorsFile::open(p);
      for (const auto& name : file.names()) {
        try {
          const at::Tensor t = file.tensor(name);
          const at::Tensor c = file.tensorCopy(name);
          ASSERT_EQ(t.numel(), file.info(name).numel());
          ASSERT_TRUE(at::equal(t, c));
        } catch (const IoError&) {
          // float8 without LibTorch float8, or a BOOL byte that is not 0/1
        }
      }
      ++loaded;
    } catch (const IoError& e) {
      ASSERT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      FAIL() << "iteration " << it << ": non-IoError exception: " << e.what();
    }
  }
  EXPECT_GT(loaded, 3);
}
