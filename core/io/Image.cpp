#include "io/Image.h"

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <png.h>
#ifdef STRATA_HAS_WEBP
#include <webp/decode.h>
#endif
#ifdef STRATA_HAS_WEBPDEMUX
#include <webp/demux.h>
#endif

#include "common/Error.h"
#include "io/AtomicFile.h"
#include "io/FileBytes.h"

namespace strata::io {
namespace {

// libpng and libjpeg report errors by longjmp. Every function that calls
// setjmp below holds only plain C data (its state lives in a job struct), so
// a longjmp never skips a C++ destructor; C++ objects are built by the callers.
constexpr std::size_t kErrorLen = 512;
// Ancillary PNG chunks (text, ICC, EXIF): the largest one read, and how many.
constexpr png_alloc_size_t kMaxPngChunkBytes = 8u << 20;
constexpr png_uint_32 kMaxPngAncillaryChunks = 1000;

void setError(char* buffer, const char* message) { std::snprintf(buffer, kErrorLen, "%s", message); }

// ------------------------------------------------------------------ PNG

void pngOnError(png_structp png, png_const_charp message) {
  setError(static_cast<char*>(png_get_error_ptr(png)), message);
  png_longjmp(png, 1);
}
void pngOnWarning(png_structp, png_const_charp) {}  // recoverable: libpng already repaired it

struct PngEncodeJob {
  const std::uint8_t* pixels;
  std::uint32_t width;
  std::uint32_t height;
  int channels;
  png_text* texts;
  int textCount;
  std::string* out;
  png_structp png;
  png_infop info;
  char error[kErrorLen];
};

void pngWriteToString(png_structp png, png_bytep data, png_size_t sizeBytes) {
  bool ok = true;
  try {
    static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), sizeBytes);
  } catch (...) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory");
}
void pngFlush(png_structp) {}

bool runPngEncode(PngEncodeJob* job) {
  job->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, job->error, pngOnError, pngOnWarning);
  if (!job->png) return setError(job->error, "libpng could not start"), false;
  job->info = png_create_info_struct(job->png);
  if (!job->info) {
    png_destroy_write_struct(&job->png, nullptr);
    return setError(job->error, "libpng could not start"), false;
  }
  if (setjmp(png_jmpbuf(job->png))) {
    png_destroy_write_struct(&job->png, &job->info);
    return false;
  }
  png_set_write_fn(job->png, job->out, pngWriteToString, pngFlush);
  png_set_IHDR(job->png, job->info, job->width, job->height, 8,
               job->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (job->textCount > 0) png_set_text(job->png, job->info, job->texts, job->textCount);
  png_write_info(job->png, job->info);
  const std::size_t stride = static_cast<std::size_t>(job->width) * job->channels;
  for (std::uint32_t y = 0; y < job->height; ++y)
    png_write_row(job->png, const_cast<png_bytep>(job->pixels + y * stride));
  png_write_end(job->png, job->info);
  png_destroy_write_struct(&job->png, &job->info);
  return true;
}

struct MemoryReader {
  const std::uint8_t* data;
  std::size_t sizeBytes;
  std::size_t pos;
};

void pngReadFromMemory(png_structp png, png_bytep out, png_size_t sizeBytes) {
  auto* r = static_cast<MemoryReader*>(png_get_io_ptr(png));
  if (sizeBytes > r->sizeBytes - r->pos) png_error(png, "unexpected end of file (truncated)");
  std::memcpy(out, r->data + r->pos, sizeBytes);
  r->pos += sizeBytes;
}

