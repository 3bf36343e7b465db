// Live reconfiguration (issue 15; docs/design.md sections 5 and 10.6): `tediserve serve
// --reconfigure`. A workload monitor fed with every request the runtime accepts (its prompt
// and output lengths and the SLO it was given), and a thread that every period runs the
// planner's decision (plan::DecideLayout: Stage 1 for the observed classes, the current
// layout scored by the same model, switch only when materially better) and, on a switch,
// asks the runtime for the new layout (Runtime::ChangeLayout: kept instances stay, the others
// drain at a block boundary, new ones start on the freed devices; nothing is lost). Placement
// is the runtime's (first fit over the agents), so Stage 2 is not run here.
//
// Lifetime: create it before the runtime (the runtime's on_accepted callback feeds it), Start
// it once the runtime is up, Stop it before the runtime is destroyed, destroy it after.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "plan/decide.h"
#include "plan/workload_monitor.h"
#include "policy/latency_profile.h"

namespace tediserve::serve {

class Runtime;

struct ReconfigurerOptions {
  double period_s = 30;               // a decision every period
  double window_s = 60;               // the monitor's arrival-rate window
  double min_gain = 0.1;              // see plan::DecideLayout
  std::vector<int> tp_degrees;        // candidates (empty: those of the profile)
  int prompt_round = 32;              // class rounding of prompt lengths
  int output_round = 0;               // of output lengths (0: the model's block size)
  double solve_time_limit_s = 10;     // wall-clock limit per MILP solve
  std::string profile_csv;            // latency profile (the runtime's --profile)
  std::string calibration;            // tokens per step by threshold (the runtime's)
  std::string policy = "tediserve";   // its candidate thresholds and token budget
};

// One decision as the log and tests see it.
struct ReconfigDecision {
  double time_s = 0;         // since the reconfigurer started
  bool busy = false;         // a layout change was still under way: no decision
  plan::LayoutDecision decision;
  std::vector<int> layout;   // asked of the runtime (empty: no change asked)
  std::string error;         // the change was refused, or the planner failed
};

class Reconfigurer {
 public:
  // Checks the options that need no runtime (period, window, rounding, files).
  static StatusOr<std::unique_ptr<Reconfigurer>> Create(ReconfigurerOptions options);
  ~Reconfigurer();

  // One accepted request (any thread; the runtime's loop calls it). Cheap: a mutex and a map.
  void Record(int prompt_len, int output_len, double slo_s);

  // Reads what it needs of the runtime (block size, context, candidate degrees against the
  // profile), declares its metrics and starts the decision thread. `rt` must outlive Stop().
  Status Start(Runtime* rt);
  void Stop();

  // One decision now, on the calling thread (the thread's body; tests).
  ReconfigDecision DecideOnce();
  std::vector<ReconfigDecision> History() const;

 private:
  explicit Reconfigurer(ReconfigurerOptions o) : options_(std::move(o)) {}
  double Now() const;
  void Run();

  ReconfigurerOptions options_;
  Runtime* rt_ = nullptr;
  policy::LatencyProfile profile_;
  std::vector<double> thresholds_, tokens_per_step_;
  int block_size_ = 0, max_context_ = 0, token_budget_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();

  mutable std::mutex mu_;  // monitor_, history_, stop_
  std::unique_ptr<plan::WorkloadMonitor> monitor_;
  std::vector<ReconfigDecision> history_;
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace tediserve::serve
