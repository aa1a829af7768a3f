#include "train/ImageFolder.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "common/Error.h"
#include "common/Text.h"
#include "io/ContentHash.h"
#include "io/FileBytes.h"
#include "io/Image.h"

namespace strata::train {
namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool isImageFile(const fs::path& p) {
  static const std::set<std::string> kExt = {".png", ".jpg", ".jpeg", ".webp"};
  return kExt.count(toLowerAscii(p.extension().string())) > 0;
}

// uint8 [H, W, 3] upright, from the file's bytes.
at::Tensor decodeUpright(const std::string& bytes, const fs::path& path) {
  io::DecodedImage img = io::decodeImage(bytes, path.string(), io::ImageChannels::Rgb);
  return io::applyExifOrientation(img.pixels, img.orientation);
}

// The reason an IoError gives, without the "path: " the reader puts in front.
std::string reasonOf(const Error& e, const fs::path& file) {
  std::string why = e.what();
  const std::string prefix = file.string() + ": ";
  if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
  return why;
}

// Why `path` (a directory entry with an image's or caption's name) is not a readable file; "" when it is.
std::string notAFile(const fs::path& path) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  const std::string problem = io::pathProblem(path);
  if (!problem.empty()) {
    if (fs::is_symlink(link) && problem == "no such file or folder")
      return "dangling symbolic link (its target does not exist)";
    return problem;
  }
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return "is a folder, not a file";
  if (!fs::is_regular_file(st)) return "not a regular file (a pipe, socket or device)";
  return "";
}

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

constexpr uint32_t kReplacement = 0xfffd;

// UTF-16 (after its byte-order mark) -> UTF-8; unpaired surrogates become U+FFFD.
std::string utf16ToUtf8(const std::string& b, size_t begin, bool little, int64_t& replaced) {
  std::string out;
  auto unit = [&](size_t i) {
    const auto lo = static_cast<unsigned char>(b[i + (little ? 0 : 1)]);
    const auto hi = static_cast<unsigned char>(b[i + (little ? 1 : 0)]);
    return static_cast<uint32_t>(hi << 8 | lo);
  };
  size_t i = begin;
  for (; i + 1 < b.size(); i += 2) {
    uint32_t u = unit(i);
    if (u >= 0xd800 && u <= 0xdbff && i + 3 < b.size()) {
      const uint32_t v = unit(i + 2);
      if (v >= 0xdc00 && v <= 0xdfff) {
        appendUtf8(out, 0x10000 + ((u - 0xd800) << 10) + (v - 0xdc00));
        i += 2;
        continue;
      }
    }
    if (u >= 0xd800 && u <= 0xdfff) {
      u = kReplacement;
      ++replaced;
    }
    appendUtf8(out, u);
  }
  if (i < b.size()) ++replaced;  // an odd last byte
  return out;
}

// Length of the valid UTF-8 sequence at s[i], 0 when none starts there.
size_t utf8SequenceAt(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t extra = 0;
  uint32_t cp = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    extra = 1;
    cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    extra = 2;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    extra = 3;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (extra > s.size() - 1 - i) return 0;
  for (size_t k = 1; k <= extra; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (d & 0x3f);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
  if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return extra + 1;
}

}  // namespace

