// The workload monitor of the reconfigurator (paper section 3.3; docs/design.md section 10):
// groups arriving requests into length classes (prompt and output length rounded up) and
// keeps, per class, the arrival rate over a sliding window and the class's SLO. No clock:
// every call carries `now` (seconds).
#pragma once

#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tediserve::plan {

// One class of requests as the planner sees it.
struct LengthClass {
  int prompt_len = 0;  // P_k (tokens, rounded up)
  int output_len = 0;  // O_k (tokens, a multiple of the block size)
  double rps = 0;      // arrivals per second
  double slo_s = 0;    // latency SLO (seconds)
};

struct MonitorOptions {
  double window_s = 300;   // arrival rates over the last window_s seconds
  int prompt_round = 256;  // prompt lengths rounded up to a multiple of this
  int output_round = 256;  // output lengths rounded up to a multiple of this (a block multiple)
  double start_s = 0;      // when monitoring began: until a full window has passed, rates
                           // are counts / (now - start_s)
  // > 0: a class reports the mean lengths of its arrivals in the window (prompt rounded up to
  // a token, output rounded up to a multiple of this, the block size) instead of its rounded
  // bound. The SLO of a class is its arrivals' mean SLO, which follows their real lengths;
  // lengths rounded up to 256 make a class of short outputs look up to 8x longer than the
  // requests whose SLOs it averages (docs/design.md 10.2). 0: the rounded bound.
  int mean_lengths_block = 0;
};

class WorkloadMonitor {
 public:
  static StatusOr<WorkloadMonitor> Create(const MonitorOptions& options);

  // One arrival. Errors (nothing recorded): lengths < 1, SLO not finite and > 0, `now` not
  // finite or earlier than the last arrival recorded.
  Status Record(double now, int prompt_len, int output_len, double slo_s);

  // The classes with at least one arrival inside (now - window_s, now], ordered by
  // (prompt, output); forgets older arrivals. rps = arrivals in the window / the window
  // (or the time since start_s while that is shorter, at least 1 s); slo_s = their mean SLO;
  // lengths: the class's rounded bound, or its arrivals' means (mean_lengths_block).
  std::vector<LengthClass> Classes(double now);

  const MonitorOptions& options() const { return options_; }

 private:
  explicit WorkloadMonitor(const MonitorOptions& o) : options_(o) {}
  void Evict(double now);

  MonitorOptions options_;
  double last_ = -1e300;
  struct Arrival {
    double time, slo;
    int prompt_len, output_len;
  };
  // per class (P, O): arrivals in arrival order
  std::map<std::pair<int, int>, std::deque<Arrival>> arrivals_;
};

// Rounds x (>= 1) up to a multiple of `to` (>= 1).
inline int RoundUp(int x, int to) { return ((x + to - 1) / to) * to; }

}  // namespace tediserve::plan