// Every chunk's declared length against the bytes the file holds, before libpng
// sees it: libpng allocates a chunk's declared length before reading it (a 600-byte
// file declaring a 2 GB text chunk took 2 GB), and one it cannot allocate leaves it
// out of step with the stream, with a misleading message after.
bool pngChunksFit(const MemoryReader& r, char* error) {
  std::size_t pos = 8;  // after the signature
  while (r.sizeBytes - pos >= 8) {
    const std::uint8_t* h = r.data + pos;
    const std::uint64_t length = (std::uint64_t{h[0]} << 24) | (std::uint64_t{h[1]} << 16) | (h[2] << 8) | h[3];
    char type[5] = {0, 0, 0, 0, 0};
    for (int i = 0; i < 4; ++i) type[i] = (h[4 + i] >= 0x20 && h[4 + i] < 0x7f) ? static_cast<char>(h[4 + i]) : '?';
    const std::size_t room = r.sizeBytes - pos - 8;  // data and CRC of this chunk, and what follows
    if (length + 4 > room) {
      std::snprintf(error, kErrorLen, "chunk %s declares %llu bytes, the file holds %zu after its header", type,
                    static_cast<unsigned long long>(length), room);
      return false;
    }
    pos += 12 + static_cast<std::size_t>(length);
    if (std::memcmp(type, "IEND", 4) == 0) break;
  }
  return true;
}

using TextSink = bool (*)(void* context, const char* key, const char* text);

struct PngDecodeJob {
  MemoryReader reader;
  bool forceRgb;
  TextSink onText;
  void* textContext;
  png_structp png;
  png_infop info;
  std::uint8_t* pixels;  // malloc'd; the caller frees or adopts it
  png_bytep* rows;       // malloc'd; the caller frees it
  std::uint32_t width;
  std::uint32_t height;
  int channels;
  char error[kErrorLen];
};

bool runPngDecode(PngDecodeJob* job) {
  if (job->reader.sizeBytes >= 8 && !pngChunksFit(job->reader, job->error)) return false;
  job->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job->error, pngOnError, pngOnWarning);
  if (!job->png) return setError(job->error, "libpng could not start"), false;
  job->info = png_create_info_struct(job->png);
  if (!job->info) {
    png_destroy_read_struct(&job->png, nullptr, nullptr);
    return setError(job->error, "libpng could not start"), false;
  }
  if (setjmp(png_jmpbuf(job->png))) {
    png_destroy_read_struct(&job->png, &job->info, nullptr);
    return false;
  }
  png_set_read_fn(job->png, &job->reader, pngReadFromMemory);
  png_set_user_limits(job->png, kMaxImageSide, kMaxImageSide);
  // libpng allocates a chunk's declared length before reading it: without a cap a
  // 600-byte file declaring a 2 GB text chunk takes 2 GB. Ancillary chunks of a real
  // image (text, ICC profile, EXIF) are far smaller; one past the cap is skipped.
  png_set_chunk_malloc_max(job->png, kMaxPngChunkBytes);
  png_set_chunk_cache_max(job->png, kMaxPngAncillaryChunks);
  png_read_info(job->png, job->info);
  const int colorType = png_get_color_type(job->png, job->info);
  const int bitDepth = png_get_bit_depth(job->png, job->info);
  // Normalise to 8-bit gray or RGB without alpha. Alpha of any origin is dropped
  // (as PIL's convert("RGB") does): an alpha channel, or transparency from a tRNS
  // chunk, which the palette expansion turns into alpha (PNG8, pngquant output).
  if (colorType == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(job->png);
  if (colorType == PNG_COLOR_TYPE_GRAY && bitDepth < 8) png_set_expand_gray_1_2_4_to_8(job->png);
  if (bitDepth == 16) png_set_strip_16(job->png);
  png_set_strip_alpha(job->png);
  if (job->forceRgb && !(colorType & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(job->png);
  png_set_interlace_handling(job->png);
  png_read_update_info(job->png, job->info);

  job->width = png_get_image_width(job->png, job->info);
  job->height = png_get_image_height(job->png, job->info);
  job->channels = png_get_channels(job->png, job->info);
  const std::size_t rowBytes = png_get_rowbytes(job->png, job->info);
  if (static_cast<std::int64_t>(job->width) * job->height > kMaxImagePixels) png_error(job->png, "image is too large");
  // 1-4 channels of 8 bits; a channel of alpha that survived the transforms is cut off by the caller.
  if (rowBytes != static_cast<std::size_t>(job->width) * job->channels || job->channels < 1 || job->channels > 4)
    png_error(job->png, "unexpected pixel layout after conversion");
  job->pixels = static_cast<std::uint8_t*>(std::malloc(rowBytes * job->height));
  job->rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * job->height));
  if (!job->pixels || !job->rows) png_error(job->png, "out of memory");
  for (std::uint32_t y = 0; y < job->height; ++y) job->rows[y] = job->pixels + y * rowBytes;
  png_read_image(job->png, job->rows);
  png_read_end(job->png, job->info);  // checks the rest up to IEND, collects late text chunks

  png_textp texts = nullptr;
  const int textCount = png_get_text(job->png, job->info, &texts, nullptr);
  for (int i = 0; i < textCount; ++i)
    if (!job->onText(job->textContext, texts[i].key, texts[i].text ? texts[i].text : "")) {
      png_destroy_read_struct(&job->png, &job->info, nullptr);
      return setError(job->error, "out of memory"), false;
    }
  png_destroy_read_struct(&job->png, &job->info, nullptr);
  return true;
}

