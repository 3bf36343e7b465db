// Which instance runs a request's next step: Algorithm 3 (step-level dispatch with migration
// at block boundaries), INFaaS (least loaded at arrival) and Llumnix (least loaded plus
// rebalancing), and the launch of each idle instance's next step batch.
#include <algorithm>
#include <cmath>

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
    const Seconds t = std::max(0.0, inst.busy_until - now) + StepTime(inst, batch);
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
          const Seconds stay = std::max(0.0, src.busy_until - now) + StepTime(src, stay_batch);
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

double Scheduler::PredictedSteps(const RequestState& r) const {
  const auto& th = options_.thresholds;
  size_t k = 0;
  for (size_t i = 1; i < th.size(); ++i)
    if (std::abs(th[i] - r.threshold) < std::abs(th[k] - r.threshold)) k = i;
  return r.predicted[k];
}

bool Scheduler::FitsBudget(const StepBatch& b, int tokens) const {
  // The token budget caps the batch (one request always goes in); who does not fit waits.
  return b.commands.empty() || b.tokens + tokens <= options_.token_budget;
}

void Scheduler::AddToBatch(Instance& inst, StepBatch& b, RequestState& r) {
  b.commands.push_back({r.spec.id, r.threshold, r.NextIsRecompute()});
  b.tokens += r.NextStepTokens();
  r.in_flight = true;
  r.batch = b.id;
  inst.batch_ids.push_back(r.spec.id);
}

void Scheduler::LaunchIdle(Seconds now, Decisions* out) {
  for (Instance& inst : instances_) {
    if (inst.busy || inst.residents.empty()) continue;
    StepBatch b;
    b.id = next_batch_++;
    b.instance = inst.info.id;
    if (options_.defer_late) {
      BatchByPace(inst, now, b);
    } else {
      for (RequestId id : inst.residents) {  // in placement order
        RequestState& r = requests_.at(id);
        if (FitsBudget(b, r.NextStepTokens())) AddToBatch(inst, b, r);
      }
    }
    b.expected_seconds = profile_->StepSeconds(inst.info.tp, b.tokens);
    b.steps = options_.batch_steps;
    if (b.steps > 1) b.expected_seconds += LaterStepsSeconds(inst, b);
    inst.busy = true;
    inst.batch = b.id;
    inst.batch_start = now;
    inst.batch_steps = b.steps;
    inst.batch_profile_seconds = b.expected_seconds;
    inst.batch_tokens = b.tokens;
    inst.busy_until = now + b.expected_seconds * inst.step_scale;
    batches_.emplace(b.id, inst.info.id);
    out->batches.push_back(std::move(b));
  }
}

Seconds Scheduler::LaterStepsSeconds(const Instance& inst, const StepBatch& b) const {
  // Step k (1-based after the first) carries each request predicted to need more than k
  // steps: the block, or the sequence at the share of its remaining steps that start a block.
  Seconds total = 0;
  for (int k = 1; k < b.steps; ++k) {
    double tokens = 0;
    for (const StepCommand& c : b.commands) {
      const RequestState& r = requests_.at(c.id);
      const double left = PredictedSteps(r);
      if (left <= k) continue;
      const int seq = r.spec.prompt_len + r.spec.output_len;
      const double starts = r.cache ? std::min(1.0, r.RemainingRecomputeSteps() / left) : 1.0;
      tokens += starts * seq + (1 - starts) * r.block_size;
    }
    if (tokens <= 0) break;
    total += profile_->StepSeconds(inst.info.tp, tokens);
  }
  return total;
}

// The default policy's batch (defer_late). A request can still meet its SLO while each of
// its remaining steps (predicted at its threshold) takes at most (time left / steps left):
// its pace. On-time residents join by priority, then in placement order, each only if the
// step stays within the pace of everyone in the batch, itself included: the batch is a set
// that can all make it (so under overload some make it rather than none). The rest (on-time
// requests that cannot keep that pace, then the late ones) ride only where the step stays
// within that pace too, so they take nothing the others need: almost free where steps hardly
// grow with the batch (a GPU's small batches) or slack is ample; not at all where each token
// lengthens a step that requests near their deadline are in (a CPU under overload). With no
// request that can make it, all ride (within the token budget).
void Scheduler::BatchByPace(Instance& inst, Seconds now, StepBatch& b) {
  auto& on_time = on_time_scratch_;  // (-priority, pace, id)
  auto& rest = rest_scratch_;
  on_time.clear();
  rest.clear();
  for (RequestId id : inst.residents) {
    RequestState& r = requests_.at(id);
    if (!CheckLate(r, now))
      on_time.emplace_back(-r.spec.priority, (r.deadline - now) / std::max(1.0, PredictedSteps(r)), id);
  }
  // By priority, then placement order (a request already under way keeps its place; one
  // placed later joins when it costs no one their pace).
  std::stable_sort(on_time.begin(), on_time.end(),
                   [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
  Seconds pace = kNever;  // the least pace in the batch
  for (const auto& [neg_priority, own_pace, id] : on_time) {
    RequestState& r = requests_.at(id);
    const int tokens = r.NextStepTokens();
    if (!FitsBudget(b, tokens)) continue;
    if (StepTime(inst, b.tokens + tokens) <= std::min(pace, own_pace)) {
      pace = std::min(pace, own_pace);
      AddToBatch(inst, b, r);
    } else {
      rest.push_back(id);
    }
  }
  for (RequestId id : inst.residents)
    if (requests_.at(id).late) rest.push_back(id);
  for (RequestId id : rest) {
    RequestState& r = requests_.at(id);
    const int tokens = r.NextStepTokens();
    if (FitsBudget(b, tokens) && StepTime(inst, b.tokens + tokens) <= pace) AddToBatch(inst, b, r);
  }
}

}  // namespace tediserve::policy
