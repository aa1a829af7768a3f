// Structured fuzz tests of every file format a user hands Strata (issue 32, point
// 11): run config YAML, tokenizer.json, config.json / model_index.json,
// safetensors headers, images (PNG / JPEG / WebP bytes) and jsonl datasets. Each
// mutates valid seeds (byte flips, truncations, erased and doubled spans, deep
// nesting, huge numbers, wrong types, stray bytes) with a fixed seed for a fixed
// number of cases, and runs every case in a forked child with a wall-clock limit
// and an address-space budget (tests/common/ForkedChild.h). A case passes when the
// reader returns or throws a typed strata::Error whose message names the file; a
// crash, a hang, an untyped exception (std::bad_alloc, a parser's own) or a
// message without the file fails it, with the case's seed and first bytes.
//
// gcc has no libFuzzer, so this is the CI form; tests/fuzz keeps the clang
// libFuzzer target. Budget: the whole label runs in well under 2 minutes on 2
// cores (STRATA_FUZZ_CASES scales every kind's count, for a longer local run).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>

#include "common/Error.h"
#include "common/ForkedChild.h"
#include "common/TestSupport.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"
#include "families/llama/LmDataset.h"
#include "io/DiffusersFolder.h"
#include "io/FileBytes.h"
#include "io/Image.h"
#include "io/Safetensors.h"
#include "io/SafetensorsCheckpoint.h"
#include "models/clip/ClipTextConfig.h"
#include "models/flux/FluxConfig.h"
#include "models/llama/LlamaConfig.h"
#include "models/t5/T5Config.h"
#include "models/vae/VaeConfig.h"
#include "text/TokenizerFactory.h"
#include "train/TestImages.h"

namespace fs = std::filesystem;
using namespace strata;
using test::ChildOutcome;

namespace {

// Each kind's cases; each runs in its own child.
int casesPerKind(int base) {
  const char* env = std::getenv("STRATA_FUZZ_CASES");
  return env ? std::max(1, std::atoi(env)) : base;
}
constexpr double kCaseSeconds = 10.0;                      // a case that takes longer is a hang
constexpr std::size_t kCaseMemory = std::size_t{2} << 30;  // over what the child inherits

std::string readAll(const fs::path& p) { return io::readFileBytes(p); }
void writeAll(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

fs::path reference(const std::string& rel) { return test::referenceDir() / rel; }

// Mutations that keep most of a file's structure, so the reader gets past the
// first byte: the cases a hostile or damaged file brings.
class Mutator {
 public:
  explicit Mutator(std::uint64_t seed, bool yaml = false) : rng_(seed), yaml_(yaml) {}

  std::string mutate(std::string s) {
    const int rounds = 1 + static_cast<int>(pick(3));
    for (int r = 0; r < rounds && !s.empty(); ++r) {
      switch (pick(9)) {
        case 0:
          s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
          break;  // bit flip
        case 1:
          s.resize(pick(s.size()));
          break;   // truncation
        case 2: {  // erase a span
          const std::size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<std::size_t>(64, s.size() - at)));
          break;
        }
        case 3: {  // double a span
          const std::size_t at = pick(s.size());
          s.insert(at, s.substr(at, 1 + pick(64)));
          break;
        }
        case 4:
          replaceNumber(s, pick(2) ? hugeNumber() : smallNumber());
          break;
        case 5:
          replaceValue(s);
          break;   // wrong type
        case 6: {  // deep nesting at a value
          const std::size_t depth = std::vector<std::size_t>{100, 1000, 30000}[pick(3)];
          const std::string nest = std::string(depth, '[') + (pick(2) ? std::string(depth, ']') : "");
          insertAtValue(s, nest);
          break;
        }
        case 7: {  // stray bytes: NUL, 0xFF, a lone quote or brace
          static const std::vector<std::string> kStray = {
              std::string(1, '\0'), "\xff", "\"", "{", "}", "\\", "\n", ":"};
          s.insert(pick(s.size() + 1), kStray[pick(kStray.size())]);
          break;
        }
        case 8:
          replaceNumber(s, hugeNumber());
          break;
      }
    }
    return s;
  }

