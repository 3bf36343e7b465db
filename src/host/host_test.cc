// The host layer: validation, SLO defaulting, the in-flight table, accounting, asynchronous
// predictions, and whole runs of every policy driven through it by a scripted cluster.
#include "host/host.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tediserve::host {
namespace {

using ::testing::HasSubstr;
using policy::InstanceInfo;
using policy::LatencyProfile;
using policy::PolicyOptions;
using policy::RequestSpec;
using policy::RequestState;
using policy::Scheduler;
using policy::StepBatch;
using policy::StepCommand;
using policy::StepOutcome;

// l(n) = max(0.01, n * 1e-4) s on TP 1, half that on TP 2.
LatencyProfile LinearProfile() {
  auto p = LatencyProfile::FromPoints({{1, {{100, 0.01}, {1000, 0.1}}}, {2, {{100, 0.005}, {1000, 0.05}}}}, "linear");
  EXPECT_TRUE(p.ok());
  return std::move(p).value();
}

const std::vector<double> kTh = {0.9, 0.8, 0.7, 0.6, 0.5};
const std::vector<double> kTokensPerStep = {2.0, 2.5, 3.2, 4.0, 8.0};
const std::vector<double> kAccuracy = {0.80, 0.79, 0.77, 0.74, 0.60};

RequestSpec Spec(RequestId id, Seconds arrival, Seconds slo = 10, int prompt = 100, int output = 256) {
  RequestSpec s;
  s.id = id;
  s.arrival = arrival;
  s.prompt_len = prompt;
  s.output_len = output;
  s.slo = slo;
  return s;
}

StepOutcome Outcome(RequestId id, bool block_done = false, bool request_done = false, int unmasked = 2) {
  StepOutcome o;
  o.id = id;
  o.unmasked = unmasked;
  o.block_done = block_done;
  o.request_done = request_done;
  return o;
}

// Instances 0..n-1, TP 1 at even ids and 2 at odd ones; one-shot estimates.
HostOptions Options(const std::string& policy, int num_instances) {
  HostOptions o;
  o.policy = *PolicyOptions::Named(policy);
  o.policy.tokens_per_step = kTokensPerStep;
  o.policy.accuracy = kAccuracy;
  o.estimator.tokens_per_step = kTokensPerStep;
  for (int i = 0; i < num_instances; ++i) o.instances.push_back({i, i % 2 == 0 ? 1 : 2});
  o.accuracy = [](double c) { return c; };
  return o;
}

struct RunLog {
  std::vector<std::tuple<Seconds, InstanceId, int, std::vector<std::tuple<RequestId, double, bool>>>> launches;
  size_t live_at_end = 0;
  int64_t migrations = 0;
  std::vector<RequestRecord> records;
};

RunLog RunToCompletion(const std::string& policy, int num_requests, int num_instances, uint64_t seed,
                       int token_budget = 8192) {
  RunLog log;
  const LatencyProfile profile = LinearProfile();
  HostOptions ho = Options(policy, num_instances);
  ho.policy.seed = seed;
  ho.policy.token_budget = token_budget;
  auto made = Host::Create(ho, &profile);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  Host& h = **made;
  const Scheduler& s = h.scheduler();

  std::vector<RequestSpec> arrivals;
  for (int i = 0; i < num_requests; ++i) {
    // Deterministic variety: prompts 50..450, outputs 32..256, SLOs 1..8 s.
    arrivals.push_back(Spec(i, i * 0.03, 1.0 + (i * 7) % 8, 50 + (i * 37) % 400, 32 * (1 + (i * 5) % 8)));
  }
  std::map<std::pair<Seconds, InstanceId>, StepBatch> running;  // by finish time
  auto take = [&](Seconds now) {
    for (StepBatch& l : h.output().batches) {
      std::vector<std::tuple<RequestId, double, bool>> cmds;
      for (const StepCommand& c : l.commands) cmds.emplace_back(c.id, c.threshold, c.recompute);
      log.launches.emplace_back(now, l.instance, l.tokens, cmds);
      const int tp = l.instance % 2 == 0 ? 1 : 2;
      for (const auto& [key, busy] : running) {
        EXPECT_NE(key.second, l.instance) << "launch on a busy instance at " << now;
      }
      EXPECT_DOUBLE_EQ(l.expected_seconds, profile.StepSeconds(tp, l.tokens));
      running[{now + profile.StepSeconds(tp, l.tokens), l.instance}] = std::move(l);
    }
    for (const RequestRecord& r : h.output().left) {
      EXPECT_EQ(r.outcome, Outcome::kCompleted);
      EXPECT_GE(r.latency, 0);
      log.records.push_back(r);
    }
    h.output().clear();
  };
  size_t next = 0;
  Seconds next_tick = 1.0;
  for (int guard = 0; guard < 1000000; ++guard) {
    const Seconds t_arr = next < arrivals.size() ? arrivals[next].arrival : 1e300;
    const Seconds t_done = running.empty() ? 1e300 : running.begin()->first.first;
    if (t_arr == 1e300 && t_done == 1e300) break;
    if (next_tick <= std::min(t_arr, t_done)) {
      EXPECT_TRUE(h.Tick(next_tick).ok());
      take(next_tick);
      next_tick += 1.0;
      continue;
    }
    if (t_arr <= t_done) {
      EXPECT_TRUE(h.Submit(arrivals[next], t_arr).ok());
      ++next;
      take(t_arr);
      continue;
    }
    auto it = running.begin();
    const Seconds now = it->first.first;
    const StepBatch l = std::move(it->second);
    running.erase(it);
    std::vector<StepOutcome> outcomes;
    for (const StepCommand& c : l.commands) {
      const RequestState* r = s.Find(c.id);
      EXPECT_NE(r, nullptr);
      if (r == nullptr) continue;
      const int per_step = c.threshold >= 0.85 ? 2 : c.threshold >= 0.65 ? 4 : 8;
      const int left = r->block_size - r->unmasked_in_block;
      const int k = std::min(per_step, left);
      const bool block_done = k == left;
      outcomes.push_back(Outcome(c.id, block_done, block_done && r->block + 1 == r->num_blocks, k));
    }
    const Status st = h.BatchDone(l.id, outcomes, now);
    EXPECT_TRUE(st.ok()) << st.ToString();
    take(now);
  }
  log.live_at_end = s.live();
  log.migrations = s.stats().migrations;
  return log;
}

TEST(SchedulerRunTest, SameInputsGiveSameStepBatches) {
  for (const std::string& policy : PolicyOptions::Names()) {
    SCOPED_TRACE(policy);
    const RunLog a = RunToCompletion(policy, 60, 3, 7);
    const RunLog b = RunToCompletion(policy, 60, 3, 7);
    ASSERT_FALSE(a.launches.empty());
    EXPECT_EQ(a.launches, b.launches);
    EXPECT_EQ(a.live_at_end, 0u);  // everyone finished
  }
}

TEST(SchedulerRunTest, InvariantsOverAWholeRun) {
  for (const std::string& policy : PolicyOptions::Names()) {
    SCOPED_TRACE(policy);
    const int budget = 1024;
    const RunLog log = RunToCompletion(policy, 200, 4, 3, budget);
    EXPECT_EQ(log.live_at_end, 0u);
    std::map<RequestId, InstanceId> where;
    std::map<RequestId, double> proteus_threshold;
    std::map<RequestId, bool> in_flight;
    int64_t moves = 0;
    for (const auto& [now, instance, tokens, cmds] : log.launches) {
      if (cmds.size() > 1) {
        EXPECT_LE(tokens, budget);
      }
      for (const auto& [id, threshold, recompute] : cmds) {
        auto it = where.find(id);
        if (it != where.end() && it->second != instance) {
          ++moves;
          // A cached request moves only at a recompute step (block boundary).
          EXPECT_TRUE(recompute) << "request " << id << " moved mid-block at " << now;
          EXPECT_NE(policy, "infaas");
          EXPECT_NE(policy, "proteus");
        }
        where[id] = instance;
        if (policy == "proteus") {
          auto [p, inserted] = proteus_threshold.emplace(id, threshold);
          if (!inserted) {
            EXPECT_DOUBLE_EQ(p->second, threshold) << "request " << id;
          }
        }
        EXPECT_TRUE(threshold == 0.9 || threshold == 0.8 || threshold == 0.7 || threshold == 0.6 ||
                    threshold == 0.5)
            << threshold;
      }
    }
    EXPECT_EQ(moves, log.migrations);
  }
}


TEST(HostRunTest, SameInputsGiveSameLaunches) {
  for (const std::string& policy : PolicyOptions::Names()) {
    SCOPED_TRACE(policy);
    const RunLog a = RunToCompletion(policy, 60, 3, 7);
    const RunLog b = RunToCompletion(policy, 60, 3, 7);
    ASSERT_FALSE(a.launches.empty());
    EXPECT_EQ(a.launches, b.launches);
    EXPECT_EQ(a.live_at_end, 0u);  // everyone finished
    EXPECT_EQ(a.records.size(), 60u);  // and left with a record
  }
}

TEST(HostRunTest, InvariantsOverAWholeRun) {
  for (const std::string& policy : PolicyOptions::Names()) {
    SCOPED_TRACE(policy);
    const int budget = 1024;
    const RunLog log = RunToCompletion(policy, 200, 4, 3, budget);
    EXPECT_EQ(log.live_at_end, 0u);
    std::map<RequestId, InstanceId> where;
    std::map<RequestId, double> proteus_threshold;
    int64_t moves = 0;
    for (const auto& [now, instance, tokens, cmds] : log.launches) {
      if (cmds.size() > 1) {
        EXPECT_LE(tokens, budget);
      }
      for (const auto& [id, threshold, recompute] : cmds) {
        auto it = where.find(id);
        if (it != where.end() && it->second != instance) {
          ++moves;
          // A cached request moves only at a recompute step (block boundary).
          EXPECT_TRUE(recompute) << "request " << id << " moved mid-block at " << now;
          EXPECT_NE(policy, "infaas");
          EXPECT_NE(policy, "proteus");
        }
        where[id] = instance;
        if (policy == "proteus") {
          auto [p, inserted] = proteus_threshold.emplace(id, threshold);
          if (!inserted) {
            EXPECT_DOUBLE_EQ(p->second, threshold) << "request " << id;
          }
        }
        EXPECT_TRUE(threshold == 0.9 || threshold == 0.8 || threshold == 0.7 || threshold == 0.6 ||
                    threshold == 0.5)
            << threshold;
      }
    }
    EXPECT_EQ(moves, log.migrations);
    // Accounting: the token-weighted threshold lies within the candidates, quality follows it.
    for (const RequestRecord& r : log.records) {
      EXPECT_GE(r.mean_threshold, 0.5 - 1e-9);
      EXPECT_LE(r.mean_threshold, 0.9 + 1e-9);
      EXPECT_NEAR(r.quality, r.mean_threshold, 1e-9);  // accuracy(c) = c here
      EXPECT_EQ(r.met, r.latency <= r.slo);
    }
  }
}

TEST(HostTest, ValidatesRequestsAndDefaultsTheirSlo) {
  const LatencyProfile profile = LinearProfile();
  HostOptions o = Options("tediserve-paper", 1);
  o.slo_scale = 5;
  auto h = Host::Create(o, &profile);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  RequestSpec bad = Spec(0, 0);
  bad.output_len = 0;
  EXPECT_EQ((*h)->Submit(bad, 0).code(), StatusCode::kInvalidArgument);
  bad = Spec(0, 0);
  bad.min_threshold = 0.9;
  bad.max_threshold = 0.5;
  EXPECT_THAT((*h)->Submit(bad, 0).message(), HasSubstr("min_threshold must be <= max_threshold"));
  RequestSpec no_slo = Spec(0, 0, /*slo=*/0, 100, 64);
  ASSERT_TRUE((*h)->Submit(no_slo, 0).ok());
  // 5 x (2 blocks of one recompute step each at 164 tokens + 30 cache steps of 32 tokens).
  const double solo = 2 * profile.StepSeconds(1, 164) + 30 * profile.StepSeconds(1, 32);
  EXPECT_NEAR((*h)->scheduler().Find(0)->spec.slo, 5 * solo, 1e-12);
  EXPECT_EQ((*h)->Submit(Spec(0, 0.1), 0.1).code(), StatusCode::kAlreadyExists);

  // Without any default, a request without an SLO is refused.
  auto h2 = Host::Create(Options("tediserve-paper", 1), &profile);
  ASSERT_TRUE(h2.ok());
  EXPECT_THAT((*h2)->Submit(no_slo, 0).message(), HasSubstr("no SLO"));
}

TEST(HostTest, EveryRequestLeavesWithARecordWhateverHappens) {
  const LatencyProfile profile = LinearProfile();
  HostOptions o = Options("tediserve-paper", 2);
  o.policy.max_live_requests = 3;
  auto made = Host::Create(o, &profile);
  ASSERT_TRUE(made.ok());
  Host& h = **made;
  for (RequestId id = 0; id < 4; ++id) ASSERT_TRUE(h.Submit(Spec(id, 0), 0).ok());
  std::map<RequestId, RequestRecord> left;
  auto collect = [&] {
    for (const RequestRecord& r : h.output().left) left[r.id] = r;
    h.output().left.clear();
  };
  collect();
  ASSERT_EQ(left.count(3), 1u);  // over the admission limit
  EXPECT_EQ(left[3].outcome, Outcome::kRejected);
  EXPECT_THAT(left[3].reason, HasSubstr("limit of 3"));
  ASSERT_TRUE(h.Cancel(1, 0.01).ok());
  collect();
  EXPECT_EQ(left[1].outcome, Outcome::kCancelled);
  EXPECT_FALSE(left[1].met);
  // The instance running request 0 fails; then everything else is given up.
  const StepBatch* b = nullptr;
  for (const StepBatch& sb : h.output().batches) {
    if (h.InFlight(sb.id) != nullptr) b = h.InFlight(sb.id);
  }
  ASSERT_NE(b, nullptr);
  const BatchId lost = b->id;
  ASSERT_TRUE(h.RemoveInstance(b->instance, 0.02, /*failed=*/true).ok());
  EXPECT_EQ(h.InFlight(lost), nullptr);
  EXPECT_EQ(h.instance_failures(), 1);
  ASSERT_TRUE(h.FailAll(0.03, "shutting down").ok());
  collect();
  EXPECT_EQ(left.size(), 4u);
  EXPECT_EQ(left[0].outcome, Outcome::kFailed);
  EXPECT_EQ(left[0].reason, "shutting down");
  EXPECT_EQ(h.live(), 0u);
}

TEST(HostTest, StepOutcomesAreAccountedAtTheirThreshold) {
  const LatencyProfile profile = LinearProfile();
  HostOptions o = Options("fixed", 1);
  o.policy.fixed_threshold = 0.7;
  o.policy.block_size = 4;
  auto made = Host::Create(o, &profile);
  ASSERT_TRUE(made.ok());
  Host& h = **made;
  ASSERT_TRUE(h.Submit(Spec(0, 0, 10, 10, 4), 0).ok());
  ASSERT_EQ(h.output().batches.size(), 1u);
  const BatchId b = h.output().batches[0].id;
  h.output().clear();
  const StepOutcome first[] = {Outcome(0, false, false, 3)};
  ASSERT_TRUE(h.BatchDone(b, first, 0.01).ok());
  const BatchId b2 = h.output().batches.at(0).id;
  EXPECT_EQ(h.BatchDone(b, first, 0.011).code(), StatusCode::kFailedPrecondition);  // twice: refused
  h.output().clear();
  const StepOutcome last[] = {Outcome(0, true, true, 1)};
  ASSERT_TRUE(h.BatchDone(b2, last, 0.02).ok());
  ASSERT_EQ(h.output().left.size(), 1u);
  const RequestRecord& r = h.output().left[0];
  EXPECT_EQ(r.outcome, Outcome::kCompleted);
  EXPECT_EQ(r.steps, 2);
  EXPECT_DOUBLE_EQ(r.mean_threshold, 0.7);
  EXPECT_DOUBLE_EQ(r.quality, 0.7);
  EXPECT_DOUBLE_EQ(r.latency, 0.02);
  EXPECT_TRUE(r.met);
  const TimelinePoint p = h.SampleTimeline(10, 10);
  EXPECT_DOUBLE_EQ(p.arrival_rps, 0.1);
  EXPECT_DOUBLE_EQ(p.window_attainment, 1.0);
}

}  // namespace
}  // namespace tediserve::host
