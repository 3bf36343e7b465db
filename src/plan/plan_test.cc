#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/mip.h"
#include "plan/stage1.h"
#include "plan/stage1_brute.h"
#include "plan/stage2.h"
#include "plan/workload_monitor.h"
#include "policy/latency_profile.h"

namespace tediserve::plan {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- the MIP wrapper

TEST(MipTest, SolvesASmallKnapsackToItsKnownOptimum) {
  // max 10a + 13b + 7c + 8d  s.t. 4a + 6b + 3c + 5d <= 10, binary: best {a, b} = 23.
  MipModel m;
  m.maximize = true;
  const int a = m.AddCol("a", 0, 1, true, 10), b = m.AddCol("b", 0, 1, true, 13);
  const int c = m.AddCol("c", 0, 1, true, 7), d = m.AddCol("d", 0, 1, true, 8);
  m.AddRow("w", -kInf, 10, {{a, 4}, {b, 6}, {c, 3}, {d, 5}});
  StatusOr<MipResult> r = SolveMip(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, MipStatus::kOptimal);
  EXPECT_NEAR(r->objective, 23, 1e-9);
  EXPECT_NEAR(r->x[a], 1, 1e-9);
  EXPECT_NEAR(r->x[b], 1, 1e-9);
  EXPECT_NEAR(r->x[c] + r->x[d], 0, 1e-9);
}

TEST(MipTest, AWarmStartIsCheckedBeforeItIsOfferedAndKeepsTheOptimum) {
  // The knapsack again. A feasible start ({c, d} = 15) is taken as the first incumbent; the
  // optimum stays {a, b} = 23. A start over the capacity ({a, b, c}: weight 13, value 30)
  // would become the incumbent unchecked (glp_ios_heur_sol does not check rows): it must be
  // refused and the optimum still found.
  MipModel m;
  m.maximize = true;
  const int a = m.AddCol("a", 0, 1, true, 10), b = m.AddCol("b", 0, 1, true, 13);
  const int c = m.AddCol("c", 0, 1, true, 7), d = m.AddCol("d", 0, 1, true, 8);
  m.AddRow("w", -kInf, 10, {{a, 4}, {b, 6}, {c, 3}, {d, 5}});
  MipOptions o;
  o.initial = {0, 0, 1, 0.9999999999};  // integer columns are rounded
  StatusOr<MipResult> r = SolveMip(m, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->initial_accepted);
  EXPECT_EQ(r->status, MipStatus::kOptimal);
  EXPECT_NEAR(r->objective, 23, 1e-9);
  o.initial = {1, 1, 1, 0};
  r = SolveMip(m, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->initial_accepted);
  EXPECT_EQ(r->status, MipStatus::kOptimal);
  EXPECT_NEAR(r->objective, 23, 1e-9);
  EXPECT_NEAR(r->x[c], 0, 1e-9);
  o.initial = {1, 1};
  EXPECT_EQ(SolveMip(m, o).status().code(), StatusCode::kInvalidArgument);
  o.initial = {1, 1, std::nan(""), 0};
  EXPECT_EQ(SolveMip(m, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(MipTest, InfeasibleAndUnboundedAreResultsNotErrors) {
  MipModel m;
  const int x = m.AddCol("x", 0, 5, true, 1);
  m.AddRow("r", 7, kInf, {{x, 1}});
  StatusOr<MipResult> r = SolveMip(m);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, MipStatus::kInfeasible);
  EXPECT_TRUE(r->x.empty());

  MipModel u;
  u.maximize = true;
  u.AddCol("x", 0, kInf, true, 1);
  StatusOr<MipResult> ru = SolveMip(u);
  ASSERT_TRUE(ru.ok()) << ru.status().ToString();
  EXPECT_EQ(ru->status, MipStatus::kUnbounded);
}

TEST(MipTest, BadModelsAreRefusedBeforeGlpkSeesThem) {
  MipModel m;
  const int x = m.AddCol("x", 0, 1, false);
  m.AddRow("dup", -kInf, 1, {{x, 1}, {x, 2}});
  EXPECT_THAT(SolveMip(m).status().message(), HasSubstr("twice"));
  MipModel m2;
  m2.AddCol("x", 0, 1, false);
  m2.AddRow("r", -kInf, 1, {{3, 1}});
  EXPECT_EQ(SolveMip(m2).status().code(), StatusCode::kInvalidArgument);
  MipModel m3;
  m3.AddCol("x", 2, 1, false);
  EXPECT_EQ(SolveMip(m3).status().code(), StatusCode::kInvalidArgument);
  MipModel m4;
  m4.AddCol("x", 0, 1.5, true);
  EXPECT_THAT(SolveMip(m4).status().message(), HasSubstr("fractional"));
  MipModel m5;
  m5.AddCol("x", 0, 1, false, std::nan(""));
  EXPECT_EQ(SolveMip(m5).status().code(), StatusCode::kInvalidArgument);
}

TEST(MipTest, GlpkErrorsBecomeStatusesAndGlpkStillWorksAfterwards) {
  const Status s = internal::TriggerGlpkErrorForTest();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("glp_set_col_bnds"));
  MipModel m;
  m.maximize = true;
  const int x = m.AddCol("x", 0, 3, true, 1);
  m.AddRow("r", -kInf, 2.5, {{x, 1}});
  StatusOr<MipResult> r = SolveMip(m);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->objective, 2, 1e-9);
}

// A knapsack that needs many nodes: a node limit stops it deterministically with a status.
MipModel HardKnapsack(int n) {
  MipModel m;
  m.maximize = true;
  std::mt19937 rng(7);
  std::vector<std::pair<int, double>> w;
  for (int i = 0; i < n; ++i) {
    const double wt = 1000 + static_cast<int>(rng() % 1000);
    const int c = m.AddCol(std::string("x").append(std::to_string(i)), 0, 1, true, wt + static_cast<int>(rng() % 50));
    w.emplace_back(c, wt);
  }
  m.AddRow("cap", -kInf, 12345.5, w);
  return m;
}

TEST(MipTest, NodeLimitStopsTheSearchDeterministicallyAndSaysSo) {
  const MipModel m = HardKnapsack(40);
  MipOptions o;
  o.node_limit = 3;
  StatusOr<MipResult> a = SolveMip(m, o);
  StatusOr<MipResult> b = SolveMip(m, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->status, MipStatus::kOptimal);
  EXPECT_THAT(a->detail, HasSubstr("GLP_ESTOP"));
  EXPECT_EQ(a->status, b->status);
  EXPECT_EQ(a->x, b->x);
  EXPECT_EQ(a->nodes, b->nodes);
}

TEST(MipTest, ConcurrentSolvesAreSerialisedAndCorrect) {
  std::vector<double> obj(4, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      MipModel m;
      m.maximize = true;
      const int x = m.AddCol("x", 0, 100, true, 1);
      m.AddRow("r", -kInf, 10.5 + t, {{x, 1}});
      for (int i = 0; i < 20; ++i) {
        StatusOr<MipResult> r = SolveMip(m);
        if (r.ok() && r->status == MipStatus::kOptimal) obj[t] = r->objective;
      }
    });
  for (auto& t : ts) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(obj[t], 10 + t);
}

