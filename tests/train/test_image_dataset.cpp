// The `images` dataset: folder scan (buckets, EXIF orientation, trigger word,
// flip, repeats, skipped files) and the encode cache (built once, reused,
// re-encoded exactly where an input changed, rebuilt when corrupt).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/Error.h"
#include "events/EventBus.h"
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