  std::uint64_t pick(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  std::string hugeNumber() {
    static const char* kHuge[] = {
        "1e9",   "1000000000", "1099511627776", "18446744073709551616", "-1", "-9223372036854775809",
        "1e308", "100000000",  "2147483648",    "4294967296",           "0",  "99999999999999999999999"};
    return kHuge[pick(12)];
  }
  std::string smallNumber() { return std::to_string(static_cast<int64_t>(pick(5000)) - 10); }

  // Replaces the digits of a random number in `s`.
  void replaceNumber(std::string& s, const std::string& with) {
    const std::size_t at = pick(s.size());
    std::size_t b = s.find_first_of("0123456789", at);
    if (b == std::string::npos) b = s.find_first_of("0123456789");
    if (b == std::string::npos) return;
    std::size_t e = b;
    while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '.' || s[e] == 'e')) ++e;
    s.replace(b, e - b, with);
  }

  // The position after a random ':' (a value in JSON and YAML), or a random one.
  std::size_t valuePosition(const std::string& s) {
    const std::size_t at = s.find(':', pick(s.size()));
    return at == std::string::npos ? pick(s.size() + 1) : at + 1;
  }

  void insertAtValue(std::string& s, const std::string& what) { s.insert(valuePosition(s), " " + what); }

  // Replaces the value after a ':' up to the next ',', newline or '}' by another type.
  void replaceValue(std::string& s) {
    static const char* kJson[] = {"\"x\"", "[]", "{}", "null", "true", "[1, \"a\", {}]", "-0.5", "\"\\ud800\""};
    static const char* kYaml[] = {"[]",       "{}",        "~",          "yes",      "&a [*a, *a]", "!!binary AAAA",
                                  "[[[[[[[[", "\"\\xff\"", "*undefined", "|\n  text"};
    const std::size_t b = valuePosition(s);
    std::size_t e = s.find_first_of(",\n}", b);
    if (e == std::string::npos) e = s.size();
    s.replace(b, e - b, yaml_ ? std::string(" ") + kYaml[pick(10)] : std::string(" ") + kJson[pick(8)]);
  }

  std::mt19937_64 rng_;
  bool yaml_;
};

// The first bytes of a failing case, printable, for the report.
std::string preview(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < std::min<std::size_t>(s.size(), 160); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 32 && c < 127) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

struct FuzzKind {
  std::string name;
  std::vector<std::string> seeds;
  bool yaml = false;
  // Writes the case's bytes where the reader looks for them and returns the path
  // an error message must name.
  std::function<fs::path(const fs::path& caseDir, const std::string& bytes)> place;
  // Reads the case (in the child): returns a short summary, or throws.
  std::function<std::string(const fs::path& caseDir)> read;
};