// ---------------------------------------------------------------- the workload monitor

TEST(WorkloadMonitorTest, ClassesRatesAndSlosOverASlidingWindow) {
  StatusOr<WorkloadMonitor> mon = WorkloadMonitor::Create({.window_s = 100, .prompt_round = 256, .output_round = 32});
  ASSERT_TRUE(mon.ok());
  // Two classes: (256, 64) and (512, 32).
  ASSERT_TRUE(mon->Record(0, 100, 40, 10).ok());
  ASSERT_TRUE(mon->Record(10, 256, 64, 20).ok());
  ASSERT_TRUE(mon->Record(20, 257, 1, 5).ok());
  std::vector<LengthClass> c = mon->Classes(50);  // 50 s since start: rates over 50 s
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].prompt_len, 256);
  EXPECT_EQ(c[0].output_len, 64);
  EXPECT_DOUBLE_EQ(c[0].rps, 2.0 / 50);
  EXPECT_DOUBLE_EQ(c[0].slo_s, 15);
  EXPECT_EQ(c[1].prompt_len, 512);
  EXPECT_EQ(c[1].output_len, 32);
  EXPECT_DOUBLE_EQ(c[1].rps, 1.0 / 50);
  // At 105 the arrival at 0 has left the window (100 s); rates over the full window.
  c = mon->Classes(105);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_DOUBLE_EQ(c[0].rps, 1.0 / 100);
  EXPECT_DOUBLE_EQ(c[0].slo_s, 20);
  c = mon->Classes(500);
  EXPECT_TRUE(c.empty());
}

// With mean_lengths_block, a class reports its arrivals' mean lengths (output rounded up to
// the block, never above the class's bound) and keeps its rounded bound as its identity.
TEST(WorkloadMonitorTest, ClassesCanReportTheirMeanLengths) {
  StatusOr<WorkloadMonitor> mon =
      WorkloadMonitor::Create({.window_s = 100, .prompt_round = 256, .output_round = 256, .mean_lengths_block = 32});
  ASSERT_TRUE(mon.ok());
  ASSERT_TRUE(mon->Record(0, 10, 20, 1).ok());   // class (256, 256)
  ASSERT_TRUE(mon->Record(1, 31, 50, 3).ok());   // class (256, 256)
  ASSERT_TRUE(mon->Record(2, 300, 256, 4).ok());  // class (512, 256)
  std::vector<LengthClass> c = mon->Classes(10);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].prompt_len, 21);   // ceil(20.5)
  EXPECT_EQ(c[0].output_len, 64);   // mean 35 -> 64
  EXPECT_DOUBLE_EQ(c[0].slo_s, 2);
  EXPECT_EQ(c[1].prompt_len, 300);
  EXPECT_EQ(c[1].output_len, 256);  // at the bound, not above
  EXPECT_FALSE(WorkloadMonitor::Create({.window_s = 10, .output_round = 256, .mean_lengths_block = 48}).ok());
  EXPECT_FALSE(WorkloadMonitor::Create({.window_s = 10, .mean_lengths_block = -1}).ok());
}

