#pragma once
// Typed reads of a JSON object's keys (config.json, adapter_config.json, ...),
// one copy for every model family. A key that is absent or null keeps the
// caller's default; a present key of the wrong type is a ConfigError
// "<source>: key '<prefix><key>': expected ..., got <value>" (the source names
// the file or the config kind, so the user knows where to look).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "common/Error.h"

namespace strata::io {

// What a shape read from a file can be, checked before anything is sized by it
// (a config.json with num_hidden_layers 1e9 made `plan` allocate 15 GB). Each is
// far above any released model (FLUX.2-dev: 56 blocks, 6144 wide; Llama-3.1-405B:
// 126 layers, 16384 wide, 53248 MLP; vocabularies reach ~262k).
namespace limits {
constexpr int64_t kLayers = 1024;                 // blocks / layers of one stack
constexpr int64_t kWidth = int64_t{1} << 18;      // a hidden, MLP, channel or embedding width
constexpr int64_t kHeads = 1024;                  // attention heads
constexpr int64_t kVocab = int64_t{1} << 22;      // vocabulary size (text::kMaxTokenId + 1)
constexpr int64_t kPositions = int64_t{1} << 24;  // positions, buckets, sample sizes
}  // namespace limits

// ConfigError "<owner>: <key> is N, more than M (...)" when value > most: one
// wording for every bound a model config checks in its validate().
void requireAtMost(const std::string& owner, const char* key, int64_t value, int64_t most);

// Where a config.json and the shapes read from the weights' header disagree, the
// weights win silently no more: LoadError "<configJson> contradicts the weights
// (<weights>): joint_attention_dim is 64 there, 4096 in the weights; ...". Both
// are the config's own JSON form; keys in `skip` (not in the weights) and keys
// `detected` lacks are not compared.
void requireAgreement(const nlohmann::json& declared, const nlohmann::json& detected, const std::string& configJson,
                      const std::string& weights, const std::vector<std::string>& skip = {});

class JsonFields {
 public:
  // Throws ConfigError when `object` is not a JSON object.
  JsonFields(const nlohmann::json& object, std::string source, std::string prefix = "");

  bool has(const char* key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  // The value; ConfigError "missing (required)" when absent or null.
  const nlohmann::json& at(const char* key) const;

  int64_t integer(const char* key) const;
  int64_t integer(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const char* key) const;
  double number(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }
  bool boolean(const char* key, bool fallback) const { return has(key) ? booleanOf(at(key), key) : fallback; }
  std::string text(const char* key, const std::string& fallback) const {
    return has(key) ? textOf(at(key), key) : fallback;
  }

  // Reads `key` into `field` when it is there: true if read, false if absent or
  // null (the field untouched). Integers, floating point, bool, strings and
  // vectors of those.
  template <class T>
  bool read(const char* key, T& field) const {
    if (!has(key)) return false;
    field = as<T>(at(key), key);
    return true;
  }

 private:
  template <class T>
  T as(const nlohmann::json& v, const char* key) const {
    if constexpr (std::is_same_v<T, bool>) {
      return booleanOf(v, key);
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
      // In range of T before narrowing: 2^32 into an int was read as 0.
      bool fits = false;
      if (v.is_number_unsigned()) {
        fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      } else {
        const int64_t x = v.get<int64_t>();
        fits = x < 0 ? std::is_signed_v<T> && x >= static_cast<int64_t>(std::numeric_limits<T>::min())
                     : static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      }
      if (!fits) fail(key, v.dump() + " is out of range for this key");
      return v.get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
      return v.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      return textOf(v, key);
    } else {
      static_assert(std::is_same_v<T, std::vector<typename T::value_type>>, "JsonFields::read: unsupported type");
      if (!v.is_array()) fail(key, "expected a list, got " + v.dump());
      T out;
      for (const auto& e : v) out.push_back(as<typename T::value_type>(e, key));
      return out;
    }
  }
  bool booleanOf(const nlohmann::json& v, const char* key) const;
  std::string textOf(const nlohmann::json& v, const char* key) const;

  const nlohmann::json& j_;
  std::string source_;
  std::string prefix_;
};

}  // namespace strata::io
