#include "io/JsonFields.h"

#include <algorithm>

namespace strata::io {

void requireAtMost(const std::string& owner, const char* key, int64_t value, int64_t most) {
  if (value > most)
    throw ConfigError(owner + ": " + key + " is " + std::to_string(value) + ", more than " + std::to_string(most) +
                      " (far beyond any released model: a corrupt or hand-edited config?)");
}

void requireAgreement(const nlohmann::json& declared, const nlohmann::json& detected, const std::string& configJson,
                      const std::string& weights, const std::vector<std::string>& skip) {
  std::string differences;
  for (auto it = declared.begin(); it != declared.end(); ++it) {
    if (std::find(skip.begin(), skip.end(), it.key()) != skip.end()) continue;
    const auto d = detected.find(it.key());
    if (d == detected.end() || *d == it.value()) continue;
    if (d->is_number() && it.value().is_number() && d->get<double>() == it.value().get<double>()) continue;  // 3 vs 3.0
    differences += (differences.empty() ? "" : "; ") + it.key() + " is " + it.value().dump() + " there, " + d->dump() +
                   " in the weights";
  }
  if (!differences.empty())
    throw LoadError(configJson + " contradicts the weights (" + weights + "): " + differences +
                    " (the weights' shapes are what would train: fix or remove config.json)");
}

JsonFields::JsonFields(const nlohmann::json& object, std::string source, std::string prefix)
    : j_(object), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!j_.is_object()) {
    const std::string where = prefix_.empty() ? "" : " key '" + prefix_.substr(0, prefix_.size() - 1) + "'";
    throw ConfigError(source_ + ":" + where + " expected a JSON object, got " + j_.dump());
  }
}

bool JsonFields::has(const char* key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

void JsonFields::fail(const std::string& key, const std::string& what) const {
  throw ConfigError(source_ + ": key '" + prefix_ + key + "': " + what);
}

const nlohmann::json& JsonFields::at(const char* key) const {
  if (!has(key)) fail(key, "missing (required)");
  return j_.at(key);
}

int64_t JsonFields::integer(const char* key) const { return as<int64_t>(at(key), key); }

double JsonFields::number(const char* key) const { return as<double>(at(key), key); }

bool JsonFields::booleanOf(const nlohmann::json& v, const char* key) const {
  if (!v.is_boolean()) fail(key, "expected true or false, got " + v.dump());
  return v.get<bool>();
}

std::string JsonFields::textOf(const nlohmann::json& v, const char* key) const {
  if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace strata::io
