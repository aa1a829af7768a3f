#include "diffusion/TrainBatch.h"

#include <string>
#include <vector>

#include "common/Error.h"
#include "events/EventBus.h"
#include "train/FlowMatching.h"
#include "train/HostToDevice.h"

namespace strata::diffusion {

at::Tensor fitTokens(const at::Tensor& txt, int64_t tokens) {
  if (txt.size(0) == tokens) return txt;
  if (txt.size(0) > tokens) return txt.slice(0, 0, tokens);
  return at::cat({txt, at::zeros({tokens - txt.size(0), txt.size(1)}, txt.options())}, 0);
}

train::TrainItem nextReadableItem(train::RunContext& run, const train::Dataset& data, int64_t step) {
  const size_t n = data.size();
  for (size_t attempt = 0; attempt <= n; ++attempt) {
    const size_t index = run.nextDrawIndex(n);
    try {
      train::TrainItem item = data.item(index);
      data.readAhead(run.peekDrawIndex(n));  // read while the card runs this step
      return item;
    } catch (const std::exception& e) {
      int64_t& skipped = run.cursor().skippedItems;
      ++skipped;
      run.bus().publish(events::WarningEvent{
          std::string("dataset item skipped: ") + e.what() + " (" + std::to_string(skipped) + " skipped so far)",
          step});
    }
  }
  throw IoError("no readable dataset item: all " + std::to_string(n) + " failed to load");
}

DrawnBatch drawBatch(train::RunContext& run, const train::Dataset& data, const train::TextEmbedding& emptyPrompt,
                     int64_t batch, const DrawOptions& options, int64_t step) {
  const config::RunConfig& cfg = run.config();
  std::vector<train::TrainItem> items;
  for (int64_t i = 0; i < batch; ++i) items.push_back(nextReadableItem(run, data, step));
  const int64_t tokens = options.tokens > 0 ? options.tokens : items.front().txt.size(0);
  std::vector<at::Tensor> lat, txt, pooled;
  for (const auto& it : items) {
    if (!it.latents.sizes().equals(items.front().latents.sizes()))
      throw Error("a batch needs latents of one size: '" + it.caption + "' differs from '" + items.front().caption +
                  "' (use batch_size 1 or one resolution)");
    lat.push_back(it.latents);
    txt.push_back(fitTokens(it.txt, tokens));
    if (options.pooled) pooled.push_back(it.pooled);
  }
  const double p = cfg.train.captionDropoutRate;
  std::vector<bool> dropped(static_cast<size_t>(batch), false);
  if (p > 0) {
    for (int64_t b = 0; b < batch; ++b) {
      // Each sample's own draw (RunContext::sampleGenerator): the same whichever rank or batch holds it.
      auto gen = run.sampleGenerator(b, train::SampleStream::CaptionDropout);
      dropped[static_cast<size_t>(b)] = at::rand({1}, gen).item<double>() < p;
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (!dropped[static_cast<size_t>(b)]) continue;
    txt[static_cast<size_t>(b)] = fitTokens(emptyPrompt.txt, tokens);
    if (options.pooled) pooled[static_cast<size_t>(b)] = emptyPrompt.pooled;
  }
  // One sample is a view of its item (no copy: the item may be in pinned memory, read
  // ahead for the copy to the card); the batch is only read from here on.
  auto batched = [batch](const std::vector<at::Tensor>& parts) {
    return batch == 1 ? parts.front().unsqueeze(0) : at::stack(parts);
  };
  DrawnBatch out;
  out.latents = batched(lat);                        // [B, C, H, W]
  out.text = batched(txt);                           // [B, N_txt, D]
  if (options.pooled) out.pooled = batched(pooled);  // [B, D_pooled]
  return out;
}

std::string itemShapeChange(const train::Dataset& data) {
  if (!data.oneItemShape().empty()) return "";
  return "the datasets' items may differ in shape (more than one resolution or aspect-ratio bucket, or a latents "
         "folder, whose files are not all read beforehand)";
}

NoisedBatch noiseBatch(train::RunContext& run, const at::Tensor& latents, double mu) {
  // Each sample's noise and noise level from its own generator (RunContext::sampleGenerator),
  // drawn on the host: the same numbers wherever the run trains.
  std::vector<at::Tensor> noise, sigmas;
  for (int64_t b = 0; b < latents.size(0); ++b) {
    auto gen = run.sampleGenerator(b, train::SampleStream::Noise);
    noise.push_back(at::randn(latents.sizes().slice(1), gen, at::kFloat));
    sigmas.push_back(train::sampleSigmas(run.config().train.timestepType, 1, mu, gen));
  }
  const auto sigma = at::cat(sigmas);
  // Mixed where the latents are: on a card that is a few microseconds, on the host it
  // was milliseconds of the step with the card waiting. The same float32 operations
  // either way.
  const auto dev = latents.device();
  const auto batchNoise = noise.size() == 1 ? noise.front().unsqueeze(0) : at::stack(noise);
  auto noised = train::addNoise(latents, train::toDeviceAsync(batchNoise, dev), train::toDeviceAsync(sigma, dev));
  return {noised.noisy, noised.target, sigma};
}

}  // namespace strata::diffusion