// Runs `cases` mutated cases of `kind`; every one must end well.
void fuzz(const FuzzKind& kind, int cases, std::uint64_t seed) {
  Mutator mutator(seed, kind.yaml);
  test::TempDir dir;
  int failures = 0, typed = 0, returned = 0;
  double slowest = 0;
  // The seeds themselves first: each must be read.
  for (std::size_t i = 0; i < kind.seeds.size(); ++i) {
    const fs::path caseDir = dir / ("seed" + std::to_string(i));
    fs::create_directories(caseDir);
    kind.place(caseDir, kind.seeds[i]);
    const ChildOutcome r = test::runInChild([&] { return kind.read(caseDir); }, kCaseSeconds, kCaseMemory);
    ASSERT_EQ(r.kind, ChildOutcome::Kind::Returned) << kind.name << " seed " << i << ": " << r.describe();
  }
  for (int c = 0; c < cases && failures < 5; ++c) {
    const std::string& seedBytes = kind.seeds[mutator.pick(kind.seeds.size())];
    const std::string bytes = mutator.mutate(seedBytes);
    const fs::path caseDir = dir / ("case" + std::to_string(c));
    fs::create_directories(caseDir);
    const fs::path named = kind.place(caseDir, bytes);
    const ChildOutcome r = test::runInChild([&] { return kind.read(caseDir); }, kCaseSeconds, kCaseMemory);
    slowest = std::max(slowest, r.seconds);
    const bool namesFile =
        r.kind != ChildOutcome::Kind::TypedError || r.text.find(named.filename().string()) != std::string::npos;
    if (!r.ok() || !namesFile) {
      ++failures;
      ADD_FAILURE()
          << kind.name << " case " << c << " (seed " << seed << "): "
          << (r.ok() ? "the message does not name " + named.string() + ": " + r.text : r.describe()).substr(0, 600)
          << "\n  input (" << bytes.size() << " bytes): " << preview(bytes);
    } else {
      fs::remove_all(caseDir);
    }
    (r.kind == ChildOutcome::Kind::TypedError ? typed : returned) += r.ok() ? 1 : 0;
  }
  std::printf("[ fuzz ] %s: %d cases: %d read, %d refused with a typed error, %d failed; slowest %.3f s\n",
              kind.name.c_str(), cases, returned, typed, failures, slowest);
}

std::string symlinkTo(const fs::path& target, const fs::path& link) {
  fs::create_symlink(target, link);
  return link.string();
}

}  // namespace

TEST(FuzzSmoke, RunConfigYaml) {
  FuzzKind k;
  k.name = "run config YAML";
  k.yaml = true;
  for (const char* name : {"demo.yaml", "flux-dev-split-4x16gb.yaml", "llama3-8b-2x16gb.yaml", "flux2-dev-4x24gb.yaml"})
    k.seeds.push_back(readAll(test::sourceDir() / "configs" / name));
  k.place = [](const fs::path& d, const std::string& b) {
    writeAll(d / "run.yaml", b);
    return d / "run.yaml";
  };
  k.read = [](const fs::path& d) {
    const config::LoadedConfig loaded = config::loadRunConfig(d / "run.yaml");
    const auto problems = config::validateLoaded(loaded, std::vector<device::DeviceInfo>{}, /*checkPaths=*/false);
    return std::to_string(problems.size()) + " problems";
  };
  fuzz(k, casesPerKind(300), 0xc0f1);
}

TEST(FuzzSmoke, TokenizerJson) {
  FuzzKind k;
  k.name = "tokenizer.json";
  k.seeds.push_back(readAll(reference("lm_tokenizer_a/tokenizer.json")));
  k.seeds.push_back(readAll(reference("flux_pipeline_a/model/tokenizer_2/tokenizer.json")));
  k.place = [](const fs::path& d, const std::string& b) {
    writeAll(d / "tokenizer.json", b);
    return d / "tokenizer.json";
  };
  k.read = [](const fs::path& d) {
    const auto opened = text::openTokenizer(d, text::TokenizerKind::kAuto);
    const auto ids = opened.tokenizer->encode("a photo of a cat, 123 \xc3\xa9t\xc3\xa9");
    return std::to_string(ids.size()) + " ids";
  };
  fuzz(k, casesPerKind(300), 0x70c3);
}

