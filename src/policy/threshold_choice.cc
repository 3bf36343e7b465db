// Which threshold a request's next step uses (fixed, Algorithm 1, caps, Proteus' draw) and
// the cluster-wide caps of Algorithm 2.
#include <algorithm>

#include "policy/scheduler.h"
#include "policy/threshold_controller.h"

namespace tediserve::policy {

void Scheduler::ChooseThreshold(RequestState& r, Seconds now) {
  const auto& th = options_.thresholds;
  switch (options_.threshold) {
    case ThresholdKind::kFixed: {
      r.threshold = std::clamp(options_.fixed_threshold, r.spec.min_threshold, r.spec.max_threshold);
      return;
    }
    case ThresholdKind::kProteus:
      return;  // drawn at arrival, kept
    case ThresholdKind::kCapsOnly: {
      r.threshold = th[AllowedRange(r, th, r.cap).first];
      return;
    }
    case ThresholdKind::kSloAware:
    case ThresholdKind::kSloAwareWithCaps:
    case ThresholdKind::kPlannedRescue: {
      const double cap = options_.threshold == ThresholdKind::kSloAware ? 1.0 : r.cap;
      PlacementCost p;
      if (r.instance >= 0) {
        const Instance& inst = instances_[instance_index_.at(r.instance)];
        const int64_t others = inst.next_tokens - r.queued_tokens;
        p.wait = std::max(0.0, inst.busy_until - now);
        p.recompute_step = StepTime(inst, others + r.spec.prompt_len + r.spec.output_len);
        p.cache_step = StepTime(inst, others + r.block_size);
      }
      // The default policy's rescue for a priority request assumes it is one standard
      // deviation slower than predicted (steps_cv, the offline CV of steps per request), so
      // it acts before the mean estimate runs out of slack; other requests, and the paper's
      // Algorithm 1, use the mean.
      const double factor =
          options_.threshold == ThresholdKind::kPlannedRescue && r.spec.priority > 0 ? 1 + options_.steps_cv : 1.0;
      // The default policy does not sink a request that is late anyway to the lowest
      // threshold when a higher one gives clearly more accuracy per unit of work (see
      // SelectThreshold); the paper's Algorithm 1 does.
      const std::span<const double> accuracy = options_.threshold == ThresholdKind::kPlannedRescue
                                                   ? std::span<const double>(options_.accuracy)
                                                   : std::span<const double>();
      r.threshold = th[SelectThreshold(r, th, cap, now, p, factor, accuracy, options_.value_margin)];
      ++stats_.threshold_selections;
      return;
    }
  }
}

void Scheduler::MaybeLoadControl(Seconds now) {
  if (options_.threshold != ThresholdKind::kSloAwareWithCaps && options_.threshold != ThresholdKind::kCapsOnly) return;
  if (now - last_load_control_ < options_.load_control_debounce) {
    load_control_due_ = true;
    return;
  }
  RunLoadControl(now);
}

void Scheduler::RunLoadControl(Seconds now) {
  last_load_control_ = now;
  load_control_due_ = false;
  ++stats_.load_control_runs;
  std::vector<RequestState*> ordered;
  ordered.reserve(order_.size());
  double slo_sum = 0;
  for (const OrderKey& key : order_) {
    RequestState& r = requests_.at(std::get<2>(key));
    ordered.push_back(&r);
    slo_sum += r.spec.slo;
  }
  if (ordered.empty()) return;
  const double slo = options_.capacity_slo > 0 ? options_.capacity_slo : slo_sum / ordered.size();
  ComputeCaps(ordered, options_.thresholds, CapacityTokens(slo));
  newest_cap_ = ordered.back()->cap;
}

void Scheduler::AdvanceProteus(Seconds now) {
  if (now < proteus_.next_period()) return;  // no period closes
  double capacity = 0;
  for (const Instance& i : instances_) {
    if (i.accepting) capacity += i.tokens_per_second;
  }
  const double step_seconds =
      period_batches_ > 0 ? period_step_seconds_ / static_cast<double>(period_batches_) : 0;
  const double late_fraction =
      period_finished_ > 0 ? static_cast<double>(period_late_) / static_cast<double>(period_finished_) : 0;
  period_batches_ = 0;
  period_step_seconds_ = 0;
  period_finished_ = 0;
  period_late_ = 0;
  proteus_.AdvanceTo(now, capacity, step_seconds, late_fraction);
}

}  // namespace tediserve::policy
