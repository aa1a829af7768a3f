// The `images` dataset: folder scan (buckets, EXIF orientation, trigger word,
// flip, repeats, skipped files) and the encode cache (built once, reused,
// re-encoded exactly where an input changed, rebuilt when corrupt).
#include <gtest/gtest.h>

#include <algorithm>

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>

#include "common/Error.h"
#include "common/Interrupted.h"
#include "common/TestSupport.h"
#include "events/EventBus.h"
#include "io/Safetensors.h"
#include "io/Image.h"
#include "train/Buckets.h"
#include "train/EncodeCache.h"
#include "train/ImageDataset.h"
#include "train/ImageFolder.h"
#include "train/TestImages.h"

using namespace strata;
using namespace strata::train;
using strata::test::encodeJpeg;
using strata::test::gradient;
namespace fs = std::filesystem;

namespace {

void writeText(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// Inserts an APP1 Exif segment (big-endian TIFF, IFD0 with one Orientation entry) after SOI.
std::string withOrientation(const std::string& jpeg, int orientation) {
  const unsigned char tiff[] = {'M',  'M',  0, 42, 0, 0, 0, 8,  // header, IFD0 at 8
                                0,    1,                        // one entry
                                0x01, 0x12, 0, 3,  0, 0, 0, 1, 0, static_cast<unsigned char>(orientation),
                                0,    0,    0, 0,  0, 0};  // no next IFD
  std::string seg = std::string("Exif\0\0", 6) + std::string(reinterpret_cast<const char*>(tiff), sizeof tiff);
  const size_t len = seg.size() + 2;
  std::string app1 = "\xff\xe1";
  app1 += static_cast<char>(len >> 8);
  app1 += static_cast<char>(len & 0xff);
  return jpeg.substr(0, 2) + app1 + seg + jpeg.substr(2);
}

struct Folder {
  fs::path dir;
  explicit Folder(const std::string& name) : dir(fs::temp_directory_path() / ("strata_images_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    io::writePng(dir / "a.png", gradient(480, 640));  // landscape
    writeText(dir / "a.txt", "a photo of [trigger] on a beach\n");
    // Stored landscape 600x300 with orientation 6: upright it is portrait 300 wide, 600 high.
    writeText(dir / "b.jpg", withOrientation(encodeJpeg(gradient(300, 600)), 6));
    writeText(dir / "b.txt", "a tall tower");
    io::writePng(dir / "c.png", gradient(512, 512));  // no caption file
    writeText(dir / "corrupt.png", std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, 'x'));
    writeText(dir / "empty.jpg", "");
    const std::string full = encodeJpeg(gradient(400, 400));
    writeText(dir / "truncated.jpg", full.substr(0, full.size() / 3));
    writeText(dir / "truncated.txt", "never used");
    io::writePng(dir / "tiny.png", gradient(32, 32));
    writeText(dir / "notes.md", "not an image");
  }
  ~Folder() { fs::remove_all(dir); }
  config::DatasetConfig config() const {
    config::DatasetConfig cfg;
    cfg.type = config::DatasetType::Images;
    cfg.folderPath = dir.string();
    cfg.resolution = {256};
    cfg.triggerWord = "sks";
    cfg.defaultCaption = "a square";
    return cfg;
  }
};

const ImageEntry& entryOf(const ImageFolderScan& s, const std::string& file, bool flip = false) {
  for (const auto& e : s.entries)
    if (e.image.filename() == file && e.flip == flip) return e;
  throw std::runtime_error("no entry for " + file);
}

// Counting fake encoders: latents = 8x8 average pool (4 channels), text = a
// vector derived from the caption's length.
struct CountingEncoders {
  int imageCalls = 0, textCalls = 0, imagesSeen = 0, textsSeen = 0;
  Encoders make() {
    Encoders e;
    e.image = [this](const at::Tensor& x) {
      ++imageCalls;
      imagesSeen += static_cast<int>(x.size(0));
      EXPECT_GE(x.min().item<float>(), -1.0f - 1e-5f);
      EXPECT_LE(x.max().item<float>(), 1.0f + 1e-5f);
      at::Tensor p = at::avg_pool2d(x, {8, 8});  // [B, 3, h, w]
      return at::cat({p, p.mean(1, true)}, 1);   // [B, 4, h, w]
    };
    e.text = [this](const std::vector<std::string>& captions) {
      ++textCalls;
      textsSeen += static_cast<int>(captions.size());
      std::vector<TextEmbedding> out;
      for (const auto& c : captions)
        out.push_back({at::full({6, 8}, static_cast<float>(c.size())), at::full({5}, static_cast<float>(c.size()))});
      return out;
    };
    e.imageModelId = "fake-vae";
    e.textModelId = "fake-text";
    e.maxSequenceLength = 6;
    e.latentChannels = 4;
    e.downscaleFactor = 8;
    e.textDim = 8;
    e.pooledDim = 5;
    return e;
  }
};

}  // namespace

TEST(Buckets, SidesAreMultiplesOf16AndAreaNearResolution) {
  for (int64_t r : {256, 512, 1024}) {
    const auto buckets = bucketsFor(r);
    ASSERT_GT(buckets.size(), 5u);
    bool square = false;
    for (const Bucket& b : buckets) {
      EXPECT_EQ(b.width % 16, 0);
      EXPECT_EQ(b.height % 16, 0);
      EXPECT_LE(b.width * b.height, r * r);
      EXPECT_GT(b.width * (b.height + 16), r * r) << b.name();  // one 16-px step below r^2 at most
      EXPECT_LE(std::max(b.width, b.height), 4 * std::min(b.width, b.height));
      square |= b.width == r && b.height == r;
    }
    EXPECT_TRUE(square);
  }
  const auto b = bucketsFor(512);
  EXPECT_EQ(chooseBucket(b, 1000, 1000), (Bucket{512, 512}));
  const Bucket wide = chooseBucket(b, 1920, 1080);
  EXPECT_GT(wide.width, wide.height);
  EXPECT_NEAR(double(wide.width) / wide.height, 1920.0 / 1080.0, 0.1);
  EXPECT_THROW(bucketsFor(100), ConfigError);
}

TEST(Buckets, ResizeAndCropCoversAndCentres) {
  const at::Tensor img = io::imageToFloatChw(gradient(300, 600));  // [3, 300, 600]
  const at::Tensor out = resizeAndCrop(img, {256, 256});
  ASSERT_EQ(out.sizes(), (at::IntArrayRef{3, 256, 256}));
  // Centre crop of a horizontal ramp: the middle column keeps the middle value.
  EXPECT_NEAR(out[0].mean().item<float>(), 0.5f, 0.02f);
}

TEST(ImageFolder, ExifOrientationIsRead) {
  const std::string jpeg = withOrientation(encodeJpeg(gradient(20, 40)), 6);
  EXPECT_EQ(io::jpegExifOrientation(jpeg), 6);
  EXPECT_EQ(io::jpegExifOrientation(encodeJpeg(gradient(20, 40))), 1);
  const io::DecodedImage d = io::decodeImage(jpeg, "x.jpg", io::ImageChannels::Rgb);
  ASSERT_EQ(d.orientation, 6);
  const at::Tensor up = io::applyExifOrientation(d.pixels, d.orientation);
  EXPECT_EQ(up.size(0), 40);
  EXPECT_EQ(up.size(1), 20);
  // Rotated 90 clockwise: the stored left column (red 0) becomes the top row.
  EXPECT_LT(up[0].select(1, 0).to(at::kFloat).mean().item<float>(), 20.0f);
}

TEST(ImageFolder, BucketsSkipsCaptionsAndTrigger) {
  Folder f("scan");
  const ImageFolderScan s = scanImageFolder(f.config());
  EXPECT_EQ(s.images, 3);
  ASSERT_EQ(s.entries.size(), 3u);
  // Four skipped files, each with its reason.
  ASSERT_EQ(s.skipped.size(), 4u);
  std::map<std::string, std::string> why;
  for (const auto& k : s.skipped) why[k.path.filename().string()] = k.reason;
  EXPECT_NE(why["empty.jpg"].find("empty"), std::string::npos) << why["empty.jpg"];
  EXPECT_NE(why["tiny.png"].find("too small"), std::string::npos) << why["tiny.png"];
  EXPECT_TRUE(why.count("corrupt.png"));
  EXPECT_TRUE(why.count("truncated.jpg"));
  ASSERT_EQ(s.defaultedCaptions.size(), 1u);
  EXPECT_EQ(s.defaultedCaptions[0].filename(), "c.png");

  const ImageEntry& a = entryOf(s, "a.png");
  EXPECT_GT(a.bucket.width, a.bucket.height);
  EXPECT_EQ(a.bucket, chooseBucket(bucketsFor(256), 640, 480));
  EXPECT_EQ(a.caption, "a photo of sks on a beach");
  const ImageEntry& b = entryOf(s, "b.jpg");
  EXPECT_LT(b.bucket.width, b.bucket.height) << "EXIF orientation 6 makes it portrait";
  EXPECT_EQ(b.caption, "sks, a tall tower");
  const ImageEntry& c = entryOf(s, "c.png");
  EXPECT_EQ(c.bucket, (Bucket{256, 256}));
  EXPECT_EQ(c.caption, "sks, a square");
  int64_t counted = 0;
  for (const auto& [bk, n] : s.bucketCounts) counted += n;
  EXPECT_EQ(counted, 3);
  const auto lines = s.reportLines();
  EXPECT_NE(lines[0].find("3 used"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("4 skipped"), std::string::npos) << lines[0];

  const at::Tensor px = loadEntryPixels(b);
  EXPECT_EQ(px.sizes(), (at::IntArrayRef{3, b.bucket.height, b.bucket.width}));
  EXPECT_GE(px.min().item<float>(), -1.0f);
  EXPECT_LE(px.max().item<float>(), 1.0f);
}

TEST(ImageFolder, FlipAndTwoResolutions) {
  Folder f("flip");
  config::DatasetConfig cfg = f.config();
  cfg.flipX = true;
  cfg.resolution = {256, 512};
  const ImageFolderScan s = scanImageFolder(cfg);
  // a (640x480) and c (512x512) cover 512 buckets; b (300x600) does not: 2x2 + 1 views, each flipped.
  EXPECT_EQ(s.entries.size(), 10u);
  const ImageEntry& a = entryOf(s, "a.png");
  ImageEntry mirrored = a;
  mirrored.flip = true;
  EXPECT_TRUE(at::equal(loadEntryPixels(mirrored), loadEntryPixels(a).flip({2})));
  EXPECT_FALSE(at::equal(loadEntryPixels(mirrored), loadEntryPixels(a)));
}

TEST(ImageFolder, TriggerWord) {
  EXPECT_EQ(applyTriggerWord("[trigger] in a hat, [trigger] again", "ohwx"), "ohwx in a hat, ohwx again");
  EXPECT_EQ(applyTriggerWord("a dog", "ohwx"), "ohwx, a dog");
  EXPECT_EQ(applyTriggerWord("ohwx dog", "ohwx"), "ohwx dog");
  EXPECT_EQ(applyTriggerWord("", "ohwx"), "ohwx");
  EXPECT_EQ(applyTriggerWord("a [trigger]", ""), "a ");
}

TEST(EncodeCache, BuiltOnceReusedAndReencodedWhereChanged) {
  Folder f("cache");
  config::DatasetConfig cfg = f.config();
  cfg.flipX = true;
  const fs::path cacheDir = f.dir / kCacheFolderName;
  CountingEncoders enc;
  {
    const auto s = scanImageFolder(cfg);
    EncodeCache cache(cacheDir, enc.make());
    const CacheStats st = cache.build(s.entries, 4);
    EXPECT_EQ(st.latentsEncoded, 6);  // 3 images x 2 flips
    EXPECT_EQ(st.textsEncoded, 3);
    EXPECT_EQ(enc.imagesSeen, 6);
    const ImageEntry& a = entryOf(s, "a.png");
    const at::Tensor lat = cache.latents(a);
    EXPECT_EQ(lat.sizes(), (at::IntArrayRef{4, a.bucket.height / 8, a.bucket.width / 8}));
    EXPECT_FLOAT_EQ(cache.text(a.caption).pooled[0].item<float>(), float(a.caption.size()));
  }
  // A second run: no encoder call at all.
  enc = CountingEncoders{};
  {
    const auto s = scanImageFolder(cfg);
    EncodeCache cache(cacheDir, enc.make());
    const CacheStats st = cache.build(s.entries);
    EXPECT_EQ(enc.imageCalls + enc.textCalls, 0);
    EXPECT_EQ(st.reused, 9);
  }
  // A changed caption: exactly that caption is encoded again, no image.
  writeText(f.dir / "b.txt", "a short tower");
  enc = CountingEncoders{};
  {
    const auto s = scanImageFolder(cfg);
    EncodeCache cache(cacheDir, enc.make());
    const CacheStats st = cache.build(s.entries);
    EXPECT_EQ(enc.imagesSeen, 0);
    EXPECT_EQ(enc.textsSeen, 1);
    EXPECT_EQ(st.textsEncoded, 1);
  }
  // A changed image: its two views are encoded again.
  io::writePng(f.dir / "c.png", gradient(512, 512).flip({0}).contiguous());
  enc = CountingEncoders{};
  {
    const auto s = scanImageFolder(cfg);
    EncodeCache cache(cacheDir, enc.make());
    cache.build(s.entries);
    EXPECT_EQ(enc.imagesSeen, 2);
    EXPECT_EQ(enc.textsSeen, 0);
  }
  // A corrupt cache file is detected on read and rebuilt.
  enc = CountingEncoders{};
  {
    const auto s = scanImageFolder(cfg);
    EncodeCache cache(cacheDir, enc.make());
    const fs::path file = cache.latentsFile(entryOf(s, "a.png"));
    ASSERT_TRUE(fs::exists(file));
    writeText(file, "garbage, not a safetensors file");
    const CacheStats st = cache.build(s.entries);
    EXPECT_EQ(st.rebuilt, 1);
    EXPECT_EQ(enc.imagesSeen, 1);
    EXPECT_EQ(cache.latents(entryOf(s, "a.png")).dim(), 3);
  }
  // Another model identity is another key: everything is encoded again.
  enc = CountingEncoders{};
  {
    const auto s = scanImageFolder(cfg);
    Encoders e = enc.make();
    e.imageModelId = "another-vae";
    EncodeCache cache(cacheDir, e);
    cache.build(s.entries);
    EXPECT_EQ(enc.imagesSeen, 6);
    EXPECT_EQ(enc.textsSeen, 0);
  }
}

TEST(ImageDataset, RepeatsEventsAndItems) {
  Folder f("dataset");
  config::DatasetConfig cfg = f.config();
  cfg.numRepeats = 3;
  cfg.cacheLatentsToDisk = false;  // in memory: no cache folder
  events::EventBus bus;
  std::vector<events::Event> seen;
  auto sub = bus.subscribe([&](const events::Event& e) { seen.push_back(e); });
  CountingEncoders enc;
  ImageDataset ds(cfg, 0, enc.make(), &bus);
  EXPECT_EQ(ds.size(), 9u);
  EXPECT_FALSE(fs::exists(f.dir / kCacheFolderName));
  EXPECT_EQ(ds.item(0).caption, ds.item(3).caption);
  EXPECT_EQ(ds.item(8).latents.dim(), 3);
  EXPECT_EQ(ds.emptyPrompt().pooled[0].item<float>(), 0.0f);  // the empty caption's embedding
  EXPECT_THROW(ds.item(9), Error);
  int datasetEvents = 0, finalProgress = 0;
  for (const auto& e : seen) {
    if (const auto* d = std::get_if<events::DatasetEvent>(&e)) {
      ++datasetEvents;
      EXPECT_EQ(d->images, 3);
      EXPECT_EQ(d->skipped.size(), 4u);
    }
    if (const auto* p = std::get_if<events::CacheProgressEvent>(&e))
      if (p->done == p->total) ++finalProgress;
  }
  EXPECT_EQ(datasetEvents, 1);
  EXPECT_GE(finalProgress, 2);
}

// Dataset::oneItemShape (train.cuda_graph: auto): images of several aspect-ratio buckets
// give items of several shapes and say ""; square images of one bucket give items of one
// shape and say which.
TEST(ImageDataset, SaysWhetherItsItemsKeepOneShape) {
  Folder mixed("mixed");
  config::DatasetConfig cfg = mixed.config();
  cfg.cacheLatentsToDisk = false;
  CountingEncoders enc;
  ImageDataset several(cfg, 0, enc.make());
  std::set<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < several.size(); ++i) shapes.insert(several.item(i).latents.sizes().vec());
  EXPECT_GT(shapes.size(), 1u);
  EXPECT_EQ(several.oneItemShape(), "");

  const fs::path squares = fs::temp_directory_path() / "strata_images_squares";
  fs::remove_all(squares);
  fs::create_directories(squares);
  io::writePng(squares / "a.png", gradient(320, 320));
  io::writePng(squares / "b.png", gradient(300, 300));
  config::DatasetConfig one = cfg;
  one.folderPath = squares.string();
  ImageDataset single(one, 0, enc.make());
  shapes.clear();
  for (size_t i = 0; i < single.size(); ++i) shapes.insert(single.item(i).latents.sizes().vec());
  EXPECT_EQ(shapes.size(), 1u);
  EXPECT_EQ(single.oneItemShape(), "images of 256x256 px");
  // Two resolutions: two buckets.
  one.resolution = {256, 128};
  EXPECT_EQ(ImageDataset(one, 0, enc.make()).oneItemShape(), "");
  fs::remove_all(squares);
}

// ---------------------------------------------------------------- hostile input (issue 32)

namespace {

// The messages of the WarningEvents a bus carried.
struct Warnings {
  events::EventBus bus;
  std::vector<std::string> messages;
  events::Subscription sub = bus.subscribe([this](const events::Event& e) {
    if (const auto* w = std::get_if<events::WarningEvent>(&e)) messages.push_back(w->message);
  });
  int mentioning(const std::string& needle) const {
    int n = 0;
    for (const auto& m : messages) n += m.find(needle) != std::string::npos;
    return n;
  }
};

std::map<std::string, std::string> reasons(const std::vector<SkippedFile>& skipped) {
  std::map<std::string, std::string> why;
  for (const auto& k : skipped) why[k.path.filename().string()] = k.reason;
  return why;
}

std::string readAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST(ImageFolder, CaptionsInOtherEncodingsAreRepairedOrSkipped) {
  Folder f("captions");
  for (const char* n : {"u16.png", "latin1.png", "binary.png", "bom8.png", "loop.png", "huge.png"})
    io::writePng(f.dir / n, gradient(300, 300));
  // UTF-16 LE with BOM: "café" is converted.
  writeText(f.dir / "u16.txt", std::string("\xff\xfe"
                                           "c\0a\0f\0\xe9\0",
                                           10));
  // Latin-1 "café" is not UTF-8: the byte becomes U+FFFD and the file is reported.
  writeText(f.dir / "latin1.txt", "caf\xe9 au lait");
  writeText(f.dir / "binary.txt", std::string("\x7f"
                                              "ELF\0\0\x01\x02",
                                              8));
  writeText(f.dir / "bom8.txt",
            "\xef\xbb\xbf"
            "plain");
  fs::create_symlink("loop.txt", f.dir / "loop.txt");  // a link to itself
  writeText(f.dir / "huge.txt", std::string(kMaxCaptionBytes + 1, 'a'));
  const ImageFolderScan s = scanImageFolder(f.config());
  EXPECT_EQ(entryOf(s, "u16.png").caption, "sks, caf\xc3\xa9");
  EXPECT_EQ(entryOf(s, "latin1.png").caption, "sks, caf\xef\xbf\xbd au lait");
  EXPECT_EQ(entryOf(s, "bom8.png").caption, "sks, plain");
  const auto why = reasons(s.skipped);
  EXPECT_NE(why.at("binary.png").find("not text"), std::string::npos) << why.at("binary.png");
  EXPECT_NE(why.at("loop.png").find("loop"), std::string::npos) << why.at("loop.png");
  EXPECT_NE(why.at("huge.png").find("larger than"), std::string::npos) << why.at("huge.png");
  const auto repaired = reasons(s.repairedCaptions);
  ASSERT_EQ(repaired.size(), 2u);
  EXPECT_NE(repaired.at("u16.txt").find("UTF-16"), std::string::npos);
  EXPECT_NE(repaired.at("latin1.txt").find("not valid UTF-8"), std::string::npos);
  // The dataset reports each once and trains on the rest; the cache stays readable.
  Warnings w;
  CountingEncoders enc;
  config::DatasetConfig cfg = f.config();
  ImageDataset ds(cfg, 0, enc.make(), &w.bus);
  EXPECT_EQ(w.mentioning("binary.png"), 1);
  EXPECT_EQ(w.mentioning("latin1.txt"), 1);
  EXPECT_EQ(w.mentioning("u16.txt"), 1);
  EXPECT_EQ(ds.scan().images, 6);  // a, b, c, u16, latin1, bom8
}

TEST(ImageFolder, LinksAndSpecialFilesAreSkippedWithTheirReason) {
  Folder f("links");
  fs::create_symlink("loop.png", f.dir / "loop.png");        // a loop
  fs::create_symlink("gone.png", f.dir / "dangling.png");    // target missing
  fs::create_symlink(f.dir / "a.png", f.dir / "alias.png");  // a good link is used
  fs::create_directory(f.dir / "folder.png");
  ASSERT_EQ(::mkfifo((f.dir / "pipe.png").c_str(), 0600), 0);  // reading it would block for ever
  const ImageFolderScan s = scanImageFolder(f.config());
  const auto why = reasons(s.skipped);
  EXPECT_NE(why.at("loop.png").find("loop"), std::string::npos) << why.at("loop.png");
  EXPECT_NE(why.at("dangling.png").find("dangling"), std::string::npos) << why.at("dangling.png");
  EXPECT_NE(why.at("folder.png").find("folder"), std::string::npos) << why.at("folder.png");
  EXPECT_NE(why.at("pipe.png").find("regular"), std::string::npos) << why.at("pipe.png");
  EXPECT_EQ(s.images, 4);  // a, alias, b, c
  EXPECT_EQ(s.skipped.size(), 8u);
}

TEST(ImageDataset, NoUsableImageListsEachFileWithItsReason) {
  test::TempDir dir;
  writeText(dir / "empty.png", "");
  writeText(dir / "text.jpg", "hello");
  fs::create_symlink("nowhere.png", dir / "dangling.png");
  config::DatasetConfig cfg;
  cfg.type = config::DatasetType::Images;
  cfg.folderPath = dir.path().string();
  cfg.resolution = {256};
  CountingEncoders enc;
  try {
    ImageDataset ds(cfg, 0, enc.make());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("empty.png: the image file is empty"), std::string::npos) << msg;
    EXPECT_NE(msg.find("text.jpg: not a PNG"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dangling.png: dangling"), std::string::npos) << msg;
  }
}

// An animated WebP (a valid file) gives its first frame.
TEST(ImageFolder, AnimatedWebpGivesItsFirstFrame) {
  if (!io::webpSupported() || test::encodeWebp(gradient(4, 4)).empty()) GTEST_SKIP() << "no WebP in this build";
  // Two frames of 320x256: the first a gradient, the second black. Built by hand: RIFF, VP8X (animation), ANIM, ANMF.
  const at::Tensor first = gradient(256, 320);
  auto frameChunk = [](const at::Tensor& hwc) {
    const std::string webp = test::encodeWebp(hwc);
    const std::string bitstream = webp.substr(12);  // the VP8L chunk after "RIFF....WEBP"
    auto le24 = [](uint32_t v) { return std::string{char(v & 0xff), char((v >> 8) & 0xff), char((v >> 16) & 0xff)}; };
    std::string payload = le24(0) + le24(0) + le24(static_cast<uint32_t>(hwc.size(1) - 1)) +
                          le24(static_cast<uint32_t>(hwc.size(0) - 1)) + le24(100) + std::string(1, '\0') + bitstream;
    return payload;
  };
  auto chunk = [](const std::string& tag, const std::string& payload) {
    const auto n = static_cast<uint32_t>(payload.size());
    std::string c = tag + std::string{char(n & 0xff), char((n >> 8) & 0xff), char((n >> 16) & 0xff), char(n >> 24)};
    c += payload;
    if (payload.size() % 2) c += '\0';
    return c;
  };
  auto le24 = [](uint32_t v) { return std::string{char(v & 0xff), char((v >> 8) & 0xff), char((v >> 16) & 0xff)}; };
  const std::string vp8x = std::string{char(0x02), 0, 0, 0} + le24(319) + le24(255);  // animation flag
  const std::string anim = std::string(4, '\0') + std::string(2, '\0');               // background, loop for ever
  const std::string body = std::string("WEBP") + chunk("VP8X", vp8x) + chunk("ANIM", anim) +
                           chunk("ANMF", frameChunk(first)) +
                           chunk("ANMF", frameChunk(at::zeros({256, 320, 3}, at::kByte)));
  const auto n = static_cast<uint32_t>(body.size());
  const std::string riff = std::string("RIFF") +
                           std::string{char(n & 0xff), char((n >> 8) & 0xff), char((n >> 16) & 0xff), char(n >> 24)} +
                           body;
  const io::DecodedImage d = io::decodeImage(riff, "anim.webp", io::ImageChannels::Rgb);
  ASSERT_EQ(d.pixels.sizes(), (at::IntArrayRef{256, 320, 3}));
  EXPECT_TRUE(at::equal(d.pixels, first));  // lossless: exactly the first frame
  Folder f("anim");
  writeText(f.dir / "anim.webp", riff);
  config::DatasetConfig cfg = f.config();
  const ImageFolderScan s = scanImageFolder(cfg);
  EXPECT_FALSE(reasons(s.skipped).count("anim.webp")) << reasons(s.skipped)["anim.webp"];
  EXPECT_NO_THROW(entryOf(s, "anim.webp"));
}

// The cache key names the bytes that were decoded: an image rewritten while the
// cache is built is left out (and said), never cached under the old content's key.
TEST(EncodeCache, ImageRewrittenDuringCachingIsNeverKeyedToOtherBytes) {
  Folder f("rewrite");
  const config::DatasetConfig cfg = f.config();
  const fs::path cacheDir = f.dir / kCacheFolderName;
  const auto s = scanImageFolder(cfg);
  const ImageEntry a = entryOf(s, "a.png"), c = entryOf(s, "c.png");
  ASSERT_FALSE(a.bucket == c.bucket);  // separate batches: c is encoded after the first call
  CountingEncoders counting;
  Encoders enc = counting.make();
  auto inner = enc.image;
  bool rewritten = false;
  enc.image = [&](const at::Tensor& x) {
    if (!rewritten) {  // someone replaces every picture while the first batch is encoded
      rewritten = true;
      for (const char* n : {"a.png", "c.png"}) io::writePng(f.dir / n, gradient(512, 512, 7.0));
    }
    return inner(x);
  };
  Warnings w;
  {
    EncodeCache cache(cacheDir, enc, &w.bus);
    const CacheStats st = cache.build(s.entries);
    // The batch encoded first read its bytes before the rewrite; the later batches see new bytes: skipped.
    ASSERT_FALSE(st.skipped.empty());
    for (const auto& k : st.skipped) {
      EXPECT_NE(k.reason.find("changed since the folder was scanned"), std::string::npos) << k.reason;
      ImageEntry e = entryOf(s, k.path.filename().string());
      EXPECT_FALSE(fs::exists(cache.latentsFile(e))) << "cached under the key of bytes it was not encoded from";
    }
    // Every entry is either cached (read before the rewrite, in the first batch) or
    // skipped with the reason above; none is both, none is lost without a word.
    size_t cached = 0;
    for (const auto& e : s.entries) {
      const bool inCache = fs::exists(cache.latentsFile(e));
      const bool skipped = std::any_of(st.skipped.begin(), st.skipped.end(),
                                       [&](const auto& k) { return k.path.filename() == e.image.filename(); });
      EXPECT_NE(inCache, skipped) << e.image;
      cached += inCache ? 1 : 0;
    }
    EXPECT_GE(cached, 1u);  // the batch being encoded while the files changed read its bytes first
  }
  // The dataset over the same race: the rewritten images are skipped with the reason, the run goes on.
  {
    Folder g("rewrite2");
    bool again = false;
    Encoders e2 = counting.make();
    auto inner2 = e2.image;
    e2.image = [&](const at::Tensor& x) {
      if (!again) {
        again = true;
        io::writePng(g.dir / "c.png", gradient(512, 512, 9.0));
        fs::remove(g.dir / "a.png");  // and one deleted
      }
      return inner2(x);
    };
    Warnings w2;
    ImageDataset ds(g.config(), 0, e2, &w2.bus);
    EXPECT_GE(ds.scan().images, 1);
    EXPECT_GE(w2.mentioning(": skipped "), 1);
    for (size_t i = 0; i < ds.size(); ++i) EXPECT_EQ(ds.item(i).latents.dim(), 3);
  }
}

// Every read is checked: shape, dtype, checksum (a bit flip), finite values, the key; each is rebuilt and said.
TEST(EncodeCache, BadEntriesAreDetectedOnReadAndRebuilt) {
  Folder f("checked");
  const config::DatasetConfig cfg = f.config();
  const fs::path cacheDir = f.dir / kCacheFolderName;
  const auto s = scanImageFolder(cfg);
  const ImageEntry& a = entryOf(s, "a.png");
  CountingEncoders enc;
  at::Tensor good;
  fs::path file;
  {
    EncodeCache cache(cacheDir, enc.make());
    cache.build(s.entries);
    good = cache.latents(a).clone();
    file = cache.latentsFile(a);
  }
  const std::string key = io::SafetensorsFile::open(file).metadata().at("strata_cache_key");
  const auto write = [&](const at::Tensor& t, const std::string& checksum) {
    io::writeSafetensors(file, {{"latents", t}}, {{"strata_cache_key", key}, {"strata_cache_checksum", checksum}});
  };
  struct Bad {
    std::string name, reason;
    std::function<void()> make;
  };
  const std::vector<Bad> bad = {
      {"bit flip", "checksum",
       [&] {
         std::string bytes = readAll(file);
         bytes[bytes.size() - 5] ^= 0x10;
         writeText(file, bytes);
       }},
      {"NaN with a valid checksum", "NaN",
       [&] {
         at::Tensor t = good.clone();
         t[0][0][0] = NAN;
         write(t, EncodeCache::checksum({{"latents", t}}));
       }},
      {"wrong shape", "shape",
       [&] {
         at::Tensor t = good.narrow(2, 0, 4).contiguous();
         write(t, EncodeCache::checksum({{"latents", t}}));
       }},
      {"wrong dtype", "F16",
       [&] {
         at::Tensor t = good.to(at::kHalf);
         write(t, EncodeCache::checksum({{"latents", t}}));
       }},
      {"no checksum", "checksum",
       [&] {
         io::writeSafetensors(file, {{"latents", good}}, {{"strata_cache_key", key}});
       }},
      {"another format's key", "other inputs",
       [&] {
         io::writeSafetensors(
             file, {{"latents", good}},
             {{"strata_cache_key", "latents|" + a.imageHash + "|fake-vae|" + a.bucket.name() + "|flip=0"},
              {"strata_cache_checksum", EncodeCache::checksum({{"latents", good}})}});
       }},
  };
  for (const Bad& b : bad) {
    b.make();
    Warnings w;
    CountingEncoders again;
    EncodeCache cache(cacheDir, again.make(), &w.bus);
    const CacheStats st = cache.build(s.entries);
    EXPECT_EQ(st.rebuilt, 1) << b.name;
    EXPECT_EQ(again.imagesSeen, 1) << b.name;
    ASSERT_EQ(w.mentioning("rebuilding"), 1) << b.name;
    EXPECT_EQ(w.mentioning(b.reason), 1) << b.name << ": " << w.messages.at(0);
    EXPECT_TRUE(at::equal(cache.latents(a), good)) << b.name;
  }
  // A text embedding of the wrong width (another text encoder's) is caught the same way.
  {
    CountingEncoders wide;
    Encoders e = wide.make();
    e.textDim = 9;  // the run expects [6, 9]; the cache holds [6, 8]
    auto inner = e.text;
    e.text = [inner](const std::vector<std::string>& c) {
      auto out = inner(c);
      for (auto& t : out) t.txt = at::cat({t.txt, t.txt.narrow(1, 0, 1)}, 1);
      return out;
    };
    Warnings w;
    EncodeCache cache(cacheDir, e, &w.bus);
    const CacheStats st = cache.build(s.entries);
    EXPECT_GE(st.rebuilt, 1);
    EXPECT_GE(w.mentioning("shape"), 1);
    EXPECT_EQ(cache.text(a.caption).txt.size(1), 9);
  }
}

TEST(EncodeCache, CaptionsAreNotWrittenIntoCacheFiles) {
  Folder f("private");
  writeText(f.dir / "a.txt", "my secret diary entry");
  const fs::path cacheDir = f.dir / kCacheFolderName;
  CountingEncoders enc;
  const auto s = scanImageFolder(f.config());
  EncodeCache cache(cacheDir, enc.make());
  cache.build(s.entries);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(cacheDir)) {
    if (!e.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(readAll(e.path()).find("secret"), std::string::npos) << e.path();
  }
  EXPECT_GT(files, 3);
  EXPECT_NE(cache.text("sks, my secret diary entry").pooled.numel(), 0);
}

// Deleting _strata_cache during a run: what is read next is written back from the copy
// still mapped (the text encoders are gone by then), or encoded again where there is none.
TEST(EncodeCache, DeletedDuringTheRunIsRebuiltNotAFailure) {
  Folder f("deleted");
  const fs::path cacheDir = f.dir / kCacheFolderName;
  const auto s = scanImageFolder(f.config());
  const ImageEntry& a = entryOf(s, "a.png");
  CountingEncoders counting;
  Encoders enc = counting.make();
  bool released = false;
  auto innerText = enc.text;
  enc.text = [&](const std::vector<std::string>& c) {
    if (released) throw Error("text encoding: the text encoders were released after caching");
    return innerText(c);
  };
  Warnings w;
  EncodeCache cache(cacheDir, enc, &w.bus);
  cache.build(s.entries, 4, {""});
  const at::Tensor lat = cache.latents(a).clone();
  const TextEmbedding txt = cache.text(a.caption);
  released = true;
  const int imagesBefore = counting.imagesSeen;
  fs::remove_all(cacheDir);
  EXPECT_TRUE(at::equal(cache.latents(a), lat));
  EXPECT_TRUE(at::equal(cache.text(a.caption).txt, txt.txt));
  EXPECT_EQ(counting.imagesSeen, imagesBefore);   // from the copy in use, not encoded
  EXPECT_TRUE(fs::exists(cache.latentsFile(a)));  // and the file is back
  EXPECT_TRUE(fs::exists(cache.textFile(a.caption)));
  EXPECT_GE(w.mentioning("deleted during the run"), 2);
  // A new cache object (no mapping): the latents are encoded again, the text cannot be and says how to fix it.
  fs::remove_all(cacheDir);
  EncodeCache fresh(cacheDir, enc, &w.bus);
  EXPECT_TRUE(at::allclose(fresh.latents(a), lat));
  EXPECT_EQ(counting.imagesSeen, imagesBefore + 1);
  try {
    fresh.text(a.caption);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(fresh.textFile(a.caption).string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("start the run again"), std::string::npos) << e.what();
  }
}

// Ctrl-C while the cache is built (issue 32, point 6): the build stops between
// batches with Interrupted saying how far it got, and the next build reuses
// what the stopped one wrote.
TEST(EncodeCache, AStopBetweenBatchesKeepsWhatWasWrittenForTheNextBuild) {
  Folder f("stopped");
  config::DatasetConfig cfg = f.config();
  cfg.flipX = true;  // 3 images x 2 flips: 6 latents, one per batch below
  const fs::path cacheDir = f.dir / kCacheFolderName;
  CountingEncoders enc;
  {
    const auto s = scanImageFolder(cfg);
    Encoders e = enc.make();
    e.stopRequested = [&enc] { return enc.imageCalls >= 2; };  // Ctrl-C during the second batch
    EncodeCache cache(cacheDir, e);
    try {
      cache.build(s.entries, 1);
      FAIL() << "the build went on past the stop request";
    } catch (const Interrupted& e) {
      EXPECT_NE(std::string(e.what()).find("latents (2 of 6 done and kept"), std::string::npos) << e.what();
    }
    EXPECT_EQ(enc.imageCalls, 2);
    EXPECT_EQ(enc.textCalls, 0);
  }
  CountingEncoders again;
  const auto s = scanImageFolder(cfg);
  EncodeCache cache(cacheDir, again.make());
  const CacheStats st = cache.build(s.entries, 1);
  EXPECT_EQ(st.reused, 2);
  EXPECT_EQ(st.latentsEncoded, 4);
  EXPECT_EQ(st.textsEncoded, 3);
}
