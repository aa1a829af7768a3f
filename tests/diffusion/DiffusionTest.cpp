// core/diffusion with stand-in parts: the generic image path keeps to the
// interfaces' contracts (rows on the CPU in float32, the seeded noise, the LoRA
// taken off again, the request checked) whatever text encoder, codec and
// denoiser a family plugs in.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "diffusion/GenerateImages.h"
#include "diffusion/ImageModels.h"

using namespace strata;
using namespace strata::diffusion;

namespace {

// A text encoder whose rows are the prompt's index, in float64 (not what the caches hold).
class CountingText : public TextEncoder {
 public:
  bool pooled = true;
  bool masked = false;
  int released = 0;
  std::vector<std::string> lastPrompts;
  TextEncoding encode(const std::vector<std::string>& prompts) override {
    if (released) throw Error("released");
    lastPrompts = prompts;
    const auto b = static_cast<int64_t>(prompts.size());
    TextEncoding e;
    e.tokens = at::arange(b * 3 * 4, at::kDouble).reshape({b, 3, 4});
    if (pooled) e.pooled = at::arange(b * 5, at::kDouble).reshape({b, 5});
    if (masked) e.mask = at::ones({b, 3}, at::kBool);
    return e;
  }
  const std::string& identity() const override { return id_; }
  int64_t sequenceLength() const override { return 3; }
  void release() override { ++released; }
  bool loaded() const override { return released == 0; }

 private:
  std::string id_ = "text id";
};

// A codec of 4 channels at factor 8 whose decode is the latents' first three channels.
class PlainCodec : public LatentCodec {
 public:
  int released = 0;
  at::Tensor encode(const at::Tensor& pixels) override { return pixels.slice(1, 0, 1).repeat({1, 4, 1, 1}); }
  at::Tensor decode(const at::Tensor& latents) override { return latents.slice(1, 0, 3).to(at::kFloat).cpu(); }
  at::Tensor normalize(const at::Tensor& raw) const override { return raw * 2; }
  at::Tensor denormalize(const at::Tensor& latents) const override { return latents / 2; }
  const std::string& identity() const override { return id_; }
  int64_t latentChannels() const override { return 4; }
  int64_t downscaleFactor() const override { return 8; }
  void release() override { ++released; }

 private:
  std::string id_ = "codec id";
};

}  // namespace

