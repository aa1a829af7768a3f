// The ATen pieces shared by the FLUX blocks (models/flux/FluxOps.h) that do more than
// one op says: joinedTokens.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "common/TestSupport.h"
#include "models/flux/FluxOps.h"

using namespace strata;
using strata::test::allClose;

// joinedTokens is cat({txt, img}, 1); for the two halves, in order, of one tensor (a single
// block's output in BlockIO) it is that tensor, and the gradient reaches it whole.
TEST(FluxOps, JoinedTokensIsTheConcatenationAndTheWholeForHalves) {
  at::manual_seed(4);
  const auto y = at::randn({2, 7, 6}).requires_grad_(true);
  const auto out = y * 1.5;  // a block's output
  const auto txt = out.narrow(1, 0, 3);
  const auto img = out.narrow(1, 3, 4);
  const auto joined = flux::joinedTokens(txt, img);
  EXPECT_TRUE(joined.is_same(out));
  const auto g = at::randn({2, 7, 6});
  (joined * g).sum().backward();
  EXPECT_TRUE(allClose(y.grad(), g * 1.5, 1e-6, 1e-6));
  // Anything else is the copy: swapped halves, a gap, separate tensors, a strided base.
  const auto a = at::randn({2, 3, 6});
  const auto b = at::randn({2, 4, 6});
  const auto strided = at::randn({2, 6, 7}).transpose(1, 2);  // [2, 7, 6], not contiguous
  const std::vector<std::pair<at::Tensor, at::Tensor>> others = {{out.narrow(1, 4, 3), out.narrow(1, 0, 4)},
                                                                 {out.narrow(1, 0, 2), out.narrow(1, 3, 4)},
                                                                 {a, b},
                                                                 {strided.narrow(1, 0, 3), strided.narrow(1, 3, 4)}};
  for (const auto& [t, i] : others) {
    const auto j = flux::joinedTokens(t, i);
    EXPECT_FALSE(j.is_same(out));
    EXPECT_TRUE(allClose(j, at::cat({t, i}, 1), 0, 0));
  }
}
