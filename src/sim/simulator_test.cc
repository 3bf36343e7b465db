// The simulator's event loop over the host: faults (failures with recovery, drains and
// re-adds, failed steps, cancellations), step times that differ from the policy's model, and
// the promise that every request ends with a record.
#include "sim/simulator.h"

#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/calibration.h"
#include "sim/results.h"
#include "sim/statistical_denoiser.h"

namespace tediserve::sim {
namespace {

using ::testing::HasSubstr;
using policy::RequestSpec;

std::string Repo(const std::string& rel) { return std::string(TEDI_SOURCE_DIR) + "/" + rel; }

class SimulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = policy::LatencyProfile::LoadCsv(Repo("data/profiles/llada-8b-base/h100_step_latency_ms.csv"));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    profile_ = std::move(*p);
    auto c = LoadCalibration(Repo("data/calibrations/llada-8b-gsm8k.json"));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cal_ = std::move(*c);
  }

  // 16 x TP1, Poisson-like evenly spread arrivals at `rps` for `seconds`.
  SimOptions Options(const std::string& policy) {
    SimOptions o;
    o.policy = *policy::PolicyOptions::Named(policy);
    o.policy.block_size = 32;
    for (double c : o.policy.thresholds) {
      o.tokens_per_step.push_back(cal_.TokensPerStepAt(c));
      o.policy.tokens_per_step.push_back(cal_.TokensPerStepAt(c));
      o.policy.accuracy.push_back(cal_.AccuracyAt(c));
    }
    for (int i = 0; i < 16; ++i) o.instances.push_back({i, 1, 0, {i}});
    o.slo_scale = 5;
    o.seed = 3;
    return o;
  }
  std::vector<RequestSpec> Requests(double rps, double seconds) {
    std::vector<RequestSpec> rs;
    for (int i = 0; i < static_cast<int>(rps * seconds); ++i) {
      RequestSpec r;
      r.id = i;
      r.arrival = i / rps;
      r.prompt_len = 200 + (i * 37) % 400;
      r.output_len = 256;
      rs.push_back(r);
    }
    return rs;
  }
  StatusOr<SimResult> Run(const SimOptions& o, const std::vector<RequestSpec>& rs) {
    StatisticalDenoiser d(cal_, o.seed);
    return Simulate(o, profile_, d, rs, [this](double c) { return cal_.AccuracyAt(c); });
  }
  static std::map<host::Outcome, int> Outcomes(const SimResult& r) {
    std::map<host::Outcome, int> n;
    for (const auto& q : r.requests) ++n[q.outcome];
    return n;
  }
  // Every request has exactly one record.
  static void ExpectARecordEach(const SimResult& r, size_t requests) {
    int total = 0;
    for (const auto& [k, v] : Outcomes(r)) total += v;
    EXPECT_EQ(total, static_cast<int>(requests));
  }
  // The same options and requests ran again: the same finish and outcome for each.
  static void ExpectTheSameRun(const SimResult& a, const SimResult& b) {
    ASSERT_EQ(a.requests.size(), b.requests.size());
    for (size_t i = 0; i < a.requests.size(); ++i) {
      EXPECT_EQ(a.requests[i].finish, b.requests[i].finish) << i;
      EXPECT_EQ(a.requests[i].outcome, b.requests[i].outcome) << i;
    }
  }
  static double Attainment(const SimResult& r) {
    int met = 0, n = 0;
    for (const auto& q : r.requests) {
      if (q.outcome == host::Outcome::kCancelled) continue;
      ++n;
      met += q.met;
    }
    return n ? static_cast<double>(met) / n : 0;
  }

  policy::LatencyProfile profile_;
  Calibration cal_;
};