TEST(FuzzSmoke, ModelConfigJson) {
  // Each seed is a config.json of one reader; the case folder says which.
  struct Reader {
    const char* fixture;
    std::function<std::string(const fs::path&)> read;
  };
  static const std::vector<Reader> kReaders = {
      {"causal_lm_a/model/config.json",
       [](const fs::path& p) {
         return std::to_string(llama::llamaParamPlan(llama::LlamaConfig::fromFile(p)).totalParams());
       }},
      {"flux_pipeline_a/model/transformer/config.json",
       [](const fs::path& p) {
         // With the weights beside it: the header's shapes and config.json are compared.
         return std::to_string(flux::fluxParamPlan(flux::FluxConfig::fromCheckpoint(p.parent_path())).totalParams());
       }},
      {"flux_pipeline_a/model/vae/config.json",
       [](const fs::path& p) { return std::to_string(vae::VaeConfig::fromDiffusersJsonFile(p).numBlocks()); }},
      {"flux_pipeline_a/model/text_encoder/config.json",
       [](const fs::path& p) { return std::to_string(clip::ClipTextConfig::fromTransformersJsonFile(p).hiddenSize); }},
      {"flux_pipeline_a/model/text_encoder_2/config.json",
       [](const fs::path& p) { return std::to_string(t5::T5Config::fromTransformersJsonFile(p).dModel); }},
  };
  FuzzKind k;
  k.name = "config.json";
  for (const auto& r : kReaders) k.seeds.push_back(readAll(reference(r.fixture)));
  // The reader is chosen by the seed's own "model_type"/"_class_name" words.
  auto readerOf = [](const std::string& bytes) -> std::size_t {
    if (bytes.find("\"llama\"") != std::string::npos) return 0;
    if (bytes.find("Flux") != std::string::npos) return 1;
    if (bytes.find("Autoencoder") != std::string::npos) return 2;
    if (bytes.find("clip") != std::string::npos || bytes.find("CLIP") != std::string::npos) return 3;
    return 4;
  };
  k.place = [&](const fs::path& d, const std::string& b) {
    writeAll(d / "config.json", b);
    writeAll(d / "reader", std::to_string(readerOf(b)));
    fs::create_symlink(reference("flux_pipeline_a/model/transformer/diffusion_pytorch_model.safetensors"),
                       d / "diffusion_pytorch_model.safetensors");
    return d / "config.json";
  };
  k.read = [](const fs::path& d) {
    const std::size_t which = static_cast<std::size_t>(std::stoi(readAll(d / "reader")));
    return kReaders[which].read(d / "config.json");
  };
  fuzz(k, casesPerKind(300), 0xc0c0);
}

TEST(FuzzSmoke, ModelIndexJson) {
  const fs::path model = reference("flux_pipeline_a/model");
  FuzzKind k;
  k.name = "model_index.json";
  k.seeds.push_back(readAll(model / "model_index.json"));
  k.place = [&](const fs::path& d, const std::string& b) {
    writeAll(d / "model_index.json", b);
    for (const char* sub :
         {"transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"})
      fs::create_directory_symlink(model / sub, d / sub);
    return d / "model_index.json";
  };
  k.read = [](const fs::path& d) {
    // Every component the FLUX pipeline looks up by class, then the transformer's shapes.
    std::string found;
    for (const std::vector<std::string>& classes : {std::vector<std::string>{"FluxTransformer2DModel"},
                                                    {"AutoencoderKL"},
                                                    {"T5EncoderModel"},
                                                    {"CLIPTextModel"},
                                                    {"T5Tokenizer", "T5TokenizerFast"},
                                                    {"CLIPTokenizer", "CLIPTokenizerFast"}})
      found += io::diffusersComponentFolder(d, classes).filename().string() + " ";
    return found +
           std::to_string(
               flux::FluxConfig::fromCheckpoint(io::diffusersComponentFolder(d, {"FluxTransformer2DModel"})).numLayers);
  };
  fuzz(k, casesPerKind(150), 0x1d3c);
}

