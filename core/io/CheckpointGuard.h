#pragma once
// Pickle checkpoints (.ckpt, .pt, .pth, .bin, torch.save zips) can run arbitrary
// code when they are loaded, so Strata never reads them: weights come only as
// .safetensors. This is the one place that decides what counts as a pickle.
#include <filesystem>
#include <optional>
#include <string>

namespace strata::io {

// Why `path` is refused, or nothing. Decided by extension (.ckpt .pt .pth .bin
// .pkl .pickle) and, for other names, by content: a zip archive (torch.save) or
// a pickle stream (protocol 2-5 header). A file that starts like a safetensors
// file (byte 8 is '{') or cannot be read is not refused here.
std::optional<std::string> unsafeCheckpointReason(const std::filesystem::path& path);

// Throws strata::IoError with that reason (naming the file and what to do).
void refuseUnsafeCheckpoint(const std::filesystem::path& path);

}  // namespace strata::io
