#pragma once
// The host heap after a streamed load has converted weights block by block.

namespace strata::io {

// The float copies a block's quantization freed lie between the quantized tensors
// the heap keeps; glibc keeps such holes resident (its mmap threshold grows with
// the sizes freed), so a CPU load would creep up by a block's worth of holes each
// time. Hands free heap pages back to the kernel (a no-op off glibc).
void releaseFreedHostMemory();

}  // namespace strata::io
