#include "host/accounting.h"

namespace tediserve::host {

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kCompleted: return "completed";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kRejected: return "rejected";
    case Outcome::kAborted: return "aborted";
    case Outcome::kFailed: return "failed";
  }
  return "?";
}

void Accounting::OnArrival(const policy::RequestSpec& spec) {
  live_[spec.id].spec = spec;
  ++window_arrivals_;
}

void Accounting::OnStep(RequestId id, int unmasked, double threshold) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (accuracy_) it->second.quality_sum += unmasked * accuracy_(threshold);
  it->second.threshold_sum += unmasked * threshold;
}

RequestRecord Accounting::OnLeave(RequestId id, Seconds now, Outcome outcome, int steps, int migrations, int failures,
                                  std::string reason) {
  RequestRecord rr;
  rr.id = id;
  auto it = live_.find(id);
  if (it == live_.end()) return rr;
  const Tally& t = it->second;
  const policy::RequestSpec& spec = t.spec;
  rr.arrival = spec.arrival;
  rr.finish = now;
  rr.latency = now - spec.arrival;
  rr.slo = spec.slo;
  rr.outcome = outcome;
  rr.reason = std::move(reason);
  rr.met = outcome == Outcome::kCompleted && rr.latency <= spec.slo;
  rr.migrations = migrations;
  rr.failures = failures;
  rr.quality = spec.output_len > 0 ? t.quality_sum / spec.output_len : 0;
  if (outcome == Outcome::kCompleted && measured_) {
    if (auto q = measured_(spec.id)) rr.quality = *q;
  }
  rr.mean_threshold = spec.output_len > 0 ? t.threshold_sum / spec.output_len : 0;
  rr.steps = steps;
  rr.priority = spec.priority;
  rr.slo_class = spec.slo_class;
  rr.prompt_len = spec.prompt_len;
  rr.output_len = spec.output_len;
  live_.erase(it);
  if (outcome != Outcome::kCancelled) {
    ++window_done_;
    window_met_ += rr.met;
    window_latency_ += rr.latency;
  }
  return rr;
}

TimelinePoint Accounting::Sample(Seconds now, Seconds interval, int active, int queued, double mean_threshold,
                                 double mean_cap) {
  TimelinePoint p;
  p.t = now;
  p.arrival_rps = window_arrivals_ / interval;
  p.active = active;
  p.queued = queued;
  p.mean_threshold = mean_threshold;
  p.mean_cap = mean_cap;
  p.window_attainment = window_done_ ? static_cast<double>(window_met_) / window_done_ : 0;
  p.window_mean_latency = window_done_ ? window_latency_ / window_done_ : 0;
  window_arrivals_ = window_done_ = window_met_ = 0;
  window_latency_ = 0;
  return p;
}

}  // namespace tediserve::host
