#include "io/Image.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <vector>
#include <jpeglib.h>
#include <png.h>

#include "common/Error.h"
#include "common/ForkedChild.h"
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

namespace {

// A PNG written through libpng's full API: any colour type and depth, optional
// palette, tRNS and interlace. `samples` holds one value per channel per pixel.
struct PngSpec {
  int colorType;
  int bitDepth;
  std::vector<png_color> palette;
  std::vector<png_byte> paletteAlpha;  // tRNS for a palette
  bool grayOrRgbTrns = false;          // tRNS of one gray / RGB colour: the first pixel's
  bool interlaced = false;
};

std::string writePngWith(const PngSpec& spec, uint32_t w, uint32_t h, const std::vector<uint16_t>& samples) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(d), n);
      },
      nullptr);
  png_set_IHDR(png, info, w, h, spec.bitDepth, spec.colorType,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) png_set_PLTE(png, info, spec.palette.data(), static_cast<int>(spec.palette.size()));
  png_color_16 trans{};
  if (!spec.paletteAlpha.empty())
    png_set_tRNS(png, info, spec.paletteAlpha.data(), static_cast<int>(spec.paletteAlpha.size()), nullptr);
  if (spec.grayOrRgbTrns) {
    trans.gray = samples[0];
    trans.red = samples[0];
    trans.green = samples[1];
    trans.blue = samples[2];
    png_set_tRNS(png, info, nullptr, 0, &trans);
  }
  png_write_info(png, info);
  const int channels = png_get_channels(png, info);
  const size_t rowBytes = png_get_rowbytes(png, info);
  std::vector<std::vector<png_byte>> rows(h, std::vector<png_byte>(rowBytes, 0));
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) {
        const uint16_t v = samples[(static_cast<size_t>(y) * w + x) * channels + c];
        const size_t bit = (static_cast<size_t>(x) * channels + c) * spec.bitDepth;
        if (spec.bitDepth == 16) {
          rows[y][bit / 8] = static_cast<png_byte>(v >> 8);
          rows[y][bit / 8 + 1] = static_cast<png_byte>(v & 0xff);
        } else {
          rows[y][bit / 8] |= static_cast<png_byte>(v << (8 - spec.bitDepth - bit % 8));
        }
      }
  std::vector<png_bytep> pointers;
  for (auto& r : rows) pointers.push_back(r.data());
  png_write_image(png, pointers.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace

// ImageMagick's PNG8 and pngquant write a palette with a tRNS chunk: libpng's
// palette expansion makes that RGBA, which the reader refused as corrupt.
TEST(Image, PalettePngWithTransparencyIsRead) {
  TempDir dir;
  const std::vector<png_color> palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
  const std::vector<uint16_t> idx = {0, 1, 2, 3, 3, 2, 1, 0, 1, 1, 2, 2};  // 4 x 3
  for (int depth : {8, 4, 2}) {
    for (bool interlaced : {false, true}) {
      PngSpec spec{PNG_COLOR_TYPE_PALETTE, depth, palette, {0, 128, 255}, false, interlaced};
      const fs::path p = dir / ("pal" + std::to_string(depth) + (interlaced ? "i" : "") + ".png");
      writeRaw(p, writePngWith(spec, 4, 3, idx));
      const auto px = readImage(p).pixels;  // alpha dropped, palette colours kept (as PIL's convert("RGB"))
      ASSERT_EQ(px.sizes(), (std::vector<int64_t>{3, 4, 3})) << p;
      for (int64_t i = 0; i < 12; ++i) {
        const png_color c = palette[idx[static_cast<size_t>(i)]];
        const auto got = px.view({12, 3})[i];
        EXPECT_EQ(got[0].item<int>(), c.red) << p << " pixel " << i;
        EXPECT_EQ(got[1].item<int>(), c.green) << p << " pixel " << i;
        EXPECT_EQ(got[2].item<int>(), c.blue) << p << " pixel " << i;
      }
      EXPECT_EQ(readImage(p, ImageChannels::Rgb).pixels.sizes(), (std::vector<int64_t>{3, 4, 3}));
    }
  }
}

// Every other layout a PNG may have: gray 1-16 bits with and without tRNS, gray + alpha, 16-bit RGB(A), RGB + tRNS.
TEST(Image, EveryPngLayoutIsRead) {
  TempDir dir;
  struct Case {
    int colorType, bitDepth;
    bool trns;
  };
  const std::vector<Case> cases = {
      {PNG_COLOR_TYPE_GRAY, 1, false},        {PNG_COLOR_TYPE_GRAY, 2, true},
      {PNG_COLOR_TYPE_GRAY, 4, false},        {PNG_COLOR_TYPE_GRAY, 8, true},
      {PNG_COLOR_TYPE_GRAY, 16, true},        {PNG_COLOR_TYPE_GRAY_ALPHA, 8, false},
      {PNG_COLOR_TYPE_GRAY_ALPHA, 16, false}, {PNG_COLOR_TYPE_RGB, 8, true},
      {PNG_COLOR_TYPE_RGB, 16, true},         {PNG_COLOR_TYPE_RGB_ALPHA, 8, false},
      {PNG_COLOR_TYPE_RGB_ALPHA, 16, false},
  };
  const uint32_t w = 5, h = 2;
  for (const Case& k : cases) {
    const bool color = k.colorType & PNG_COLOR_MASK_COLOR;
    const int channels = (color ? 3 : 1) + ((k.colorType & PNG_COLOR_MASK_ALPHA) ? 1 : 0);
    const uint32_t maxV = (1u << k.bitDepth) - 1;
    std::vector<uint16_t> samples;
    std::vector<int> expected;  // 8-bit colour samples (alpha dropped)
    for (uint32_t i = 0; i < w * h; ++i)
      for (int c = 0; c < channels; ++c) {
        const uint32_t v = ((i * 7 + static_cast<uint32_t>(c) * 3) * 2749u) % (maxV + 1);
        samples.push_back(static_cast<uint16_t>(v));
        const bool alpha = c == channels - 1 && (k.colorType & PNG_COLOR_MASK_ALPHA);
        // libpng scales 1-4 bits up by bit replication (x255/max); 16 bits lose their low byte (within 1).
        if (!alpha) expected.push_back(static_cast<int>((v * 255 + maxV / 2) / maxV));
      }
    PngSpec spec{k.colorType, k.bitDepth, {}, {}, k.trns, false};
    const fs::path p =
        dir / ("c" + std::to_string(k.colorType) + "d" + std::to_string(k.bitDepth) + (k.trns ? "t" : "") + ".png");
    const std::string bytes = writePngWith(spec, w, h, samples);
    ASSERT_FALSE(bytes.empty()) << p;
    writeRaw(p, bytes);
    at::Tensor px;
    try {
      px = readImage(p).pixels;
    } catch (const std::exception& e) {
      ADD_FAILURE() << p << ": " << e.what();
      continue;
    }
    ASSERT_EQ(px.sizes(), (std::vector<int64_t>{h, w, color ? 3 : 1})) << p;
    const auto flat = px.reshape({-1}).to(at::kInt);
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_NEAR(flat[static_cast<int64_t>(i)].item<int>(), expected[i], 1) << p << " sample " << i;
    EXPECT_EQ(readImage(p, ImageChannels::Rgb).pixels.size(2), 3) << p;
  }
}

// Print and Photoshop files: CMYK JPEGs (Adobe's inverted inks) are converted to RGB, not refused.
TEST(Image, CmykJpegIsConvertedToRgb) {
  TempDir dir;
  const auto rgb = gradient(16, 24, 3);  // [H, W, 3]
  // Adobe CMYK stores 255 - ink: with no black ink (K' = 255), C' = R, M' = G, Y' = B.
  const auto cmyk = at::cat({rgb, at::full({16, 24, 1}, 255, at::kByte)}, 2).contiguous();
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = 24;
  cinfo.image_height = 16;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, JCS_YCCK);  // what Photoshop writes; sets the Adobe marker
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = cmyk.data_ptr<uint8_t>() + cinfo.next_scanline * 24 * 4;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  writeRaw(dir / "cmyk.jpg", std::string(reinterpret_cast<char*>(buffer), size));
  std::free(buffer);
  const auto back = readImage(dir / "cmyk.jpg").pixels;
  ASSERT_EQ(back.sizes(), rgb.sizes());
  EXPECT_LE((back.to(at::kInt) - rgb.to(at::kInt)).abs().max().item<int>(), 12);
}