bool collectText(void* context, const char* key, const char* text) {
  try {
    (*static_cast<ImageText*>(context))[key] = text;
    return true;
  } catch (...) {
    return false;
  }
}

DecodedImage decodePng(const std::string& bytes, const std::string& source, bool forceRgb) {
  DecodedImage image;
  PngDecodeJob job{};
  job.reader = {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), 0};
  job.forceRgb = forceRgb;
  job.onText = collectText;
  job.textContext = &image.text;
  const bool ok = runPngDecode(&job);
  std::free(job.rows);
  if (!ok) {
    std::free(job.pixels);
    throw IoError(source + ": corrupt PNG: " + job.error);
  }
  image.pixels = at::from_blob(
      job.pixels, {job.height, job.width, job.channels}, [](void* p) { std::free(p); },
      at::TensorOptions().dtype(at::kByte));
  if (job.channels == 2 || job.channels == 4)  // gray + alpha, RGB + alpha
    image.pixels = image.pixels.slice(2, 0, job.channels - 1).contiguous();
  return image;
}

// ------------------------------------------------------------------ JPEG

struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg hands back this pointer
  std::jmp_buf jump;
  char error[kErrorLen];
  char warning[kErrorLen];
};

void jpegOnError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  char message[JMSG_LENGTH_MAX] = {};
  (*cinfo->err->format_message)(cinfo, message);
  setError(errors->error, message);
  std::longjmp(errors->jump, 1);
}

// Warnings mean corrupt data that libjpeg papered over (e.g. a truncated file
// filled with gray); they are kept and turned into an error afterwards.
void jpegOnMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (errors->warning[0] == '\0') {
    char message[JMSG_LENGTH_MAX] = {};
    (*cinfo->err->format_message)(cinfo, message);
    setError(errors->warning, message);
  }
  cinfo->err->num_warnings++;
}

struct JpegDecodeJob {
  const std::uint8_t* data;
  std::size_t sizeBytes;
  bool forceRgb;
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  std::uint8_t* pixels;   // malloc'd; the caller frees or adopts it
  std::uint8_t* cmykRow;  // malloc'd for CMYK / YCCK files; the caller frees it
  std::uint32_t width;
  std::uint32_t height;
  int channels;
};

// One CMYK row -> RGB. Adobe's files (Photoshop; the APP14 marker) store the
// inks inverted (255 = no ink), so there R = C K / 255; others store ink amounts.
void cmykRowToRgb(const std::uint8_t* cmyk, std::uint8_t* rgb, std::uint32_t width, bool adobeInverted) {
  for (std::uint32_t x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const unsigned k = adobeInverted ? cmyk[3] : 255u - cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const unsigned v = adobeInverted ? cmyk[c] : 255u - cmyk[c];
      rgb[c] = static_cast<std::uint8_t>((v * k + 127) / 255);
    }
  }
}