TEST(WorkloadMonitorTest, RefusesBadInput) {
  EXPECT_FALSE(WorkloadMonitor::Create({.window_s = 0}).ok());
  EXPECT_FALSE(WorkloadMonitor::Create({.window_s = 10, .prompt_round = 0}).ok());
  StatusOr<WorkloadMonitor> mon = WorkloadMonitor::Create({});
  ASSERT_TRUE(mon.ok());
  EXPECT_FALSE(mon->Record(5, 0, 10, 1).ok());
  EXPECT_FALSE(mon->Record(5, 10, 10, 0).ok());
  EXPECT_FALSE(mon->Record(std::nan(""), 10, 10, 1).ok());
  ASSERT_TRUE(mon->Record(5, 10, 10, 1).ok());
  EXPECT_FALSE(mon->Record(4, 10, 10, 1).ok());  // out of order
  EXPECT_EQ(mon->Classes(6).size(), 1u);
}

// ---------------------------------------------------------------- Stage 1

// l_d(n) = a_d * n exactly (no per-step floor): batching buys no throughput, so the paper's
// per-request figures hold at every batch size.
policy::LatencyProfile LinearProfile(std::map<int, double> per_token) {
  std::map<int, std::vector<std::pair<double, double>>> pts;
  for (const auto& [d, a] : per_token) pts[d] = {{1, a}, {16384, a * 16384}};
  StatusOr<policy::LatencyProfile> p = policy::LatencyProfile::FromPoints(pts, "linear");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

// Paper section 2.2.2: 8 GPUs; one class whose request is 1 recompute step of 64 tokens and
// 3 cache steps of 32 (160 tokens at T = 8): 2 s on TP-4, 3.6 s on TP-1.
struct PaperExample {
  policy::LatencyProfile profile = LinearProfile({{1, 3.6 / 160}, {4, 2.0 / 160}});
  Stage1Inputs Inputs(double rps, std::vector<double> thresholds = {0.9}, std::vector<double> tps = {8}) const {
    Stage1Inputs in;
    in.gpus_per_node = {4, 4};
    in.tp_degrees = {1, 4};
    in.profile = &profile;
    in.thresholds = std::move(thresholds);
    in.tokens_per_step = std::move(tps);
    in.block_size = 32;
    in.recompute_bins = {64, 128};
    in.cache_bins = {32, 64};
    in.classes = {{32, 32, rps, 10.0}};
    return in;
  }
};

TEST(Stage1Test, PaperExampleLowLoadPicksHighTp) {
  PaperExample ex;
  StatusOr<Stage1Result> r = PlanStage1(ex.Inputs(0.3));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcome, Stage1Outcome::kPlanned);
  EXPECT_EQ(r->instances, (std::map<int, int>{{4, 2}}));
  EXPECT_NEAR(r->mean_latency_s, 2.0, 1e-5);
  EXPECT_NEAR(r->mean_threshold, 0.9, 1e-6);
  ASSERT_EQ(r->solves.size(), 3u);
  for (const ObjectiveSolve& s : r->solves) EXPECT_EQ(s.status, MipStatus::kOptimal) << s.objective;
  // Smallest bins: one request a batch (the linear profile makes batching pure latency).
  EXPECT_EQ(r->recompute_bin.at(4), 64);
  EXPECT_EQ(r->cache_bin.at(4), 32);
}

TEST(Stage1Test, PaperExampleHighLoadDoesNotPickTwoTp4) {
  PaperExample ex;
  StatusOr<Stage1Result> r = PlanStage1(ex.Inputs(1.5));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcome, Stage1Outcome::kPlanned);
  EXPECT_NE(r->instances, (std::map<int, int>{{4, 2}}));  // sustains only 1.0 req/s
  // By hand: TP-4 work per TP-4-second saves 0.8 s of latency; one TP-4 instance at 1.5 req/s
  // can take 2/3 s of TP-4 work per request: latency 3.6 - 0.8 * 2/3 = 3.0667 s, the TP-1
  // rest (2.4 s a request at 1.5 req/s) needs 3.6 -> 4 TP-1 instances.
  EXPECT_EQ(r->instances, (std::map<int, int>{{1, 4}, {4, 1}}));
  EXPECT_NEAR(r->mean_latency_s, 3.6 - 0.8 * 2.0 / 3.0, 1e-5);
  double capacity = 0;  // requests per second the layout sustains at the planned split
  for (const auto& [d, n] : r->instances) capacity += n / (d == 4 ? 2.0 : 3.6);
  EXPECT_GE(capacity, 1.5);
}

