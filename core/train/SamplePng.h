#pragma once
// Writes a sample image as an 8-bit RGB PNG with text chunks (the prompt, the
// step, the seed), atomically.
#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <string>

namespace strata::train {

// rgb: [3, H, W] float in [0, 1]. Throws IoError.
void writeSamplePng(const std::filesystem::path& path, const at::Tensor& rgb,
                    const std::map<std::string, std::string>& text);

// Reads the text chunks of a PNG (tests, the sample browser). Throws IoError.
std::map<std::string, std::string> readPngText(const std::filesystem::path& path);

}  // namespace strata::train
