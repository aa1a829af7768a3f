// The FLUX.2 sampler and the whole FLUX.2 pipeline of every "flux2_pipeline"
// folder on CUDA in float32 (TF32 off): the CPU parity checks' numbers
// (tests/parity/Flux2PipelineSamplingChecks.cpp, Flux2PipelineImageChecks.cpp) at
// each output's tolerance, from model/ and from singles/.
#include <gtest/gtest.h>

#include <iostream>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "gpu/GpuStats.h"
#include "parity/Flux2PipelineRuns.h"

using namespace strata;

TEST(Flux2PipelineGpu, SamplingAndImagesFromThePromptTextOnCuda) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto folders = test::fixturesOfKind("flux2_pipeline");
  ASSERT_FALSE(folders.empty()) << "no flux2_pipeline fixture under " << test::referenceDir();
  const test::gpu::NoTf32 exactFloat32;
  for (const auto& [dir, manifest] : folders) {
    const parity::Flux2PipelineFixture f(dir, manifest);
    for (const bool single : {false, true}) {
      std::cout << "[flux2 pipeline gpu] " << dir.string() << " (" << (single ? "singles/" : "model/") << ")"
                << std::endl;
      SCOPED_TRACE(dir.string() + (single ? " singles/" : " model/"));
      parity::expectFlux2SamplingMatches(f, single, cuda);
      parity::expectFlux2PipelineImagesMatch(f, single, cuda);
    }
  }
}
