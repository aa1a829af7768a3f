#include "dist/C10dCollective.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if STRATA_DIST_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if STRATA_DIST_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <map>
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

struct C10dCollective::Impl {
  LaunchEnv env;
  ConnectOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Group> group;
#if STRATA_DIST_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // `group` where it is NCCL's

  ~Impl() {
    // The non-blocking end NCCL's destructor would give the group anyway (its
    // communicators aborted, not waited for), without its warning that Python's
    // destroy_process_group() was not called.
    if (nccl) try {
        nccl->abort();
      } catch (...) {
      }
  }
#endif

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
      throw Error(std::string(what) + " over " + std::to_string(env.worldSize) + " ranks failed on rank " +
                  std::to_string(env.rank) + " (did another rank stop?): " + firstLine(e.what()));
    }
  }

  // `tensors` packed per device and dtype into flat buffers on the group's device;
  // `run` gets each buffer; the results are copied back in place.
  template <typename Run>
  void packed(std::vector<at::Tensor>& tensors, Run run) {
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
      if (members.size() == 1 && only.is_contiguous() && only.device() == options.device) {
        // Already one flat buffer where the group works (the reducer packs its own):
        // reduced in place, without a copy there and back.
        std::vector<at::Tensor> buffer{only.view({-1})};
        run(buffer);
        continue;
      }
      std::vector<at::Tensor> flat;
      for (size_t i : members) flat.push_back(tensors[i].reshape({-1}));
      std::vector<at::Tensor> buffer{at::cat(flat).to(options.device).contiguous()};
      run(buffer);
      const at::Tensor result = buffer[0].to(tensors[members.front()].device());
      int64_t offset = 0;
      for (size_t i : members) {
        const int64_t n = tensors[i].numel();
        tensors[i].copy_(result.slice(0, offset, offset + n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  }
};

C10dCollective::C10dCollective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
C10dCollective::~C10dCollective() = default;
int C10dCollective::rank() const { return impl_->env.rank; }
int C10dCollective::worldSize() const { return impl_->env.worldSize; }

void C10dCollective::allReduceSum(std::vector<at::Tensor>& tensors) {
  impl_->packed(tensors, [&](std::vector<at::Tensor>& buffer) {
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = impl_->options.collectiveTimeout;
    impl_->wait(impl_->group->allreduce(buffer, o), "an all-reduce");
  });
}

bool C10dCollective::startsSumsOn(const c10::Device& device) const {
  const c10::Device& own = impl_->options.device;
  return device == own || (own.is_cpu() && device.is_cuda());
}

namespace {

class C10dPendingSum final : public train::PendingSum {
 public:
  C10dPendingSum(C10dCollective::Impl* impl, c10::intrusive_ptr<c10d::Work> work)
      : impl_(impl), work_(std::move(work)) {}
  void wait() override { impl_->wait(work_, "an all-reduce"); }

 private:
  C10dCollective::Impl* impl_;
  c10::intrusive_ptr<c10d::Work> work_;
};

}  // namespace

std::unique_ptr<train::PendingSum> C10dCollective::startAllReduceSum(const at::Tensor& buffer) {
  if (!startsSumsOn(buffer.device()) || !buffer.is_contiguous() || buffer.dim() != 1)
    throw Error("an all-reduce was started on a " + std::to_string(buffer.dim()) + "-d" +
                (buffer.is_contiguous() ? "" : ", non-contiguous") + " buffer on " + buffer.device().str() +
                "; the group on " + impl_->options.device.str() + " takes one flat contiguous buffer on " +
                (impl_->options.device.is_cpu() ? "the CPU or a CUDA card" : impl_->options.device.str()));
  std::vector<at::Tensor> one{buffer};
  c10d::AllreduceOptions o;
  o.timeout = impl_->options.collectiveTimeout;
  try {
    return std::make_unique<C10dPendingSum>(impl_.get(), impl_->group->allreduce(one, o));
  } catch (const std::exception& e) {
    throw Error("an all-reduce over " + std::to_string(impl_->env.worldSize) + " ranks failed to start on rank " +
                std::to_string(impl_->env.rank) + " (did another rank stop?): " + firstLine(e.what()));
  }
}

void C10dCollective::broadcastFromRankZero(std::vector<at::Tensor>& tensors) {
  impl_->packed(tensors, [&](std::vector<at::Tensor>& buffer) {
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    o.timeout = impl_->options.collectiveTimeout;
    impl_->wait(impl_->group->broadcast(buffer, o), "a broadcast from rank 0");
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
#endif
    }
  } catch (const std::exception& e) {
    throw Error(rankName + ": the process group on " + options.device.str() + ": " + firstLine(e.what()));
  }
  return std::make_shared<C10dCollective>(std::move(impl));
}

}  // namespace strata::dist
