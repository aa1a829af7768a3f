// families::fluxOtherModules without images to encode: no text encoders or VAE, and a
// note that says why for every dataset type that is not images (jsonl included, which
// the validator refuses for FLUX but a plan made without validating may still see).
#include <gtest/gtest.h>

#include <string>

#include "families/flux/FluxPlanning.h"

using namespace strata;

TEST(FluxPlanning, EveryDatasetTypeWithoutImagesSaysWhyNoEncodersAreNeeded) {
  const std::pair<config::DatasetType, std::string> cases[] = {
      {config::DatasetType::Shapes, "shapes dataset"},
      {config::DatasetType::Synthetic, "synthetic dataset"},
      {config::DatasetType::Latents, "latents dataset"},
      {config::DatasetType::Jsonl, "jsonl dataset is text for a causal LM"},
  };
  for (const auto& [type, why] : cases) {
    config::RunConfig c;
    config::DatasetConfig d;
    d.type = type;
    c.datasets = {d};
    std::string note;
    EXPECT_TRUE(families::fluxOtherModules(c, "cpu", &note).empty()) << config::enumName(type);
    EXPECT_EQ(note.rfind("No text encoders or VAE: ", 0), 0u) << note;
    EXPECT_NE(note.find(why), std::string::npos) << note;
    EXPECT_EQ(note.back(), '.') << note;
  }
}