TEST_F(SimulatorTest, FaultsLoseNoRequestAndRunsRepeat) {
  const auto rs = Requests(30, 120);
  SimOptions o = Options("tediserve-paper");
  o.faults.random_failures = 4;
  o.faults.random_drains = 2;
  o.faults.recover_after = 20;
  o.faults.readd_after = 20;
  o.faults.cancel_fraction = 0.05;
  auto a = Run(o, rs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->instance_failures, 4);
  EXPECT_EQ(a->drains, 2);
  const auto n = Outcomes(*a);
  ExpectARecordEach(*a, rs.size());
  EXPECT_GT(n.at(host::Outcome::kCompleted), 0);
  // 5% of clients cancel at a random time within their SLO; those whose answer came first
  // do not count.
  EXPECT_GT(n.at(host::Outcome::kCancelled), 0);
  EXPECT_LE(n.at(host::Outcome::kCancelled), 0.07 * rs.size());
  EXPECT_EQ(a->cancellations, n.at(host::Outcome::kCancelled));
  for (const auto& q : a->requests) {
    if (q.outcome != host::Outcome::kCompleted) {
      EXPECT_FALSE(q.met);
    }
    EXPECT_EQ(q.id, &q - a->requests.data());
  }
  EXPECT_GT(a->scheduler_stats.lost_steps, 0);  // failures hit batches in flight
  auto b = Run(o, rs);
  ASSERT_TRUE(b.ok());
  ExpectTheSameRun(*a, *b);
}

TEST_F(SimulatorTest, FailedStepsAreRetriedAndCounted) {
  const auto rs = Requests(20, 30);
  SimOptions o = Options("tediserve-paper");
  o.faults.step_failure_probability = 0.02;
  auto r = Run(o, rs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->failed_batches, 0);
  EXPECT_EQ(r->scheduler_stats.lost_steps >= r->failed_batches, true);
  int failures = 0;
  for (const auto& q : r->requests) failures += q.failures;
  EXPECT_GT(failures, 0);
  const auto n = Outcomes(*r);
  EXPECT_EQ(n.at(host::Outcome::kCompleted) + (n.count(host::Outcome::kAborted) ? n.at(host::Outcome::kAborted) : 0),
            static_cast<int>(rs.size()));
}

