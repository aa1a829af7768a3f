#pragma once
// The ranks of a data-parallel run as the trainer sees them, without a c10d header
// (dist/ implements it on c10d's TCPStore and process groups). A run in one
// process has none (TrainerOptions::collective null) and takes none of its paths.
//
// Every call is collective: each rank makes the same calls in the same order, and
// each returns or throws (a rank gone, a timeout) within the implementation's
// bounded timeout, never hangs.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace strata::train {

// A sum Collective::startAllReduceSum started, waited for once.
class PendingSum {
 public:
  virtual ~PendingSum() = default;
  // Returns when what this thread queues next sees the sum in the buffer (on a CUDA
  // card the caller's stream waits and the host goes on); throws as allReduceSum does.
  // A sum on a card that fails after wait() returned leaves NaN in the buffer and
  // the reason in Collective::failure().
  virtual void wait() = 0;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  // Each tensor summed over the ranks, in place (one flat buffer per device is the caller's choice).
  virtual void allReduceSum(std::vector<at::Tensor>& tensors) = 0;
  // Whether startAllReduceSum takes buffers on `device`; the same answer on every
  // rank whose buffers are on the same kind of device.
  virtual bool startsSumsOn(const c10::Device& /*device*/) const { return false; }
  // Starts summing one flat contiguous `buffer` over the ranks in place and returns
  // without waiting, so that a backward goes on while it runs; nothing may write
  // `buffer` before wait(). Collective as allReduceSum: every rank starts the same
  // buffers in the same order. Only for buffers on a device startsSumsOn takes.
  // This one sums at once and leaves nothing to wait for.
  virtual std::unique_ptr<PendingSum> startAllReduceSum(const at::Tensor& buffer) {
    struct Done final : PendingSum {
      void wait() override {}
    };
    std::vector<at::Tensor> one{buffer};
    allReduceSum(one);
    return std::make_unique<Done>();
  }
  // Why a sum waited for in stream order (on a card) failed after its wait had
  // returned; empty while none has. Its buffer then holds NaN, so the step's loss
  // or gradient norm is not finite, and the trainer says this instead; every later
  // call throws it.
  virtual std::string failure() const { return {}; }
  // Rank 0's tensors copied into every rank's, in place.
  virtual void broadcastFromRankZero(std::vector<at::Tensor>& tensors) = 0;
  // Rank 0 publishes `value` under `key`; every other rank waits for it (a slow
  // step on rank 0, such as building the encode cache, is waited for within the
  // store's timeout) and gets it. Rank 0 gets its own value back.
  virtual std::string shareFromRankZero(const std::string& key, const std::string& value) = 0;
};

}  // namespace strata::train
