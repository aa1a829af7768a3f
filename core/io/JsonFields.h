#pragma once
// Typed reads of a JSON object's keys (config.json, adapter_config.json, ...),
// one copy for every model family. A key that is absent or null keeps the
// caller's default; a present key of the wrong type is a ConfigError
// "<source>: key '<prefix><key>': expected ..., got <value>" (the source names
// the file or the config kind, so the user knows where to look).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/Error.h"

namespace strata::io {

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
  std::string text(const char* key, const std::string& fallback) const { return has(key) ? textOf(at(key), key) : fallback; }

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
