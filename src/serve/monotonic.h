// The clock of BatchResult's worker_received_ns, worker_done_ns and scheduler_received_ns
// (worker.proto): CLOCK_MONOTONIC (std::chrono::steady_clock on Linux) in nanoseconds, the
// same in every process of one machine.
#pragma once

#include <chrono>
#include <cstdint>

namespace tediserve::serve {

inline int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace tediserve::serve
