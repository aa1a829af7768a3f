#pragma once
// Image files: PNG write (atomic, with text chunks such as the sample prompt),
// PNG and JPEG read. Pixels travel as uint8 [H, W, C] tensors on the CPU.
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace strata::io {

// Text chunks: key -> value. Keys are 1-79 printable Latin-1 characters without
// leading, trailing or double spaces (the PNG rule); values are UTF-8 (stored
// as tEXt when plain ASCII, else as uncompressed iTXt).
using ImageText = std::map<std::string, std::string>;

enum class ImageChannels {
  Native,  // gray stays 1 channel, colour is 3
  Rgb,     // always 3 channels
};

struct DecodedImage {
  at::Tensor pixels;    // uint8 [H, W, C], C = 1 or 3; alpha is dropped
  ImageText text;       // PNG tEXt/zTXt/iTXt chunks; empty for JPEG
  int orientation = 1;  // EXIF orientation tag 1..8 of a JPEG (1 = as stored); `pixels` are NOT rotated
};

// Whether readImage reads WebP in this build.
bool webpSupported();
// The EXIF orientation (tag 0x0112 of IFD0 in the APP1 "Exif" segment) of JPEG
// bytes; 1 when absent or unreadable (a broken EXIF block never fails a read).
int jpegExifOrientation(const std::string& bytes);
// uint8 [H, W, C] stored pixels -> the upright image for EXIF orientation 1..8
// ([W, H, C] for 5..8); other values return the image as is.
at::Tensor applyExifOrientation(const at::Tensor& hwc, int orientation);

// Larger images are refused as corrupt rather than allocated.
constexpr std::int64_t kMaxImageSide = 32768;
constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

// `image` is uint8 [H, W, C] or [H, W], or floating [C, H, W] / [1, C, H, W] /
// [H, W] in [0, 1] (clamped, rounded); C = 1 (gray) or 3 (RGB); any device.
// Throws IoError naming the file on a bad tensor, key or failed write.
void writePng(const std::filesystem::path& path, const at::Tensor& image, const ImageText& text = {});
// The same, to bytes in memory; `what` names the image in error messages.
std::string encodePng(const at::Tensor& image, const ImageText& text = {}, const std::string& what = "image");

// PNG, JPEG or WebP, told apart by content (not by extension). Throws IoError naming
// the file and what is wrong (unknown format, truncated, corrupt, too large).
DecodedImage readImage(const std::filesystem::path& path, ImageChannels channels = ImageChannels::Native);
// The same from bytes in memory; `sourceName` names them in error messages.
DecodedImage decodeImage(const std::string& bytes, const std::string& sourceName,
                         ImageChannels channels = ImageChannels::Native);

// uint8 [H, W, C] -> float [C, H, W] in [0, 1].
at::Tensor imageToFloatChw(const at::Tensor& hwc);

}  // namespace strata::io
