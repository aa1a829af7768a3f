#include "dist/C10dCollective.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if STRATA_DIST_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if STRATA_DIST_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#if STRATA_DIST_GLOO && defined(STRATA_HAS_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#define STRATA_GLOO_STAGES_CARDS 1
#else
#define STRATA_GLOO_STAGES_CARDS 0
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace strata::dist {

namespace {

#if STRATA_TORCH_C10D_BACKENDS
using Group = c10d::Backend;  // 2.x: a process group's backend holds the collectives
#else
using Group = c10d::ProcessGroup;
#endif

std::string seconds(std::chrono::milliseconds t) { return std::to_string(t.count() / 1000) + " s"; }

std::string where(const LaunchEnv& env) { return env.masterAddr + ":" + std::to_string(env.masterPort); }

bool loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

#if STRATA_DIST_GLOO
// The network device Gloo talks through: GLOO_SOCKET_IFNAME's interface where set
// (as PyTorch reads it), loopback for a run on one host, else this host's name.
std::shared_ptr<::gloo::transport::Device> glooDevice(const LaunchEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (loopback(env.masterAddr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

// c10's messages carry a stack trace after their first line.
std::string firstLine(const std::string& what) { return what.substr(0, what.find('\n')); }

std::vector<uint8_t> bytesOf(const std::string& s) { return {s.begin(), s.end()}; }
std::string stringOf(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

#if STRATA_GLOO_STAGES_CARDS
// One thread that issues a Gloo group's collectives in the order they were posted.
// Gloo pairs the ranks' calls by the order they are made in; a sum of a card's
// buffer can only be issued once its copy to the host has landed, and a call made
// meanwhile by another thread must not overtake it.
class IssueQueue {
 public:
  // `run` false: the queue is closing and the task is not to be issued.
  using Task = std::function<void(bool run)>;
  IssueQueue() : thread_([this] { loop(); }) {}
  IssueQueue(const IssueQueue&) = delete;
  IssueQueue& operator=(const IssueQueue&) = delete;
  ~IssueQueue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }
  void post(Task task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!closing_) {
        tasks_.push_back(std::move(task));
        ready_.notify_one();
        return;
      }
    }
    task(false);
  }

 private:
  void loop() {
    for (;;) {
      Task task;
      bool run = true;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return closing_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
        run = !closing_;
      }
      task(run);
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> tasks_;
  bool closing_ = false;
  std::thread thread_;  // last: starts once the members it reads exist
};
#endif

// The first sum that failed after its wait had returned (on a card, in stream order).
struct FailureSlot {
  mutable std::mutex mutex;
  std::string what;
  void record(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (what.empty()) what = why;
  }
  std::string get() const {
    std::lock_guard<std::mutex> lock(mutex);
    return what;
  }
};

}  // namespace

std::string backendProblem(const c10::Device& device) {
  if (device.is_cuda()) {
#if STRATA_DIST_NCCL
    return {};
#else
    return "this build has no NCCL process group (its LibTorch has none, or nccl.h was not found when it was built)";
#endif
  }
#if STRATA_DIST_GLOO
  return {};
#else
  return "this build has no Gloo process group (Gloo's headers, Debian's libgloo-dev, were not found when it was "
         "built)";
#endif
}

#if STRATA_GLOO_STAGES_CARDS
namespace {

// A sum of a card's buffer on a Gloo group: copied to pinned host memory on a side
// stream (in the wire dtype: float32 for bfloat16), summed on the host once that copy
// has landed, and copied back on the stream that waits for it. That stream holds at a
// host function until the host sum is done, so the host goes on queueing the optimizer
// step and the next forward (a host that waited would leave the card idle while it
// launched them).
struct StagedSum {
  at::Tensor host;             // pinned, the buffer's bytes
  at::cuda::CUDAEvent copied;  // the copy to the host has landed
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<FailureSlot> failed;
  std::string where;  // "over N ranks on rank r"

  std::mutex mutex;
  std::condition_variable settledCv;
  bool settled = false;  // issued, or failed to be
  c10::intrusive_ptr<c10d::Work> work;
  std::string error;
  // Set last by the host function: the sum may now be freed, off that thread (freeing
  // its event and pinned memory calls CUDA, which a host function must not).
  std::atomic<bool> released{false};

  void settle(c10::intrusive_ptr<c10d::Work> w, std::string why) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      work = std::move(w);
      error = std::move(why);
      settled = true;
    }
    settledCv.notify_all();
  }

  // On the stream's host-function thread: no CUDA call here. Waits, bounded, for the
  // host sum; a failure leaves NaN (all bits set is NaN in every float format) for
  // the copy back, so the step is not finite and stops with `failed`'s reason.
  void holdUntilSummed() {
    holdUntilSummedOrFailed();
    released = true;  // last: nothing here is touched after it
  }

 private:
  void holdUntilSummedOrFailed() {
    std::string why = failed->get();  // an earlier sum failed: do not wait again
    c10d::Work* w = nullptr;          // the sum keeps it (its last reference must not go here)
    if (why.empty()) {
      std::unique_lock<std::mutex> lock(mutex);
      if (settledCv.wait_for(lock, timeout, [this] { return settled; })) {
        why = error;
        w = work.get();
      } else {
        why = "it was not started within " + seconds(timeout);
      }
    }
    if (why.empty()) try {
        if (!w->wait(timeout)) why = "it did not finish within " + seconds(timeout);
      } catch (const std::exception& e) {
        why = firstLine(e.what());
      }
    if (why.empty()) return;
    std::memset(host.data_ptr(), 0xFF, host.nbytes());
    failed->record("an all-reduce of a card's buffer " + where + " failed (did another rank stop?): " + why);
  }
};

void CUDART_CB holdStreamUntilSummed(void* sum) { static_cast<StagedSum*>(sum)->holdUntilSummed(); }

}  // namespace
#endif

struct C10dCollective::Impl {
  LaunchEnv env;
  ConnectOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Group> group;
  std::shared_ptr<FailureSlot> failed = std::make_shared<FailureSlot>();
#if STRATA_GLOO_STAGES_CARDS
  // Gloo's: a group of its own for the sums of cards' buffers, issued by `issuer` once
  // each buffer's copy to the host has landed, so that the host's own small calls on
  // `group` (a step's agreement) never wait behind a step's gradients.
  c10::intrusive_ptr<Group> cardGroup;
  std::mutex sideMutex;
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> sideStreams;  // per card: the copies to the host
  // Sums whose host function is queued, kept until it has run (StagedSum::released).
  std::vector<std::shared_ptr<StagedSum>> held;

  void hold(std::shared_ptr<StagedSum> sum) {
    std::lock_guard<std::mutex> lock(sideMutex);
    held.erase(std::remove_if(held.begin(), held.end(), [](const auto& s) { return s->released.load(); }), held.end());
    held.push_back(std::move(sum));
  }
#endif
#if STRATA_DIST_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // `group` where it is NCCL's
#endif
#if STRATA_GLOO_STAGES_CARDS
  // Issues cardGroup's sums in the order they were started. Last, so that it closes
  // first, before the groups go.
  std::unique_ptr<IssueQueue> issuer;
#endif

  ~Impl() {
#if STRATA_GLOO_STAGES_CARDS
    issuer.reset();
    // A host function still queued reads its sum when its stream reaches it: those
    // are left to the process's end rather than freed under it.
    for (auto& s : held)
      if (!s->released.load()) new std::shared_ptr<StagedSum>(std::move(s));
#endif
#if STRATA_DIST_NCCL
    // The non-blocking end NCCL's destructor would give the group anyway (its
    // communicators aborted, not waited for), without its warning that Python's
    // destroy_process_group() was not called.
    if (nccl) try {
        nccl->abort();
      } catch (...) {
      }
#endif
  }

  std::string overRanks() const {
    return "over " + std::to_string(env.worldSize) + " ranks on rank " + std::to_string(env.rank);
  }

  void throwIfFailed() const {
    if (auto why = failed->get(); !why.empty()) throw Error(why);
  }

  // The group's call `make` (an all-reduce, a broadcast), its failure to start said.
  c10::intrusive_ptr<c10d::Work> issue(const std::function<c10::intrusive_ptr<c10d::Work>()>& make, const char* what) {
    try {
      return make();
    } catch (const std::exception& e) {
      throw Error(std::string(what) + " " + overRanks() +
                  " failed to start (did another rank stop?): " + firstLine(e.what()));
    }
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    try {
      // NCCL: the caller's stream waits for the collective and the host goes on
      // queueing (a wait with a timeout would block the host until the card is done,
      // leaving it idle while the optimizer step is launched); the group's watchdog
      // bounds it with the same timeout, and a host read of the result waits in order.
      // Gloo works on the host: its wait is the bound.
      if (options.device.is_cuda()) {
        work->wait();
      } else if (!work->wait(options.collectiveTimeout)) {
        throw Error(std::string(what) + " did not finish within " + seconds(options.collectiveTimeout));
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(std::string(what) + " " + overRanks() + " failed (did another rank stop?): " + firstLine(e.what()));
    }
  }

  // The dtype a `t` buffer is summed or broadcast in. Gloo (LibTorch 1.13's at least)
  // has no bfloat16: it goes as float32 there, exactly for a broadcast and more
  // precisely for a sum. NCCL takes it as it is.
  at::ScalarType wireType(at::ScalarType t) const {
    return options.device.is_cpu() && t == at::kBFloat16 ? at::kFloat : t;
  }

  // Whether a sum of a buffer on `device` is staged through the host in stream order.
  bool stagesOnHost(const c10::Device& device) const {
#if STRATA_GLOO_STAGES_CARDS
    return cardGroup && options.device.is_cpu() && device.is_cuda();
#else
    (void)device;
    return false;
#endif
  }

  std::unique_ptr<train::PendingSum> startSum(const at::Tensor& buffer);

  // `tensors` packed per device and dtype into flat buffers on the group's device
  // (on their own card where `onTheirCard` and the group stages cards' sums); `run`
  // gets each buffer; the results are copied back in place.
  template <typename Run>
  void packed(std::vector<at::Tensor>& tensors, bool onTheirCard, Run run) {
    throwIfFailed();
    at::NoGradGuard noGrad;
    // Buffers in the order their first tensor comes: the same on every rank, whatever
    // its cards are called (a map by device name would put "cuda:10" before "cuda:9"
    // on one replica and not on another, and pair up different parameters).
    std::vector<std::pair<std::pair<std::string, int>, std::vector<size_t>>> groups;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::pair<std::string, int> key{tensors[i].device().str(), static_cast<int>(tensors[i].scalar_type())};
      auto at = std::find_if(groups.begin(), groups.end(), [&key](const auto& g) { return g.first == key; });
      if (at == groups.end()) at = groups.insert(groups.end(), {key, {}});
      at->second.push_back(i);
    }
    for (const auto& [key, members] : groups) {
      const at::Tensor& only = tensors[members.front()];
      const c10::Device target = onTheirCard && stagesOnHost(only.device()) ? only.device() : options.device;
      const at::ScalarType wire = wireType(only.scalar_type());
      if (members.size() == 1 && only.is_contiguous() && only.device() == target && wire == only.scalar_type()) {
        // Already one flat buffer where it is summed (the reducer packs its own):
        // reduced in place, without a copy there and back.
        at::Tensor buffer = only.view({-1});
        run(buffer);
        continue;
      }
      std::vector<at::Tensor> flat;
      for (size_t i : members) flat.push_back(tensors[i].reshape({-1}));
      at::Tensor buffer = at::cat(flat).to(target, wire).contiguous();
      run(buffer);
      const at::Tensor result = buffer.to(only.device());
      int64_t offset = 0;
      for (size_t i : members) {
        const int64_t n = tensors[i].numel();
        tensors[i].copy_(result.slice(0, offset, offset + n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  }
};

namespace {

// With `wide` defined the sum ran on that copy of `buffer` in the wire dtype, copied back at the wait.
class C10dPendingSum final : public train::PendingSum {
 public:
  C10dPendingSum(C10dCollective::Impl* impl, c10::intrusive_ptr<c10d::Work> work, at::Tensor buffer = {},
                 at::Tensor wide = {})
      : impl_(impl), work_(std::move(work)), buffer_(std::move(buffer)), wide_(std::move(wide)) {}
  void wait() override {
    impl_->wait(work_, "an all-reduce");
    if (wide_.defined()) {
      at::NoGradGuard noGrad;
      buffer_.copy_(wide_);
    }
  }

 private:
  C10dCollective::Impl* impl_;
  c10::intrusive_ptr<c10d::Work> work_;
  at::Tensor buffer_, wide_;
};

#if STRATA_GLOO_STAGES_CARDS
class StagedPendingSum final : public train::PendingSum {
 public:
  StagedPendingSum(C10dCollective::Impl* impl, at::Tensor buffer, std::shared_ptr<StagedSum> sum)
      : impl_(impl), buffer_(std::move(buffer)), sum_(std::move(sum)) {}
  void wait() override {
    impl_->throwIfFailed();
    const c10::cuda::CUDAGuard guard(buffer_.device());
    const auto stream = c10::cuda::getCurrentCUDAStream(buffer_.device().index());
    impl_->hold(sum_);
    // The copy to the host goes before the host function in this stream's order:
    // a host function may only wait for work queued ahead of it.
    sum_->copied.block(stream);
    const cudaError_t launched = cudaLaunchHostFunc(stream.stream(), &holdStreamUntilSummed, sum_.get());
    if (launched != cudaSuccess) {
      sum_->released = true;
      throw Error("an all-reduce " + impl_->overRanks() + ": the wait for the host's sum could not be queued on " +
                  buffer_.device().str() + ": " + cudaGetErrorString(launched));
    }
    at::NoGradGuard noGrad;
    if (sum_->host.scalar_type() == buffer_.scalar_type()) {
      buffer_.copy_(sum_->host, /*non_blocking=*/true);
    } else {
      // To the card in the stream's order, then converted there: a copy that converts on
      // the host would read the host buffer now, before its sum.
      buffer_.copy_(sum_->host.to(buffer_.device(), /*non_blocking=*/true));
    }
  }

 private:
  C10dCollective::Impl* impl_;
  at::Tensor buffer_;
  std::shared_ptr<StagedSum> sum_;
};
#endif

}  // namespace

std::unique_ptr<train::PendingSum> C10dCollective::Impl::startSum(const at::Tensor& buffer) {
  throwIfFailed();
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  o.timeout = options.collectiveTimeout;
#if STRATA_GLOO_STAGES_CARDS
  if (stagesOnHost(buffer.device())) {
    const c10::DeviceIndex card = buffer.device().index();
    const c10::cuda::CUDAGuard guard(buffer.device());
    c10::cuda::CUDAStream side = [&] {
      std::lock_guard<std::mutex> lock(sideMutex);
      auto found = sideStreams.find(card);
      if (found == sideStreams.end())
        found = sideStreams.emplace(card, c10::cuda::getStreamFromPool(/*isHighPriority=*/true, card)).first;
      return found->second;
    }();
    auto sum = std::make_shared<StagedSum>();
    sum->timeout = options.collectiveTimeout;
    sum->failed = failed;
    sum->where = overRanks();
    sum->host = at::empty(buffer.sizes(),
                          buffer.options().device(c10::kCPU).dtype(wireType(buffer.scalar_type())).pinned_memory(true));
    {
      // The copy to the host after what the caller's stream has queued (the gradients).
      at::cuda::CUDAEvent queued;
      queued.record(c10::cuda::getCurrentCUDAStream(card));
      queued.block(side);
      const c10::cuda::CUDAStreamGuard onSide(side);
      at::NoGradGuard noGrad;
      // Converted on the card, on this stream: a copy that converts on its way to the
      // host would wait for the stream on the host.
      sum->host.copy_(buffer.to(sum->host.scalar_type()), /*non_blocking=*/true);
      sum->copied.record(side);
    }
    // A buffer the caller frees before the copy has read it is not handed out again.
    c10::cuda::CUDACachingAllocator::recordStream(buffer.storage().data_ptr(), side);
    Group* g = cardGroup.get();
    issuer->post([sum, g, o](bool run) {
      if (!run) return sum->settle({}, "the group closed before it was started");
      try {
        sum->copied.synchronize();
        std::vector<at::Tensor> one{sum->host};
        sum->settle(g->allreduce(one, o), {});
      } catch (const std::exception& e) {
        sum->settle({}, firstLine(e.what()));
      }
    });
    return std::make_unique<StagedPendingSum>(this, buffer, std::move(sum));
  }
#endif
  const at::ScalarType wire = wireType(buffer.scalar_type());
  if (wire != buffer.scalar_type()) {
    std::vector<at::Tensor> one{buffer.to(wire)};
    auto work = issue([&] { return group->allreduce(one, o); }, "an all-reduce");
    return std::make_unique<C10dPendingSum>(this, std::move(work), buffer, one.front());
  }
  std::vector<at::Tensor> one{buffer};
  return std::make_unique<C10dPendingSum>(this, issue([&] { return group->allreduce(one, o); }, "an all-reduce"));
}

C10dCollective::C10dCollective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
C10dCollective::~C10dCollective() = default;
int C10dCollective::rank() const { return impl_->env.rank; }
int C10dCollective::worldSize() const { return impl_->env.worldSize; }

void C10dCollective::allReduceSum(std::vector<at::Tensor>& tensors) {
  // A card's buffer on Gloo is summed in its stream's order, as a started sum is.
  impl_->packed(tensors, /*onTheirCard=*/true, [&](at::Tensor& buffer) { impl_->startSum(buffer)->wait(); });
}

bool C10dCollective::startsSumsOn(const c10::Device& device) const {
  const c10::Device& own = impl_->options.device;
  return device == own || (own.is_cpu() && device.is_cuda());
}

std::unique_ptr<train::PendingSum> C10dCollective::startAllReduceSum(const at::Tensor& buffer) {
  if (!startsSumsOn(buffer.device()) || !buffer.is_contiguous() || buffer.dim() != 1)
    throw Error("an all-reduce was started on a " + std::to_string(buffer.dim()) + "-d" +
                (buffer.is_contiguous() ? "" : ", non-contiguous") + " buffer on " + buffer.device().str() +
                "; the group on " + impl_->options.device.str() + " takes one flat contiguous buffer on " +
                (impl_->options.device.is_cpu() ? "the CPU or a CUDA card" : impl_->options.device.str()));
  return impl_->startSum(buffer);
}

std::string C10dCollective::failure() const { return impl_->failed->get(); }

void C10dCollective::broadcastFromRankZero(std::vector<at::Tensor>& tensors) {
  // Once a run (the LoRA's start): through the group's device, the host waiting.
  impl_->packed(tensors, /*onTheirCard=*/false, [&](at::Tensor& buffer) {
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    o.timeout = impl_->options.collectiveTimeout;
    std::vector<at::Tensor> one{buffer};
    impl_->wait(impl_->issue([&] { return impl_->group->broadcast(one, o); }, "a broadcast from rank 0"),
                "a broadcast from rank 0");
  });
}

std::string C10dCollective::shareFromRankZero(const std::string& key, const std::string& value) {
  const std::string storeKey = "strata/share/" + key;
  try {
    if (impl_->env.rank == 0) {
      impl_->store->set(storeKey, bytesOf(value));
      return value;
    }
    impl_->store->wait({storeKey}, impl_->options.storeTimeout);
    return stringOf(impl_->store->get(storeKey));
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(impl_->env.rank) + " waited for rank 0's '" + key + "' at " +
                where(impl_->env) + " (timeout " + seconds(impl_->options.storeTimeout) + "): " + firstLine(e.what()));
  }
}

std::shared_ptr<C10dCollective> connect(const LaunchEnv& env, const ConnectOptions& options) {
  if (const auto why = backendProblem(options.device); !why.empty())
    throw Error("data-parallel on " + options.device.str() + ": " + why);
  auto impl = std::make_unique<C10dCollective::Impl>();
  impl->env = env;
  impl->options = options;
  const std::string rankName = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.worldSize);

  // The rendezvous: rank 0 serves the store and waits (bounded) for every rank to join.
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.masterPort);
  so.isServer = env.rank == 0;
  so.numWorkers = static_cast<std::size_t>(env.worldSize);
  so.waitWorkers = true;
  so.timeout = options.connectTimeout;
  try {
    impl->store = c10::make_intrusive<c10d::TCPStore>(env.masterAddr, so);
  } catch (const std::exception& e) {
    const std::string what = firstLine(e.what());
    if (env.rank == 0 && (what.find("in use") != std::string::npos || what.find("EADDRINUSE") != std::string::npos))
      throw Error(rankName + ": MASTER_PORT " + std::to_string(env.masterPort) +
                  " is in use on this host; choose a free port (strata-train run --nproc picks one itself)");
    if (env.rank == 0)
      throw Error(rankName + ": not all WORLD_SIZE=" + std::to_string(env.worldSize) + " ranks joined at " +
                  where(env) + " within " + seconds(options.connectTimeout) +
                  " (is WORLD_SIZE right, and did every rank start?): " + what);
    throw Error(rankName + ": could not reach rank 0 at MASTER_ADDR:MASTER_PORT " + where(env) + " within " +
                seconds(options.connectTimeout) + " (is rank 0 running, and the address reachable?): " + what);
  }
  impl->store->setTimeout(options.storeTimeout);

  // The same config and build everywhere: each rank's fingerprint beside every other's.
  try {
    impl->store->set("strata/fingerprint/" + std::to_string(env.rank), bytesOf(options.fingerprint));
    std::string differ;
    for (int r = 0; r < env.worldSize; ++r) {
      const std::string key = "strata/fingerprint/" + std::to_string(r);
      try {
        impl->store->wait({key}, options.connectTimeout);
      } catch (const std::exception& e) {
        throw Error(rankName + ": not all WORLD_SIZE=" + std::to_string(env.worldSize) + " ranks joined at " +
                    where(env) + " within " + seconds(options.connectTimeout) + ": rank " + std::to_string(r) +
                    " is missing (is WORLD_SIZE right, and did every rank start?)");
      }
      if (stringOf(impl->store->get(key)) != options.fingerprint)
        differ += (differ.empty() ? "" : ", ") + std::to_string(r);
    }
    impl->store->set("strata/fingerprint-read/" + std::to_string(env.rank), bytesOf("1"));
    if (!differ.empty() && env.rank == 0) {
      // Rank 0 serves the store: it stays up until every rank has read the others'
      // fingerprints (each then says which differ), bounded, instead of resetting them mid-read.
      std::vector<std::string> read;
      for (int r = 1; r < env.worldSize; ++r) read.push_back("strata/fingerprint-read/" + std::to_string(r));
      try {
        impl->store->wait(read, std::min<std::chrono::milliseconds>(options.connectTimeout, std::chrono::seconds(10)));
      } catch (const std::exception&) {
        // A rank that is gone by now learns nothing more; the refusal below stands.
      }
    }
    if (!differ.empty())
      throw ConfigError(rankName + ": the config or the strata-train build of rank(s) " + differ +
                        " differs from this rank's; start every rank with the same config, --set overrides and "
                        "strata-train");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(rankName + ": comparing the ranks' configs at " + where(env) + ": " + firstLine(e.what()));
  }

  // The process group, on its own key space of the store.
  auto groupStore = c10::make_intrusive<c10d::PrefixStore>("strata/group", impl->store);
  try {
    if (options.device.is_cuda()) {
#if STRATA_DIST_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = options.collectiveTimeout;
      impl->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(groupStore, env.rank, env.worldSize, o);
      impl->group = impl->nccl;
#endif
    } else {
#if STRATA_DIST_GLOO
      auto o = c10d::ProcessGroupGloo::Options::create(options.collectiveTimeout);
      o->devices.push_back(glooDevice(env));
      impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(groupStore, env.rank, env.worldSize, o);
#if STRATA_GLOO_STAGES_CARDS
      // Made by every rank of a CUDA build (the builds are the same: the fingerprint),
      // whether or not it trains on cards.
      auto cardStore = c10::make_intrusive<c10d::PrefixStore>("strata/cards", impl->store);
      impl->cardGroup = c10::make_intrusive<c10d::ProcessGroupGloo>(cardStore, env.rank, env.worldSize, o);
      impl->issuer = std::make_unique<IssueQueue>();
#endif
#endif
    }
  } catch (const std::exception& e) {
    throw Error(rankName + ": the process group on " + options.device.str() + ": " + firstLine(e.what()));
  }
  return std::make_shared<C10dCollective>(std::move(impl));
}

}  // namespace strata::dist
