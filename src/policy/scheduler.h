// The policy core: owns the canonical state of every live request and the scheduler's view of
// the instances, answers events with step launches. Pure: no I/O, time only from the caller,
// deterministic for a seed. The simulator and the runtime drive the same class
// (DESIGN.md section 1). Algorithms: dispatch and migration (Alg 3), SLO-aware thresholds
// (Alg 1), load control (Alg 2), and the baselines of DESIGN.md 3.5 behind the same events.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "policy/latency_profile.h"
#include "policy/request_state.h"
#include "policy/step_estimator.h"

namespace tediserve::policy {

enum class DispatchKind {
  kStepLevel,           // Algorithm 3: every step to the instance that finishes it soonest
  kLeastLoaded,         // INFaaS: least-loaded instance at arrival, never moves
  kLeastLoadedMigrate,  // Llumnix: least-loaded at arrival + rebalancing at block boundaries
};

enum class ThresholdKind {
  kFixed,             // one threshold for every step
  kSloAware,          // Algorithm 1 only
  kCapsOnly,          // Algorithm 2 only: every step runs at its cap
  kSloAwareWithCaps,  // Algorithm 1 within Algorithm 2's caps (TeDiServe)
  kProteus,           // a periodic mix of thresholds; each request keeps the one it drew
};

struct PolicyOptions {
  std::string name = "tediserve";
  DispatchKind dispatch = DispatchKind::kStepLevel;
  ThresholdKind threshold = ThresholdKind::kSloAwareWithCaps;
  std::vector<double> thresholds{0.9, 0.8, 0.7, 0.6, 0.5};  // candidates, high to low
  // Offline profile of the served model at each candidate: mean tokens unmasked per step
  // (capacity model of Proteus) and accuracy (its quality objective).
  std::vector<double> tokens_per_step;
  std::vector<double> accuracy;
  double fixed_threshold = 0.9;
  int block_size = 32;
  bool cache = true;
  int token_budget = 8192;             // max tokens one instance pushes in one step
  Seconds load_control_debounce = 1.0;  // Algorithm 2 runs at most this often
  double capacity_slo = 0;             // s_ref of Algorithm 2; 0 = mean SLO of live requests
  // tau_d of Algorithm 2: tokens per second of the block pattern (one recompute step of the
  // mean sequence, then cache steps of B tokens at the top threshold's tokens per step),
  // run by this many requests side by side; 0 = full token-budget batches instead.
  int capacity_concurrency = 2;
  int llumnix_margin_tokens = 4096;    // imbalance that triggers a Llumnix migration
  // Refreshed predictions are computed by the driver off the scheduling thread
  // (TakePredictionRequests / OnPredictions) instead of inline; arrivals still predict inline.
  bool async_predictions = false;
  Seconds proteus_period = 10;
  double proteus_headroom = 1.05;      // capacity >= headroom x demand
  double proteus_smoothing = 0.5;      // weight of the newest period's arrival rate
  uint64_t seed = 1;

  // Presets: tediserve, fixed, slo-aware, caps-only, infaas, llumnix, proteus.
  static StatusOr<PolicyOptions> Named(const std::string& name);
  static std::vector<std::string> Names();
};

struct InstanceInfo {
  InstanceId id = 0;
  int tp = 1;
};

struct StepCommand {
  RequestId id = 0;
  double threshold = 0.9;
  bool recompute = true;
};

// One step to run now on one instance over the given batch.
struct Launch {
  InstanceId instance = 0;
  int tokens = 0;
  std::vector<StepCommand> batch;
};

struct SchedulerStats {
  int64_t dispatch_decisions = 0;
  int64_t migrations = 0;
  int64_t load_control_runs = 0;
  int64_t threshold_selections = 0;
  int64_t predictions = 0;
};

class Scheduler {
 public:
  static StatusOr<std::unique_ptr<Scheduler>> Create(PolicyOptions options,
                                                     const LatencyProfile* profile,
                                                     StepEstimator* estimator,
                                                     std::vector<InstanceInfo> instances);

  // Events. Each appends the steps to launch now to `out`.
  void OnArrival(const RequestSpec& spec, Seconds now, std::vector<Launch>* out);
  // The step last launched on `instance` came back. Requests reported done leave.
  void OnStepDone(InstanceId instance, std::span<const StepOutcome> outcomes, Seconds now,
                  std::vector<Launch>* out);
  // Periodic housekeeping (load control, Proteus's period).
  void OnTick(Seconds now, std::vector<Launch>* out);

