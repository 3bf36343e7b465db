// The discrete-event simulator: a virtual clock drives the policy core (policy::Scheduler)
// against simulated instances. An instance runs one step at a time over the batch the
// scheduler launched; its latency comes from the latency profile, what it unmasks from a
// DenoiserModel (DESIGN.md section 4). Deterministic: same inputs, same results.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/latency_profile.h"
#include "policy/scheduler.h"
#include "sim/denoiser.h"

namespace tediserve::sim {

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
  policy::Seconds tick = 0.25;              // housekeeping events (load control, Proteus)
  policy::Seconds timeline_interval = 10;
  uint64_t seed = 1;
  bool progress = false;               // a progress line on stderr for long runs
};

struct RequestResult {
  policy::RequestId id = 0;
  policy::Seconds arrival = 0, finish = 0, latency = 0, slo = 0;
  bool met = false;
  double quality = 0;         // accuracy of the mix of thresholds its tokens were unmasked at
                              // (or, with the engine in the loop, 1/0 exact match)
  double mean_threshold = 0;  // token-weighted
  int steps = 0;
  int migrations = 0;
  int priority = 0;
  int prompt_len = 0, output_len = 0;
};

struct TimelinePoint {
  policy::Seconds t = 0;
  double arrival_rps = 0;
  int active = 0, queued = 0;
  double mean_threshold = 0, mean_cap = 0;
  double window_attainment = 0, window_mean_latency = 0;  // of requests finished in the window
};

struct SimResult {
  std::vector<RequestResult> requests;  // by id
  std::vector<TimelinePoint> timeline;
  policy::SchedulerStats scheduler_stats;
  int64_t predictor_fallbacks = 0;  // predictions that fell back to one-shot (estimator predictor)
  int64_t events = 0;
  int64_t steps = 0;          // instance steps
  int64_t request_steps = 0;  // sum over steps of batch size
  double wall_seconds = 0;    // not part of any results file (those are byte-identical)
};

// Per-token accuracy at a threshold (the model's calibration).
using AccuracyFn = std::function<double(double threshold)>;
// Measured quality of a finished request, if the denoiser knows it (engine in the loop).
using MeasuredQualityFn = std::function<std::optional<double>(policy::RequestId)>;

// Requests must have ids 0..N-1 and be sorted by arrival, each with slo > 0.
StatusOr<SimResult> Simulate(const SimOptions& options, const policy::LatencyProfile& profile,
                             DenoiserModel& denoiser, const std::vector<policy::RequestSpec>& requests,
                             const AccuracyFn& accuracy, const MeasuredQualityFn& measured = nullptr);

}  // namespace tediserve::sim
