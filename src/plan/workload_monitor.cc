#include "plan/workload_monitor.h"

#include <algorithm>
#include <cmath>

namespace tediserve::plan {

StatusOr<WorkloadMonitor> WorkloadMonitor::Create(const MonitorOptions& o) {
  if (!(std::isfinite(o.window_s) && o.window_s > 0)) return InvalidArgument("monitor window must be > 0 seconds");
  if (o.prompt_round < 1 || o.output_round < 1) return InvalidArgument("monitor rounding must be >= 1 token");
  if (!std::isfinite(o.start_s)) return InvalidArgument("monitor start time must be finite");
  return WorkloadMonitor(o);
}

Status WorkloadMonitor::Record(double now, int prompt_len, int output_len, double slo_s) {
  if (!std::isfinite(now)) return InvalidArgument("arrival time must be finite");
  if (now < last_) return InvalidArgument("arrivals must be recorded in time order");
  if (prompt_len < 1 || output_len < 1) return InvalidArgument("prompt and output lengths must be >= 1");
  if (!(std::isfinite(slo_s) && slo_s > 0)) return InvalidArgument("SLO must be > 0 seconds");
  if (prompt_len > (1 << 24) || output_len > (1 << 24)) return InvalidArgument("length too large");
  last_ = now;
  arrivals_[{RoundUp(prompt_len, options_.prompt_round), RoundUp(output_len, options_.output_round)}].emplace_back(now, slo_s);
  return Status::Ok();
}

void WorkloadMonitor::Evict(double now) {
  const double from = now - options_.window_s;
  for (auto it = arrivals_.begin(); it != arrivals_.end();) {
    auto& q = it->second;
    while (!q.empty() && q.front().first <= from) q.pop_front();
    it = q.empty() ? arrivals_.erase(it) : std::next(it);
  }
}

std::vector<LengthClass> WorkloadMonitor::Classes(double now) {
  Evict(now);
  const double span = std::max(1.0, std::min(options_.window_s, now - options_.start_s));
  std::vector<LengthClass> out;
  for (const auto& [key, q] : arrivals_) {
    double slo = 0;
    int count = 0;
    for (const auto& [t, s] : q)
      if (t <= now) {
        slo += s;
        ++count;
      }
    if (count == 0) continue;
    out.push_back({key.first, key.second, count / span, slo / count});
  }
  return out;
}

}  // namespace tediserve::plan
