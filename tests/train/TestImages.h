#pragma once
// JPEG / WebP encodings of the pictures the images-dataset tests write (the
// project reads those formats but writes only PNG); the pictures themselves
// (test::gradient, whose columns differ so a mirror shows) are in
// common/ImagesRunSupport.h.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <string>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#ifdef STRATA_TEST_HAS_WEBP_ENCODER
#include <webp/encode.h>
#endif

#include "common/ImagesRunSupport.h"

namespace strata::test {

inline std::string encodeJpeg(const at::Tensor& hwc) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(hwc.size(1));
  c.image_height = static_cast<JDIMENSION>(hwc.size(0));
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  at::Tensor px = hwc.contiguous();
  for (int64_t r = 0; r < hwc.size(0); ++r) {
    JSAMPROW row = px.data_ptr<uint8_t>() + r * hwc.size(1) * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// Lossless WebP bytes; empty when the test was built without libwebp's encoder.
inline std::string encodeWebp(const at::Tensor& hwc) {
#ifdef STRATA_TEST_HAS_WEBP_ENCODER
  at::Tensor px = hwc.contiguous();
  uint8_t* out = nullptr;
  const size_t n = WebPEncodeLosslessRGB(px.data_ptr<uint8_t>(), static_cast<int>(hwc.size(1)),
                                         static_cast<int>(hwc.size(0)), static_cast<int>(hwc.size(1) * 3), &out);
  std::string bytes(reinterpret_cast<char*>(out), n);
  WebPFree(out);
  return bytes;
#else
  (void)hwc;
  return {};
#endif
}

}  // namespace strata::test
