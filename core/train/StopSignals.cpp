#include "train/StopSignals.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "train/Trainer.h"

namespace strata::train {

namespace {

std::atomic<Trainer*> gTarget{nullptr};
std::atomic<int> gSignal{0};
std::atomic<bool> gExitAtOnce{false};
const char* gWho = "strata";
const char* gAction = "";

void say(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;
}

extern "C" void onStopSignal(int sig) {
  const int saved = errno;
  if (gSignal.exchange(sig) != 0) {
    // The second signal: stop now, as the signal's default action does.
    say("\n");
    say(gWho);
    say(": stopping at once\n");
    std::signal(sig, SIG_DFL);
    ::raise(sig);
    errno = saved;
    return;
  }
  if (Trainer* t = gTarget.load()) t->requestStop();
  const char* name = sig == SIGINT    ? "Ctrl-C (SIGINT)"
                     : sig == SIGTERM ? "SIGTERM"
                     : sig == SIGHUP  ? "SIGHUP"
                                      : "a signal";
  say("\n");
  say(gWho);
  say(": ");
  say(name);
  say(": ");
  if (gExitAtOnce.load()) {
    say("stopped, nothing written\n");
    ::_exit(128 + sig);
  }
  say(gAction);
  say(" (send it again to stop at once)\n");
  errno = saved;
}

static_assert(std::atomic<Trainer*>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

}  // namespace

StopOnSignals::StopOnSignals(const char* who, const char* action) : StopOnSignals(nullptr, who, action) {}

StopOnSignals::StopOnSignals(Trainer& trainer, const char* who, const char* action)
    : StopOnSignals(&trainer, who, action) {}

StopOnSignals::StopOnSignals(Trainer* trainer, const char* who, const char* action) {
  gWho = who;
  gAction = action;
  gSignal.store(0);
  gExitAtOnce.store(false);
  previousTarget_ = gTarget.exchange(trainer);
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &previous_[i]);
  // A reader that went away (a closed terminal, `| head`) must not end the run
  // without its checkpoint: writes to it fail instead.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &previousPipe_);
}

StopOnSignals::~StopOnSignals() {
  for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  ::sigaction(SIGPIPE, &previousPipe_, nullptr);
  gTarget.store(previousTarget_);
  gExitAtOnce.store(false);
}

void StopOnSignals::setExitAtOnce(bool atOnce) { gExitAtOnce.store(atOnce); }

int StopOnSignals::signalReceived() const { return gSignal.load(); }

}  // namespace strata::train
