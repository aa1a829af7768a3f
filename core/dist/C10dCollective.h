#pragma once
// train::Collective on PyTorch's own engine, c10d: a TCPStore (rank 0 serves it)
// for the rendezvous, the start's checks and rank 0's verdicts, and a process
// group for the tensors: NCCL on CUDA cards (where this LibTorch has it), Gloo on
// the CPU. Every wait is bounded: the store's connect and waits, and each
// collective, by ConnectOptions' timeouts. Gloo matches collectives across ranks
// by the order they are issued in: the sums of cards' buffers, issued once their
// copy to the host has landed, have a Gloo group and an issuing thread of their own.
#include <chrono>
#include <memory>
#include <string>

#include "dist/LaunchEnv.h"
#include "train/Collective.h"

namespace strata::dist {

struct ConnectOptions {
  // Rank 0's wait for every rank to join, the others' for rank 0's store, and the
  // comparison of the ranks' fingerprints.
  std::chrono::milliseconds connectTimeout = std::chrono::minutes(5);
  // The store's connect (all ranks joined) and every wait on it, rank 0's data
  // preparation (the encode cache) among them.
  std::chrono::milliseconds storeTimeout = std::chrono::minutes(30);
  // Each collective (an all-reduce, a broadcast); a rank that died or hangs is
  // noticed within it. Samples on rank 0 run between two of them.
  std::chrono::milliseconds collectiveTimeout = std::chrono::minutes(30);
  // The device this rank's tensors live on: CUDA takes NCCL, the CPU Gloo.
  c10::Device device = c10::Device(c10::kCPU);
  // What must be the same on every rank (the run config as run, the build);
  // compared with rank 0's through the store, a difference refused by name.
  std::string fingerprint;
};

// Whether this build can run data-parallel on `device` (Gloo for the CPU, NCCL
// for CUDA); empty, or why not.
std::string backendProblem(const c10::Device& device);

class C10dCollective;

// Joins the run `env` describes. Throws strata::Error with the reason: the port
// in use (rank 0), the master not reached in time, ranks missing at the
// timeout, a fingerprint that differs from rank 0's, no backend for the device.
std::shared_ptr<C10dCollective> connect(const LaunchEnv& env, const ConnectOptions& options);

class C10dCollective final : public train::Collective {
 public:
  ~C10dCollective() override;
  int rank() const override;
  int worldSize() const override;
  // Tensors are packed into one flat buffer per device and dtype, each reduced
  // (or broadcast) in one call, and unpacked in place.
  void allReduceSum(std::vector<at::Tensor>& tensors) override;
  // The group's device; Gloo also takes CUDA buffers: each is copied to pinned host
  // memory on a stream of its own, summed on the host, and copied back in the order
  // of the stream that waits for it (the host does not wait; see failure()).
  bool startsSumsOn(const c10::Device& device) const override;
  std::unique_ptr<train::PendingSum> startAllReduceSum(const at::Tensor& buffer) override;
  std::string failure() const override;
  void broadcastFromRankZero(std::vector<at::Tensor>& tensors) override;
  std::string shareFromRankZero(const std::string& key, const std::string& value) override;

  struct Impl;
  explicit C10dCollective(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::dist
