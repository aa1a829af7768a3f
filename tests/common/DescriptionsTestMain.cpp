// The main() of the tests that read the families' descriptions but run no family
// (config's): the descriptions are registered before anything else, as
// registerAll() does in a program.
#include <gtest/gtest.h>

#include "families/descriptions/Descriptions.h"

int main(int argc, char** argv) {
  strata::families::registerDescriptions();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
