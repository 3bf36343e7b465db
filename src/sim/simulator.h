// The discrete-event simulator: a virtual clock drives the host layer (src/host/, and through
// it the policy core) against simulated instances. An instance runs one step batch at a time;
// its duration comes from the latency profile (or a second "truth" profile, with an optional
// lognormal error, so the policy's model of step time can be wrong), what it unmasks from a
// DenoiserModel (docs/design.md section 4). Faults can be injected: instance failures with
// recovery, drains and re-adds, failed step batches, client cancellations. Deterministic:
// same inputs, same results.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "host/host.h"
#include "policy/latency_profile.h"
#include "policy/scheduler.h"
#include "sim/denoiser.h"
#include "sim/reconfig.h"

namespace tediserve::sim {

// Faults to inject (all off by default). Random times are drawn from the run's seed.
struct FaultOptions {
  struct Event {
    policy::Seconds time = 0;
    policy::InstanceId instance = 0;
    bool drain = false;               // drain (orderly) instead of fail
    policy::Seconds back_after = 60;  // re-added this long after it failed / finished draining
  };
  std::vector<Event> events;          // at given times
  int random_failures = 0;            // instances that fail at uniform random times in the window
  int random_drains = 0;              // instances drained at uniform random times in the window
  policy::Seconds window_from = 0;    // the window (to 0: the last arrival)
  policy::Seconds window_to = 0;
  policy::Seconds recover_after = 60;  // a randomly failed instance comes back this much later
  policy::Seconds readd_after = 60;    // a randomly drained instance is re-added this long after it drained
  double failure_rate_per_hour = 0;   // per instance: Poisson failures (each recovers after recover_after)
  double step_failure_probability = 0;  // each step batch fails (its instance survives)
  double cancel_fraction = 0;         // clients that cancel, at a uniform time within their SLO
  bool any() const {
    return !events.empty() || random_failures > 0 || random_drains > 0 || failure_rate_per_hour > 0 ||
           step_failure_probability > 0 || cancel_fraction > 0;
  }
};

struct SimOptions {
  policy::PolicyOptions policy;
  std::vector<policy::InstanceInfo> instances;
  std::string estimator = "oneshot";  // oneshot | oracle | predictor
  int oracle_refresh_tokens = 0;       // 0: refresh at block starts
  std::string predictor_model;         // the trained step predictor's file (estimator predictor)
  int predictor_refresh_tokens = -1;   // k; -1: the one recorded in the model file
  bool predictor_async = false;        // refreshes on the predictor's own thread (slower to simulate)
  policy::Seconds predictor_latency = 0.001;  // virtual time from a refresh to its result
  // Historical mean tokens per step at each candidate threshold (the one-shot estimate).
  std::vector<double> tokens_per_step;
  // SLO of requests that come without one (see host::HostOptions).
  policy::Seconds slo_seconds = 0;
  double slo_scale = 0;
  policy::Seconds tick = 0.25;              // housekeeping events (load control, Proteus)
  policy::Seconds timeline_interval = 10;
  // Truth vs model: step times come from truth_profile (nullptr: the policy's profile) times
  // a lognormal factor with mean 1 and log-sd step_time_sigma (0: exact).
  const policy::LatencyProfile* truth_profile = nullptr;
  double step_time_sigma = 0;
  // Plus this much per step batch, whatever its steps: the round trip between the scheduler
  // and a worker that a profile of the engine alone leaves out.
  policy::Seconds batch_overhead = 0;
  // And times this factor of the virtual time the step starts at (empty: 1), e.g. how fast a
  // live machine ran over a run that the simulation replays (bench-serve --fidelity).
  std::function<double(policy::Seconds)> step_time_factor;
  FaultOptions faults;
  // Reconfiguration (off by default): periodic Stage 1 / Stage 2 plans executed one launch
  // at a time (docs/design.md section 10.5). Not combined with fault injection.
  ReconfigOptions reconfig;
  uint64_t seed = 1;
  bool progress = false;               // a progress line on stderr for long runs
};

using RequestResult = host::RequestRecord;
using TimelinePoint = host::TimelinePoint;
using AccuracyFn = host::AccuracyFn;
using MeasuredQualityFn = host::MeasuredQualityFn;

struct SimResult {
  std::vector<RequestResult> requests;  // by id
  std::vector<TimelinePoint> timeline;
  policy::SchedulerStats scheduler_stats;
  int64_t predictor_fallbacks = 0;  // predictions that fell back to one-shot (estimator predictor)
  int64_t events = 0;
  int64_t steps = 0;          // instance steps
  int64_t batches = 0;        // step batches (each up to PolicyOptions::batch_steps steps)
  int64_t batch_requests = 0;  // sum over batches of their requests (= request_steps at one step each)
  int64_t request_steps = 0;  // sum over steps of batch size
  // Faults (zero without them).
  int64_t instance_failures = 0, drains = 0, failed_batches = 0, cancellations = 0;
  int64_t unaccounted = 0;    // requests of the workload without a record (0 unless a bug)
  // Reconfiguration (empty without it): every decision, and the layout after every change.
  std::vector<PlanRecord> plans;
  struct LayoutPoint {
    double time = 0;
    std::map<int, int> layout;  // TP degree -> instances accepting work
  };
  std::vector<LayoutPoint> layouts;
  int64_t reconfig_launches = 0, reconfig_terminations = 0;
  double wall_seconds = 0;    // not part of any results file (those are byte-identical)
};

// Requests must have ids 0..N-1 and be sorted by arrival; a request without an SLO (slo <= 0)
// gets the default of options.slo_seconds / slo_scale.
StatusOr<SimResult> Simulate(const SimOptions& options, const policy::LatencyProfile& profile,
                             DenoiserModel& denoiser, const std::vector<policy::RequestSpec>& requests,
                             const AccuracyFn& accuracy, const MeasuredQualityFn& measured = nullptr);

}  // namespace tediserve::sim
