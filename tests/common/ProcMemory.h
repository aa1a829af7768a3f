#pragma once
// The process's resident memory as Linux reports it (/proc/self/status), for
// tests that bound a peak: VmHWM is the high-water mark of VmRSS, and writing
// "5" to /proc/self/clear_refs resets it to the current RSS. File pages the
// process has mapped and read count in RSS too, so a loader under test must
// release them (io::SafetensorsFile::releasePages) or they show up here.
#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace strata::test {

// A "VmRSS:" / "VmHWM:" / "RssFile:" line of /proc/self/status in bytes, -1 when absent.
inline int64_t procStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;  // "  123 kB"
  return -1;
}

// Returns freed heap to the system, then resets VmHWM to the current RSS.
// False where the kernel does not allow the reset (then a peak cannot be measured).
inline bool resetPeakRss() {
  ::malloc_trim(0);
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out) && procStatusBytes("VmHWM") <= procStatusBytes("VmRSS") + (1 << 20);
}

}  // namespace strata::test