TEST(Stage1Test, AFixedLayoutIsScoredByTheSameModel) {
  PaperExample ex;
  Stage1Options o;
  o.fixed_instances = std::map<int, int>{{4, 2}};
  StatusOr<Stage1Result> r = PlanStage1(ex.Inputs(1.5), o);  // 2 x TP-4 sustain 1.0 req/s
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcome, Stage1Outcome::kInfeasibleFallback);
  EXPECT_EQ(r->instances, (std::map<int, int>{{4, 2}}));
  o.fixed_instances = std::map<int, int>{{4, 1}, {1, 4}};
  r = PlanStage1(ex.Inputs(1.5), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, Stage1Outcome::kPlanned);
  EXPECT_NEAR(r->mean_latency_s, 3.6 - 0.8 * 2.0 / 3.0, 1e-5);
  o.fixed_instances = std::map<int, int>{{2, 1}};
  EXPECT_THAT(PlanStage1(ex.Inputs(1.5), o).status().message(), HasSubstr("not a candidate"));
}

TEST(Stage1Test, ThresholdsFallOnlyWhenCapacityRunsOut) {
  PaperExample ex;
  // 0.9 at T = 8 (4 steps), 0.5 at T = 16 (2 steps).
  StatusOr<Stage1Result> r = PlanStage1(ex.Inputs(1.5, {0.9, 0.5}, {8, 16}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->mean_threshold, 0.9, 1e-6);
  // 3 req/s: 8 TP-1 at 0.9 sustain 2.22; all TP-1 and the most cache steps C that fit:
  // 3 * 0.0225 * (64 + 32 C) = 8 -> C = 1.7037; mean threshold (6.4 C + 9.6) / 32.
  r = PlanStage1(ex.Inputs(3.0, {0.9, 0.5}, {8, 16}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instances, (std::map<int, int>{{1, 8}}));
  const double C = (8.0 / 3.0 / 0.0225 - 64) / 32;
  EXPECT_NEAR(r->mean_threshold, (6.4 * C + 9.6) / 32, 1e-5);
  EXPECT_NEAR(r->mean_latency_s, 8.0 / 3.0, 1e-4);
}

TEST(Stage1Test, RecomputeStepsEqualTheNumberOfBlocks) {
  PaperExample ex;
  Stage1Inputs in = ex.Inputs(0.5, {0.9, 0.5}, {8, 16});
  in.classes = {{32, 96, 0.2, 30.0}, {32, 32, 0.3, 30.0}};  // 3 blocks and 1 block
  in.recompute_bins = {128, 256};
  StatusOr<Stage1Result> r = PlanStage1(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->classes.size(), 2u);
  for (const ClassPlan& c : r->classes) {
    double rec = 0, tokens = 0;
    for (size_t i = 0; i < 2; ++i) {
      rec += c.recompute_at[i];
      tokens += (c.recompute_at[i] + c.cache_at[i]) * in.tokens_per_step[i];
    }
    EXPECT_NEAR(rec, c.cls.output_len / 32.0, 1e-6);
    EXPECT_NEAR(tokens, c.cls.output_len, 1e-6);
    double rec_d = 0;
    for (const auto& [d, v] : c.recompute_on) rec_d += v;
    EXPECT_NEAR(rec_d, rec, 1e-6);
    EXPECT_LE(c.latency_s, c.cls.slo_s + 1e-6);
  }
}

TEST(Stage1Test, DegenerateInputsGiveClearResults) {
  PaperExample ex;
  Stage1Inputs in = ex.Inputs(1.0);
  in.gpus_per_node = {0, 0};
  EXPECT_THAT(PlanStage1(in).status().message(), HasSubstr("no GPUs"));
  in.gpus_per_node = {};
  EXPECT_THAT(PlanStage1(in).status().message(), HasSubstr("no nodes"));

  // An SLO shorter than one step: the fallback, with the reason naming the class.
  in = ex.Inputs(1.0);
  in.classes[0].slo_s = 0.1;
  StatusOr<Stage1Result> r = PlanStage1(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcome, Stage1Outcome::kInfeasibleFallback);
  EXPECT_THAT(r->reason, HasSubstr("prompt 32, output 32"));
  EXPECT_EQ(r->instances, (std::map<int, int>{{1, 8}}));

  // Too much load for any layout (8 TP-1 sustain 2.22 req/s): the fallback.
  r = PlanStage1(ex.Inputs(5.0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, Stage1Outcome::kInfeasibleFallback);
  EXPECT_THAT(r->reason, HasSubstr("infeasible"));
  EXPECT_EQ(r->instances, (std::map<int, int>{{1, 8}}));

  // Empty workload: no classes, or only classes without arrivals.
  in = ex.Inputs(0.0);
  r = PlanStage1(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, Stage1Outcome::kEmptyWorkload);
  EXPECT_TRUE(r->instances.empty());

  // A class longer than the context.
  in = ex.Inputs(1.0);
  in.max_context = 60;
  EXPECT_EQ(PlanStage1(in).status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(PlanStage1(in).status().message(), HasSubstr("exceeds the context"));
  // Longer than the largest recompute batch.
  in = ex.Inputs(1.0);
  in.classes[0].prompt_len = 1000;
  EXPECT_THAT(PlanStage1(in).status().message(), HasSubstr("largest recompute batch"));
  // Not a block multiple; a degree the profile lacks; bad thresholds.
  in = ex.Inputs(1.0);
  in.classes[0].output_len = 33;
  EXPECT_THAT(PlanStage1(in).status().message(), HasSubstr("multiple of the block"));
  in = ex.Inputs(1.0);
  in.tp_degrees = {1, 2};
  EXPECT_THAT(PlanStage1(in).status().message(), HasSubstr("TP-2"));
  in = ex.Inputs(1.0, {0.5, 0.9}, {8, 8});
  EXPECT_THAT(PlanStage1(in).status().message(), HasSubstr("descending"));
  // A degree larger than every node: never chosen.
  in = ex.Inputs(0.3);
  in.gpus_per_node = {2, 2, 2, 2};
  r = PlanStage1(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->instances, (std::map<int, int>{{1, 8}}));
}

TEST(Stage1Test, NodePatternsAreMaximalAndPackingIsExact) {
  // 4 GPUs, degrees 1, 2, 4: {4}, {2,2}, {2,1,1}, {1,1,1,1}.
  EXPECT_EQ(MaximalPatterns(4, {1, 2, 4}).size(), 4u);
  // Degree 3 on nodes of 4: two TP-3 need two nodes.
  EXPECT_TRUE(Packable({4, 4}, {1, 3}, {2, 2}));
  EXPECT_FALSE(Packable({4, 4}, {1, 3}, {3, 2}));
  EXPECT_FALSE(Packable({4, 4}, {3}, {3}));
  // The MILP respects it: 2 nodes of 4, TP-3 is fastest -> at most 2 TP-3 + 2 TP-1.
  const policy::LatencyProfile prof = LinearProfile({{1, 3.6 / 160}, {3, 2.0 / 160}});
  PaperExample ex;
  Stage1Inputs in = ex.Inputs(0.3);
  in.profile = &prof;
  in.tp_degrees = {1, 3};
  StatusOr<Stage1Result> r = PlanStage1(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instances, (std::map<int, int>{{1, 2}, {3, 2}}));
  EXPECT_EQ(r->gpus_used, 8);
}

policy::LatencyProfile H100() {
  StatusOr<policy::LatencyProfile> p =
      policy::LatencyProfile::LoadCsv(std::string(TEDI_SOURCE_DIR) + "/data/profiles/llada-8b-base/h100_step_latency_ms.csv");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

// The MILP against enumeration of every packable layout and bin choice (<= 16 GPUs).
TEST(Stage1Test, MatchesBruteForceOnSmallClusters) {
  const policy::LatencyProfile prof = H100();
  std::mt19937 rng(11);
  int planned = 0, fallbacks = 0;
  int mixed_planned = 0;
  for (int t = 0; t < 20; ++t) {  // cases 10-19: mixed batches (one bin per degree)
    Stage1Inputs in;
    const int nodes = 1 + static_cast<int>(rng() % 3);
    const int per = t % 2 == 0 ? 4 : 2 + static_cast<int>(rng() % 3);
    in.gpus_per_node.assign(nodes, per);
    in.tp_degrees = t % 3 == 0 ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 4};
    in.profile = &prof;
    in.thresholds = {0.9, 0.7, 0.5};
    in.tokens_per_step = {3.02, 4.77, 6.58};
    in.block_size = 32;
    in.recompute_bins = t % 2 == 0 ? std::vector<int>{1024, 4096} : std::vector<int>{2048};
    in.cache_bins = {64, 512};
    if (t >= 10) {
      in.mixed_batches = true;
      in.recompute_bins = t % 2 == 0 ? std::vector<int>{64, 512, 4096} : std::vector<int>{256, 1024, 2048};
      in.cache_bins.clear();
    }
    const int nk = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < nk; ++k) {
      LengthClass c;
      c.prompt_len = 256 * (1 + static_cast<int>(rng() % 3));
      c.output_len = 256 * (1 + static_cast<int>(rng() % 2));
      c.rps = 0.5 + (rng() % 100) / 10.0;
      c.slo_s = 2 + (rng() % 60) / 10.0;
      in.classes.push_back(c);
    }
    SCOPED_TRACE("case " + std::to_string(t));
    StatusOr<Stage1Result> milp = PlanStage1(in);
    StatusOr<BruteForceStage1Result> bf = BruteForceStage1(in);
    ASSERT_TRUE(milp.ok()) << milp.status().ToString();
    ASSERT_TRUE(bf.ok()) << bf.status().ToString();
    EXPECT_GT(bf->combinations, 0);
    EXPECT_EQ(milp->outcome == Stage1Outcome::kPlanned, bf->feasible);
    if (!bf->feasible) {
      ++fallbacks;
      continue;
    }
    ++planned;
    if (in.mixed_batches) {
      ++mixed_planned;
      for (const auto& [d, b] : milp->recompute_bin) EXPECT_EQ(milp->cache_bin.at(d), b) << "TP" << d << ": one batch, one bin";
    }
    EXPECT_NEAR(milp->mean_threshold, bf->mean_threshold, 1e-4);
    EXPECT_NEAR(milp->mean_latency_s, bf->mean_latency_s, 1e-4 * std::max(1.0, bf->mean_latency_s));
    double third = 0;
    int total = 0;
    for (int g : in.gpus_per_node) total += g;
    for (const auto& [d, n] : milp->instances) third += n * (1.0 - (total + 1.0) * d);
    EXPECT_NEAR(third, bf->third, 1e-6) << "milp and brute force differ in GPUs used / instances";
  }
  // The cases exercise both outcomes.
  EXPECT_GE(planned, 3);
  EXPECT_GE(mixed_planned, 2);
  EXPECT_GE(fallbacks, 1);
}

// Bins a larger bin of the same degree is no slower than are left out of the MILP (fewer
// binaries). The H100 profile has such bins among the cache bins 32..256 (its curves are
// made non-decreasing on loading, so these are ties: TP-1 takes as long for 64 tokens as for
// 32); brute force, which tries every bin, must find the same optima.
TEST(Stage1Test, LeavingOutDominatedBinsKeepsTheOptimum) {
  const policy::LatencyProfile prof = H100();
  ASSERT_LE(prof.StepSeconds(1, 64), prof.StepSeconds(1, 32));  // the premise
  std::mt19937 rng(5);
  int planned = 0;
  for (int t = 0; t < 6; ++t) {
    Stage1Inputs in;
    in.gpus_per_node.assign(1 + t % 2, 4);
    in.tp_degrees = t % 3 == 0 ? std::vector<int>{1, 4} : (t % 3 == 1 ? std::vector<int>{1, 2} : std::vector<int>{2, 4});
    in.profile = &prof;
    in.thresholds = {0.9, 0.5};
    in.tokens_per_step = {3.02, 6.58};
    in.block_size = 32;
    in.recompute_bins = {1024, 4096};
    in.cache_bins = {32, 64, 128, 256};
    for (int k = 0; k < 2; ++k) {
      LengthClass c;
      c.prompt_len = 256 * (1 + static_cast<int>(rng() % 3));
      c.output_len = 256 * (1 + static_cast<int>(rng() % 2));
      c.rps = 0.5 + (rng() % 60) / 10.0;
      c.slo_s = 3 + (rng() % 40) / 10.0;
      in.classes.push_back(c);
    }
    SCOPED_TRACE("case " + std::to_string(t));
    StatusOr<Stage1Result> milp = PlanStage1(in);
    StatusOr<BruteForceStage1Result> bf = BruteForceStage1(in);
    ASSERT_TRUE(milp.ok()) << milp.status().ToString();
    ASSERT_TRUE(bf.ok()) << bf.status().ToString();
    ASSERT_EQ(milp->outcome == Stage1Outcome::kPlanned, bf->feasible);
    if (!bf->feasible) continue;
    ++planned;
    EXPECT_NEAR(milp->mean_threshold, bf->mean_threshold, 1e-4);
    EXPECT_NEAR(milp->mean_latency_s, bf->mean_latency_s, 1e-4 * std::max(1.0, bf->mean_latency_s));
    for (const auto& [d, b] : milp->cache_bin) {
      for (int larger : in.cache_bins) {
        if (larger > b) {
          EXPECT_GT(prof.StepSeconds(d, larger), prof.StepSeconds(d, b)) << "TP" << d << " chose a dominated bin";
        }
      }
    }
  }
  EXPECT_GE(planned, 3);
}

// A step is charged at the batch the load builds up (the smallest bin that holds it), not at
// a bin that must hold the longest class: a short class next to a 3840-token one is not
// charged 3840-token recompute steps. With the H100 profile and one class of (256, 256)
// (8 blocks) beside one of (3584, 256), at 0.1 req/s each, all TP-1: the short class's
// modelled latency is about its solo run, 8 x l_1(512) + 76.8 x l_1(32) = 1.11 s. Charged at a
// 4096-token bin it would be 8 x l_1(4096) + 76.8 x l_1(32) = 1.96 s, over its 1.5 s SLO,
// and 16 x TP-1 would be called infeasible (what the E1 run with reconfiguration hit).
TEST(Stage1Test, StepsAreChargedAtTheBatchTheLoadBuilds) {
  const policy::LatencyProfile prof = H100();
  Stage1Inputs in;
  in.gpus_per_node = {4, 4, 4, 4};
  in.tp_degrees = {1, 2, 4};
  in.profile = &prof;
  in.thresholds = {0.9};
  in.tokens_per_step = {3.02};
  in.block_size = 32;
  const double blocks = 8, cache = 256 / 3.02 - 8;
  const double solo_short = blocks * prof.StepSeconds(1, 512) + cache * prof.StepSeconds(1, 32);
  const double solo_long = blocks * prof.StepSeconds(1, 3840) + cache * prof.StepSeconds(1, 32);
  ASSERT_NEAR(solo_short, 1.11, 0.02);
  ASSERT_GT(blocks * prof.StepSeconds(1, 4096) + cache * prof.StepSeconds(1, 32), 1.5);  // the old charge
  in.classes = {{256, 256, 0.1, 1.5}, {3584, 256, 0.1, 5 * solo_long}};
  Stage1Options o;
  o.fixed_instances = std::map<int, int>{{1, 16}};
  StatusOr<Stage1Result> r = PlanStage1(in, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->outcome, Stage1Outcome::kPlanned) << r->reason;
  ASSERT_EQ(r->classes.size(), 2u);
  EXPECT_NEAR(r->classes[0].latency_s, solo_short, 0.02 * solo_short);
  EXPECT_NEAR(r->classes[1].latency_s, solo_long, 0.02 * solo_long);
  EXPECT_LE(r->recompute_bin.at(1), 512);  // the light load's batch, not 4096

  // More load builds bigger batches: the same layout at 10 req/s per class charges more per
  // step (the stability row needs a bin that holds the batch), and still meets the SLOs.
  in.classes[0].rps = in.classes[1].rps = 10;
  in.classes[0].slo_s = 5 * solo_short;
  r = PlanStage1(in, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->outcome, Stage1Outcome::kPlanned) << r->reason;
  EXPECT_GT(r->classes[0].latency_s, 1.05 * solo_short);
  EXPECT_GT(r->recompute_bin.at(1) + r->cache_bin.at(1), 512 + 32);

  // Default bins: 2^i and 1.5 x 2^i; recompute ones from the largest <= the shortest class's
  // P + O (512) to the token budget, cache ones from B to 32 B.
  in.classes[0].rps = in.classes[1].rps = 0.1;
  StatusOr<Stage1Problem> p = MakeStage1Problem(in);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->recompute_bins, (std::vector<int>{512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192}));
  EXPECT_EQ(p->cache_bins, (std::vector<int>{32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024}));
  // A recompute step of the long class in a 512-token bin costs its own 3840 tokens.
  EXPECT_DOUBLE_EQ(p->rec_lat_k[1][0][0], prof.StepSeconds(1, 3840));
  EXPECT_DOUBLE_EQ(p->rec_lat_k[0][0][0], prof.StepSeconds(1, 512));

  // Mixed batches: one bin list from B to the budget, and one bin per degree for recompute
  // and cache steps together: a restriction of the separate bins, so never faster.
  in.mixed_batches = true;
  p = MakeStage1Problem(in);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->recompute_bins.front(), 32);
  EXPECT_EQ(p->recompute_bins.back(), 8192);
  EXPECT_EQ(p->cache_bins, p->recompute_bins);
  in.classes[0].rps = in.classes[1].rps = 10;
  StatusOr<Stage1Result> split = r;  // the separate-bin result at 10 req/s
  r = PlanStage1(in, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->outcome, Stage1Outcome::kPlanned) << r->reason;
  EXPECT_EQ(r->recompute_bin.at(1), r->cache_bin.at(1));
  EXPECT_GE(r->mean_latency_s, split->mean_latency_s - 1e-9);
  in.cache_bins = {32, 64};
  EXPECT_THAT(MakeStage1Problem(in).status().message(), HasSubstr("one bin list"));
}

// ---------------------------------------------------------------- Stage 2

std::vector<Placement> AllTp(int nodes, int per, int tp) {
  std::vector<Placement> v;
  for (int n = 0; n < nodes; ++n)
    for (int i = 0; i + tp <= per; i += tp) {
      Placement p{static_cast<int>(v.size()), n, tp, {}};
      for (int g = i; g < i + tp; ++g) p.gpus.push_back(g);
      v.push_back(p);
    }
  return v;
}

TEST(Stage2Test, KeepsEveryInstanceThatCanBeKept) {
  // 16 x TP-1 on 4 nodes -> 2 x TP-4 + 8 x TP-1: two nodes keep their 4 TP-1 each.
  Stage2Inputs in{{4, 4, 4, 4}, {{4, 2}, {1, 8}}, AllTp(4, 4, 1)};
  StatusOr<Stage2Result> r = PlanStage2(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, MipStatus::kOptimal);
  EXPECT_EQ(r->kept.size(), 8u);
  EXPECT_EQ(r->launched.size(), 2u);
  EXPECT_EQ(r->terminated.size(), 8u);
  ASSERT_EQ(r->steps.size(), 10u);
  // One launch at a time, each right after the 4 terminations of its node.
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(r->steps[5 * j + i].kind, PlanStep::kTerminate);
      EXPECT_EQ(r->steps[5 * j + i].instance.node, r->steps[5 * j + 4].instance.node);
    }
    EXPECT_EQ(r->steps[5 * j + 4].kind, PlanStep::kLaunch);
  }
  EXPECT_TRUE(CheckStage2(in, *r).ok());

  // 4 x TP-4 -> 2 x TP-4 + 2 x TP-2 + 4 x TP-1: two TP-4 stay.
  in = {{4, 4, 4, 4}, {{4, 2}, {2, 2}, {1, 4}}, AllTp(4, 4, 4)};
  r = PlanStage2(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kept.size(), 2u);
  EXPECT_EQ(BruteForceMaxKept(in), 2);

  // The same layout as now: nothing changes.
  in = {{4, 4}, {{2, 4}}, AllTp(2, 4, 2)};
  r = PlanStage2(in);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->unchanged());
  EXPECT_TRUE(r->steps.empty());
  EXPECT_EQ(r->kept.size(), 4u);

  // A mixed node: TP-2 on {1,2} (not aligned) survives a move to 1 x TP-2 + 2 x TP-1.
  in = {{4}, {{2, 1}, {1, 2}}, {{7, 0, 2, {1, 2}}, {8, 0, 1, {0}}, {9, 0, 1, {3}}}};
  r = PlanStage2(in);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->unchanged());
}

