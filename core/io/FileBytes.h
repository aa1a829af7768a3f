#pragma once
// Whole-file (or leading-bytes) reads through POSIX calls, with IoError naming
// the file and the OS error. Used instead of std::ifstream in core/io.
#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>

namespace strata::io {

// Up to `maxBytes` bytes from the start of `path`. Throws IoError if the file
// cannot be opened or read, or is a folder.
std::string readFileBytes(const std::filesystem::path& path,
                          std::size_t maxBytes = std::numeric_limits<std::size_t>::max());

// Why `path` cannot be reached, from the OS: "no such file or folder", "a loop
// of symbolic links", "permission denied", ...; "" when it can (stat works).
// std::filesystem::exists() says false for all of these alike.
std::string pathProblem(const std::filesystem::path& path);

}  // namespace strata::io
