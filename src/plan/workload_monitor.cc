#include "plan/workload_monitor.h"

#include <algorithm>
#include <cmath>

namespace tediserve::plan {

StatusOr<WorkloadMonitor> WorkloadMonitor::Create(const MonitorOptions& o) {
  if (!(std::isfinite(o.window_s) && o.window_s > 0)) return InvalidArgument("monitor window must be > 0 seconds");
  if (o.prompt_round < 1 || o.output_round < 1) return InvalidArgument("monitor rounding must be >= 1 token");
  if (!std::isfinite(o.start_s)) return InvalidArgument("monitor start time must be finite");
  if (o.mean_lengths_block < 0 || (o.mean_lengths_block > 0 && o.output_round % o.mean_lengths_block != 0))
    return InvalidArgument("monitor: mean_lengths_block must be >= 0 and divide the output rounding");
  return WorkloadMonitor(o);
}

Status WorkloadMonitor::Record(double now, int prompt_len, int output_len, double slo_s) {
  if (!std::isfinite(now)) return InvalidArgument("arrival time must be finite");
  if (now < last_) return InvalidArgument("arrivals must be recorded in time order");
  if (prompt_len < 1 || output_len < 1) return InvalidArgument("prompt and output lengths must be >= 1");
  if (!(std::isfinite(slo_s) && slo_s > 0)) return InvalidArgument("SLO must be > 0 seconds");
  if (prompt_len > (1 << 24) || output_len > (1 << 24)) return InvalidArgument("length too large");
  last_ = now;
  arrivals_[{RoundUp(prompt_len, options_.prompt_round), RoundUp(output_len, options_.output_round)}].push_back(
      {now, slo_s, prompt_len, output_len});
  return Status::Ok();
}

void WorkloadMonitor::Evict(double now) {
  const double from = now - options_.window_s;
  for (auto it = arrivals_.begin(); it != arrivals_.end();) {
    auto& q = it->second;
    while (!q.empty() && q.front().time <= from) q.pop_front();
    it = q.empty() ? arrivals_.erase(it) : std::next(it);
  }
}

std::vector<LengthClass> WorkloadMonitor::Classes(double now) {
  Evict(now);
  const double span = std::max(1.0, std::min(options_.window_s, now - options_.start_s));
  std::vector<LengthClass> out;
  for (const auto& [key, q] : arrivals_) {
    double slo = 0, prompt = 0, output = 0;
    int count = 0;
    for (const Arrival& a : q)
      if (a.time <= now) {
        slo += a.slo;
        prompt += a.prompt_len;
        output += a.output_len;
        ++count;
      }
    if (count == 0) continue;
    LengthClass c{key.first, key.second, count / span, slo / count};
    if (options_.mean_lengths_block > 0) {
      // Means within the class's bound (the bound is a multiple of the block), never above.
      c.prompt_len = std::min(key.first, static_cast<int>(std::ceil(prompt / count - 1e-9)));
      c.output_len = std::min(key.second, RoundUp(static_cast<int>(std::ceil(output / count - 1e-9)), options_.mean_lengths_block));
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace tediserve::plan
