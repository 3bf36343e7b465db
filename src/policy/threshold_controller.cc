#include "policy/threshold_controller.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tediserve::policy {

Seconds EstimateRemainingSeconds(const RequestState& r, int k, const PlacementCost& p, double steps_factor) {
  const double s = r.predicted[k] * steps_factor;
  if (!r.cache) return p.wait + s * p.recompute_step;
  const double rec = r.RemainingRecomputeSteps();
  return p.wait + rec * p.recompute_step + std::max(0.0, s - rec) * p.cache_step;
}

std::pair<int, int> AllowedRange(const RequestState& r, std::span<const double> thresholds, double cap) {
  const int n = static_cast<int>(thresholds.size());
  const double lo_bound = r.spec.min_threshold;
  const double hi_bound = std::min(r.spec.max_threshold, std::max(cap, lo_bound));
  int first = n, last = -1;
  for (int k = 0; k < n; ++k) {
    const double c = thresholds[k];
    if (c <= hi_bound + 1e-12 && c >= lo_bound - 1e-12) {
      first = std::min(first, k);
      last = std::max(last, k);
    }
  }
  if (first > last) {
    // The bounds exclude every candidate: use the candidate nearest to them.
    const double target = std::clamp(cap, lo_bound, r.spec.max_threshold);
    int best = 0;
    for (int k = 1; k < n; ++k) {
      if (std::abs(thresholds[k] - target) < std::abs(thresholds[best] - target)) best = k;
    }
    return {best, best};
  }
  return {first, last};
}

int SelectThreshold(const RequestState& r, std::span<const double> thresholds, double cap,
                    Seconds now, const PlacementCost& p, double steps_factor,
                    std::span<const double> accuracy, double margin) {
  const auto [first, last] = AllowedRange(r, thresholds, cap);
  const Seconds budget = r.deadline - now;
  const bool valued = accuracy.size() == thresholds.size();
  const auto value = [&](int k) {
    const double work = RequestLoadTokens(r, k);
    return work > 0 ? accuracy[k] / work : 0.0;
  };
  // With accuracy, a rescue below `first` must not lower the accuracy per unit of work: the
  // accuracy it costs, acc[first] - acc[k], must be at most the work it saves valued at the
  // request's own rate, (W[first] - W[k]) x acc[first] / W[first].
  const double floor_value = valued ? value(first) * (1 - 1e-9) : 0.0;
  for (int k = first; k <= last; ++k) {
    if (k > first && valued && value(k) < floor_value) continue;
    if (EstimateRemainingSeconds(r, k, p, steps_factor) <= budget) return k;
  }
  if (!valued) return last;
  int best = last;
  double best_value = value(last) * (1 + margin);
  for (int k = first; k < last; ++k) {
    const double v = value(k);
    if (v > best_value * (1 + 1e-9)) {
      best_value = v;
      best = k;
    }
  }
  return best;
}

double RequestLoadTokens(const RequestState& r, int k) {
  const double s = r.predicted[k];
  const double seq = r.spec.prompt_len + r.spec.output_len;
  if (!r.cache) return s * seq;
  const double rec = r.RemainingRecomputeSteps();
  return rec * seq + std::max(0.0, s - rec) * r.block_size;
}

void ComputeCaps(std::span<RequestState* const> ordered, std::span<const double> thresholds,
                 double capacity_tokens) {
  const int n = static_cast<int>(ordered.size());
  const int low = static_cast<int>(thresholds.size()) - 1;
  // suffix[i] = load of requests i.. at the lowest threshold.
  std::vector<double> suffix(n + 1, 0.0);
  for (int i = n - 1; i >= 0; --i) suffix[i] = suffix[i + 1] + RequestLoadTokens(*ordered[i], low);
  double committed = 0;
  for (int i = 0; i < n; ++i) {
    RequestState& r = *ordered[i];
    int chosen = low;
    for (int k = 0; k < low; ++k) {
      if (committed + RequestLoadTokens(r, k) + suffix[i + 1] <= capacity_tokens) {
        chosen = k;
        break;
      }
    }
    r.cap = thresholds[chosen];
    committed += RequestLoadTokens(r, chosen);
  }
}

}  // namespace tediserve::policy
