#include <gtest/gtest.h>

#include "nn/BlockIO.h"
#include "nn/Linear.h"

using strata::nn::BlockIO;

TEST(BlockIO, FieldsRoundTripKeepsUndefinedFields) {
  BlockIO io;
  io.img = at::ones({1, 4, 8});
  io.temb = at::zeros({1, 8});
  const auto back = BlockIO::fromFields(io.fields());
  EXPECT_TRUE(back.img.equal(io.img));
  EXPECT_TRUE(back.temb.equal(io.temb));
  EXPECT_FALSE(back.txt.defined());
  EXPECT_FALSE(back.mask.defined());
}

TEST(BlockIO, FromFieldsRejectsWrongCount) { EXPECT_THROW(BlockIO::fromFields({at::ones({1})}), std::exception); }

TEST(BlockIO, ToSameDeviceDoesNotCopy) {
  BlockIO io;
  io.img = at::ones({2, 3});
  io.txt = at::ones({2, 3});
  const auto moved = io.to(at::Device(at::kCPU));
  EXPECT_TRUE(moved.img.is_same(io.img));
  EXPECT_TRUE(moved.txt.is_same(io.txt));
}

namespace {
struct AddConstant final : strata::nn::LinearAdapter {
  double value;
  explicit AddConstant(double v) : value(v) {}
  at::Tensor delta(const at::Tensor&, const at::Tensor& base) override { return at::full_like(base, value); }
};
}  // namespace

TEST(Linear, ParametersCarryStateDictNamesAndAdaptersAreNotChildren) {
  strata::nn::Linear lin(3, 2);
  const auto params = lin->named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_TRUE(params.contains("weight"));
  EXPECT_TRUE(params.contains("bias"));
  auto adapter = std::make_shared<AddConstant>(1.5);
  lin->addAdapter(adapter);
  EXPECT_EQ(lin->named_parameters().size(), 2u);
  const auto x = at::randn({4, 3});
  EXPECT_TRUE(at::allclose(lin->forward(x), lin->forwardBase(x) + 1.5));
  lin->removeAdapter(adapter.get());
  EXPECT_TRUE(at::allclose(lin->forward(x), lin->forwardBase(x)));
}