bool runJpegDecode(JpegDecodeJob* job) {
  job->cinfo.err = jpeg_std_error(&job->errors.pub);
  job->errors.pub.error_exit = jpegOnError;
  job->errors.pub.emit_message = jpegOnMessage;
  if (setjmp(job->errors.jump)) {
    jpeg_destroy_decompress(&job->cinfo);
    return false;
  }
  jpeg_create_decompress(&job->cinfo);
  jpeg_mem_src(&job->cinfo, const_cast<unsigned char*>(job->data), static_cast<unsigned long>(job->sizeBytes));
  jpeg_read_header(&job->cinfo, TRUE);
  // CMYK / YCCK (print files, Photoshop exports): libjpeg gives CMYK, converted per row below.
  const bool cmyk = job->cinfo.jpeg_color_space == JCS_CMYK || job->cinfo.jpeg_color_space == JCS_YCCK;
  job->cinfo.out_color_space = cmyk                                                 ? JCS_CMYK
                               : (job->cinfo.num_components == 1 && !job->forceRgb) ? JCS_GRAYSCALE
                                                                                    : JCS_RGB;
  if (job->cinfo.image_width > kMaxImageSide || job->cinfo.image_height > kMaxImageSide ||
      static_cast<std::int64_t>(job->cinfo.image_width) * job->cinfo.image_height > kMaxImagePixels) {
    jpeg_destroy_decompress(&job->cinfo);
    return setError(job->errors.error, "image is too large"), false;
  }
  jpeg_start_decompress(&job->cinfo);
  job->width = job->cinfo.output_width;
  job->height = job->cinfo.output_height;
  job->channels = cmyk ? 3 : job->cinfo.output_components;
  if (cmyk && job->cinfo.output_components != 4) {
    jpeg_destroy_decompress(&job->cinfo);
    return setError(job->errors.error, "CMYK image without 4 components"), false;
  }
  const std::size_t stride = static_cast<std::size_t>(job->width) * job->channels;
  job->pixels = static_cast<std::uint8_t*>(std::malloc(stride * job->height));
  if (cmyk) job->cmykRow = static_cast<std::uint8_t*>(std::malloc(static_cast<std::size_t>(job->width) * 4));
  if (!job->pixels || (cmyk && !job->cmykRow)) {
    jpeg_destroy_decompress(&job->cinfo);
    return setError(job->errors.error, "out of memory"), false;
  }
  while (job->cinfo.output_scanline < job->height) {
    std::uint8_t* out = job->pixels + job->cinfo.output_scanline * stride;
    JSAMPROW row = cmyk ? job->cmykRow : out;
    if (jpeg_read_scanlines(&job->cinfo, &row, 1) != 1) break;  // cannot happen with a memory source
    if (cmyk) cmykRowToRgb(job->cmykRow, out, job->width, job->cinfo.saw_Adobe_marker);
  }
  jpeg_finish_decompress(&job->cinfo);
  jpeg_destroy_decompress(&job->cinfo);
  if (job->errors.pub.num_warnings > 0) return setError(job->errors.error, job->errors.warning), false;
  return true;
}

DecodedImage decodeJpeg(const std::string& bytes, const std::string& source, bool forceRgb) {
  // Heap-allocated: the libjpeg structs are large, and the job must not move.
  auto job = std::make_unique<JpegDecodeJob>();
  job->data = reinterpret_cast<const std::uint8_t*>(bytes.data());
  job->sizeBytes = bytes.size();
  job->forceRgb = forceRgb;
  const bool ok = runJpegDecode(job.get());
  std::free(job->cmykRow);
  if (!ok) {
    std::free(job->pixels);
    throw IoError(source + ": corrupt JPEG: " + job->errors.error);
  }
  DecodedImage image;
  image.pixels = at::from_blob(
      job->pixels, {job->height, job->width, job->channels}, [](void* p) { std::free(p); },
      at::TensorOptions().dtype(at::kByte));
  return image;
}

// ------------------------------------------------------------------ helpers

