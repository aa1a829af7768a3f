#pragma once
// What every family of this build says about itself (config/FamilyRegistry.h),
// registered without its runs: a light library (config/ and io/ only) for what
// reads descriptions and trains nothing, e.g. config/'s tests. registerAll()
// (families/Registration.h) calls it first.
namespace strata::families {

// Registers every family's description, in the chooser's order. Safe to call more
// than once and from several threads; later calls do nothing.
void registerDescriptions();

}  // namespace strata::families