TEST(Stage2Test, MatchesBruteForceOnRandomSmallClusters) {
  std::mt19937 rng(5);
  const std::vector<int> degrees = {1, 2, 4};
  for (int t = 0; t < 40; ++t) {
    Stage2Inputs in;
    const int nodes = 1 + static_cast<int>(rng() % 4);
    for (int n = 0; n < nodes; ++n) in.gpus_per_node.push_back(2 + static_cast<int>(rng() % 3) * 2);  // 2, 4, 6
    // Current: random packing per node, GPUs in a random order.
    int id = 0;
    for (int n = 0; n < nodes; ++n) {
      std::vector<int> gpus(in.gpus_per_node[n]);
      for (size_t g = 0; g < gpus.size(); ++g) gpus[g] = static_cast<int>(g);
      std::shuffle(gpus.begin(), gpus.end(), rng);
      size_t at = 0;
      while (at < gpus.size()) {
        const int d = degrees[rng() % 3];
        if (at + d > gpus.size() || rng() % 5 == 0) {
          ++at;  // leave a GPU idle
          continue;
        }
        Placement p{id++, n, d, {gpus.begin() + at, gpus.begin() + at + d}};
        std::sort(p.gpus.begin(), p.gpus.end());
        in.current.push_back(p);
        at += d;
      }
    }
    // Target: a random packable layout.
    std::vector<int> counts(3, 0);
    for (int n = 0; n < nodes; ++n) {
      int left = in.gpus_per_node[n];
      while (left > 0) {
        const int i = static_cast<int>(rng() % 3);
        if (degrees[i] <= left) {
          ++counts[i];
          left -= degrees[i];
        } else if (rng() % 3 == 0) {
          break;
        }
      }
    }
    for (int i = 0; i < 3; ++i) in.target[degrees[i]] = counts[i];
    SCOPED_TRACE("case " + std::to_string(t));
    const int best = BruteForceMaxKept(in);
    ASSERT_GE(best, 0);
    StatusOr<Stage2Result> r = PlanStage2(in);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, MipStatus::kOptimal);
    EXPECT_EQ(static_cast<int>(r->kept.size()), best);
    EXPECT_TRUE(CheckStage2(in, *r).ok());
  }
}