std::string shapeOf(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// Any accepted layout -> contiguous uint8 [H, W, C] on the CPU.
at::Tensor toHwcBytes(const at::Tensor& image, const std::string& what) {
  if (!image.defined()) throw IoError(what + ": the image tensor is undefined");
  at::Tensor t = image.detach().to(at::kCPU);
  if (t.scalar_type() == at::kByte) {
    if (t.dim() == 2) t = t.unsqueeze(2);  // [H, W, 1]
    if (t.dim() != 3) throw IoError(what + ": a uint8 image must be [H, W, C] or [H, W], got " + shapeOf(image));
  } else if (at::isFloatingType(t.scalar_type())) {
    if (t.dim() == 4 && t.size(0) == 1) t = t.squeeze(0);
    if (t.dim() == 2) t = t.unsqueeze(0);  // [1, H, W]
    if (t.dim() != 3) throw IoError(what + ": a float image must be [C, H, W] or [H, W], got " + shapeOf(image));
    t = t.to(at::kFloat);
    if (!at::isfinite(t).all().item<bool>()) throw IoError(what + ": the image holds NaN or infinite values");
    t = t.clamp(0.0, 1.0).mul(255.0).round().to(at::kByte).permute({1, 2, 0});  // [H, W, C]
  } else {
    throw IoError(what + ": image dtype " + std::string(c10::toString(t.scalar_type())) +
                  " is not supported (uint8 HWC or float CHW)");
  }
  const auto h = t.size(0), w = t.size(1), c = t.size(2);
  if (c != 1 && c != 3) throw IoError(what + ": the image must have 1 or 3 channels, got " + shapeOf(image));
  if (h < 1 || w < 1 || h > kMaxImageSide || w > kMaxImageSide)
    throw IoError(what + ": image size " + std::to_string(w) + "x" + std::to_string(h) + " is out of range");
  return t.contiguous();
}

bool isAscii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

bool isUtf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    std::size_t extra = 0;
    if (c < 0x80)
      extra = 0;
    else if (c >= 0xc2 && c <= 0xdf)
      extra = 1;
    else if ((c & 0xf0) == 0xe0)
      extra = 2;
    else if (c >= 0xf0 && c <= 0xf4)
      extra = 3;
    else
      return false;
    if (extra > s.size() - 1 - i) return false;
    for (std::size_t k = 1; k <= extra; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += 1 + extra;
  }
  return true;
}

void checkTextKey(const std::string& key, const std::string& what) {
  bool ok = !key.empty() && key.size() <= 79 && key.front() != ' ' && key.back() != ' ' &&
            key.find("  ") == std::string::npos;
  for (unsigned char c : key) ok = ok && ((c >= 32 && c <= 126) || c >= 161);
  if (!ok)
    throw IoError(what + ": PNG text key '" + key +
                  "' is invalid (1-79 printable Latin-1 characters, no leading, trailing or double spaces)");
}

}  // namespace

std::string encodePng(const at::Tensor& image, const ImageText& text, const std::string& what) {
  const at::Tensor hwc = toHwcBytes(image, what);
  // png_text wants mutable char*: keep copies alive for the call.
  std::vector<std::string> keys, values;
  std::vector<png_text> chunks;
  keys.reserve(text.size());
  values.reserve(text.size());
  for (const auto& [key, value] : text) {
    checkTextKey(key, what);
    if (value.find('\0') != std::string::npos) throw IoError(what + ": PNG text '" + key + "' contains a NUL byte");
    if (!isUtf8(value)) throw IoError(what + ": PNG text '" + key + "' is not valid UTF-8");
    keys.push_back(key);
    values.push_back(value);
    png_text chunk{};
    chunk.compression = isAscii(value) ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
    chunk.key = keys.back().data();
    chunk.text = values.back().data();
    if (chunk.compression == PNG_TEXT_COMPRESSION_NONE)
      chunk.text_length = value.size();
    else
      chunk.itxt_length = value.size();
    chunks.push_back(chunk);
  }
  std::string out;
  PngEncodeJob job{};
  job.pixels = hwc.data_ptr<std::uint8_t>();
  job.height = static_cast<std::uint32_t>(hwc.size(0));
  job.width = static_cast<std::uint32_t>(hwc.size(1));
  job.channels = static_cast<int>(hwc.size(2));
  job.texts = chunks.data();
  job.textCount = static_cast<int>(chunks.size());
  job.out = &out;
  if (!runPngEncode(&job)) throw IoError(what + ": PNG encoding failed: " + job.error);
  return out;
}