TEST_F(SimulatorTest, RequestsThatCanNeverRunFailWithAReason) {
  const auto rs = Requests(20, 10);
  SimOptions o = Options("infaas");
  for (int i = 0; i < 16; ++i) o.faults.events.push_back({1.0, i, false, 1e9});  // all die, back far too late
  auto r = Run(o, rs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto n = Outcomes(*r);
  ASSERT_GT(n.count(host::Outcome::kFailed), 0u);
  for (const auto& q : r->requests) {
    if (q.outcome == host::Outcome::kFailed) {
      EXPECT_THAT(q.reason, HasSubstr("no instance"));
    }
  }
}

TEST_F(SimulatorTest, BatchesOfSeveralStepsPayTheRoundTripOnce) {
  const auto rs = Requests(30, 60);
  SimOptions o = Options("tediserve");
  o.batch_overhead = 0.005;  // a round trip per batch the profile does not know
  auto one = Run(o, rs);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  o.policy.batch_steps = 4;
  auto four = Run(o, rs);
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  EXPECT_EQ(one->batches, one->steps);
  // About a quarter of the batches for about the same steps, every request answered.
  EXPECT_LT(four->batches * 2, one->batches);
  EXPECT_GT(four->steps, four->batches);
  EXPECT_NEAR(static_cast<double>(four->request_steps), static_cast<double>(one->request_steps),
              0.1 * one->request_steps);
  for (const auto* r : {&*one, &*four}) {
    EXPECT_EQ(Outcomes(*r).at(host::Outcome::kCompleted), static_cast<int>(rs.size()));
  }
  double lat_one = 0, lat_four = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    lat_one += one->requests[i].finish - rs[i].arrival;
    lat_four += four->requests[i].finish - rs[i].arrival;
  }
  EXPECT_LT(lat_four, lat_one);  // fewer round trips per request
  // With failed steps and failing instances, still a record for every request, and the
  // same run twice.
  o.faults.step_failure_probability = 0.02;
  o.faults.random_failures = 2;
  o.faults.recover_after = 10;
  auto a = Run(o, rs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_GT(a->failed_batches, 0);
  ExpectARecordEach(*a, rs.size());
  auto b = Run(o, rs);
  ASSERT_TRUE(b.ok());
  ExpectTheSameRun(*a, *b);
}

TEST_F(SimulatorTest, StepTimeErrorChangesTimesNotTheRequestCount) {
  const auto rs = Requests(40, 60);
  SimOptions o = Options("tediserve-paper");
  auto exact = Run(o, rs);
  ASSERT_TRUE(exact.ok());
  o.step_time_sigma = 0.2;
  auto noisy = Run(o, rs);
  ASSERT_TRUE(noisy.ok());
  auto again = Run(o, rs);
  ASSERT_TRUE(again.ok());
  int differ = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    differ += exact->requests[i].finish != noisy->requests[i].finish;
    EXPECT_EQ(noisy->requests[i].finish, again->requests[i].finish);
  }
  EXPECT_GT(differ, static_cast<int>(rs.size()) / 2);
  EXPECT_EQ(Outcomes(*noisy).at(host::Outcome::kCompleted), static_cast<int>(rs.size()));
  // A truth profile twice as slow as the policy's model: everything takes longer, and the
  // policy's predictions (busy_until) are corrected from the actual completions.
  std::vector<std::pair<double, double>> pts;
  for (double n = 32; n <= 16384; n *= 2) pts.push_back({n, 2 * profile_.StepSeconds(1, n)});
  auto slow = policy::LatencyProfile::FromPoints({{1, pts}}, "slow");
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  o.step_time_sigma = 0;
  o.truth_profile = &*slow;
  auto slower = Run(o, rs);
  ASSERT_TRUE(slower.ok()) << slower.status().ToString();
  double lat_exact = 0, lat_slow = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    lat_exact += exact->requests[i].latency;
    lat_slow += slower->requests[i].latency;
  }
  EXPECT_GT(lat_slow, 1.5 * lat_exact);
  EXPECT_EQ(Outcomes(*slower).at(host::Outcome::kCompleted), static_cast<int>(rs.size()));
  // A factor over time instead (the machine twice as slow from the 30th second on): requests
  // that arrive before 20 s are as fast as with the exact times, those after 30 s slower.
  o.truth_profile = nullptr;
  o.step_time_factor = [](policy::Seconds t) { return t < 30 ? 1.0 : 2.0; };
  auto later = Run(o, rs);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  double early_exact = 0, early_later = 0, late_exact = 0, late_later = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    if (rs[i].arrival < 20) {
      early_exact += exact->requests[i].latency;
      early_later += later->requests[i].latency;
    } else if (rs[i].arrival >= 30) {
      late_exact += exact->requests[i].latency;
      late_later += later->requests[i].latency;
    }
  }
  EXPECT_GT(early_exact, 0);
  EXPECT_NEAR(early_later, early_exact, 1e-9 * early_exact);
  EXPECT_GT(late_later, 1.5 * late_exact);
  EXPECT_EQ(Outcomes(*later).at(host::Outcome::kCompleted), static_cast<int>(rs.size()));
}

