#pragma once
// Two ranks of a data-parallel run as two threads of one test process, joined
// through c10d over loopback (tests/dist on Gloo, tests/gpu with cards' buffers).
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "dist/C10dCollective.h"
#include "dist/LaunchEnv.h"

namespace strata::test {

inline dist::LaunchEnv rankOf(int rank, int world, int port) {
  dist::LaunchEnv e;
  e.rank = rank;
  e.worldSize = world;
  e.localRank = rank;
  e.localWorldSize = world;
  e.masterAddr = "127.0.0.1";
  e.masterPort = port;
  return e;
}

// Timeouts short enough for a test that waits on one of them.
inline dist::ConnectOptions quickOptions(const std::string& fingerprint = "same") {
  dist::ConnectOptions o;
  o.connectTimeout = std::chrono::seconds(5);
  o.storeTimeout = std::chrono::seconds(20);
  o.collectiveTimeout = std::chrono::seconds(20);
  o.fingerprint = fingerprint;
  return o;
}

// `body` on two ranks at once; each one's result or error text.
template <typename Body>
std::vector<std::string> onTwoRanks(Body body, const std::vector<std::string>& fingerprints = {"same", "same"}) {
  const int port = freeLoopbackPort();
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      try {
        auto c = dist::connect(rankOf(r, 2, port), quickOptions(fingerprints[static_cast<size_t>(r)]));
        return body(*c, c);
      } catch (const std::exception& e) {
        return std::string("error: ") + e.what();
      }
    }));
  std::vector<std::string> out;
  for (auto& f : ranks) out.push_back(f.get());
  return out;
}

}  // namespace strata::test
