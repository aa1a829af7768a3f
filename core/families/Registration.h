#pragma once
// The one registration of the model families (train/ModelFamily.h): model.arch
// picks one of these. Every program calls registerAll() at the top of main()
// (strata, strata-train, the test mains). It is an explicit call on purpose: a
// static initialiser's side effect can be dropped by the linker when nothing
// references its object, and once was (the shipped app could not train).
namespace strata::families {

// Registers every model family this build has. Safe to call more than once and
// from several threads; later calls do nothing.
void registerAll();

}  // namespace strata::families
