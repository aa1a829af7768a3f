#include "io/Image.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <jpeglib.h>
#include <png.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "SafetensorsTestUtil.h"

namespace fs = std::filesystem;
using strata::IoError;
using strata::io::ImageChannels;
using strata::io::readImage;
using strata::io::writePng;
using strata::test::readRaw;
using strata::test::TempDir;
using strata::test::writeRaw;

namespace {

at::Tensor randomHwc(int64_t h, int64_t w, int64_t c, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(0, 256, {h, w, c}, gen, at::kLong).to(at::kByte);
}

// A smooth RGB or gray picture, so JPEG loss stays small.
at::Tensor gradient(int64_t h, int64_t w, int64_t c) {
  auto y = at::arange(h, at::kFloat).view({h, 1, 1}) * (200.0 / h);
  auto x = at::arange(w, at::kFloat).view({1, w, 1}) * (200.0 / w);
  auto ch = at::arange(c, at::kFloat).view({1, 1, c}) * 20.0;
  return (y * 0.5 + x * 0.5 + ch + 10).clamp(0, 255).round().to(at::kByte).contiguous();  // [H, W, C]
}

std::string encodeJpeg(const at::Tensor& hwc, int quality) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(hwc.size(1));
  cinfo.image_height = static_cast<JDIMENSION>(hwc.size(0));
  cinfo.input_components = static_cast<int>(hwc.size(2));
  cinfo.in_color_space = hwc.size(2) == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const auto* base = hwc.data_ptr<uint8_t>();
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(base) + cinfo.next_scanline * hwc.size(1) * hwc.size(2);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return out;
}

::testing::AssertionResult readFails(const fs::path& path, const std::string& needle) {
  try {
    readImage(path);
  } catch (const IoError& e) {
    const std::string msg = e.what();
    if (msg.find(path.string()) == std::string::npos)
      return ::testing::AssertionFailure() << "message does not name the file: " << msg;
    if (msg.find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << msg;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "no error for " << path;
}

}  // namespace

TEST(Image, PngRoundTripRgbAndGray) {
  TempDir dir;
  const auto rgb = randomHwc(17, 23, 3, 1);
  writePng(dir / "rgb.png", rgb);
  const auto back = readImage(dir / "rgb.png");
  EXPECT_EQ(back.pixels.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(back.pixels, rgb));
  EXPECT_TRUE(back.text.empty());

  const auto gray = randomHwc(5, 9, 1, 2);
  writePng(dir / "gray.png", gray.squeeze(2));  // [H, W]
  EXPECT_TRUE(at::equal(readImage(dir / "gray.png").pixels, gray));
  const auto asRgb = readImage(dir / "gray.png", ImageChannels::Rgb).pixels;
  ASSERT_EQ(asRgb.sizes(), (std::vector<int64_t>{5, 9, 3}));
  EXPECT_TRUE(at::equal(asRgb, gray.expand({5, 9, 3})));
}

TEST(Image, FloatChwIsClampedAndRounded) {
  TempDir dir;
  auto chw = at::rand({3, 8, 6}, at::kFloat) * 1.4 - 0.2;  // some values outside [0, 1]
  writePng(dir / "f.png", chw);
  const auto expected = (chw.clamp(0, 1) * 255).round().to(at::kByte).permute({1, 2, 0});
  EXPECT_TRUE(at::equal(readImage(dir / "f.png").pixels, expected));
  writePng(dir / "b.png", chw.unsqueeze(0).to(at::kBFloat16));  // [1, C, H, W]
  EXPECT_EQ(readImage(dir / "b.png").pixels.sizes(), (std::vector<int64_t>{8, 6, 3}));
  EXPECT_EQ(strata::io::imageToFloatChw(readImage(dir / "f.png").pixels).sizes(), chw.sizes());
}

TEST(Image, PngTextChunksRoundTrip) {
  TempDir dir;
  const strata::io::ImageText text = {
      {"prompt", "a photo of sks dog, 35mm"},
      {"prompt utf8", "caf\xc3\xa9 \xe2\x98\x95 \xf0\x9f\x90\x95"},  // stored as iTXt
      {"step", "1500"},
  };
  writePng(dir / "t.png", randomHwc(4, 4, 3, 3), text);
  EXPECT_EQ(readImage(dir / "t.png").text, text);
  EXPECT_NE(readRaw(dir / "t.png").find("tEXtprompt"), std::string::npos);
  EXPECT_NE(readRaw(dir / "t.png").find("iTXtprompt utf8"), std::string::npos);
}

TEST(Image, WriteRejectsBadInputAndLeavesNoFile) {
  TempDir dir;
  const fs::path p = dir / "x.png";
  const auto img = randomHwc(2, 2, 3, 4);
  EXPECT_THROW(writePng(p, img, {{"", "v"}}), IoError);
  EXPECT_THROW(writePng(p, img, {{" lead", "v"}}), IoError);
  EXPECT_THROW(writePng(p, img, {{std::string(80, 'k'), "v"}}), IoError);
  EXPECT_THROW(writePng(p, img, {{"k", "bad \xff utf8"}}), IoError);
  EXPECT_THROW(writePng(p, randomHwc(2, 2, 2, 5), {}), IoError);           // 2 channels
  EXPECT_THROW(writePng(p, at::zeros({2, 2, 3}, at::kInt), {}), IoError);  // int32
  EXPECT_THROW(writePng(p, at::full({3, 2, 2}, NAN), {}), IoError);
  EXPECT_THROW(writePng(p, at::Tensor(), {}), IoError);
  EXPECT_TRUE(fs::is_empty(dir.path()));
  try {
    writePng(dir / "missing" / "y.png", img);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("y.png"), std::string::npos) << e.what();
  }
}