CaptionText decodeCaptionBytes(const std::string& bytes) {
  CaptionText out;
  int64_t replaced = 0;
  const auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  if (bytes.size() >= 2 && ((at(0) == 0xff && at(1) == 0xfe) || (at(0) == 0xfe && at(1) == 0xff))) {
    const bool little = at(0) == 0xff;
    out.text = utf16ToUtf8(bytes, 2, little, replaced);
    if (out.text.find('\0') != std::string::npos) {
      out.text.clear();
      out.error = "the caption file is not text (NUL characters)";
      return out;
    }
    out.repair = std::string("converted from UTF-16 ") + (little ? "LE" : "BE");
    if (replaced > 0) out.repair += " (" + std::to_string(replaced) + " invalid unit(s) replaced by U+FFFD)";
    return out;
  }
  const size_t begin = bytes.size() >= 3 && at(0) == 0xef && at(1) == 0xbb && at(2) == 0xbf ? 3 : 0;
  if (bytes.find('\0', begin) != std::string::npos) {
    out.error = "the caption file is not text (NUL bytes: binary, or UTF-16 without a byte-order mark)";
    return out;
  }
  out.text.reserve(bytes.size() - begin);
  for (size_t i = begin; i < bytes.size();) {
    const size_t n = utf8SequenceAt(bytes, i);
    if (n == 0) {
      appendUtf8(out.text, kReplacement);
      ++replaced;
      ++i;
    } else {
      out.text.append(bytes, i, n);
      i += n;
    }
  }
  if (replaced > 0)
    out.repair =
        "not valid UTF-8: " + std::to_string(replaced) + " byte(s) replaced by U+FFFD (save captions as UTF-8)";
  return out;
}

std::string contentHash(const std::string& bytes) { return io::contentHashHex(bytes); }

std::string applyTriggerWord(const std::string& caption, const std::string& triggerWord) {
  const std::string kTag = "[trigger]";
  std::string out = caption;
  bool replaced = false;
  for (size_t pos = out.find(kTag); pos != std::string::npos; pos = out.find(kTag, pos + triggerWord.size())) {
    out.replace(pos, kTag.size(), triggerWord);
    replaced = true;
  }
  if (!replaced && !triggerWord.empty() && out.find(triggerWord) == std::string::npos)
    out = out.empty() ? triggerWord : triggerWord + ", " + out;
  return out;
}

ImageFolderScan scanImageFolder(const config::DatasetConfig& cfg, std::size_t stopAfterUsable) {
  const fs::path folder(cfg.folderPath);
  // Every name with an image extension; what is not a readable file is skipped with its reason
  // below (a symlink loop or a dangling link is reported, not silently dropped).
  std::vector<fs::path> files;
  std::error_code ec;
  fs::directory_iterator it(folder, ec);
  if (ec) throw IoError(cfg.folderPath + ": cannot list the image folder (" + ec.message() + ")");
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw IoError(cfg.folderPath + ": cannot list the image folder (" + ec.message() + ")");
    if (isImageFile(it->path())) files.push_back(it->path());
  }
  if (ec) throw IoError(cfg.folderPath + ": cannot list the image folder (" + ec.message() + ")");
  std::sort(files.begin(), files.end());  // a stable order across runs and machines

  std::vector<int64_t> resolutions = cfg.resolution;
  std::sort(resolutions.begin(), resolutions.end());
  resolutions.erase(std::unique(resolutions.begin(), resolutions.end()), resolutions.end());
  std::vector<std::vector<Bucket>> tables;
  for (int64_t r : resolutions) tables.push_back(bucketsFor(r));

  // "txt" and ".txt" both name dog1.txt (ai-toolkit configs use either).
  const std::string captionExt = cfg.captionExt.rfind('.', 0) == 0 ? cfg.captionExt : "." + cfg.captionExt;
  ImageFolderScan scan;
  for (const fs::path& file : files) {
    if (stopAfterUsable > 0 && scan.entries.size() >= stopAfterUsable) break;
    if (const std::string why = notAFile(file); !why.empty()) {
      scan.skipped.push_back({file, why});
      continue;
    }
    if (std::error_code sizeEc; fs::file_size(file, sizeEc) > kMaxImageFileBytes && !sizeEc) {
      scan.skipped.push_back(
          {file, "larger than " + std::to_string(kMaxImageFileBytes >> 20) + " MB: not read (not a training image)"});
      continue;
    }
    // Read once: the hash that keys the cache is of the bytes decoded here.
    at::Tensor hwc;
    std::string imageHash;
    try {
      const std::string bytes = io::readFileBytes(file, kMaxImageFileBytes);
      imageHash = contentHash(bytes);
      hwc = decodeUpright(bytes, file);
    } catch (const Error& e) {
      // The reader names the file and says what is wrong (empty, truncated, corrupt).
      scan.skipped.push_back({file, reasonOf(e, file)});
      continue;
    }
    const int64_t h = hwc.size(0), w = hwc.size(1);
    std::vector<std::pair<int64_t, Bucket>> uses;
    for (size_t i = 0; i < resolutions.size(); ++i) {
      const Bucket b = chooseBucket(tables[i], w, h);
      if (coversBucket(w, h, b)) uses.emplace_back(resolutions[i], b);
    }
    if (uses.empty()) {
      const Bucket b = chooseBucket(tables.front(), w, h);
      scan.skipped.push_back({file, "too small: " + std::to_string(w) + "x" + std::to_string(h) +
                                        " does not cover the smallest bucket " + b.name()});
      continue;
    }
    fs::path captionFile = file;
    captionFile.replace_extension(captionExt);
    std::string caption;
    const bool captionNamed = fs::exists(fs::symlink_status(captionFile, ec));  // a file, or a link of any kind
    if (captionNamed) {
      // A caption that is there but cannot be read skips its image: the default caption would train it wrongly.
      std::string bad = notAFile(captionFile);
      CaptionText text;
      if (bad.empty()) {
        try {
          const std::string bytes = io::readFileBytes(captionFile, kMaxCaptionBytes + 1);
          if (bytes.size() > kMaxCaptionBytes)
            bad = "larger than " + std::to_string(kMaxCaptionBytes >> 20) + " MB";
          else
            text = decodeCaptionBytes(bytes);
        } catch (const Error& e) {
          bad = reasonOf(e, captionFile);
        }
        if (bad.empty()) bad = text.error;
      }
      if (!bad.empty()) {
        scan.skipped.push_back({file, "caption file " + captionFile.filename().string() + ": " + bad});
        continue;
      }
      if (!text.repair.empty()) scan.repairedCaptions.push_back({captionFile, text.repair});
      caption = trim(text.text);
    } else {
      caption = cfg.defaultCaption;
      scan.defaultedCaptions.push_back(file);
    }
    caption = applyTriggerWord(caption, cfg.triggerWord);
    ++scan.images;
    for (const auto& [res, bucket] : uses)
      for (int flip = 0; flip <= (cfg.flipX ? 1 : 0); ++flip) {
        scan.entries.push_back({file, imageHash, caption, res, bucket, flip == 1});
        ++scan.bucketCounts[bucket];
      }
  }
  return scan;
}

