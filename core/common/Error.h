#pragma once
// Typed errors thrown by the core. Each carries enough context (file, key, line)
// for the CLI to print one clear line and for the GUI to show a dialog.
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file could not be read or written, or its content is malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

// A run configuration is invalid (carries the key path in its message).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Weights do not match the model: missing, unexpected or mis-shaped keys.
class LoadError : public Error {
 public:
  using Error::Error;
};

// Device placement went wrong: audit mismatch, out of memory under a cap, ...
class PlacementError : public Error {
 public:
  using Error::Error;
};

}  // namespace strata
