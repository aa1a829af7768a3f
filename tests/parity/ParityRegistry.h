#pragma once
// Parity checks register themselves per fixture kind; test_parity.cpp walks every
// fixture folder under the reference root and runs the checks of its kind.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace strata::parity {

using CheckFn = std::function<void(const std::filesystem::path& dir, const nlohmann::json& manifest)>;

struct ParityCheck {
  std::string kind;  // manifest "kind", e.g. "flux_transformer"
  std::string name;  // what it checks, e.g. "base forward (diffusers names)"
  CheckFn run;       // reports mismatches through EXPECT_* / ADD_FAILURE
};

std::vector<ParityCheck>& registry();
bool registerCheck(ParityCheck check);

}  // namespace strata::parity

#define STRATA_PARITY_CONCAT_INNER(a, b) a##b
#define STRATA_PARITY_CONCAT(a, b) STRATA_PARITY_CONCAT_INNER(a, b)
// STRATA_PARITY_CHECK("flux_transformer", "base forward", fn);
#define STRATA_PARITY_CHECK(kind, name, fn)                                  \
  static const bool STRATA_PARITY_CONCAT(strataParityRegistered, __LINE__) = \
      ::strata::parity::registerCheck({kind, name, fn})
