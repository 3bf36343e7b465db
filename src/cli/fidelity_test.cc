#include "cli/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "engine/tokenizer.h"

namespace tediserve::cli::fidelity {
namespace {

const std::string kModel = std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada";
const std::string kProfile = std::string(TEDI_SOURCE_DIR) + "/data/profiles/tiny-llada-cpu.csv";
const std::string kCalibration = std::string(TEDI_SOURCE_DIR) + "/data/calibrations/tiny-llada.json";

std::vector<engine::TaskProblem> Problems() {
  auto tok = engine::Tokenizer::FromFile(kModel + "/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  auto p = engine::ReadTaskFile(kModel + "/heldout.jsonl", *tok);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

TEST(FidelityTest, OverheadIsTheProbesMedians) {
  // HTTP 1.0 ms, 0.2 ms per step beyond the profile; one stalled probe and one failed.
  std::vector<Probe> probes = {
      {3.0e-3, 2.0e-3, 2, 1.6e-3, 2}, {2.1e-3, 1.1e-3, 1, 0.9e-3, 1}, {3.2e-3, 2.2e-3, 2, 1.8e-3, 2},
      {80e-3, 50e-3, 2, 1.7e-3, 2},   {0, 0, 0, 1.0e-3, 1},
  };
  const Overhead o = EstimateOverhead(probes);
  EXPECT_EQ(o.probes, 4);
  EXPECT_NEAR(o.per_request_s, 1.0e-3, 1e-12);
  EXPECT_NEAR(o.per_step_s, 0.2e-3, 1e-12);
  EXPECT_NEAR(o.steps, 2, 1e-12);
  // The profile slower than the live steps: a negative step term is kept (it is measured).
  const Overhead neg = EstimateOverhead({{2e-3, 1e-3, 1, 1.5e-3, 1}});
  EXPECT_NEAR(neg.per_step_s, -0.5e-3, 1e-12);
  // No usable probe: no overhead.
  const Overhead none = EstimateOverhead({{0, 0, 0, 1e-3, 1}});
  EXPECT_EQ(none.probes, 0);
  EXPECT_EQ(none.per_step_s, 0);
  EXPECT_EQ(none.per_request_s, 0);
}

TEST(FidelityTest, OffsetProfileAddsTheOffsetEverywhere) {
  auto p = policy::LatencyProfile::FromPoints({{1, {{8, 1e-3}, {16, 1.5e-3}, {64, 4e-3}, {128, 9e-3}}},
                                               {2, {{8, 2e-3}, {128, 6e-3}}}},
                                              "test");
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto q = OffsetProfile(*p, 0.25e-3, 300);
  ASSERT_TRUE(q.ok()) << q.status().message();
  for (int tp : {1, 2})
    for (int n : {1, 4, 8, 9, 16, 40, 64, 100, 128, 129, 300, 600, 5000})
      EXPECT_NEAR(q->StepSeconds(tp, n), p->StepSeconds(tp, n) + 0.25e-3, 1e-12) << "tp " << tp << " n " << n;
  // An offset that leaves a step no time is refused.
  EXPECT_FALSE(OffsetProfile(*p, -1e-3, 300).ok());
  // A scale multiplies first, then the offset adds; a scale <= 0 is refused.
  auto r = OffsetProfile(*p, 0.1e-3, 300, 2.5);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (int tp : {1, 2})
    for (int n : {1, 8, 40, 128, 300, 5000})
      EXPECT_NEAR(r->StepSeconds(tp, n), 2.5 * p->StepSeconds(tp, n) + 0.1e-3, 1e-12) << "tp " << tp << " n " << n;
  EXPECT_FALSE(OffsetProfile(*p, 0, 300, 0).ok());
  EXPECT_FALSE(OffsetProfile(*p, 0, 300, -1).ok());
}

TEST(FidelityTest, StepScaleFollowsTheSizeClasses) {
  // Classes: 8 tokens on average at x2, 80 at x3, one with too few batches, 4000 at x4.
  std::vector<loadgen::StepSizeClass> classes = {
      {16, 100, 800, 1.0, 2.0}, {128, 50, 4000, 2.0, 6.0}, {256, 3, 600, 1.0, 9.0},
      {std::numeric_limits<double>::infinity(), 20, 80000, 1.0, 4.0}};
  const StepScale s = StepScaleFrom(classes, 2.5);
  ASSERT_EQ(s.points.size(), 3u);
  EXPECT_DOUBLE_EQ(s.points[0].first, 8);
  EXPECT_DOUBLE_EQ(s.points[1].second, 3);
  EXPECT_DOUBLE_EQ(s.At(1), 2);      // flat below the first point
  EXPECT_DOUBLE_EQ(s.At(44), 2.5);   // halfway between 8 and 80
  EXPECT_DOUBLE_EQ(s.At(80), 3);
  EXPECT_DOUBLE_EQ(s.At(9000), 4);   // flat beyond the last
  EXPECT_FALSE(s.IsOne());
  // No class with enough batches: the overall ratio everywhere.
  const StepScale few = StepScaleFrom({{16, 5, 40, 1.0, 3.0}}, 2.5);
  EXPECT_TRUE(few.points.empty());
  EXPECT_DOUBLE_EQ(few.At(100), 2.5);
  EXPECT_TRUE(StepScale().IsOne());
  // A profile scaled by the curve: each token count by its own ratio.
  auto p = policy::LatencyProfile::FromPoints({{1, {{8, 1e-3}, {128, 9e-3}}}}, "test");
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto q = OffsetProfile(*p, 0, 300, s);
  ASSERT_TRUE(q.ok()) << q.status().message();
  for (int n : {1, 8, 30, 44, 80, 100, 128, 300})
    EXPECT_NEAR(q->StepSeconds(1, n), s.At(n) * p->StepSeconds(1, n), 1e-12) << n;
  StepScale bad(2);
  bad.points = {{8, 0.0}};
  EXPECT_FALSE(OffsetProfile(*p, 0, 300, bad).ok());
}

// With a fixed cost per batch, each class's ratio is fitted on what is left of its batches'
// time; a class that the fixed cost alone exceeds gives no point. The level scales only that
// rest too.
TEST(FidelityTest, StepScaleAndLevelLeaveOutAFixedCostPerBatch) {
  // 100 batches of 1 s profile and 2 s elapsed: 0.5 ms each fixed leaves 1.95 s (x1.95);
  // 50 batches of 2 s profile and 6 s elapsed leave 5.975 s (x2.9875); 20 batches with less
  // elapsed than their fixed cost.
  std::vector<loadgen::StepSizeClass> classes = {
      {16, 100, 800, 1.0, 2.0}, {128, 50, 4000, 2.0, 6.0}, {256, 20, 2000, 1.0, 0.005}};
  const StepScale s = StepScaleFrom(classes, 2.5, 0.0005);
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_DOUBLE_EQ(s.points[0].second, 1.95);
  EXPECT_DOUBLE_EQ(s.points[1].second, 2.9875);
  const StepScale zero = StepScaleFrom(classes, 2.5, 0);
  EXPECT_DOUBLE_EQ(zero.points[0].second, 2);  // no fixed cost: as before
  // Level: 100 batches at 1 s profile, 2.05 s elapsed, 0.5 ms fixed each: 2.0 s over x2 = 1.
  loadgen::GaugeSample a, b;
  a.t = 0;
  b.t = 0.5;
  b.step_sizes = {{16, 100, 800, 1.0, 2.05}};
  StepScale l(2);
  l.points = {{8, 2.0}};
  StepLevelFrom({a, b}, &l, 0.0005);
  ASSERT_EQ(l.level.size(), 1u);
  EXPECT_DOUBLE_EQ(l.level[0].second, 1);
  StepLevelFrom({a, b}, &l);
  EXPECT_DOUBLE_EQ(l.level[0].second, 1.025);  // the fixed cost counted in the ratio
}

TEST(FidelityTest, StepSigmaPoolsTheScatterWithinClasses) {
  // Class 1: 100 batches, ratios of mean 3 and variance 0.9 (CV^2 0.1); class 2: 100 batches
  // all at 2 (CV 0); class 3: too few batches to count.
  loadgen::StepSizeClass a{16, 100, 800, 1, 3};
  a.ratio_sum = 300;
  a.ratio_squares = 100 * (0.9 + 9);
  loadgen::StepSizeClass b{64, 100, 4000, 1, 2};
  b.ratio_sum = 200;
  b.ratio_squares = 400;
  loadgen::StepSizeClass c{128, 3, 300, 1, 9};
  c.ratio_sum = 30;
  c.ratio_squares = 900;
  EXPECT_NEAR(StepSigmaFrom({a}), std::sqrt(std::log(1.1)), 1e-12);
  EXPECT_NEAR(StepSigmaFrom({a, b, c}), std::sqrt(std::log(1.05)), 1e-12);
  EXPECT_EQ(StepSigmaFrom({b}), 0);
  EXPECT_EQ(StepSigmaFrom({c}), 0);
  EXPECT_EQ(StepSigmaFrom({}), 0);
}

TEST(FidelityTest, StepLevelFollowsTheRunOverTime) {
  // Totals sampled every half second: nothing yet; 100 batches at 2x the profile; 100 more at
  // 4x; 2 more (too few to say): the level keeps the last one.
  auto sample = [](double t, double batches, double profile, double elapsed) {
    loadgen::GaugeSample g;
    g.t = t;
    loadgen::StepSizeClass c{16, batches, 8 * batches, profile, elapsed};
    g.step_sizes = {c};
    return g;
  };
  std::vector<loadgen::GaugeSample> samples = {sample(0, 0, 0, 0), sample(0.5, 100, 1, 2), sample(1.0, 200, 2, 6),
                                               sample(1.5, 202, 2.02, 6.5)};
  samples[0].step_sizes.clear();  // no class counted before the run
  StepScale s(3);
  s.points = {{8, 2.0}};  // the run's ratio by size: 2 at every size
  const double level_sd = StepLevelFrom(samples, &s);
  ASSERT_EQ(s.level.size(), 3u);
  EXPECT_DOUBLE_EQ(s.level[0].first, 0);
  EXPECT_DOUBLE_EQ(s.level[0].second, 1);  // 2 s over 1 s x 2
  EXPECT_DOUBLE_EQ(s.level[1].second, 2);  // 4 s over 1 s x 2
  EXPECT_DOUBLE_EQ(s.level[2].second, 2);  // two batches: the level before
  EXPECT_DOUBLE_EQ(s.LevelAt(-1), 1);
  EXPECT_DOUBLE_EQ(s.LevelAt(0.2), 1);
  EXPECT_DOUBLE_EQ(s.LevelAt(0.7), 2);
  EXPECT_DOUBLE_EQ(s.LevelAt(99), 2);
  EXPECT_NEAR(level_sd, std::log(2.0) / 2, 1e-12);  // log levels 0 and ln 2, 100 batches each
  EXPECT_FALSE(s.IsOne());
  StepScale none;
  EXPECT_EQ(StepLevelFrom({}, &none), 0);
  EXPECT_TRUE(none.level.empty());
  EXPECT_TRUE(none.IsOne());
}

TEST(FidelityTest, ProbePlanSpreadsProblemsASecondApart) {
  const auto plan = ProbePlan(400, 5, 8);
  ASSERT_EQ(plan.size(), 5u);
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].id, static_cast<int64_t>(i));
    EXPECT_DOUBLE_EQ(plan[i].send_s, static_cast<double>(i));
    EXPECT_EQ(plan[i].problem, i * 37 % 400);
    EXPECT_EQ(plan[i].output_len, 8);
  }
  EXPECT_TRUE(ProbePlan(0, 5, 8).empty());
}

TEST(FidelityTest, SimulatedSoloRequestsCostTheProfilePlusTheOverhead) {
  const auto problems = Problems();
  ASSERT_FALSE(problems.empty());
  auto plan = ProbePlan(problems.size(), 20, 8);
  for (auto& p : plan) p.prompt_len = static_cast<int>(problems[p.problem].ids.size());
  SimSetup s;
  s.model_dir = kModel;
  s.profile_csv = kProfile;
  s.calibration = kCalibration;
  s.layout = {1, 1};
  auto bare = SimulatePlan(s, plan, problems);
  ASSERT_TRUE(bare.ok()) << bare.status().message();
  ASSERT_EQ(bare->size(), plan.size());
  auto prof = policy::LatencyProfile::LoadCsv(kProfile);
  ASSERT_TRUE(prof.ok());
  int correct = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& r = (*bare)[i];
    EXPECT_EQ(r.outcome, "ok") << r.error;
    EXPECT_GE(r.steps, 1);
    EXPECT_LE(r.steps, 8);
    EXPECT_TRUE(r.slo_met);
    EXPECT_EQ(r.problem, plan[i].problem);
    // Alone, each step is at least the profile's smallest step and at most a whole sequence's.
    const int seq = plan[i].prompt_len + 8;
    EXPECT_GE(r.latency_s, r.steps * prof->StepSeconds(1, 1) - 1e-12);
    EXPECT_LE(r.latency_s, r.steps * prof->StepSeconds(1, seq) + 1e-9);
    correct += r.correct;
  }
  EXPECT_GE(correct, 15);  // the bundled model is ~95% right at threshold 0.9

