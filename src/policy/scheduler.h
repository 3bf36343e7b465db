// The policy core: owns the canonical state of every live request and the scheduler's view of
// the instances, and answers the events a cluster sends with decisions. Pure: no I/O, time
// only from the caller, deterministic for a seed. The simulator and the runtime drive the same
// class through the host layer (src/host/, docs/design.md section 1). Algorithms: dispatch and
// migration (Algorithm 3), SLO-aware thresholds (Algorithm 1), load control (Algorithm 2), and
// the baselines of docs/design.md section 3.5 behind the same events.
//
// Thread contract: one loop thread owns a Scheduler and calls every method; nothing blocks
// and nothing calls back. Work done elsewhere (steps on workers, predictions on the
// prediction thread) comes back as events on that thread. Between events the core needs a
// tick only at NextWakeup().
//
// Events return a Status: a bad event (an unknown instance or batch, a duplicate request id,
// a result that does not match its batch, a prediction of the wrong size) is an error with a
// message and changes nothing. Each event appends what the driver must do to `Decisions`.
//
// Files: scheduler.cc (events, bookkeeping, load control), dispatch.cc (Algorithm 3, INFaaS,
// Llumnix), threshold_choice.cc (which threshold a request's next step uses), proteus.* (the
// Proteus baseline's mix).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "policy/latency_profile.h"
#include "policy/proteus.h"
#include "policy/request_state.h"
#include "policy/step_estimator.h"

namespace tediserve::policy {

using BatchId = int64_t;  // 1, 2, 3, ... in launch order; 0 = none
inline constexpr Seconds kNever = std::numeric_limits<double>::infinity();
inline constexpr int kMaxBatchSteps = 16;  // PolicyOptions::batch_steps at most

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
  kPlannedRescue,     // Proteus' mix plans each request's threshold at arrival; Algorithm 1
                      // lowers it for a step only when the request would miss its SLO
};

// Whether the threshold kind keeps Proteus' periodic mix (drawn per request at arrival).
inline constexpr bool UsesProteusMix(ThresholdKind k) {
  return k == ThresholdKind::kProteus || k == ThresholdKind::kPlannedRescue;
}

struct PolicyOptions {
  std::string name = "tediserve";
  DispatchKind dispatch = DispatchKind::kStepLevel;
  ThresholdKind threshold = ThresholdKind::kSloAwareWithCaps;
  std::vector<double> thresholds{0.9, 0.8, 0.7, 0.6, 0.5};  // candidates, high to low
  // Offline profile of the served model at each candidate: mean tokens unmasked per step
  // (capacity model of Proteus) and accuracy (its quality objective).
  std::vector<double> tokens_per_step;
  std::vector<double> accuracy;
  // Offline CV of the steps a request needs around tokens_per_step's mean (the calibration's
  // steps_cv; 0: unknown). The default policy's rescue plans for a request this much slower
  // than predicted (docs/design.md section 3.5).
  double steps_cv = 0;
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
  double proteus_headroom = 1.05;      // capacity >= headroom x demand (at most, with the ratio below)
  double proteus_smoothing = 0.5;      // weight of the newest period's arrival rate
  // ProteusMix::Options::change_z / window and headroom_slo_ratio (0: off, Proteus' own
  // smoothing and constant headroom). Named("tediserve") sets change_z 2 and ratio 0.03.
  double proteus_change_z = 0;
  int proteus_window = 6;
  double proteus_headroom_slo_ratio = 0;
  // The default policy (kPlannedRescue) keeps a threshold above the lowest for a request it
  // cannot bring in on time, and its plan a single threshold instead of the mix that fits
  // the capacity, only when that promises this much more accuracy per unit of work
  // (SelectThreshold, ProteusMix::Options::most_correct).
  double value_margin = 0.1;
  // The default policy's latency cap on its plan (ProteusMix::Options::latency_fraction =
  // 1 / (1 + plan_latency_z x steps_cv)): the plan's mean passes per request times the
  // measured step time stays within that fraction of the mean SLO, so a request that needs
  // plan_latency_z standard deviations more steps than the mean would still finish in time.
  // It binds only after a period in which at least plan_latency_miss_target of the finished
  // requests missed their SLO (0: always). `tediserve` sets 2 and 0.05; 0 turns the cap off.
  double plan_latency_z = 0;
  double plan_latency_miss_target = 0;
  // Admission: at most this many live requests (0: no limit); an arrival over it is
  // rejected (reported in Decisions::ended with kResourceExhausted).
  int max_live_requests = 0;
  // A request whose steps were lost this many times (failed batches or instances) is
  // aborted with a reason instead of being retried again.
  int max_step_failures = 3;
  // Dispatch order of the default policy (docs/design.md section 3.5): waiting requests by
  // priority, then earliest deadline (least slack), and a request past its deadline (which no
  // threshold can save) yields to every request that can still meet its SLO: it is placed and
  // batched only with capacity no such request wants, and leaves its instance at a block
  // boundary while such requests wait. Off: FCFS by priority then arrival (the paper's).
  bool defer_late = false;
  // Weight of each returned batch in an instance's running mean of measured / profiled step
  // time, by which the policy scales the profile's step times (dispatch, rescue, pace); 0:
  // the profile as it is. Named("tediserve") sets 0.05: a profile measured alone on a machine
  // is optimistic once the HTTP front end, the loop and gRPC share it.
  double step_scale_weight = 0;
  // Steps per step batch: an instance runs up to this many denoising steps of the same
  // requests at the same thresholds before its result comes back (a request that finishes
  // stops early; blocks end and start within the batch). More than 1 divides the round trips
  // between the scheduler and a worker, at the cost of decisions (thresholds, joining
  // requests, migrations) every batch instead of every step (docs/design.md section 3.9).
  int batch_steps = 1;
  uint64_t seed = 1;

