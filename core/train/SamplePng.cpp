#include "train/SamplePng.h"

#include <png.h>

#include <cstdio>
#include <vector>

#include "common/Error.h"
#include "io/AtomicFile.h"

namespace strata::train {

namespace {
void pngWrite(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), length);
}
void pngFlush(png_structp) {}
}  // namespace

void writeSamplePng(const std::filesystem::path& path, const at::Tensor& rgb,
                    const std::map<std::string, std::string>& text) {
  if (rgb.dim() != 3 || rgb.size(0) != 3) throw IoError(path.string() + ": sample must be [3, H, W]");
  const int64_t h = rgb.size(1), w = rgb.size(2);
  // [3, H, W] -> [H, W, 3] bytes
  auto bytes = (rgb.detach().to(at::kCPU, at::kFloat).clamp(0, 1) * 255.0 + 0.5)
                   .to(at::kByte)
                   .permute({1, 2, 0})
                   .contiguous();
  std::string encoded;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    throw IoError(path.string() + ": libpng could not start");
  }
  std::vector<std::string> keys, values;
  for (const auto& [k, v] : text) {
    keys.push_back(k.substr(0, 79));  // PNG keywords are 1..79 bytes
    values.push_back(v);
  }
  std::vector<png_text> chunks(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    chunks[i] = png_text{};
    chunks[i].compression = PNG_ITXT_COMPRESSION_NONE;  // UTF-8 prompts
    chunks[i].key = const_cast<char*>(keys[i].c_str());
    chunks[i].text = const_cast<char*>(values[i].c_str());
    chunks[i].text_length = 0;
    chunks[i].itxt_length = values[i].size();
  }
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  auto* base = bytes.data_ptr<uint8_t>();
  for (int64_t y = 0; y < h; ++y) rows[static_cast<size_t>(y)] = base + y * w * 3;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw IoError(path.string() + ": PNG encoding failed");
  }
  png_set_write_fn(png, &encoded, pngWrite, pngFlush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!chunks.empty()) png_set_text(png, info, chunks.data(), static_cast<int>(chunks.size()));
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  io::writeFileAtomic(path, encoded);
}

std::map<std::string, std::string> readPngText(const std::filesystem::path& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw IoError(path.string() + ": cannot open");
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    std::fclose(f);
    png_destroy_read_struct(&png, &info, nullptr);
    throw IoError(path.string() + ": libpng could not start");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    std::fclose(f);
    throw IoError(path.string() + ": not a readable PNG");
  }
  png_init_io(png, f);
  png_read_info(png, info);
  std::map<std::string, std::string> out;
  png_textp text = nullptr;
  int n = 0;
  png_get_text(png, info, &text, &n);
  for (int i = 0; i < n; ++i)
    out[text[i].key] = std::string(text[i].text, text[i].itxt_length ? text[i].itxt_length : text[i].text_length);
  png_destroy_read_struct(&png, &info, nullptr);
  std::fclose(f);
  return out;
}

}  // namespace strata::train