  // The same again with the overhead: each solo request costs its batches x the per-batch
  // round trip more (a batch is a step with serve --batch-steps 1; two steps with the
  // default 2), plus per request; the steps and answers do not change.
  s.overhead.per_step_s = 0.5e-3;
  s.overhead.per_request_s = 1e-3;
  StatusOr<std::vector<loadgen::RequestResult>> with = std::vector<loadgen::RequestResult>{};
  for (int n : {2, 1}) {
    s.batch_steps = n;
    with = SimulatePlan(s, plan, problems);
    ASSERT_TRUE(with.ok()) << with.status().message();
    for (size_t i = 0; i < plan.size(); ++i) {
      const auto& a = (*bare)[i];
      const auto& b = (*with)[i];
      const int batches = (a.steps + n - 1) / n;
      EXPECT_EQ(a.steps, b.steps);
      EXPECT_EQ(a.correct, b.correct);
      EXPECT_NEAR(b.latency_s, a.latency_s + batches * 0.5e-3 + 1e-3, 1e-9) << i << " n " << n;
      EXPECT_NEAR(b.server_latency_s, a.latency_s + batches * 0.5e-3, 1e-9) << i << " n " << n;
    }
  }
  // Deterministic.
  auto again = SimulatePlan(s, plan, problems);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ((*again)[i].latency_s, (*with)[i].latency_s);
}