  // Presets: tediserve, fixed, slo-aware, caps-only, infaas, llumnix, proteus.
  static StatusOr<PolicyOptions> Named(const std::string& name);
  static std::vector<std::string> Names();
};

// An instance (model replica) as the driver reports it.
struct InstanceInfo {
  InstanceInfo() = default;
  InstanceInfo(InstanceId id_, int tp_, int node_ = 0, std::vector<int> devices_ = {})
      : id(id_), tp(tp_), node(node_), devices(std::move(devices_)) {}
  InstanceId id = 0;
  int tp = 1;                // tensor-parallel degree
  int node = 0;              // the node (machine) it runs on
  std::vector<int> devices;  // its devices on that node (GPUs; cores on CPU); may be empty
};

struct StepCommand {
  RequestId id = 0;
  double threshold = 0.9;
  bool recompute = true;  // push the whole sequence (rebuilds the KV cache) or only the block
};

// One denoising step to run now on one instance over a batch of requests. (A step batch:
// not to be confused with launching an instance, which is the reconfigurator's business.)
struct StepBatch {
  BatchId id = 0;
  InstanceId instance = 0;
  int tokens = 0;                 // tokens pushed through the network (its first step)
  int steps = 1;                  // steps to run (PolicyOptions::batch_steps)
  Seconds expected_seconds = 0;   // the latency profile's prediction of its duration (all steps)
  std::vector<StepCommand> commands;
};

// A request that completed: the core's record of it.
struct FinishedRequest {
  RequestSpec spec;
  Seconds finish = 0;
  int steps = 0;
  int migrations = 0;
  int failures = 0;  // steps lost to failures and rerun
};

enum class EndKind {
  kCancelled,  // the client cancelled it
  kRejected,   // refused at arrival (admission limit)
  kAborted,    // given up while live (its steps failed too often)
};
const char* EndKindName(EndKind k);

// A request that left without completing, and why.
struct EndedRequest {
  RequestId id = 0;
  EndKind kind = EndKind::kAborted;
  StatusCode code = StatusCode::kOk;  // kCancelled, kResourceExhausted, kUnavailable, ...
  std::string reason;
  int steps = 0, migrations = 0, failures = 0;  // what it had done
};