TEST(ImageModels, EncodeTextsGivesOneFloatRowPerTextOnTheCpu) {
  auto text = std::make_unique<CountingText>();
  auto* t = text.get();
  ImageModels models(std::make_unique<PlainCodec>(), std::move(text));
  EXPECT_EQ(models.textModelId(), "text id");
  EXPECT_EQ(models.imageModelId(), "codec id");
  EXPECT_EQ(models.downscaleFactor(), 8);
  const auto rows = models.encodeTexts({"a", "b"});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].txt.scalar_type(), at::kFloat);
  EXPECT_EQ(rows[1].txt.sizes().vec(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(rows[1].txt[0][0].item<float>(), 12.0f);  // row 1 starts at 3 x 4
  EXPECT_EQ(rows[1].pooled.sizes().vec(), (std::vector<int64_t>{5}));
  EXPECT_EQ(rows[1].pooled[0].item<float>(), 5.0f);
  t->pooled = false;  // a model without a pooled vector: an empty one per row
  EXPECT_EQ(models.encodeTexts({"a"}).at(0).pooled.numel(), 0);
  t->masked = true;  // the cache holds no mask: refused rather than dropped
  EXPECT_THROW(models.encodeTexts({"a"}), Error);
  t->masked = false;
  models.releaseTextEncoders();
  EXPECT_FALSE(models.textEncodersLoaded());
  EXPECT_THROW(models.encodeTexts({"a"}), Error);
}

TEST(ImageModels, NeedsBothParts) {
  EXPECT_THROW(ImageModels(nullptr, std::make_unique<CountingText>()), Error);
  EXPECT_THROW(ImageModels(std::make_unique<PlainCodec>(), nullptr), Error);
}

namespace {

struct Record {
  int applied = 0, removed = 0;
  at::Tensor noise;
  at::Tensor tokens;
  at::Tensor negative;
};

Denoiser recordingDenoiser(Record& rec, bool fail = false) {
  Denoiser d;
  d.patchSize = 2;
  d.applyLora = [&rec](const std::filesystem::path&, double multiplier) -> std::function<void()> {
    EXPECT_EQ(multiplier, 0.5);
    ++rec.applied;
    return [&rec] { ++rec.removed; };
  };
  d.sample = [&rec, fail](const at::Tensor& noise, const TextEncoding& text, const TextEncoding& negative,
                          const ImageRequest&) {
    rec.noise = noise;
    rec.tokens = text.tokens;
    rec.negative = negative.tokens;
    if (fail) throw std::runtime_error("sampler failed");
    return noise * 3;
  };
  return d;
}

}  // namespace

TEST(GenerateImages, SeededNoiseThroughTheDenoiserThenTheCodec) {
  CountingText text;
  PlainCodec codec;
  Record rec;
  ImageRequest r;
  r.prompts = {"a", "b"};
  r.seed = 7;
  r.width = 32;  // 2 x 8 x 2: a 4 x 2 latent
  r.height = 64;
  r.lora = "adapter.safetensors";
  r.loraMultiplier = 0.5;
  const auto out = generateImages(text, codec, recordingDenoiser(rec), r);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto expected = at::randn({2, 4, 8, 4}, gen, at::TensorOptions().dtype(at::kFloat));
  ASSERT_TRUE(rec.noise.defined());
  EXPECT_TRUE(test::allClose(rec.noise, expected, 0, 0));
  EXPECT_EQ(rec.tokens.size(0), 2);
  EXPECT_TRUE(test::allClose(out.latents, expected * 3, 0, 0));
  EXPECT_EQ(out.images.sizes().vec(), (std::vector<int64_t>{2, 3, 8, 4}));
  EXPECT_EQ(rec.applied, 1);
  EXPECT_EQ(rec.removed, 1);

  // Given latents are used as they are.
  r.latents = at::ones({2, 4, 8, 4});
  generateImages(text, codec, recordingDenoiser(rec), r);
  EXPECT_TRUE(test::allClose(rec.noise, r.latents, 0, 0));
}

TEST(GenerateImages, EncodesTheNegativePromptOnlyForADenoiserThatRunsANegativePass) {
  CountingText text;
  PlainCodec codec;
  Record rec;
  ImageRequest r;
  r.prompts = {"a", "b", "c"};
  r.width = r.height = 16;
  generateImages(text, codec, recordingDenoiser(rec), r);
  EXPECT_FALSE(rec.negative.defined());  // no wantsNegative: never

  auto d = recordingDenoiser(rec);
  std::vector<double> asked;
  d.wantsNegative = [&asked](const ImageRequest& request) {
    asked.push_back(request.guidance);
    return request.guidance > 1.0;
  };
  r.guidance = 1.0;
  generateImages(text, codec, d, r);
  EXPECT_FALSE(rec.negative.defined());
  r.guidance = 4.0;
  r.negativePrompt = "blurry";
  generateImages(text, codec, d, r);
  ASSERT_TRUE(rec.negative.defined());
  EXPECT_EQ(rec.negative.size(0), 3);  // one negative row per prompt
  EXPECT_EQ(text.lastPrompts, (std::vector<std::string>{"blurry", "blurry", "blurry"}));
  EXPECT_EQ(asked, (std::vector<double>{1.0, 4.0}));
}

TEST(GenerateImages, TakesTheLoraOffWhenTheSamplerThrows) {
  CountingText text;
  PlainCodec codec;
  Record rec;
  ImageRequest r;
  r.prompts = {"a"};
  r.width = r.height = 16;
  r.lora = "adapter.safetensors";
  r.loraMultiplier = 0.5;
  EXPECT_THROW(generateImages(text, codec, recordingDenoiser(rec, true), r), std::runtime_error);
  EXPECT_EQ(rec.applied, 1);
  EXPECT_EQ(rec.removed, 1);
}

TEST(GenerateImages, RefusesABadRequestBeforeSampling) {
  CountingText text;
  PlainCodec codec;
  Record rec;
  ImageRequest r;
  r.prompts = {"a"};
  r.width = 24;  // not a multiple of 2 x 8
  r.height = 16;
  EXPECT_THROW(generateImages(text, codec, recordingDenoiser(rec), r), ConfigError);
  r.width = 16;
  r.steps = 0;
  EXPECT_THROW(generateImages(text, codec, recordingDenoiser(rec), r), ConfigError);
  r.steps = 4;
  r.latents = at::zeros({1, 4, 4, 4});  // 16 px is a 2 x 2 latent
  EXPECT_THROW(generateImages(text, codec, recordingDenoiser(rec), r), ConfigError);
  r.latents = at::Tensor();
  r.prompts.clear();
  EXPECT_THROW(generateImages(text, codec, recordingDenoiser(rec), r), ConfigError);
  EXPECT_FALSE(rec.noise.defined());
  EXPECT_EQ(checkImageRequest(ImageRequest{{"a"}, {}, 1, 0, {}, 4, 1, 48, 32, {}}, 8, 2),
            (std::pair<int64_t, int64_t>{4, 6}));
}
