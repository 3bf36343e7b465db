// Reconfiguration in the simulator (issue 15; docs/design.md section 10.5): a workload
// monitor fed with arrivals, a periodic decision (Stage 1 for the observed classes, the
// current layout scored by the same model, switch only when the new layout is materially
// better), and the Stage 2 plan steps the event loop executes one launch at a time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/stage2.h"
#include "plan/workload_monitor.h"
#include "policy/latency_profile.h"
#include "policy/scheduler.h"

namespace tediserve::sim {

struct ReconfigOptions {
  bool enabled = false;
  std::vector<int> gpus_per_node;      // the cluster (filled from the cluster section)
  std::vector<int> tp_degrees = {1, 2, 4};
  double period_s = 300;               // a decision every period
  double window_s = 300;               // the monitor's window
  double load_delay_s = 20;            // a launched instance takes work this long after launch
  double min_gain = 0.10;              // switch when the mean threshold is this much higher,
                                       // or equal and the mean slack this much larger
  int prompt_round = 256, output_round = 256;
  // Lengths a class is planned with: its arrivals' means ("mean", the output rounded up to the
  // block) or its rounded bound ("bound": every request as long as the class's longest).
  bool class_means = true;
  // Stage 1's batch model: split (the paper's separate recompute and cache bins) or mixed
  // (one bin per degree for the batch of recompute and cache steps together, as the
  // simulator runs them; larger MILPs: E1's reconfigured run took ~3x the CPU time).
  bool mixed_batches = false;
  int max_context = 4096;
  int64_t node_limit = 20000;          // per MILP solve (deterministic)
};

struct PlanRecord {
  double time = 0;
  std::string outcome;                 // Stage 1's outcome
  std::map<int, int> current, chosen;  // layouts (degree -> instances)
  double chosen_threshold = 0, chosen_latency_s = 0;
  double current_threshold = 0, current_latency_s = 0;
  bool current_feasible = false;
  bool switched = false;
  std::string reason;
  double solve_seconds = 0;            // stage 1 (both solves) + stage 2; not in result files
  int classes = 0;
};

class Reconfigurator {
 public:
  static StatusOr<Reconfigurator> Create(const ReconfigOptions& options, const policy::LatencyProfile* profile,
                                         const std::vector<double>& thresholds, const std::vector<double>& tokens_per_step,
                                         int block_size, int token_budget);

  Status Record(double now, int prompt_len, int output_len, double slo_s) {
    return monitor_.Record(now, prompt_len, output_len, slo_s);
  }
  // The plan steps to execute now (empty: keep the layout). `live`: the instances accepting
  // work now, with their node and devices.
  StatusOr<std::vector<plan::PlanStep>> Decide(double now, const std::vector<policy::InstanceInfo>& live);

  const std::vector<PlanRecord>& records() const { return records_; }
  const ReconfigOptions& options() const { return options_; }

 private:
  Reconfigurator(const ReconfigOptions& o, plan::WorkloadMonitor m) : options_(o), monitor_(std::move(m)) {}
  ReconfigOptions options_;
  plan::WorkloadMonitor monitor_;
  const policy::LatencyProfile* profile_ = nullptr;
  std::vector<double> thresholds_, tokens_per_step_;
  int block_size_ = 32, token_budget_ = 8192;
  std::vector<PlanRecord> records_;
};

}  // namespace tediserve::sim