// What the driver must do after an event. Every event appends; the driver clears.
struct Decisions {
  std::vector<StepBatch> batches;          // step batches to run now
  std::vector<FinishedRequest> finished;   // requests that completed
  std::vector<EndedRequest> ended;         // requests cancelled, rejected or aborted
  std::vector<InstanceId> drained;         // draining instances now idle and empty: safe to stop
  void clear() {
    batches.clear();
    finished.clear();
    ended.clear();
    drained.clear();
  }
  bool empty() const { return batches.empty() && finished.empty() && ended.empty() && drained.empty(); }
};

struct SchedulerStats {
  int64_t dispatch_decisions = 0;
  int64_t migrations = 0;
  int64_t load_control_runs = 0;
  int64_t threshold_selections = 0;
  int64_t predictions = 0;
  int64_t lost_steps = 0;  // request steps lost to failed batches and instances
};

class Scheduler {
 public:
  // `instances` may be empty (a runtime whose workers have not joined yet).
  static StatusOr<std::unique_ptr<Scheduler>> Create(PolicyOptions options,
                                                     const LatencyProfile* profile,
                                                     StepEstimator* estimator,
                                                     std::vector<InstanceInfo> instances);

  // ---- Events. ----
  // A request arrives. Errors: a duplicate live id, lengths <= 0, slo <= 0, an output length
  // that is not a multiple of the block size when caching.
  Status OnArrival(const RequestSpec& spec, Seconds now, Decisions* out);
  // A step batch came back: one outcome per step each request of the batch ran, a request's
  // in the order of its steps (requests cancelled since the launch may be left out). A
  // request runs every step of the batch unless it finished. Errors: a batch never launched;
  // a batch no longer in flight (already done, failed or lost with its instance); outcomes
  // that do not match the batch (a request not in it, more steps than the batch has, a step
  // after the request finished).
  Status OnBatchDone(BatchId batch, std::span<const StepOutcome> outcomes, Seconds now, Decisions* out);
  // A step batch failed on a live instance: nothing it did counts; its requests keep their
  // place but their KV cache is gone (next step recomputes).
  Status OnBatchFailed(BatchId batch, Seconds now, Decisions* out);
  // A new instance takes work from now on. Errors: a live id, a TP degree the profile lacks.
  Status OnInstanceAdded(const InstanceInfo& info, Seconds now, Decisions* out);
  // The instance takes no new work; residents leave at their next block boundary. Once it is
  // idle and empty it is reported in Decisions::drained (once).
  Status OnInstanceDraining(InstanceId id, Seconds now, Decisions* out);
  // The instance is gone (stopped after draining, or failed): its in-flight batch is lost,
  // its residents go back to the ready set with their KV cache invalid.
  Status OnInstanceRemoved(InstanceId id, Seconds now, Decisions* out);
  // The client cancelled a live request. Error: the id is not live.
  Status OnCancel(RequestId id, Seconds now, Decisions* out);
  // The driver gives up on a live request (e.g. it is shutting down): it leaves as kAborted
  // with `reason`. Error: the id is not live.
  Status OnAbort(RequestId id, const std::string& reason, Seconds now, Decisions* out);
  // Periodic housekeeping (load control, Proteus's period).
  Status OnTick(Seconds now, Decisions* out);
  // With async_predictions: predicted[i * thresholds + k] for ids[i] as of its snapshot
  // (TakePredictionRequests). Steps run since the snapshot are counted off; ids that left
  // meanwhile are skipped. Error: predicted has the wrong size.
  Status OnPredictions(std::span<const RequestId> ids, std::span<const double> predicted, Seconds now,
                       Decisions* out);

  // When the core next needs OnTick (kNever: not until another event).
  Seconds NextWakeup() const;

  // With async_predictions: snapshots of the requests whose prediction is due (taken once).
  std::vector<RequestState> TakePredictionRequests();

