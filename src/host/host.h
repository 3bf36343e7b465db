// The host: what every driver of the policy core needs around it, written once. The simulator
// drives it with a virtual clock and simulated instances, the scheduler tests and the policy
// benchmark with scripted instances, and the serving runtime with a real clock and worker
// processes (docs/design.md section 1.3).
//
// It owns the Scheduler and the step estimators, and adds:
//   - request validation and SLO defaulting before a request reaches the core;
//   - asynchronous prediction plumbing (snapshots to the prediction thread, results back as
//     events, never blocking unless the driver asks for it);
//   - the table of step batches in flight (what each asked for, when it was launched);
//   - per-request accounting (latency, SLO met, threshold mix, quality) and timeline samples.
//
// Thread contract: as the Scheduler's. One loop thread calls every method; the prediction
// thread only runs jobs. Events return a Status (a bad event is an error and changes
// nothing); what the driver must do next accumulates in output() until it clears it.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "host/accounting.h"
#include "host/estimators.h"
#include "policy/latency_profile.h"
#include "policy/scheduler.h"

namespace tediserve::host {

using policy::BatchId;
using policy::InstanceId;

struct HostOptions {
  policy::PolicyOptions policy;
  EstimatorOptions estimator;
  std::vector<policy::InstanceInfo> instances;  // at start (more may join later)
  // SLO of a request that comes without one (slo <= 0): slo_seconds if > 0, else slo_scale x
  // its latency alone on the smallest TP degree at the top threshold; with neither, such a
  // request is refused.
  Seconds slo_seconds = 0;
  double slo_scale = 0;
  // Earliest delivery of an asynchronous prediction after it was sent. The simulator sets a
  // virtual latency so its runs stay deterministic; a real loop leaves 0 and takes each
  // result when the prediction thread has it.
  Seconds prediction_delay = 0;
  // Called on the prediction thread when a result is ready (a real loop posts a wake-up and
  // then calls DeliverNextPrediction(now, /*wait=*/false)); unset in the simulator.
  std::function<void()> on_prediction_ready;
  AccuracyFn accuracy;         // per-token accuracy at a threshold (quality of the mix)
  MeasuredQualityFn measured;  // optional: measured quality of a completed request
};

// Accumulated decisions for the driver.
struct HostOutput {
  std::vector<policy::StepBatch> batches;  // run these now
  std::vector<RequestRecord> left;         // requests that left (any outcome), with records
  std::vector<InstanceId> drained;         // draining instances now idle and empty
  void clear() {
    batches.clear();
    left.clear();
    drained.clear();
  }
};

// Latency of a request alone on a TP-`tp` instance at the top threshold (tokens_per_step of it).
Seconds SoloLatency(const policy::RequestSpec& r, const policy::LatencyProfile& profile, int tp, int block,
                    bool cache, double tokens_per_step);

class Host {
 public:
  // `truth` answers the oracle estimator (simulation only).
  static StatusOr<std::unique_ptr<Host>> Create(HostOptions options, const policy::LatencyProfile* profile,
                                                policy::OracleEstimator::Truth truth = nullptr);
  ~Host();

  // ---- Events (the driver's clock). ----
  // Validates the request, gives it its SLO, and hands it to the core. A request the core
  // refuses (admission limit) leaves at once as kRejected; an invalid one is an error.
  Status Submit(policy::RequestSpec spec, Seconds now);
  Status BatchDone(BatchId batch, std::span<const policy::StepOutcome> outcomes, Seconds now);
  Status BatchFailed(BatchId batch, Seconds now);
  Status AddInstance(const policy::InstanceInfo& info, Seconds now);
  Status DrainInstance(InstanceId id, Seconds now);
  // The instance stopped (after draining) or failed; `failed` only changes what is counted.
  Status RemoveInstance(InstanceId id, Seconds now, bool failed);
  Status Cancel(RequestId id, Seconds now);
  Status Tick(Seconds now);
  // Every live request leaves as kFailed with `reason` (the driver is shutting down, or no
  // instance is left to run it).
  Status FailAll(Seconds now, const std::string& reason);

  // Asynchronous predictions: when the oldest job may be delivered (kNever: none), and its
  // delivery. With wait, blocks until the prediction thread has it (the simulator's virtual
  // time needs that); without, returns false when it is not ready yet.
  Seconds NextPredictionDue() const;
  StatusOr<bool> DeliverNextPrediction(Seconds now, bool wait);

  // When the driver must next call Tick or DeliverNextPrediction (kNever: only on events).
  Seconds NextWakeup() const;

  HostOutput& output() { return output_; }
  TimelinePoint SampleTimeline(Seconds now, Seconds interval);

  // The batch in flight with this id (nullptr if none): what each request was asked to do.
  const policy::StepBatch* InFlight(BatchId batch) const;
  const policy::Scheduler& scheduler() const { return *scheduler_; }
  policy::Scheduler& mutable_scheduler() { return *scheduler_; }
  int64_t predictor_fallbacks() const { return estimators_->fallbacks(); }
  int64_t instance_failures() const { return instance_failures_; }
  size_t live() const { return scheduler_->live(); }

 private:
  Host(HostOptions options, const policy::LatencyProfile* profile) : options_(std::move(options)), profile_(profile) {}
  // Turns the core's decisions into output (records for requests that left), then sends
  // due predictions to the prediction thread.
  void Absorb(Seconds now);
  Outcome OutcomeOf(policy::EndKind k) const;

  HostOptions options_;
  const policy::LatencyProfile* profile_;
  std::unique_ptr<Estimators> estimators_;
  std::unique_ptr<policy::Scheduler> scheduler_;
  std::unique_ptr<Accounting> accounting_;
  policy::Decisions decisions_;
  HostOutput output_;
  std::unordered_map<BatchId, policy::StepBatch> in_flight_;
  struct PredictionJob {
    Seconds due = 0;
    uint64_t ticket = 0;
  };
  std::deque<PredictionJob> predictions_;
  bool aborts_are_failures_ = false;  // FailAll: the core's aborts are the driver's failures
  int solo_tp_ = 0;  // smallest TP degree in the cluster (SLO defaulting)
  int64_t instance_failures_ = 0;
};

}  // namespace tediserve::host
