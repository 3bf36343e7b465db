// Policy cost at cluster scale: (a) one Algorithm 2 pass over 2,000 live requests and 5
// candidate thresholds; (b) one dispatch cycle (OnStepDone of an instance whose batch of ~16
// requests came back) with 64 instances and ~2,000 live requests. Prints medians over many
// repeats against the 200 us target. Setup is outside the timed regions.
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

#include "policy/scheduler.h"
#include "policy/threshold_controller.h"

namespace tediserve::policy {
namespace {

constexpr double kTargetMicros = 200;
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

void Report(const char* what, const Summary& s, bool judged) {
  std::printf("%-58s median %8.2f us  p90 %8.2f  p99 %8.2f  max %8.2f", what, s.median, s.p90, s.p99, s.max);
  if (judged) std::printf("   target <= %.0f us: %s", kTargetMicros, s.median <= kTargetMicros ? "PASS" : "FAIL");
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

// A driver that keeps the scheduler in steady state: it answers each launch after the
// profile's step time with outcomes that unmask 2 tokens and close blocks on time.
class Driver {
 public:
  // whole_blocks: every step closes its block, so every returning request is at a block
  // boundary and Algorithm 3 weighs all instances for it (the dispatcher's worst case).
  Driver(PolicyOptions o, int num_requests, int token_budget, bool whole_blocks = false)
      : profile_(MakeProfile()), est_(kTh, kTokensPerStep), whole_blocks_(whole_blocks) {
    o.thresholds = kTh;
    o.tokens_per_step = kTokensPerStep;
    o.accuracy = {0.8, 0.79, 0.77, 0.74, 0.6};
    o.token_budget = token_budget;
    std::vector<InstanceInfo> inst;
    for (int i = 0; i < kInstances; ++i) inst.push_back({i, 1});
    auto made = Scheduler::Create(o, &profile_, &est_, inst);
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      std::exit(1);
    }
    s_ = std::move(made).value();
    std::vector<Launch> out;
    TopUp(num_requests, 0);
  }

  Scheduler& scheduler() { return *s_; }

  // Builds the outcomes of the next instance to finish; returns false when nothing runs.
  bool Next(InstanceId* instance, Seconds* now, std::vector<StepOutcome>* outcomes) {
    if (queue_.empty()) return false;
    const auto [t, id] = queue_.top();
    queue_.pop();
    *instance = id;
    *now = t;
    outcomes->clear();
    for (const StepCommand& c : in_flight_[id].batch) {
      const RequestState* r = s_->Find(c.id);
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

  void Take(std::vector<Launch>& out, Seconds now) {
    for (Launch& l : out) {
      queue_.push({now + profile_.StepSeconds(1, l.tokens), l.instance});
      in_flight_[l.instance] = std::move(l);
    }
    out.clear();
  }

  // Arrivals that bring the live count back to `target` (outside any timed region).
  void TopUp(size_t target, Seconds now) {
    std::vector<Launch> out;
    while (s_->live() < target) {
      s_->OnArrival(MakeSpec(next_id_, now), now, &out);
      ++next_id_;
      Take(out, now);
    }
  }

 private:
  LatencyProfile profile_;
  OneShotEstimator est_;
  std::unique_ptr<Scheduler> s_;
  using Event = std::pair<Seconds, InstanceId>;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::map<InstanceId, Launch> in_flight_;
  RequestId next_id_ = 0;
  bool whole_blocks_;
};

// (a) Algorithm 2 through the scheduler (ordering + ComputeCaps) and ComputeCaps alone.
void BenchLoadControl(int repeats) {
  Driver d(*PolicyOptions::Named("tediserve"), kRequests, 8192);
  Scheduler& s = d.scheduler();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    s.RunLoadControl(100.0 + i);
    t.push_back(Micros(Clock::now() - t0));
  }
  char what[128];
  std::snprintf(what, sizeof what, "(a) RunLoadControl, %zu live x %zu thresholds", s.live(), kTh.size());
  Report(what, Summarize(t), true);

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
  Report("    ComputeCaps alone, 2000 x 5", Summarize(t), false);
}

// (b) One dispatch cycle: OnStepDone of the next instance to finish, in steady state.
void BenchDispatch(const char* policy, const char* label, double debounce, int warmup, int cycles,
                   bool whole_blocks = false) {
  PolicyOptions o = *PolicyOptions::Named(policy);
  o.load_control_debounce = debounce;
  // Budget 2048 tokens: batches of ~20 requests (mostly cache steps of 32 tokens plus a few
  // recompute steps of the whole sequence); with whole blocks every step recomputes (~850
  // tokens), so 16384 tokens for a batch of about the same size.
  Driver d(o, kRequests, whole_blocks ? 16384 : 2048, whole_blocks);
  Scheduler& s = d.scheduler();
  std::vector<StepOutcome> outcomes;
  std::vector<Launch> out;
  std::vector<double> t;
  double batch_sum = 0;
  int64_t decisions = 0, migrations = 0;
  InstanceId inst = 0;
  Seconds now = 0;
  for (int i = 0; i < warmup + cycles && d.Next(&inst, &now, &outcomes); ++i) {
    const SchedulerStats before = s.stats();
    const auto t0 = Clock::now();
    s.OnStepDone(inst, outcomes, now, &out);
    const double us = Micros(Clock::now() - t0);
    if (i >= warmup) {
      t.push_back(us);
      batch_sum += outcomes.size();
      decisions += s.stats().dispatch_decisions - before.dispatch_decisions;
      migrations += s.stats().migrations - before.migrations;
    }
    d.Take(out, now);
    d.TopUp(kRequests, now);
  }
  char what[160];
  std::snprintf(what, sizeof what, "(b) OnStepDone %s, %d inst, %zu live, batch %.1f", label, kInstances, s.live(),
                t.empty() ? 0.0 : batch_sum / t.size());
  Report(what, Summarize(t), true);
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
  BenchDispatch("tediserve", "tediserve (debounce 1 s)", 1.0, 500, cycles);
  BenchDispatch("tediserve", "tediserve + Alg 2 every call", 0.0, 500, cycles);
  BenchDispatch("tediserve", "tediserve, all at block ends", 1.0, 500, cycles, true);
  BenchDispatch("infaas", "infaas", 1.0, 500, cycles);
  BenchDispatch("llumnix", "llumnix", 1.0, 500, cycles);
  return 0;
}
