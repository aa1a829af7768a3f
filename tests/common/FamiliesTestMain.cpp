// The main() of every test program that links strata_core: like a program a
// user runs, it registers the model families before anything else.
#include <gtest/gtest.h>

#include "families/Registration.h"

int main(int argc, char** argv) {
  strata::families::registerAll();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
