// Policy cost at cluster scale: (a) one Algorithm 2 pass over 2,000 live requests and 5
// candidate thresholds (target 200 us); (b) one dispatch cycle (Host::BatchDone of a batch of
// ~20 requests: accounting, the scheduler's bookkeeping, Algorithms 1 and 3, the next launch)
// with 64 instances and ~2,000 live requests (target 10 us with the 1 s debounce of Algorithm
// 2, 100 us with Algorithm 2 on every event). Prints medians over many repeats. Setup is
// outside the timed regions.
//
//   policy_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <queue>
#include <span>
#include <utility>
#include <vector>

#include "host/host.h"
#include "policy/threshold_controller.h"

namespace tediserve::policy {
namespace {

constexpr double kLoadControlTarget = 200;  // us
constexpr double kDispatchTarget = 10;
constexpr double kDispatchWithLoadControlTarget = 100;
constexpr int kInstances = 64;
constexpr int kRequests = 2000;

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Summary {
  double median = 0, p90 = 0, p99 = 0, max = 0;
};

Summary Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  return {at(0.5), at(0.9), at(0.99), v.back()};
}

void Report(const char* what, const Summary& s, double target_us) {
  std::printf("%-58s median %8.2f us  p90 %8.2f  p99 %8.2f  max %8.2f", what, s.median, s.p90, s.p99, s.max);
  if (target_us > 0) std::printf("   target <= %.0f us: %s", target_us, s.median <= target_us ? "PASS" : "FAIL");
  std::printf("\n");
}

// A smooth synthetic curve with an H100-like shape: a ~12 ms floor, then ~25 us per token.
LatencyProfile MakeProfile() {
  std::vector<std::pair<double, double>> pts;
  for (double n : {32.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) {
    pts.push_back({n, std::max(0.012, 0.004 + n * 25e-6)});
  }
  return std::move(LatencyProfile::FromPoints({{1, pts}}, "bench")).value();
}

const std::vector<double> kTh = {0.9, 0.8, 0.7, 0.6, 0.5};
const std::vector<double> kTokensPerStep = {1.6, 2.1, 2.7, 3.4, 4.5};

// Requests with prompts 64..1000 and outputs 128..512 (blocks of 32), SLOs 5..20 s; every
// 7th has priority 1.
RequestSpec MakeSpec(RequestId id, Seconds arrival) {
  RequestSpec s;
  s.id = id;
  s.arrival = arrival;
  s.prompt_len = 64 + static_cast<int>((id * 7919) % 937);
  s.output_len = 128 * (1 + static_cast<int>((id * 31) % 4));
  s.slo = 5 + static_cast<double>((id * 13) % 16);
  s.priority = id % 7 == 0 ? 1 : 0;
  return s;
}

// A driver that keeps the cluster in steady state through the host layer (as the simulator
// and the runtime drive it): it answers each step batch after the profile's step time with
// outcomes that unmask 2 tokens and close blocks on time.
class Driver {
 public:
  // whole_blocks: every step closes its block, so every returning request is at a block
  // boundary and Algorithm 3 weighs all instances for it (the dispatcher's worst case).
  Driver(PolicyOptions o, int num_requests, int token_budget, bool whole_blocks = false)
      : profile_(MakeProfile()), whole_blocks_(whole_blocks) {
    host::HostOptions ho;
    o.thresholds = kTh;
    o.tokens_per_step = kTokensPerStep;
    o.accuracy = {0.8, 0.79, 0.77, 0.74, 0.6};
    o.token_budget = token_budget;
    ho.policy = o;
    ho.estimator.tokens_per_step = kTokensPerStep;
    ho.accuracy = [](double c) { return c; };
    for (int i = 0; i < kInstances; ++i) ho.instances.push_back({i, 1});
    auto made = host::Host::Create(ho, &profile_);
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      std::exit(1);
    }
    h_ = std::move(made).value();
    TopUp(num_requests, 0);
  }
  host::Host& host() { return *h_; }
  const Scheduler& scheduler() { return h_->scheduler(); }
  Scheduler& mutable_scheduler() { return h_->mutable_scheduler(); }
  // Builds the outcomes of the next batch to finish; returns false when nothing runs.
  bool Next(BatchId* batch, Seconds* now, std::vector<StepOutcome>* outcomes) {
    if (queue_.empty()) return false;
    const auto [t, id] = queue_.top();
    queue_.pop();
    *batch = id;
    *now = t;
    outcomes->clear();
    const StepBatch* b = h_->InFlight(id);
    if (b == nullptr) return false;
    for (const StepCommand& c : b->commands) {
      const RequestState* r = h_->scheduler().Find(c.id);
      if (r == nullptr) continue;
      StepOutcome o;
      o.id = c.id;
      const int left = r->block_size - r->unmasked_in_block;
      o.unmasked = std::min(whole_blocks_ ? left : 2, left);
      o.block_done = o.unmasked == left;
      o.request_done = o.block_done && r->block + 1 == r->num_blocks;
      outcomes->push_back(o);
    }
    return true;
  }
  // Queues the batches the last event launched (outside any timed region).
  void Take(Seconds now) {
    for (const StepBatch& l : h_->output().batches) queue_.push({now + l.expected_seconds, l.id});
    h_->output().clear();
  }
  // Arrivals that bring the live count back to `target` (outside any timed region).
  void TopUp(size_t target, Seconds now) {
    while (h_->live() < target) {
      if (!h_->Submit(MakeSpec(next_id_, now), now).ok()) std::exit(1);
      ++next_id_;
      Take(now);
    }
  }

 private:
  LatencyProfile profile_;
  std::unique_ptr<host::Host> h_;
  using Event = std::pair<Seconds, BatchId>;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  RequestId next_id_ = 0;
  bool whole_blocks_;
};

// (a) Algorithm 2 through the scheduler (ordering + ComputeCaps) and ComputeCaps alone.
void BenchLoadControl(int repeats) {
  Driver d(*PolicyOptions::Named("tediserve-paper"), kRequests, 8192);
  Scheduler& s = d.mutable_scheduler();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    s.RunLoadControl(100.0 + i);
    t.push_back(Micros(Clock::now() - t0));
  }
  char what[128];
  std::snprintf(what, sizeof what, "(a) RunLoadControl, %zu live x %zu thresholds", s.live(), kTh.size());
  Report(what, Summarize(t), kLoadControlTarget);

