// Walks every fixture folder under $STRATA_REFERENCE_DIR (default: the project's
// copy in tests/fixtures/reference), reads its manifest and runs every check
// registered for its kind. A folder of a kind with checks must match; a kind
// with no checks yet is listed as not checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "common/TestSupport.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;

namespace strata::parity {

std::vector<ParityCheck>& registry() {
  static std::vector<ParityCheck> checks;
  return checks;
}

bool registerCheck(ParityCheck check) {
  registry().push_back(std::move(check));
  return true;
}

}  // namespace strata::parity

TEST(Parity, EveryFixtureFolderMatchesItsReference) {
  const fs::path root = strata::test::referenceDir();
  ASSERT_TRUE(fs::is_directory(root)) << "reference root " << root << " is not a folder";

  std::vector<fs::path> folders;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file() && entry.path().filename() == "manifest.json")
      folders.push_back(entry.path().parent_path());
  }
  std::sort(folders.begin(), folders.end());
  ASSERT_FALSE(folders.empty()) << "no fixture folder (manifest.json) under " << root;

  int checkedFolders = 0;
  for (const auto& dir : folders) {
    nlohmann::json manifest;
    try {
      std::ifstream in(dir / "manifest.json");
      manifest = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      ADD_FAILURE() << dir / "manifest.json"
                    << ": not valid JSON: " << e.what();
      continue;
    }
    const std::string kind = manifest.value("kind", "");
    int ran = 0;
    for (const auto& check : strata::parity::registry()) {
      if (check.kind != kind) continue;
      if (ran == 0) std::cout << "[parity] " << dir.string() << " (" << kind << ")\n";
      std::cout << "[parity]   " << check.name << std::endl;
      SCOPED_TRACE(dir.string() + ": " + check.name);
      check.run(dir, manifest);
      ++ran;
    }
    if (ran == 0) {
      std::cout << "[parity] " << dir.string() << " (" << kind
                << "): not checked, Strata has no implementation of this kind yet\n";
    } else {
      ++checkedFolders;
    }
  }
  EXPECT_GT(checkedFolders, 0) << "no fixture folder under " << root << " was checked";
}