std::vector<std::string> ImageFolderScan::reportLines() const {
  std::vector<std::string> lines;
  lines.push_back("images: " + std::to_string(images) + " used (" + std::to_string(entries.size()) + " entries), " +
                  std::to_string(skipped.size()) + " skipped, " + std::to_string(defaultedCaptions.size()) +
                  " without a caption file (default caption used)");
  std::string table = "buckets:";
  for (const auto& [b, n] : bucketCounts) table += " " + b.name() + "=" + std::to_string(n);
  lines.push_back(table);
  for (const SkippedFile& s : skipped) lines.push_back("skipped " + s.path.string() + ": " + s.reason);
  for (const SkippedFile& s : repairedCaptions) lines.push_back("caption " + s.path.string() + ": " + s.reason);
  return lines;
}

at::Tensor loadEntryPixels(const ImageEntry& entry) {
  const std::string bytes = io::readFileBytes(entry.image, kMaxImageFileBytes + 1);
  if (!entry.imageHash.empty() && contentHash(bytes) != entry.imageHash)
    throw IoError(entry.image.string() + ": changed since the folder was scanned");
  return entryPixelsFromBytes(entry, bytes);
}

at::Tensor entryPixelsFromBytes(const ImageEntry& entry, const std::string& bytes) {
  at::Tensor chw = io::imageToFloatChw(decodeUpright(bytes, entry.image));  // [3, H, W] in [0, 1]
  at::Tensor x = resizeAndCrop(chw, entry.bucket).clamp(0.0, 1.0);  // [3, bh, bw]; resampling can overshoot by an ulp
  if (entry.flip) x = x.flip({2});
  return x.mul(2.0).sub(1.0).contiguous();  // [-1, 1]
}

}  // namespace strata::train