TEST(Image, PngWithAlphaOrPaletteIsNormalised) {
  TempDir dir;
  // RGBA through libpng's simplified API: alpha must be dropped, colour kept.
  const auto rgba = randomHwc(6, 5, 4, 6);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = 5;
  image.height = 6;
  image.format = PNG_FORMAT_RGBA;
  const fs::path p = dir / "rgba.png";
  ASSERT_TRUE(png_image_write_to_file(&image, p.c_str(), 0, rgba.data_ptr<uint8_t>(), 0, nullptr));
  const auto back = readImage(p).pixels;
  EXPECT_TRUE(at::equal(back, rgba.slice(2, 0, 3)));
}

TEST(Image, JpegRgbAndGray) {
  TempDir dir;
  const auto rgb = gradient(32, 48, 3);
  writeRaw(dir / "rgb.jpg", encodeJpeg(rgb, 95));
  const auto back = readImage(dir / "rgb.jpg").pixels;
  ASSERT_EQ(back.sizes(), rgb.sizes());
  EXPECT_LE((back.to(at::kInt) - rgb.to(at::kInt)).abs().max().item<int>(), 12);

  const auto gray = gradient(16, 16, 1);
  writeRaw(dir / "gray.jpeg", encodeJpeg(gray, 95));
  EXPECT_EQ(readImage(dir / "gray.jpeg").pixels.sizes(), (std::vector<int64_t>{16, 16, 1}));
  EXPECT_EQ(readImage(dir / "gray.jpeg", ImageChannels::Rgb).pixels.sizes(), (std::vector<int64_t>{16, 16, 3}));
  // Content decides, not the extension.
  writeRaw(dir / "really-a-jpeg.png", encodeJpeg(rgb, 90));
  EXPECT_EQ(readImage(dir / "really-a-jpeg.png").pixels.sizes(), rgb.sizes());
}

TEST(Image, CorruptFilesGiveOneClearError) {
  TempDir dir;
  writeRaw(dir / "empty.png", "");
  EXPECT_TRUE(readFails(dir / "empty.png", "empty"));
  writeRaw(dir / "text.png", "hello, not an image");
  EXPECT_TRUE(readFails(dir / "text.png", "not a PNG, JPEG or WebP image"));
  EXPECT_TRUE(readFails(dir / "absent.png", "cannot open"));
  EXPECT_TRUE(readFails(dir.path(), "folder"));

  writePng(dir / "good.png", randomHwc(64, 64, 3, 7));
  const std::string png = readRaw(dir / "good.png");
  for (std::size_t cut : {std::size_t{8}, std::size_t{30}, png.size() / 2, png.size() - 13}) {
    writeRaw(dir / "cut.png", png.substr(0, cut));
    EXPECT_TRUE(readFails(dir / "cut.png", "corrupt PNG")) << "cut at " << cut;
  }
  std::string flipped = png;
  flipped[png.size() / 2] ^= 0x5a;  // inside IDAT: CRC or zlib error
  writeRaw(dir / "flipped.png", flipped);
  EXPECT_TRUE(readFails(dir / "flipped.png", "corrupt PNG"));
  std::string badHeader = png;
  badHeader[16] = 0x7f;  // width > 2^31
  writeRaw(dir / "badheader.png", badHeader);
  EXPECT_TRUE(readFails(dir / "badheader.png", "corrupt PNG"));

  const std::string jpg = encodeJpeg(gradient(64, 64, 3), 90);
  writeRaw(dir / "cut.jpg", jpg.substr(0, jpg.size() / 2));
  EXPECT_TRUE(readFails(dir / "cut.jpg", "corrupt JPEG"));
  const std::string noisy = encodeJpeg(randomHwc(64, 64, 3, 8), 95);  // mostly scan data
  writeRaw(dir / "cutscan.jpg", noisy.substr(0, noisy.size() - 200));
  EXPECT_TRUE(readFails(dir / "cutscan.jpg", "Premature end"));
  writeRaw(dir / "head.jpg", jpg.substr(0, 3));
  EXPECT_TRUE(readFails(dir / "head.jpg", "corrupt JPEG"));
  std::string garbage = jpg;
  for (std::size_t i = 200; i < 260 && i < garbage.size(); ++i) garbage[i] = static_cast<char>(0xff);
  writeRaw(dir / "garbage.jpg", garbage);
  EXPECT_TRUE(readFails(dir / "garbage.jpg", "corrupt JPEG"));
}
