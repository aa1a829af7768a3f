#pragma once
// Include from exactly one file of a test executable: prints a stack trace when
// a test crashes (SIGSEGV, SIGBUS), so a crash on a machine without a debugger
// still says where.
#include <execinfo.h>
#include <unistd.h>

#include <csignal>

namespace {

extern "C" void strataTestCrashHandler(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char msg[] = "\n*** crash: stack trace (addr2line -e <binary> for lines) ***\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

const bool kInstalled = [] {
  std::signal(SIGSEGV, strataTestCrashHandler);
  std::signal(SIGBUS, strataTestCrashHandler);
  return true;
}();

}  // namespace