TEST(FuzzSmoke, SafetensorsHeader) {
  // Mutations inside the header (the 8-byte length and the JSON), the data kept.
  const std::string file = readAll(reference("flux_pipeline_a/model/transformer/diffusion_pytorch_model.safetensors"));
  std::uint64_t headerSize = 0;
  std::memcpy(&headerSize, file.data(), 8);
  ASSERT_LT(headerSize + 8, file.size());
  const std::string head = file.substr(0, 8 + headerSize), data = file.substr(8 + headerSize);
  FuzzKind k;
  k.name = "safetensors header";
  k.seeds.push_back(head);
  k.place = [&](const fs::path& d, const std::string& b) {
    writeAll(d / "model.safetensors", b + data);
    return d / "model.safetensors";
  };
  k.read = [](const fs::path& d) {
    const auto f = io::SafetensorsFile::open(d / "model.safetensors");
    std::size_t bytes = 0;
    for (const auto& name : f.names()) bytes += f.info(name).sizeBytes();
    return std::to_string(bytes) + " bytes of tensors";
  };
  fuzz(k, casesPerKind(300), 0x5afe);
}

TEST(FuzzSmoke, ShardIndexJson) {
  // Two shards and their index; the index is mutated, the shards kept.
  test::TempDir shards;
  io::writeSafetensors(shards / "model-00001-of-00002.safetensors",
                       {{"a.weight", at::ones({4, 2})}, {"b.weight", at::zeros({3})}});
  io::writeSafetensors(shards / "model-00002-of-00002.safetensors", {{"c.weight", at::ones({2, 2}, at::kHalf)}});
  const std::string index = R"({"metadata": {"total_size": 52}, "weight_map": {
      "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00001-of-00002.safetensors",
      "c.weight": "model-00002-of-00002.safetensors"}})";
  FuzzKind k;
  k.name = "shard index JSON";
  k.seeds.push_back(index);
  k.place = [&](const fs::path& d, const std::string& b) {
    writeAll(d / "model.safetensors.index.json", b);
    for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
      fs::create_symlink(shards / shard, d / shard);
    return d / "model.safetensors.index.json";
  };
  k.read = [](const fs::path& d) {
    const auto ckpt = io::SafetensorsCheckpoint::open(d);
    return std::to_string(ckpt.shapes().size()) + " tensors in " + std::to_string(ckpt.files().size()) + " files";
  };
  fuzz(k, casesPerKind(200), 0x1d3e);
}

TEST(FuzzSmoke, ImageBytes) {
  const at::Tensor pixels = test::gradient(12, 16);
  FuzzKind k;
  k.name = "image bytes";
  k.seeds.push_back(io::encodePng(pixels, {{"parameters", "a caption"}}));
  k.seeds.push_back(test::encodeJpeg(pixels));
  if (io::webpSupported())
    if (std::string webp = test::encodeWebp(pixels); !webp.empty()) k.seeds.push_back(std::move(webp));
  k.place = [](const fs::path& d, const std::string& b) {
    writeAll(d / "image.png", b);
    return d / "image.png";
  };
  k.read = [](const fs::path& d) {
    const io::DecodedImage img = io::readImage(d / "image.png", io::ImageChannels::Rgb);
    return std::to_string(img.pixels.numel()) + " values";
  };
  fuzz(k, casesPerKind(300), 0x1a9e);
}

TEST(FuzzSmoke, JsonlDataset) {
  FuzzKind k;
  k.name = "jsonl dataset";
  k.seeds.push_back(
      "{\"prompt\": \"What is 2 + 2?\", \"response\": \"4\"}\n"
      "{\"prompt\": \"Name a colour.\", \"response\": \"Blue, like the sky.\"}\n"
      "{\"prompt\": \"Say hi\", \"response\": \"hi there\", \"extra\": [1, 2, {\"a\": null}]}\n");
  k.place = [](const fs::path& d, const std::string& b) {
    writeAll(d / "data.jsonl", b);
    return d / "data.jsonl";
  };
  k.read = [](const fs::path& d) {
    const auto tok = text::openTokenizer(reference("lm_tokenizer_a"), text::TokenizerKind::kAuto);
    families::LmDataOptions options;
    options.maxSeqLen = 64;
    const auto ds = families::LmDataset::fromJsonl(d / "data.jsonl", *tok.tokenizer, options);
    return std::to_string(ds.size()) + " rows";
  };
  fuzz(k, casesPerKind(200), 0x15e1);
}
