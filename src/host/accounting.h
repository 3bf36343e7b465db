// Per-request accounting and timeline sampling, the same for every driver: what happened to
// each request (latency, SLO met, the mix of thresholds its tokens were unmasked at and the
// quality that mix implies) and windowed cluster figures over time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

#include "policy/request.h"

namespace tediserve::host {

using policy::RequestId;
using policy::Seconds;

enum class Outcome {
  kCompleted,
  kCancelled,  // by its client
  kRejected,   // refused at arrival (admission limit, invalid request)
  kAborted,    // given up by the policy core (its steps kept failing)
  kFailed,     // the driver gave up on it (e.g. no instance left to run it)
};
const char* OutcomeName(Outcome o);

struct RequestRecord {
  RequestId id = 0;
  Seconds arrival = 0, finish = 0, latency = 0, slo = 0;
  bool met = false;            // completed within its SLO
  double quality = 0;          // accuracy of the mix of thresholds its tokens were unmasked at
                               // (or, with a measured quality, e.g. the engine in the loop, 1/0)
  double mean_threshold = 0;   // token-weighted over its output
  int steps = 0;
  int migrations = 0;
  int failures = 0;            // steps lost to failures and rerun
  int priority = 0;
  int slo_class = 0;
  int prompt_len = 0, output_len = 0;
  Outcome outcome = Outcome::kCompleted;
  std::string reason;          // why it did not complete
};

struct TimelinePoint {
  Seconds t = 0;
  double arrival_rps = 0;
  int active = 0, queued = 0;
  double mean_threshold = 0, mean_cap = 0;
  double window_attainment = 0, window_mean_latency = 0;  // of requests that left in the window
};

// Per-token accuracy at a threshold (the served model's calibration).
using AccuracyFn = std::function<double(double threshold)>;
// Measured quality of a completed request, where the driver knows it.
using MeasuredQualityFn = std::function<std::optional<double>(RequestId)>;

class Accounting {
 public:
  Accounting(AccuracyFn accuracy, MeasuredQualityFn measured)
      : accuracy_(std::move(accuracy)), measured_(std::move(measured)) {}

  void OnArrival(const policy::RequestSpec& spec);
  // `unmasked` tokens of request `id` were unmasked at `threshold` by one step.
  void OnStep(RequestId id, int unmasked, double threshold);
  // The request left; returns its record (and forgets it). Cancelled requests do not count
  // in the window's attainment.
  RequestRecord OnLeave(RequestId id, Seconds now, Outcome outcome, int steps, int migrations, int failures,
                        std::string reason);
  // Closes the window that started `interval` ago.
  TimelinePoint Sample(Seconds now, Seconds interval, int active, int queued, double mean_threshold, double mean_cap);
  bool knows(RequestId id) const { return live_.count(id) != 0; }

 private:
  struct Tally {
    policy::RequestSpec spec;
    double quality_sum = 0, threshold_sum = 0;
  };
  AccuracyFn accuracy_;
  MeasuredQualityFn measured_;
  std::unordered_map<RequestId, Tally> live_;
  int window_arrivals_ = 0, window_done_ = 0, window_met_ = 0;
  double window_latency_ = 0;
};

}  // namespace tediserve::host
