// Which instance runs a request's next step: Algorithm 3 (step-level dispatch with migration
// at block boundaries), INFaaS (least loaded at arrival) and Llumnix (least loaded plus
// rebalancing), and the launch of each idle instance's next step batch.
#include <algorithm>

#include "policy/scheduler.h"

namespace tediserve::policy {

// Algorithm 3's choice: among accepting instances whose next batch still fits the token
// budget with r, the one with the earliest completion of r's next step.
Scheduler::Instance* Scheduler::BestStepLevel(const RequestState& r, Seconds now, Seconds* best_time) {
  Instance* best = nullptr;
  *best_time = 1e300;
  const int tokens = r.NextStepTokens();
  for (Instance& inst : instances_) {
    if (!inst.accepting) continue;
    const int64_t batch = inst.next_tokens - (r.instance == inst.info.id ? r.queued_tokens : 0) + tokens;
    // An empty instance takes any request (a sequence longer than the budget still runs).
    if (batch > options_.token_budget && batch != tokens) continue;
    const Seconds t = std::max(0.0, inst.busy_until - now) + profile_->StepSeconds(inst.info.tp, batch);
    if (t < *best_time) {
      *best_time = t;
      best = &inst;
    }
  }
  ++stats_.dispatch_decisions;
  return best;
}

// The accepting instance with the least work per unit of capacity; nullptr if none accepts.
Scheduler::Instance* Scheduler::LeastLoaded() {
  Instance* best = nullptr;
  double best_load = 1e300;
  for (Instance& inst : instances_) {
    if (!inst.accepting) continue;
    const double load = inst.load_tokens / inst.tokens_per_second;
    if (load < best_load) {
      best_load = load;
      best = &inst;
    }
  }
  ++stats_.dispatch_decisions;
  return best;
}

void Scheduler::DispatchReady(const std::vector<RequestId>& ready, InstanceId from, Seconds now) {
  Instance& src = instances_[instance_index_.at(from)];
  for (RequestId id : ready) {
    RequestState& r = requests_.at(id);
    const bool may_move = !options_.cache || r.NextIsRecompute();
    if (!src.accepting && may_move) {
      ReturnToWaiting(r);  // its instance drains: it leaves at this block boundary
      continue;
    }
    if (may_move && CheckLate(r, now) && OnTimeWaiting()) {
      ReturnToWaiting(r);  // lost anyway: its place goes to a request that can still make it
      continue;
    }
    switch (options_.dispatch) {
      case DispatchKind::kStepLevel: {
        if (may_move) {
          const int64_t stay_batch = src.next_tokens;
          const Seconds stay = std::max(0.0, src.busy_until - now) + profile_->StepSeconds(src.info.tp, stay_batch);
          Seconds t = 0;
          Instance* best = BestStepLevel(r, now, &t);
          if (best != nullptr && best != &src && t < stay * (1 - 1e-9)) Place(r, *best);
        }
        break;
      }
      case DispatchKind::kLeastLoaded:
        break;
      case DispatchKind::kLeastLoadedMigrate: {
        if (may_move) {
          Instance* dst = LeastLoaded();
          const int64_t seq = r.spec.prompt_len + r.spec.output_len;
          if (dst != nullptr && dst != &src) {
            const int64_t gap = src.load_tokens - dst->load_tokens;
            if (gap > options_.llumnix_margin_tokens && gap > seq) Place(r, *dst);
          }
        }
        break;
      }
    }
    ChooseThreshold(r, now);
  }
}

void Scheduler::DispatchWaiting(Seconds now) {
  // FCFS with head-of-line blocking: stop at the first request that fits nowhere. That keeps
  // a dispatch cycle O(placements) under overload and never starves a big request. (Only
  // step-level dispatch queues requests in normal operation; least-loaded dispatch queues
  // them only while no instance accepts work.) With defer_late the order is by deadline and
  // a request found past its deadline at the head moves behind every on-time one.
  while (!waiting_.empty()) {
    const RequestId id = std::get<3>(*waiting_.begin());
    RequestState& r = requests_.at(id);
    if (!r.late && CheckLate(r, now)) continue;  // re-keyed behind the on-time requests
    Instance* best = nullptr;
    if (options_.dispatch == DispatchKind::kStepLevel) {
      Seconds t = 0;
      best = BestStepLevel(r, now, &t);
    } else {
      best = LeastLoaded();
    }
    if (best == nullptr) break;
    Place(r, *best);
    ChooseThreshold(r, now);
  }
}

void Scheduler::LaunchIdle(Seconds now, Decisions* out) {
  for (Instance& inst : instances_) {
    if (inst.busy || inst.residents.empty()) continue;
    StepBatch b;
    b.id = next_batch_++;
    b.instance = inst.info.id;
    // With defer_late, residents past their deadline are batched after the others (two
    // passes); otherwise in placement order.
    const int passes = options_.defer_late ? 2 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      for (RequestId id : inst.residents) {
        RequestState& r = requests_.at(id);
        if (passes == 2 && r.late != (pass == 1)) continue;
        const int tokens = r.NextStepTokens();
        // The token budget caps the batch; who does not fit waits for the next step here.
        if (!b.commands.empty() && b.tokens + tokens > options_.token_budget) continue;
        b.commands.push_back({id, r.threshold, r.NextIsRecompute()});
        b.tokens += tokens;
        r.in_flight = true;
        r.batch = b.id;
        inst.batch_ids.push_back(id);
      }
    }
    b.expected_seconds = profile_->StepSeconds(inst.info.tp, b.tokens);
    inst.busy = true;
    inst.batch = b.id;
    inst.busy_until = now + b.expected_seconds;
    batches_.emplace(b.id, inst.info.id);
    out->batches.push_back(std::move(b));
  }
}

}  // namespace tediserve::policy
