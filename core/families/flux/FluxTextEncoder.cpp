#include "families/flux/FluxTextEncoder.h"

#include "common/Error.h"
#include "families/flux/FluxTextEncoders.h"

namespace strata::families {

FluxTextEncoder::FluxTextEncoder(Loader load, std::string identity, int64_t sequenceLength)
    : load_(std::move(load)), identity_(std::move(identity)), sequenceLength_(sequenceLength) {}

FluxTextEncoder::FluxTextEncoder(std::shared_ptr<FluxTextEncoders> loaded) : encoders_(std::move(loaded)) {
  if (!encoders_) throw Error("FluxTextEncoder: no text encoders");
  identity_ = encoders_->identity();
  sequenceLength_ = encoders_->maxSequenceLength();
}

FluxTextEncoder::~FluxTextEncoder() = default;

diffusion::TextEncoding FluxTextEncoder::encode(const std::vector<std::string>& prompts) {
  if (released_) throw Error("text encoding: the text encoders were released after caching");
  if (!encoders_) encoders_ = load_();
  auto e = encoders_->encode(prompts);
  diffusion::TextEncoding out;
  out.tokens = e.t5;  // FLUX.1 gives T5 no attention mask
  out.pooled = e.pooled;
  return out;
}

void FluxTextEncoder::release() {
  if (encoders_) encoders_->release();
  encoders_.reset();
  released_ = true;
}

}  // namespace strata::families