  // ---- Introspection. ----
  const RequestState* Find(RequestId id) const;
  std::vector<RequestId> LiveIds() const;  // ascending
  // The step batch in flight on an instance (0: none, or no such instance).
  BatchId InFlightBatch(InstanceId id) const;
  // What a batch in flight ran, as its outcomes (OnBatchDone's) say: its steps, the tokens
  // they pushed, and the profile's time for them (each step priced by the tokens the requests
  // still running pushed in it). For a batch of one step: 1, its tokens and its
  // expected_seconds. Zeros for a batch not in flight.
  struct RanWork {
    int steps = 0;
    int64_t tokens = 0;
    Seconds profile_seconds = 0;
  };
  RanWork Ran(BatchId batch, std::span<const StepOutcome> outcomes) const;
  // Ran() of the last batch OnBatchDone accepted.
  const RanWork& LastBatchDone() const { return last_done_; }
  // The instance's measured step time over the profile's (PolicyOptions::step_scale_weight);
  // 1 for an unknown instance.
  double StepScale(InstanceId id) const;
  size_t live() const { return requests_.size(); }
  size_t waiting() const { return waiting_.size(); }
  size_t instances() const { return instances_.size(); }
  size_t accepting_instances() const;
  double MeanThreshold() const;  // over live requests: threshold of their next step
  double MeanCap() const;
  const SchedulerStats& stats() const { return stats_; }
  const PolicyOptions& options() const { return options_; }
  // Cluster capacity W over `slo` seconds, in tokens (Algorithm 2), over accepting instances.
  double CapacityTokens(Seconds slo) const;
  // Proteus's current mix (fraction per candidate).
  const std::vector<double>& proteus_mix() const { return proteus_.mix(); }

  // Exposed for the policy-cost benchmark: one Algorithm 2 pass.
  void RunLoadControl(Seconds now);
  // tau_d of one instance as Algorithm 2 counts it (see capacity_concurrency).
  double CapacityTokensPerSecond(int tp) const;

 private:
  struct Instance {
    InstanceInfo info;
    bool accepting = true;             // false while draining
    bool drained_reported = false;
    bool busy = false;                 // a batch is in flight
    BatchId batch = 0;                 // that batch
    std::vector<RequestId> batch_ids;  // its requests, in launch order
    Seconds busy_until = 0;            // predicted end of that batch
    std::vector<RequestId> residents;  // in placement order
    int64_t next_tokens = 0;           // sum of residents' next-step tokens
    int64_t load_tokens = 0;           // sum of residents' P+O (INFaaS / Llumnix load)
    double tokens_per_second = 1;      // tau_d at the token budget
    // Measured step time over the profile's, a running mean over this instance's batches (1:
    // the profile holds); the policy's own step times are the profile's times this.
    double step_scale = 1;
    Seconds batch_start = 0;           // when the batch in flight was launched
    Seconds batch_profile_seconds = 0;  // the profile's time for it (expected_seconds)
    int batch_tokens = 0;              // its (first step's) tokens
    int batch_steps = 1;               // its steps
  };
  using OrderKey = std::tuple<int, Seconds, RequestId>;  // (-priority, arrival, id)
  // Waiting order: (late, -priority, deadline or arrival, id); see PolicyOptions::defer_late.
  using WaitKey = std::tuple<int, int, Seconds, RequestId>;

  Scheduler(PolicyOptions options, const LatencyProfile* profile, StepEstimator* estimator);
  static OrderKey KeyOf(const RequestState& r) { return {-r.spec.priority, r.spec.arrival, r.spec.id}; }
  WaitKey WaitKeyOf(const RequestState& r) const {
    return {r.late ? 1 : 0, -r.spec.priority, options_.defer_late ? r.deadline : r.spec.arrival, r.spec.id};
  }
  // With defer_late: marks r late once `now` is past its deadline (re-keying it if waiting).
  // Returns r.late.
  bool CheckLate(RequestState& r, Seconds now);
  // Whether a request that can still meet its SLO waits for an instance.
  bool OnTimeWaiting() const { return !waiting_.empty() && std::get<0>(*waiting_.begin()) == 0; }
  Instance* FindInstance(InstanceId id);
  Status AddInstance(const InstanceInfo& info);

  // Predictions.
  void Refresh(RequestState& r);
  void RefreshBatch(std::span<RequestState* const> rs);
  // predicted (one per candidate) as of `steps_since` steps ago, floored at the blocks left.
  void StorePrediction(RequestState& r, std::span<const double> predicted, int steps_since);

