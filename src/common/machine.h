// What the machine allows a process to allocate, for validating sizes that come from
// outside (a model's dimensions, a batch) before allocating them: an impossible size is a
// clear error instead of std::bad_alloc or the OOM killer.
#pragma once

#include <cstdint>
#include <string>

namespace tediserve {

// The smaller of physical RAM (sysconf) and the process's address-space / data-segment
// limits (RLIMIT_AS, RLIMIT_DATA) when set. Never 0: 1 GiB when nothing can be read.
std::uint64_t UsableMemoryBytes();

// "3.2 GiB", "512.0 MiB", "96 bytes".
std::string FormatBytes(std::uint64_t bytes);

}  // namespace tediserve
