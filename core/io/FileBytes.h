#pragma once
// Whole-file (or leading-bytes) reads through POSIX calls, with IoError naming
// the file and the OS error. Used instead of std::ifstream in core/io.
// Only regular files are read: a FIFO would block the open (the app never showed
// its window) and /dev/zero never ends, so both are refused before any read.
#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>

namespace strata::io {

// The cap on a small text file the user hands over: a run config, the app's run
// queue, a model's config.json. These are a few KB; 1 MB leaves room.
constexpr std::size_t kMaxSmallFileBytes = std::size_t{1} << 20;

// Up to `maxBytes` bytes from the start of `path`. Throws IoError if the file
// cannot be opened or read, or is a folder or any other non-regular file (FIFO,
// device, socket).
std::string readFileBytes(const std::filesystem::path& path,
                          std::size_t maxBytes = std::numeric_limits<std::size_t>::max());

// The whole of a regular file of at most `limitBytes` bytes; a larger one is an
// IoError "<path>: N bytes, more than the M a <what> may hold", before it is read.
// Every small text read goes through it: configs, the run queue, JSON files.
std::string readSmallFile(const std::filesystem::path& path, std::size_t limitBytes = kMaxSmallFileBytes,
                          const std::string& what = "file of this kind");

// Why `path` cannot be reached, from the OS: "no such file or folder", "a loop
// of symbolic links", "permission denied", ...; "" when it can (stat works).
// std::filesystem::exists() says false for all of these alike.
std::string pathProblem(const std::filesystem::path& path);

// "1 MB", "256 MB", "12345 bytes": a limit as a user reads it.
std::string byteSizeText(std::size_t bytes);

}  // namespace strata::io