void writePng(const std::filesystem::path& path, const at::Tensor& image, const ImageText& text) {
  writeFileAtomic(path, encodePng(image, text, path.string()));
}

namespace {

#ifdef STRATA_HAS_WEBP
void checkWebpSize(int width, int height, const std::string& source) {
  if (width < 1 || height < 1 || width > kMaxImageSide || height > kMaxImageSide ||
      static_cast<std::int64_t>(width) * height > kMaxImagePixels)
    throw IoError(source + ": WebP image is too large (" + std::to_string(width) + "x" + std::to_string(height) + ")");
}

// An animated WebP: its first frame, composed on the canvas (as a viewer shows
// it before playing), alpha dropped.
DecodedImage decodeAnimatedWebp(const std::string& bytes, const std::string& source) {
#ifdef STRATA_HAS_WEBPDEMUX
  WebPData data{reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) throw IoError(source + ": the WebP animation decoder could not start");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> decoder(WebPAnimDecoderNew(&data, &options),
                                                                       WebPAnimDecoderDelete);
  if (!decoder) throw IoError(source + ": corrupt or truncated animated WebP image");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info)) throw IoError(source + ": corrupt animated WebP image");
  checkWebpSize(static_cast<int>(info.canvas_width), static_cast<int>(info.canvas_height), source);
  std::uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp) || !rgba)
    throw IoError(source + ": corrupt or truncated animated WebP image (first frame)");
  const int64_t h = info.canvas_height, w = info.canvas_width;
  DecodedImage out;
  out.pixels = at::from_blob(rgba, {h, w, 4}, at::TensorOptions().dtype(at::kByte)).slice(2, 0, 3).contiguous();
  return out;  // [H, W, 3], copied before the decoder frees its canvas
#else
  throw IoError(source + ": animated WebP image, but this build has no WebP animation reader (libwebpdemux)");
#endif
}

DecodedImage decodeWebp(const std::string& bytes, const std::string& source, bool forceRgb) {
  const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(data, bytes.size(), &features) != VP8_STATUS_OK)
    throw IoError(source + ": corrupt or truncated WebP image");
  if (features.has_animation) return decodeAnimatedWebp(bytes, source);
  const int width = features.width, height = features.height;
  if (width > kMaxImageSide || height > kMaxImageSide || static_cast<std::int64_t>(width) * height > kMaxImagePixels)
    throw IoError(source + ": WebP image is too large (" + std::to_string(width) + "x" + std::to_string(height) + ")");
  DecodedImage out;
  out.pixels = at::empty({height, width, 3}, at::kByte);  // [H, W, 3]; alpha dropped
  const std::size_t stride = static_cast<std::size_t>(width) * 3;
  if (!WebPDecodeRGBInto(data, bytes.size(), out.pixels.data_ptr<std::uint8_t>(), stride * height,
                         static_cast<int>(stride)))
    throw IoError(source + ": corrupt or truncated WebP image");
  (void)forceRgb;  // WebP decodes to RGB always
  return out;
}
#endif

std::uint32_t readExifInt(const std::uint8_t* p, bool little, int bytes) {
  std::uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint32_t>(p[little ? i : bytes - 1 - i]) << (8 * i);
  return v;
}

}  // namespace

bool webpSupported() {
#ifdef STRATA_HAS_WEBP
  return true;
#else
  return false;
#endif
}