  // ComputeCaps alone over hand-made states (no scheduler bookkeeping).
  std::vector<RequestState> states(kRequests);
  std::vector<RequestState*> ordered;
  for (int i = 0; i < kRequests; ++i) {
    RequestState& r = states[i];
    r.spec = MakeSpec(i, 0);
    r.block_size = 32;
    r.num_blocks = r.spec.output_len / 32;
    r.block = i % r.num_blocks;
    r.steps_in_block = i % 3;
    for (size_t k = 0; k < kTh.size(); ++k) r.predicted[k] = r.spec.output_len / kTokensPerStep[k];
    ordered.push_back(&r);
  }
  t.clear();
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    ComputeCaps(ordered, kTh, 2e6 + i);
    t.push_back(Micros(Clock::now() - t0));
  }
  Report("    ComputeCaps alone, 2000 x 5", Summarize(t), 0);
}

// (b) One dispatch cycle: OnStepDone of the next instance to finish, in steady state.
void BenchDispatch(const char* policy, const char* label, double debounce, int warmup, int cycles,
                   bool whole_blocks = false) {
  const double target = debounce > 0 ? kDispatchTarget : kDispatchWithLoadControlTarget;
  PolicyOptions o = *PolicyOptions::Named(policy);
  o.load_control_debounce = debounce;
  // Budget 2048 tokens: batches of ~20 requests (mostly cache steps of 32 tokens plus a few
  // recompute steps of the whole sequence); with whole blocks every step recomputes (~850
  // tokens), so 16384 tokens for a batch of about the same size.
  Driver d(o, kRequests, whole_blocks ? 16384 : 2048, whole_blocks);
  const Scheduler& s = d.scheduler();
  std::vector<StepOutcome> outcomes;
  std::vector<double> t;
  double batch_sum = 0;
  int64_t decisions = 0, migrations = 0;
  BatchId batch = 0;
  Seconds now = 0;
  for (int i = 0; i < warmup + cycles && d.Next(&batch, &now, &outcomes); ++i) {
    const SchedulerStats before = s.stats();
    const auto t0 = Clock::now();
    const Status st = d.host().BatchDone(batch, outcomes, now);
    const double us = Micros(Clock::now() - t0);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      std::exit(1);
    }
    if (i >= warmup) {
      t.push_back(us);
      batch_sum += outcomes.size();
      decisions += s.stats().dispatch_decisions - before.dispatch_decisions;
      migrations += s.stats().migrations - before.migrations;
    }
    d.Take(now);
    d.TopUp(kRequests, now);
  }
  char what[160];
  std::snprintf(what, sizeof what, "(b) BatchDone %s, %d inst, %zu live, batch %.1f", label, kInstances, s.live(),
                t.empty() ? 0.0 : batch_sum / t.size());
  Report(what, Summarize(t), target);
  std::printf("      per cycle: %.2f instance choices, %.3f migrations; %zu waiting at the end\n",
              t.empty() ? 0.0 : static_cast<double>(decisions) / t.size(),
              t.empty() ? 0.0 : static_cast<double>(migrations) / t.size(), s.waiting());
}

}  // namespace
}  // namespace tediserve::policy

int main(int argc, char** argv) {
  using namespace tediserve::policy;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int repeats = quick ? 51 : 501;
  const int cycles = quick ? 500 : 5000;
  std::printf("policy_bench: %d instances, %d requests, %zu thresholds\n", kInstances, kRequests, kTh.size());
  BenchLoadControl(repeats);
  BenchDispatch("tediserve-paper", "tediserve-paper (debounce 1 s)", 1.0, 500, cycles);
  BenchDispatch("tediserve-paper", "tediserve-paper + Alg 2 every call", 0.0, 500, cycles);
  BenchDispatch("tediserve-paper", "tediserve-paper, all at block ends", 1.0, 500, cycles, true);
  BenchDispatch("infaas", "infaas", 1.0, 500, cycles);
  BenchDispatch("llumnix", "llumnix", 1.0, 500, cycles);
  // Its per-event work: Algorithm 1 per step under the planned cap, Proteus' mix per period.
  BenchDispatch("tediserve", "tediserve (plan at arrival + Alg 1)", 1.0, 500, cycles);
  return 0;
}
