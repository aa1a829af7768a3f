#pragma once
// Range checks for numbers the user types on the command line, shared by the
// sub-commands: a bad number is exit code 2 with one line saying what is allowed,
// never a silently ignored or wrapped-around value.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace strata::cli {

// --stop-after: a step number, 1 .. 10^12 (0 or less would never stop).
inline CLI::Validator stopAfterCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE || v < 1 || v > 1000000000000LL)
          return "'" + text + "' is not a step to stop after: give a step number of at least 1";
        return "";
      },
      "STEP>=1");
}

// A count from 1 to `max` (`strata-train bench --steps`, --profile-steps); `what`
// names it in the message ("a number of measured steps").
inline CLI::Validator countCheck(const std::string& what, long long max) {
  return CLI::Validator(
      [what, max](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE || v < 1 || v > max)
          return "'" + text + "' is not " + what + ": give 1 to " + std::to_string(max);
        return "";
      },
      "1.." + std::to_string(max));
}

// A size in GB: finite, 0 .. 10^6.
inline CLI::Validator gigabytesCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || errno == ERANGE || !(v >= 0 && v <= 1e6))
          return "'" + text + "' is not a size in GB from 0 to 1000000";
        return "";
      },
      "GB");
}

// An image side in pixels for FLUX: a multiple of 16 (the VAE's 8 x the 2 x 2
// patches) from 16 to 4096.
inline CLI::Validator imageSideCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE || v < 16 || v > 4096 || v % 16 != 0)
          return "'" + text + "' is not an image side: give a multiple of 16 from 16 to 4096 pixels";
        return "";
      },
      "PIXELS");
}

// A text option given with nothing in it (`--devices ''`, `--run-dir ''`): refused,
// rather than read as "not given" and run with the default. `what` names the value
// ("a device list such as 4x16GB").
inline CLI::Validator nonEmptyCheck(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        if (text.find_first_not_of(" \t\r\n") == std::string::npos) return "is empty: give " + what;
        return "";
      },
      "TEXT");
}

}  // namespace strata::cli