TEST(FidelityTest, OverloadQueuesAndMissesSlos) {
  // 200 requests at once on one instance with a 5 ms SLO: most must miss, none is lost.
  const auto problems = Problems();
  std::vector<loadgen::PlannedRequest> plan;
  for (int i = 0; i < 200; ++i) {
    loadgen::PlannedRequest p;
    p.id = i;
    p.send_s = 0.0001 * i;
    p.problem = static_cast<size_t>(i) % problems.size();
    p.prompt_len = static_cast<int>(problems[p.problem].ids.size());
    p.output_len = 8;
    p.slo_s = 0.005;
    plan.push_back(p);
  }
  SimSetup s;
  s.model_dir = kModel;
  s.profile_csv = kProfile;
  s.calibration = kCalibration;
  s.layout = {1};
  s.policy = "infaas";
  ReplayBatches batches;
  auto r = SimulatePlan(s, plan, problems, &batches);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const loadgen::Summary sum = loadgen::Summarize(*r);
  EXPECT_EQ(sum.requests, 200);
  EXPECT_EQ(sum.completed, 200);
  EXPECT_LT(sum.attainment, 0.5);
  EXPECT_GT(sum.latency_mean_s, 0.005);
  // The replay's batches (of 2 steps, serve's default) hold every request step, and a queue
  // of 200 is served in batches.
  int64_t request_steps = 0;
  for (const auto& x : *r) request_steps += x.steps;
  EXPECT_LE(batches.request_steps, request_steps);
  EXPECT_LE(request_steps, 2 * batches.request_steps);
  EXPECT_GT(batches.batches, 0);
  EXPECT_LT(batches.batches * 4, batches.request_steps);
}