// A PNG chunk's length is checked before libpng allocates it (issue 32, point 5): a
// 600-byte file declaring a 2 GB text chunk took 2.2 GB. Now the chunk is refused by
// its declared length against the file's size (in a child with 256 MB of room),
// with an error naming the file and the chunk.
TEST(Image, AHugeDeclaredPngTextChunkIsRefusedBeforeItIsAllocated) {
  TempDir dir;
  writePng(dir / "good.png", randomHwc(8, 8, 3, 1));
  std::string png = readRaw(dir / "good.png");
  // After the signature (8 bytes) and IHDR (4 + 4 + 13 + 4): a tEXt chunk declaring 2 GB, 40 bytes of it there.
  const std::string chunk =
      std::string("\x7f\xff\xff\x00", 4) + "tEXt" + "Comment" + std::string(1, '\0') + std::string(32, 'x');
  png.insert(33, chunk);
  ASSERT_LT(png.size(), 1000u);
  const fs::path p = dir / "text-bomb.png";
  writeRaw(p, png);
  const auto out = strata::test::runInChild(
      [p] {
        readImage(p);
        return std::string("read");
      },
      30.0, std::size_t{256} << 20);
  ASSERT_EQ(out.kind, strata::test::ChildOutcome::Kind::TypedError) << out.describe();
  EXPECT_NE(out.text.find(p.string()), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("chunk tEXt declares 2147483392 bytes, the file holds"), std::string::npos) << out.text;
}