TEST(Stage2Test, BadInputIsRefused) {
  Stage2Inputs in{{4}, {{4, 2}}, {}};
  EXPECT_EQ(PlanStage2(in).status().code(), StatusCode::kFailedPrecondition);  // 8 GPUs on 4
  in = {{2, 2}, {{4, 1}}, {}};
  EXPECT_EQ(PlanStage2(in).status().code(), StatusCode::kFailedPrecondition);  // no node of 4
  in = {{0}, {{1, 0}}, {}};
  EXPECT_THAT(PlanStage2(in).status().message(), HasSubstr("no GPUs"));
  in = {{4}, {{1, 4}}, {{1, 0, 1, {0}}, {2, 0, 1, {0}}}};
  EXPECT_THAT(PlanStage2(in).status().message(), HasSubstr("used twice"));
  in = {{4}, {{1, 4}}, {{1, 0, 2, {0}}}};
  EXPECT_THAT(PlanStage2(in).status().message(), HasSubstr("exactly tp GPUs"));
  in = {{4}, {{1, 4}}, {{1, 3, 1, {0}}}};
  EXPECT_THAT(PlanStage2(in).status().message(), HasSubstr("no such node"));
  // Emptying the cluster is a valid plan: every instance terminated.
  in = {{4}, {}, AllTp(1, 4, 1)};
  StatusOr<Stage2Result> r = PlanStage2(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->terminated.size(), 4u);
}

}  // namespace
}  // namespace tediserve::plan
