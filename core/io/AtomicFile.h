#pragma once
// Atomic file replacement: write a temp file in the target's folder, fsync it,
// rename it over the target. A reader never sees a half-written file, and on
// any failure the previous file stays as it was.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>

namespace strata::io {

// Appends `sizeBytes` bytes to the temp file; throws strata::IoError on failure.
using ByteSink = std::function<void(const void* data, std::size_t sizeBytes)>;

// Replaces `path` with `bytes`. Throws strata::IoError naming the path and the
// OS error; the temp file is removed and the old file (if any) is untouched.
void writeFileAtomic(const std::filesystem::path& path, const std::string& bytes);

// Streaming variant: `produce` writes the content through the sink it is given
// (any number of calls). If `produce` throws, the temp file is removed, the old
// file is untouched and the exception propagates unchanged.
void writeFileAtomicStream(const std::filesystem::path& path,
                           const std::function<void(const ByteSink& write)>& produce);

}  // namespace strata::io