TEST(FidelityTest, BadInputsAreErrors) {
  const auto problems = Problems();
  auto plan = ProbePlan(problems.size(), 3, 8);
  SimSetup s;
  s.model_dir = kModel;
  s.profile_csv = kProfile;
  s.calibration = kCalibration;
  s.layout = {3};  // no TP-3 column
  EXPECT_FALSE(SimulatePlan(s, plan, problems).ok());
  s.layout = {1};
  s.policy = "nosuch";
  EXPECT_FALSE(SimulatePlan(s, plan, problems).ok());
  s.policy = "tediserve";
  plan[1].problem = problems.size();
  EXPECT_FALSE(SimulatePlan(s, plan, problems).ok());
}

TEST(FidelityTest, CompareTakesSimMinusLive) {
  loadgen::Summary live, sim, bare;
  live.attainment = 0.90;
  live.latency_mean_s = 0.010;
  live.latency_p90_s = 0.020;
  sim.attainment = 0.87;
  sim.latency_mean_s = 0.0105;
  sim.latency_p90_s = 0.018;
  bare.attainment = 0.99;
  bare.latency_mean_s = 0.005;
  const Comparison c = Compare(live, sim, bare, Overhead{});
  EXPECT_NEAR(c.attainment_diff_points, -3, 1e-9);
  EXPECT_NEAR(c.mean_latency_diff, 0.05, 1e-9);
  EXPECT_NEAR(c.p90_latency_diff, -0.1, 1e-9);
  EXPECT_NEAR(c.profile_only_attainment_diff_points, 9, 1e-9);
  EXPECT_NEAR(c.profile_only_mean_latency_diff, -0.5, 1e-9);
  EXPECT_NEAR(c.server_attainment_diff_points, 0, 1e-9);
  EXPECT_FALSE(std::isfinite(c.server_mean_latency_diff));  // no server latencies given
  EXPECT_TRUE(c.attainment_within);
  EXPECT_TRUE(c.mean_latency_within);
  sim.attainment = 0.84;
  sim.latency_mean_s = 0.0112;
  const Comparison d = Compare(live, sim, bare, Overhead{});
  EXPECT_FALSE(d.attainment_within);
  EXPECT_FALSE(d.mean_latency_within);
  const auto j = ToJson(d);
  EXPECT_FALSE(j["attainment_within_5_points"].get<bool>());
  EXPECT_NEAR(j["live"]["latency_mean_ms"].get<double>(), 10, 1e-9);
}

}  // namespace
}  // namespace tediserve::cli::fidelity
