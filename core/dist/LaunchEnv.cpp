#include "dist/LaunchEnv.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "common/Error.h"

namespace strata::dist {

namespace {

// The variable as an integer in [low, high]; `fallback` where it is unset (none: required).
int intVariable(const std::function<const char*(const char*)>& getenv, const char* name, long low, long high,
                std::optional<int> fallback) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') {
    if (fallback) return *fallback;
    throw ConfigError(std::string(name) + " is not set (a data-parallel run needs RANK, WORLD_SIZE, MASTER_ADDR and " +
                      "MASTER_PORT, as torchrun sets them)");
  }
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0')
    throw ConfigError(std::string(name) + "='" + text + "' is not a whole number");
  if (value < low || value > high)
    throw ConfigError(std::string(name) + "=" + text + " is outside " + std::to_string(low) + ".." +
                      std::to_string(high));
  return static_cast<int>(value);
}

}  // namespace

std::optional<LaunchEnv> launchEnvFrom(const std::function<const char*(const char*)>& getenvArg) {
  const std::function<const char*(const char*)> getenv =
      getenvArg ? getenvArg : [](const char* name) -> const char* { return std::getenv(name); };
  // c10d's ranks are ints; a bound keeps a mistyped size from reaching an allocation.
  constexpr long kMaxWorld = 1 << 16;
  LaunchEnv env;
  env.worldSize = intVariable(getenv, "WORLD_SIZE", 1, kMaxWorld, 1);
  const auto flag = [&getenv](const char* name) {
    const char* text = getenv(name);
    if (text == nullptr || *text == '\0' || std::string(text) == "0") return false;
    if (std::string(text) == "1") return true;
    throw ConfigError(std::string(name) + "='" + text + "' is not 0 or 1");
  };
  if (env.worldSize == 1 && !flag("STRATA_DIST_GROUP_OF_ONE")) return std::nullopt;
  if (const char* backend = getenv("STRATA_DIST_BACKEND"); backend != nullptr && *backend != '\0') {
    env.backend = backend;
    if (env.backend != "gloo" && env.backend != "nccl")
      throw ConfigError("STRATA_DIST_BACKEND='" + env.backend + "' is not gloo or nccl");
  }
  env.shareCards = flag("STRATA_DIST_SHARE_CARDS");
  if (const char* overlap = getenv("STRATA_DIST_OVERLAP"); overlap != nullptr && *overlap != '\0')
    env.overlap = flag("STRATA_DIST_OVERLAP");
  env.rank = intVariable(getenv, "RANK", 0, env.worldSize - 1, std::nullopt);
  env.localWorldSize = intVariable(getenv, "LOCAL_WORLD_SIZE", 1, env.worldSize, env.worldSize);
  env.localRank = intVariable(getenv, "LOCAL_RANK", 0, env.localWorldSize - 1, env.rank);
  const char* addr = getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') throw ConfigError("MASTER_ADDR is not set (the address of rank 0's host)");
  env.masterAddr = addr;
  env.masterPort = intVariable(getenv, "MASTER_PORT", 1, 65535, std::nullopt);
  return env;
}

}  // namespace strata::dist
