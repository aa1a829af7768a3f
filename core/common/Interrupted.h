#pragma once
// The work was stopped on request (Ctrl-C, the app's Stop) at a point where
// nothing is lost by stopping; the message says where ("caching latents (12 of 600 ...)").
#include "common/Error.h"

namespace strata {

class Interrupted : public Error {
 public:
  using Error::Error;
};

}  // namespace strata