// Reconfiguration (issue 15): at a light load the planner moves 16 x TP1 to higher TP degrees,
// one launch at a time, draining only the instances a launch needs; no request is lost and
// the run repeats exactly.
TEST_F(SimulatorTest, ReconfigurationSwitchesLayoutAndLosesNothing) {
  SimOptions o = Options("tediserve");
  o.instances.clear();
  for (int i = 0; i < 16; ++i) o.instances.push_back({i, 1, i / 4, {i % 4}});
  o.reconfig.enabled = true;
  o.reconfig.gpus_per_node = {4, 4, 4, 4};
  o.reconfig.tp_degrees = {1, 2, 4};
  o.reconfig.period_s = 120;
  o.reconfig.window_s = 120;
  o.reconfig.load_delay_s = 10;
  o.reconfig.min_gain = 0;  // switch on any gain: this test is about executing a plan
  const std::vector<RequestSpec> rs = Requests(1.0, 900);
  auto a = Run(o, rs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->unaccounted, 0);
  EXPECT_EQ(Outcomes(*a)[host::Outcome::kCompleted], static_cast<int>(rs.size()));
  ASSERT_FALSE(a->plans.empty());
  EXPECT_TRUE(a->plans.front().switched) << a->plans.front().reason;
  EXPECT_GT(a->reconfig_launches, 0);
  EXPECT_GT(a->reconfig_terminations, 0);
  // Higher degrees at the end, every GPU in use at every recorded point.
  ASSERT_GE(a->layouts.size(), 2u);
  const auto& last = a->layouts.back().layout;
  EXPECT_TRUE(last.count(4) || last.count(2));
  for (const auto& lp : a->layouts) {
    int gpus = 0;
    for (const auto& [d, n] : lp.layout) gpus += d * n;
    EXPECT_LE(gpus, 16);
  }
  // After the switch the layout is kept (no flapping at a steady load).
  int switches = 0;
  for (const PlanRecord& p : a->plans) switches += p.switched;
  EXPECT_EQ(switches, 1);
  auto b = Run(o, rs);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->requests.size(), b->requests.size());
  for (size_t i = 0; i < a->requests.size(); ++i) EXPECT_EQ(a->requests[i].latency, b->requests[i].latency);
  EXPECT_EQ(a->layouts.size(), b->layouts.size());

  // The planner's other models (one mixed batch bin per degree; classes at their rounded
  // bounds rather than their mean lengths) drive the same execution: nothing is lost.
  o.reconfig.mixed_batches = true;
  o.reconfig.class_means = false;
  auto c = Run(o, rs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->unaccounted, 0);
  EXPECT_EQ(Outcomes(*c)[host::Outcome::kCompleted], static_cast<int>(rs.size()));
  EXPECT_EQ(c->plans.size(), a->plans.size());

  o.faults.random_failures = 1;
  EXPECT_THAT(Run(o, rs).status().message(), HasSubstr("faults"));
}

TEST_F(SimulatorTest, BadFaultOptionsAreRefused) {
  const auto rs = Requests(10, 5);
  SimOptions o = Options("tediserve-paper");
  o.faults.random_failures = 17;
  EXPECT_THAT(Run(o, rs).status().message(), HasSubstr("cluster has 16"));
  o = Options("tediserve-paper");
  o.faults.cancel_fraction = 2;
  EXPECT_THAT(Run(o, rs).status().message(), HasSubstr("[0, 1]"));
  o = Options("tediserve-paper");
  o.step_time_sigma = -1;
  EXPECT_THAT(Run(o, rs).status().message(), HasSubstr("step_time_sigma"));
}

// A request turned away at arrival has no latency, threshold or steps: counting its zeros in
// those means made a fixed-threshold policy look as if it lowered its threshold at overload.
TEST(SummaryTest, LatencyThresholdAndStepsAreOverCompletedRequestsOnly) {
  std::vector<RequestResult> rs(5);
  for (int i = 0; i < 5; ++i) rs[i].id = i;
  for (int i : {0, 1}) {
    rs[i].outcome = host::Outcome::kCompleted;
    rs[i].latency = 0.1 * (i + 1);
    rs[i].mean_threshold = 0.9;
    rs[i].steps = 4 + 2 * i;
    rs[i].quality = 1;
    rs[i].met = true;
  }
  rs[2].outcome = host::Outcome::kRejected;
  rs[3].outcome = host::Outcome::kAborted;
  rs[3].latency = 5;
  rs[3].steps = 30;
  rs[4].outcome = host::Outcome::kCancelled;
  const Summary s = Summarize(rs, "all");
  EXPECT_EQ(s.requests, 5);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_DOUBLE_EQ(s.attainment, 0.5);  // the failed ones count as missed and wrong
  EXPECT_DOUBLE_EQ(s.quality, 0.5);
  EXPECT_DOUBLE_EQ(s.mean_threshold, 0.9);
  EXPECT_DOUBLE_EQ(s.mean_steps, 5);
  EXPECT_NEAR(s.mean_latency, 0.15, 1e-12);
  EXPECT_NEAR(s.p99_latency, 0.2, 1e-12);
  const Summary none = Summarize({rs[2], rs[4]}, "none completed");
  EXPECT_EQ(none.failed, 1);
  EXPECT_DOUBLE_EQ(none.attainment, 0);
  EXPECT_DOUBLE_EQ(none.mean_threshold, 0);
  EXPECT_DOUBLE_EQ(none.mean_latency, 0);
}

}  // namespace
}  // namespace tediserve::sim