int jpegExifOrientation(const std::string& bytes) {
  const auto* b = reinterpret_cast<const std::uint8_t*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t pos = 2;  // after SOI
  while (pos + 4 <= n && b[pos] == 0xff) {
    const std::uint8_t marker = b[pos + 1];
    if (marker == 0xda || marker == 0xd9) break;  // start of scan / end: no EXIF before the pixels
    const std::size_t len = (static_cast<std::size_t>(b[pos + 2]) << 8) | b[pos + 3];
    if (len < 2 || pos + 2 + len > n) break;
    const std::uint8_t* seg = b + pos + 4;
    const std::size_t segLen = len - 2;
    if (marker == 0xe1 && segLen >= 14 && std::memcmp(seg, "Exif\0\0", 6) == 0) {
      const std::uint8_t* tiff = seg + 6;
      const std::size_t tiffLen = segLen - 6;
      const bool little = tiff[0] == 'I' && tiff[1] == 'I';
      if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
      if (readExifInt(tiff + 2, little, 2) != 42) return 1;
      const std::size_t ifd = readExifInt(tiff + 4, little, 4);
      if (ifd + 2 > tiffLen) return 1;
      const std::size_t count = readExifInt(tiff + ifd, little, 2);
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t e = ifd + 2 + 12 * i;
        if (e + 12 > tiffLen) return 1;
        if (readExifInt(tiff + e, little, 2) != 0x0112) continue;
        const std::uint32_t v = readExifInt(tiff + e + 8, little, 2);  // SHORT, left-justified in the value field
        return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
      }
      return 1;
    }
    pos += 2 + len;
  }
  return 1;
}

at::Tensor applyExifOrientation(const at::Tensor& hwc, int orientation) {
  // The EXIF table: 2 mirror, 3 rotate 180, 4 flip vertical, 5 transpose,
  // 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise.
  switch (orientation) {
    case 2:
      return hwc.flip({1}).contiguous();
    case 3:
      return hwc.flip({0, 1}).contiguous();
    case 4:
      return hwc.flip({0}).contiguous();
    case 5:
      return hwc.transpose(0, 1).contiguous();  // [W, H, C]
    case 6:
      return hwc.transpose(0, 1).flip({1}).contiguous();  // [W, H, C]
    case 7:
      return hwc.transpose(0, 1).flip({0, 1}).contiguous();
    case 8:
      return hwc.transpose(0, 1).flip({0}).contiguous();
    default:
      return hwc;
  }
}

DecodedImage decodeImage(const std::string& bytes, const std::string& sourceName, ImageChannels channels) {
  const bool forceRgb = channels == ImageChannels::Rgb;
  static const unsigned char kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.empty()) throw IoError(sourceName + ": the image file is empty");
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngMagic, 8) == 0) return decodePng(bytes, sourceName, forceRgb);
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xff &&
      static_cast<unsigned char>(bytes[1]) == 0xd8 && static_cast<unsigned char>(bytes[2]) == 0xff) {
    DecodedImage out = decodeJpeg(bytes, sourceName, forceRgb);
    out.orientation = jpegExifOrientation(bytes);
    return out;
  }
  if (bytes.size() >= 12 && std::memcmp(bytes.data(), "RIFF", 4) == 0 &&
      std::memcmp(bytes.data() + 8, "WEBP", 4) == 0) {
#ifdef STRATA_HAS_WEBP
    return decodeWebp(bytes, sourceName, forceRgb);
#else
    throw IoError(sourceName + ": WebP image, but this build has no WebP reader (install libwebp-dev and rebuild)");
#endif
  }
  throw IoError(sourceName + ": not a PNG, JPEG or WebP image (unrecognised content)");
}

DecodedImage readImage(const std::filesystem::path& path, ImageChannels channels) {
  return decodeImage(readFileBytes(path), path.string(), channels);
}

at::Tensor imageToFloatChw(const at::Tensor& hwc) {
  if (!hwc.defined() || hwc.scalar_type() != at::kByte || hwc.dim() != 3)
    throw IoError("imageToFloatChw: expected a uint8 [H, W, C] tensor");
  return hwc.permute({2, 0, 1}).to(at::kFloat).div(255.0).contiguous();  // [C, H, W]
}

}  // namespace strata::io