  // Introspection.
  const RequestState* Find(RequestId id) const;

  // With async_predictions: snapshots of the requests whose prediction is due (taken once),
  // and the results coming back, predicted[i * thresholds + k] for ids[i] as of its snapshot.
  // Steps run since the snapshot are counted off; ids that finished meanwhile are ignored.
  std::vector<RequestState> TakePredictionRequests();
  void OnPredictions(std::span<const RequestId> ids, std::span<const double> predicted, Seconds now);
  size_t live() const { return requests_.size(); }
  size_t waiting() const { return waiting_.size(); }
  double MeanThreshold() const;  // over live requests: threshold of their next step
  double MeanCap() const;
  const SchedulerStats& stats() const { return stats_; }
  const PolicyOptions& options() const { return options_; }
  // Cluster capacity W over `slo` seconds, in tokens (Algorithm 2).
  double CapacityTokens(Seconds slo) const;
  // Proteus's current mix (fraction per candidate).
  const std::vector<double>& proteus_mix() const { return proteus_mix_; }

  // Exposed for the policy-cost benchmark: one Algorithm 2 pass and one dispatch cycle.
  void RunLoadControl(Seconds now);
  // tau_d of one instance as Algorithm 2 counts it (see capacity_concurrency).
  double CapacityTokensPerSecond(int tp) const;

 private:
  struct Instance {
    InstanceInfo info;
    bool busy = false;
    Seconds busy_until = 0;
    std::vector<RequestId> residents;  // in placement order
    int64_t next_tokens = 0;           // sum of residents' next-step tokens
    int64_t load_tokens = 0;           // sum of residents' P+O (INFaaS / Llumnix load)
    double tokens_per_second = 1;      // tau_d at the token budget
  };
  using OrderKey = std::tuple<int, Seconds, RequestId>;  // (-priority, arrival, id)

  Scheduler(PolicyOptions options, const LatencyProfile* profile, StepEstimator* estimator);

  void Refresh(RequestState& r);
  void RefreshBatch(std::span<RequestState* const> rs);
  // predicted (one per candidate) as of `steps_since` steps ago, floored at the blocks left.
  void StorePrediction(RequestState& r, std::span<const double> predicted, int steps_since);
  void Place(RequestState& r, Instance& inst);
  void Unplace(RequestState& r);
  void SetQueuedTokens(RequestState& r, int tokens);
  Instance* BestStepLevel(const RequestState& r, Seconds now, Seconds* best_time);
  Instance* LeastLoaded();
  void DispatchReady(const std::vector<RequestId>& ready, InstanceId from, Seconds now);
  void DispatchWaiting(Seconds now);
  void ChooseThreshold(RequestState& r, Seconds now);
  void LaunchIdle(Seconds now, std::vector<Launch>* out);
  void MaybeLoadControl(Seconds now);
  void ProteusPeriod(Seconds now);
  double DrawProteusThreshold();

  PolicyOptions options_;
  const LatencyProfile* profile_;
  StepEstimator* estimator_;
  std::vector<Instance> instances_;
  std::unordered_map<InstanceId, size_t> instance_index_;
  std::unordered_map<RequestId, RequestState> requests_;
  std::set<OrderKey> order_;       // live requests, load-control order
  std::set<OrderKey> waiting_;     // not placed on any instance
  SchedulerStats stats_;
  std::vector<const RequestState*> batch_states_;  // RefreshBatch scratch
  std::vector<RequestState> pending_predictions_;   // async: due, not yet taken
  std::vector<double> batch_out_;
  Seconds last_load_control_ = -1e300;
  double newest_cap_ = 1.0;
  double seq_sum_ = 0;      // sum of P+O over arrivals (mean sequence of the block pattern)
  int64_t arrivals_ = 0;  // cap of the last request in the last load-control pass
  // Proteus.
  std::vector<double> proteus_mix_;
  Seconds proteus_next_period_ = 0;
  int64_t proteus_arrivals_ = 0;
  double proteus_rate_ = -1;
  double proteus_work_sum_[kMaxThresholds] = {};
  uint64_t rng_state_;
};

}  // namespace tediserve::policy