  // Placement bookkeeping.
  void Place(RequestState& r, Instance& inst);
  void Unplace(RequestState& r);
  void SetQueuedTokens(RequestState& r, int tokens);
  // Sends a placed request back to the waiting set (it leaves its instance).
  void ReturnToWaiting(RequestState& r);
  // Removes a live request for good (finished, cancelled, aborted).
  void Forget(RequestState& r);
  // Loses the in-flight batch of `inst` (failed batch or instance): its requests' steps do
  // not count and their KV cache is gone; too many failures abort a request.
  void LoseBatch(Instance& inst, const std::string& why, Decisions* out);
  void ReportDrained(Decisions* out);
  static EndedRequest EndOf(const RequestState& r, EndKind kind, StatusCode code, std::string reason) {
    return {r.spec.id, kind, code, std::move(reason), r.steps, r.migrations, r.failures};
  }

  // Dispatch (dispatch.cc).
  Instance* BestStepLevel(const RequestState& r, Seconds now, Seconds* best_time);
  Instance* LeastLoaded();
  void DispatchReady(const std::vector<RequestId>& ready, InstanceId from, Seconds now);
  void DispatchWaiting(Seconds now);
  void LaunchIdle(Seconds now, Decisions* out);
  // Folds a returned batch's measured duration (`steps` steps the profile prices at
  // `profile_seconds`) into inst.step_scale (step_scale_weight).
  void MeasureStep(Instance& inst, Seconds now, int steps, Seconds profile_seconds);
  // The profile's time for a batch's steps after its first (batch_steps > 1): each request
  // runs them until its predicted steps end, a block's first step pushing the sequence.
  Seconds LaterStepsSeconds(const Instance& inst, const StepBatch& b) const;
  void BatchByPace(Instance& inst, Seconds now, StepBatch& b);
  bool FitsBudget(const StepBatch& b, int tokens) const;
  void AddToBatch(Instance& inst, StepBatch& b, RequestState& r);
  // A step of `tokens` on `inst` as the policy prices it: the profile's time x the instance's
  // measured step_scale.
  Seconds StepTime(const Instance& inst, double tokens) const {
    return profile_->StepSeconds(inst.info.tp, tokens) * inst.step_scale;
  }
  // r's predicted remaining steps at its current threshold.
  double PredictedSteps(const RequestState& r) const;

  // Thresholds (threshold_choice.cc).
  void ChooseThreshold(RequestState& r, Seconds now);
  void MaybeLoadControl(Seconds now);
  void AdvanceProteus(Seconds now);
  // Step batches that returned since the plan's last period, and their measured seconds.
  int64_t period_batches_ = 0;
  double period_step_seconds_ = 0;
  int64_t period_finished_ = 0;  // requests finished in the plan's period
  int64_t period_late_ = 0;      // of which after their deadline

  PolicyOptions options_;
  const LatencyProfile* profile_;
  StepEstimator* estimator_;
  std::vector<Instance> instances_;  // in the order they were added
  std::unordered_map<InstanceId, size_t> instance_index_;
  std::unordered_map<BatchId, InstanceId> batches_;  // in flight
  BatchId next_batch_ = 1;
  std::unordered_map<RequestId, RequestState> requests_;
  std::set<OrderKey> order_;       // live requests, load-control order
  std::set<WaitKey> waiting_;      // not placed on any instance
  // BatchByPace's, kept to save allocations per batch.
  std::vector<std::tuple<int, Seconds, RequestId>> on_time_scratch_;
  std::vector<RequestId> rest_scratch_;
  SchedulerStats stats_;
  RanWork last_done_;  // LastBatchDone()
  std::vector<const RequestState*> batch_states_;  // RefreshBatch scratch
  std::vector<RequestState> pending_predictions_;   // async: due, not yet taken
  std::vector<double> batch_out_;
  std::vector<RequestId> ready_scratch_;
  std::vector<RequestState*> refresh_scratch_;
  Seconds last_load_control_ = -1e300;
  bool load_control_due_ = false;  // an event wanted Algorithm 2 but the debounce held it
  double newest_cap_ = 1.0;        // cap of the last request in the last load-control pass
  double seq_sum_ = 0;             // sum of P+O over arrivals (mean sequence of the block pattern)
  int64_t arrivals_ = 0;           // requests admitted so far
  ProteusMix proteus_;
};

}  // namespace tediserve::policy
