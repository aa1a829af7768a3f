// A FIFO or a device given as the config (issue 32, point 8): `strata-train
// validate`, `plan` and `run` blocked in open() forever on a FIFO. Each must
// refuse it at once, exit 2 and name the file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>

#include "CliProcess.h"
#include "common/TestSupport.h"

namespace fs = std::filesystem;
using namespace strata::test::cli;

TEST(SpecialFilesCli, FifoOrDeviceAsConfigIsRefusedAtOnce) {
  if (!fs::exists(strataTrainPath())) GTEST_FAIL() << "strata-train not built at " << strataTrainPath();
  strata::test::TempDir tmp;
  const fs::path fifo = tmp / "run.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path zero = tmp / "zero.yaml";
  fs::create_symlink("/dev/zero", zero);
  for (const fs::path& config : {fifo, zero}) {
    for (const char* command : {"validate", "plan", "run"}) {
      Child c({command, config.string()}, tmp / "out.log");
      const bool ended = c.waitFor(std::chrono::seconds(20));
      EXPECT_TRUE(ended) << command << " " << config << ": still running after 20 s (blocked on the file)";
      if (!ended) continue;
      EXPECT_EQ(c.exitCode(), 2) << command << " " << config << ": " << c.output();
      EXPECT_NE(c.output().find(config.string()), std::string::npos) << c.output();
      EXPECT_NE(c.output().find("not a regular file"), std::string::npos) << c.output();
    }
  }
}
