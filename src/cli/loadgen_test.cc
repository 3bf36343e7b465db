#include "cli/loadgen.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "common/temp_dir.h"
#include "host/host.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace tediserve::cli::loadgen {
namespace {

using ::testing::HasSubstr;

std::vector<engine::TaskProblem> Problems(size_t n) {
  std::vector<engine::TaskProblem> out(n);
  for (size_t i = 0; i < n; ++i) {
    char prompt[32], answer[32];
    std::snprintf(prompt, sizeof prompt, "p%zu", i);
    std::snprintf(answer, sizeof answer, "a%zu", i);
    out[i].task = i % 2 ? "add" : "sub";
    out[i].prompt.assign(prompt);
    out[i].answer.assign(answer);
    out[i].ids.assign(3 + i % 4, 5);
  }
  return out;
}


TEST(LoadgenArrivals, PoissonMatchesTheSimulatorsArrivalTimes) {
  ArrivalOptions o;
  o.type = "poisson";
  o.rate = 7.5;
  o.requests = 200;
  o.seed = 42;
  auto got = Arrivals(o);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 200u);
  // The simulator, given the same arrivals section and seed.
  YAML::Node w = YAML::Load(
      "arrivals: {type: poisson, rate: 7.5, num_requests: 200}\n"
      "lengths: {type: fixed, prompt_len: 30, output_len: 64}\n");
  auto spec = sim::ParseWorkload(w, ".");
  ASSERT_TRUE(spec.ok());
  auto sim = sim::GenerateWorkload(*spec, 42);
  ASSERT_TRUE(sim.ok());
  for (size_t i = 0; i < got->size(); ++i) EXPECT_EQ((*got)[i].arrival, (*sim)[i].arrival) << i;
  // Another seed, other times.
  o.seed = 43;
  auto other = Arrivals(o);
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)[5].arrival, (*got)[5].arrival);
}

TEST(LoadgenArrivals, GammaDurationAndErrors) {
  ArrivalOptions o;
  o.type = "gamma";
  o.rate = 20;
  o.cv = 3;
  o.duration_s = 10;
  auto got = Arrivals(o);
  ASSERT_TRUE(got.ok()) << got.status().message();
  for (const auto& r : *got) EXPECT_LT(r.arrival, 10);
  EXPECT_GT(got->size(), 50u);

  o.requests = 10;  // both
  EXPECT_THAT(Arrivals(o).status().message(), HasSubstr("exactly one of --requests and --duration"));
  o.requests = 0;
  o.duration_s = 0;  // neither
  EXPECT_FALSE(Arrivals(o).ok());
  o.duration_s = 1;
  o.rate = -1;
  EXPECT_THAT(Arrivals(o).status().message(), HasSubstr("--rate"));
  o.type = "uniform";
  EXPECT_THAT(Arrivals(o).status().message(), HasSubstr("unknown"));
}

TEST(LoadgenArrivals, TraceReplayKeepsSloAndPriorityAndCaps) {
  TempDir d;
  const std::string path = d.File("t.csv");
  {
    std::ofstream f(path);
    f << "arrival_s,prompt_len,output_len,slo_s,priority\n0.5,10,8,0.25,1\n0.1,10,8,,0\n2.0,10,8,,0\n";
  }
  ArrivalOptions o;
  o.type = "trace";
  o.file = path;
  auto got = Arrivals(o);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_DOUBLE_EQ((*got)[0].arrival, 0.1);
  EXPECT_DOUBLE_EQ((*got)[1].slo, 0.25);
  EXPECT_EQ((*got)[1].priority, 1);
  o.duration_s = 1;
  EXPECT_EQ(Arrivals(o)->size(), 2u);
  o.duration_s = 0;
  o.requests = 1;
  EXPECT_EQ(Arrivals(o)->size(), 1u);
  o.file = d.File("missing.csv");
  EXPECT_FALSE(Arrivals(o).ok());
}

TEST(LoadgenArrivals, WorkloadConfigUsesItsSeed) {
  TempDir d;
  const std::string path = d.File("w.yaml");
  {
    std::ofstream f(path);
    f << "seed: 9\nworkload:\n  arrivals: {type: poisson, rate: 3, num_requests: 20}\n"
         "  lengths: {type: fixed, prompt_len: 4, output_len: 8}\n";
  }
  ArrivalOptions o;
  o.type = "workload";
  o.file = path;
  auto got = Arrivals(o);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ArrivalOptions p;
  p.rate = 3;
  p.requests = 20;
  p.seed = 9;
  auto same = Arrivals(p);
  ASSERT_TRUE(same.ok());
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ((*got)[i].arrival, (*same)[i].arrival);
}

TEST(LoadgenPlan, ProblemOrderUsesEveryProblemBeforeRepeating) {
  const auto order = ProblemOrder(7, 20, 3);
  ASSERT_EQ(order.size(), 20u);
  EXPECT_EQ(std::set<size_t>(order.begin(), order.begin() + 7).size(), 7u);
  EXPECT_EQ(std::set<size_t>(order.begin() + 7, order.begin() + 14).size(), 7u);
  EXPECT_EQ(order, ProblemOrder(7, 20, 3));
  EXPECT_NE(order, ProblemOrder(7, 20, 4));
}

TEST(LoadgenPlan, SloFixedScaledAndFromTheTrace) {
  auto prof = policy::LatencyProfile::FromPoints({{1, {{8, 0.4e-3}, {16, 0.6e-3}, {64, 1.5e-3}}}}, "test");
  ASSERT_TRUE(prof.ok()) << prof.status().message();
  std::vector<policy::RequestSpec> arr(3);
  for (int i = 0; i < 3; ++i) arr[i].arrival = i;
  arr[2].slo = 0.5;  // the trace's own
  arr[1].slo_factor = 2;
  const auto problems = Problems(5);

  SloOptions fixed;
  fixed.fixed_ms = 40;
  auto p = Plan(arr, problems, 8, fixed, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ((*p)[0].slo_s, 0.04);
  EXPECT_DOUBLE_EQ((*p)[1].slo_s, 0.08);
  EXPECT_DOUBLE_EQ((*p)[2].slo_s, 0.5);

  SloOptions scaled;
  scaled.scale = 10;
  scaled.profile = &*prof;
  scaled.block_size = 8;
  scaled.tokens_per_step = 4;
  p = Plan(arr, problems, 8, scaled, 1);
  ASSERT_TRUE(p.ok());
  policy::RequestSpec s;
  s.prompt_len = (*p)[0].prompt_len;
  s.output_len = 8;
  EXPECT_DOUBLE_EQ((*p)[0].slo_s, 10 * host::SoloLatency(s, *prof, 1, 8, true, 4));
  EXPECT_EQ((*p)[0].prompt_len, static_cast<int>(problems[(*p)[0].problem].ids.size()));
  EXPECT_GT((*p)[0].slo_s, 0);

  // The latency alone measured on the server scales every scaled SLO (not fixed or trace ones).
  SloOptions live = scaled;
  live.live_factor = 3.5;
  auto pl = Plan(arr, problems, 8, live, 1);
  ASSERT_TRUE(pl.ok());
  EXPECT_DOUBLE_EQ((*pl)[0].slo_s, 3.5 * (*p)[0].slo_s);
  EXPECT_DOUBLE_EQ((*pl)[1].slo_s, 3.5 * (*p)[1].slo_s);
  EXPECT_DOUBLE_EQ((*pl)[2].slo_s, 0.5);
  EXPECT_DOUBLE_EQ(ProfileSoloLatency(scaled, s.prompt_len, 8), host::SoloLatency(s, *prof, 1, 8, true, 4));
  for (double bad : {0.0, -1.0, std::nan("")}) {
    live.live_factor = bad;
    EXPECT_FALSE(Plan(arr, problems, 8, live, 1).ok()) << bad;
  }

  SloOptions none;
  none.scale = 0;
  p = Plan(arr, problems, 8, none, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].slo_s, 0);
  EXPECT_FALSE(RequestBody((*p)[0], "x", 0).contains("slo_ms"));
  EXPECT_EQ(RequestBody((*p)[2], "x", 16)["slo_ms"].get<double>(), 500);
  EXPECT_EQ(RequestBody((*p)[2], "x", 16)["max_tokens"].get<int>(), 16);

  SloOptions broken;  // a scale without a profile
  EXPECT_FALSE(Plan(arr, problems, 8, broken, 1).ok());
}

TEST(LoadgenPlan, AsTraceRoundTripsThroughTheSimulatorsReader) {
  std::vector<policy::RequestSpec> arr(2);
  arr[0].arrival = 0.25;
  arr[1].arrival = 1.5;
  arr[1].priority = 2;
  SloOptions fixed;
  fixed.fixed_ms = 30;
  auto p = Plan(arr, Problems(3), 8, fixed, 1);
  ASSERT_TRUE(p.ok());
  TempDir d;
  ASSERT_TRUE(sim::WriteTrace(d.File("t.csv"), AsTrace(*p)).ok());
  auto back = sim::ReadTrace(d.File("t.csv"));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].arrival, 1.5);
  EXPECT_EQ((*back)[1].priority, 2);
  EXPECT_DOUBLE_EQ((*back)[0].slo, 0.03);
  EXPECT_EQ((*back)[0].output_len, 8);
}

TEST(LoadgenResponse, GradesLikeEvalAndReadsTheTediserveObject) {
  RequestResult r;
  r.latency_s = 0.02;
  r.slo_s = 0.05;
  const std::string body = R"({"choices":[{"text":"253","finish_reason":"stop"}],"usage":{"completion_tokens":3},
    "tediserve":{"steps":3,"mean_threshold":0.8,"slo_ms":30,"latency_ms":18,"slo_met":true,"migrations":1}})";
  ReadResponse(200, body, "253", &r);
  EXPECT_EQ(r.outcome, "ok");
  EXPECT_TRUE(r.correct);
  EXPECT_DOUBLE_EQ(r.slo_s, 0.03);  // the server's
  EXPECT_TRUE(r.slo_met);
  EXPECT_TRUE(r.server_slo_met);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.migrations, 1);
  EXPECT_EQ(r.completion_tokens, 3);
  EXPECT_DOUBLE_EQ(r.server_latency_s, 0.018);

  r.latency_s = 0.04;  // over the SLO at the client, though the server met it
  ReadResponse(200, body, "253 ", &r);
  EXPECT_FALSE(r.correct);  // exact match only, as tediserve eval
  EXPECT_FALSE(r.slo_met);
  EXPECT_TRUE(r.server_slo_met);

  ReadResponse(429, R"({"error":{"message":"queue full"}})", "x", &r);
  EXPECT_EQ(r.outcome, "rejected");
  EXPECT_EQ(r.error, "queue full");
  EXPECT_FALSE(r.slo_met);
  EXPECT_FALSE(r.correct);
  ReadResponse(503, "{}", "x", &r);
  EXPECT_EQ(r.outcome, "unavailable");
  ReadResponse(499, "{}", "x", &r);
  EXPECT_EQ(r.outcome, "cancelled");
  ReadResponse(400, "not json", "x", &r);
  EXPECT_EQ(r.outcome, "client_error");
  ReadResponse(500, "", "x", &r);
  EXPECT_EQ(r.outcome, "server_error");
  ReadResponse(0, "", "x", &r);
  EXPECT_EQ(r.outcome, "transport");
  ReadResponse(200, R"({"choices":[]})", "x", &r);
  EXPECT_EQ(r.outcome, "bad_response");
  ReadResponse(200, R"({"choices":[{"text":"x"}]})", "x", &r);
  EXPECT_EQ(r.outcome, "bad_response");  // no tediserve object
}

TEST(LoadgenSummary, CountsPercentilesAndRates) {
  std::vector<RequestResult> rs(4);
  for (int i = 0; i < 4; ++i) {
    rs[i].id = i;
    rs[i].planned_s = i;
    rs[i].sent_s = i;
    rs[i].latency_s = 0.1 * (i + 1);
    rs[i].done_s = i + rs[i].latency_s;
    rs[i].outcome = "ok";
    rs[i].steps = 2;
    rs[i].mean_threshold = 0.9;
    rs[i].completion_tokens = 4;
    rs[i].slo_met = i < 2;
    rs[i].server_slo_met = i < 3;
    rs[i].correct = i != 1;
  }
  rs[3].outcome = "rejected";
  rs[3].slo_met = rs[3].server_slo_met = rs[3].correct = false;
  const Summary s = Summarize(rs);
  EXPECT_EQ(s.requests, 4);
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.outcomes.at("ok"), 3);
  EXPECT_EQ(s.outcomes.at("rejected"), 1);
  EXPECT_DOUBLE_EQ(s.attainment, 0.5);
  EXPECT_DOUBLE_EQ(s.attainment_server, 0.75);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_DOUBLE_EQ(s.accuracy_completed, 2.0 / 3);
  EXPECT_NEAR(s.latency_mean_s, 0.2, 1e-12);
  EXPECT_NEAR(s.latency_p50_s, 0.2, 1e-12);
  EXPECT_NEAR(s.latency_p99_s, 0.298, 1e-12);
  EXPECT_DOUBLE_EQ(s.offered_rps, 1);
  EXPECT_NEAR(s.wall_s, 3.4, 1e-12);
  EXPECT_NEAR(s.throughput_rps, 3 / 3.4, 1e-12);
  EXPECT_NEAR(s.tokens_per_s, 12 / 3.4, 1e-12);
  EXPECT_NEAR(s.mean_threshold, 0.9, 1e-12);
  EXPECT_TRUE(std::isnan(Percentile({}, 0.5)));
  EXPECT_DOUBLE_EQ(Percentile({3, 1, 2}, 0.5), 2);
  auto j = ToJson(s);
  EXPECT_EQ(j["requests"], 4);
  EXPECT_TRUE(ToJson(Summarize({}))["latency_mean_s"].is_null() || ToJson(Summarize({}))["latency_mean_s"] == 0);
}

TEST(LoadgenSummary, AggregatesRepeatedRunsByPolicyAndRate) {
  auto run = [](const std::string& l, double rate, double att, double acc, double lat) {
    RunSummary r;
    r.label = l;
    r.rate = rate;
    r.summary.requests = 10;
    r.summary.completed = 9;
    r.summary.attainment = att;
    r.summary.accuracy = acc;
    r.summary.latency_mean_s = lat;
    return r;
  };
  const auto a = AggregateRuns({run("x", 5, 0.8, 0.9, 0.1), run("y", 5, 0.5, 0.95, 0.2), run("x", 5, 0.6, 0.92, 0.3),
                                run("x", 9, 0.1, 0.9, 0.5)});
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].label, "x");
  EXPECT_EQ(a[0].rate, 5);
  EXPECT_EQ(a[0].runs, 2);
  EXPECT_EQ(a[0].requests, 20);
  EXPECT_EQ(a[0].failed, 2);
  EXPECT_NEAR(a[0].attainment, 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(a[0].attainment_min, 0.6);
  EXPECT_DOUBLE_EQ(a[0].attainment_max, 0.8);
  EXPECT_NEAR(a[0].accuracy, 0.91, 1e-12);
  EXPECT_NEAR(a[0].latency_mean_s, 0.2, 1e-12);
  EXPECT_EQ(a[1].label, "y");
  EXPECT_EQ(a[2].rate, 9);
  EXPECT_EQ(ToJson(a[0])["runs"], 2);
}

TEST(LoadgenMetrics, StepSizesMinusDiffersClassByClass) {
  StepSizeClass a64{64, 10, 400, 1, 2, 20, 41}, a_inf{std::numeric_limits<double>::infinity(), 2, 5000, 3, 9, 6, 18};
  StepSizeClass b64{64, 4, 160, 0.5, 0.5, 8, 16};
  const auto d = StepSizesMinus({a64, a_inf}, {b64});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_DOUBLE_EQ(d[0].batches, 6);
  EXPECT_DOUBLE_EQ(d[0].tokens, 240);
  EXPECT_DOUBLE_EQ(d[0].profile_s, 0.5);
  EXPECT_DOUBLE_EQ(d[0].elapsed_s, 1.5);
  EXPECT_DOUBLE_EQ(d[0].ratio_sum, 12);
  EXPECT_DOUBLE_EQ(d[0].ratio_squares, 25);
  EXPECT_DOUBLE_EQ(d[1].batches, 2);  // no earlier count: all of it
  EXPECT_TRUE(StepSizesMinus({a64}, {a64}).empty());  // nothing ran between
}

TEST(LoadgenSummary, GoodputIsTheHighestRateAtTarget) {
  EXPECT_EQ(*GoodputRate({2, 4, 6, 8}, {1.0, 0.95, 0.91, 0.5}, 0.9), 6);
  EXPECT_EQ(*GoodputRate({8, 2}, {0.95, 0.99}, 0.9), 8);
  EXPECT_FALSE(GoodputRate({2}, {0.5}, 0.9).has_value());
}

TEST(LoadgenMetrics, ParsesPrometheusAndComputesTheOverhead) {
  const std::string before =
      "# HELP tediserve_scheduler_seconds_total x\n# TYPE tediserve_scheduler_seconds_total counter\n"
      "tediserve_scheduler_seconds_total 1\ntediserve_step_seconds_total 10\ntediserve_step_seconds_count 100\n"
      "tediserve_batch_requests_bucket{le=\"4\"} 50\ntediserve_batch_requests_bucket{le=\"8\"} 80\n"
      "tediserve_batch_requests_bucket{le=\"+Inf\"} 100\ntediserve_batch_requests_sum 500\n"
      "tediserve_batch_requests_count 100\ntediserve_requests_total{outcome=\"completed\"} 7\n";
  const std::string after =
      "tediserve_scheduler_seconds_total 1.5\ntediserve_scheduler_wall_seconds_total 3\n"
      "tediserve_loop_seconds_total 5\ntediserve_step_seconds_total 60\ntediserve_step_seconds_count 1100\n"
      "tediserve_batch_requests_bucket{le=\"4\"} 150\ntediserve_batch_requests_bucket{le=\"8\"} 380\n"
      "tediserve_batch_requests_bucket{le=\"+Inf\"} 1100\ntediserve_batch_requests_sum 9500\n"
      "tediserve_batch_requests_count 1100\ntediserve_request_steps_total 9000\n"
      "tediserve_step_profile_seconds_total 20\ntediserve_step_elapsed_seconds_total 45\n"
      "tediserve_step_size_batches_total{tokens_max=\"+Inf\"} 4\ntediserve_step_size_tokens_total{tokens_max=\"+Inf\"} 20000\n"
      "tediserve_step_size_profile_seconds_total{tokens_max=\"+Inf\"} 2\n"
      "tediserve_step_size_elapsed_seconds_total{tokens_max=\"+Inf\"} 8\n"
      "tediserve_step_size_batches_total{tokens_max=\"64\"} 996\ntediserve_step_size_tokens_total{tokens_max=\"64\"} 40000\n"
      "tediserve_step_size_profile_seconds_total{tokens_max=\"64\"} 18\n"
      "tediserve_step_size_elapsed_seconds_total{tokens_max=\"64\"} 37\n"
      "tediserve_step_size_batches_total{tokens_max=\"16\"} 0\n"
      "tediserve_step_overhead_seconds_total{leg=\"to_worker\"} 0.2\n"
      "tediserve_step_overhead_seconds_total{leg=\"worker\"} 0.01\n"
      "tediserve_step_overhead_seconds_total{leg=\"from_worker\"} 0.3\n"
      "tediserve_step_overhead_seconds_total{leg=\"loop\"} 0.1\n";
  auto b = ParsePrometheus(before);
  auto a = ParsePrometheus(after);
  ASSERT_TRUE(b.ok() && a.ok());
  EXPECT_EQ(b->at("tediserve_requests_total{outcome=\"completed\"}"), 7);
  EXPECT_TRUE(std::isinf(b->at("tediserve_batch_requests_bucket{le=\"+Inf\"}")) == false);
  const Overhead o = OverheadBetween(*b, *a);
  ASSERT_TRUE(o.valid);
  EXPECT_DOUBLE_EQ(o.batches, 1000);
  EXPECT_DOUBLE_EQ(o.overhead, 0.5 / 50);
  EXPECT_DOUBLE_EQ(o.wall_overhead, 3.0 / 50);  // absent before: counted from 0
  EXPECT_DOUBLE_EQ(o.loop_overhead, 5.0 / 50);
  EXPECT_DOUBLE_EQ(o.policy_ms_per_step, 0.5);
  EXPECT_DOUBLE_EQ(o.step_ms, 50);
  EXPECT_DOUBLE_EQ(o.mean_batch, 9);
  EXPECT_DOUBLE_EQ(o.batches_over_4, 0.9);
  EXPECT_DOUBLE_EQ(o.batches_over_8, 0.7);
  EXPECT_DOUBLE_EQ(o.step_scale, 45.0 / 20);  // the run's steps over the profile's (absent before)
  // By size class, bounds ascending (+Inf last), the empty class left out.
  ASSERT_EQ(o.step_sizes.size(), 2u);
  EXPECT_EQ(o.step_sizes[0].tokens_max, 64);
  EXPECT_DOUBLE_EQ(o.step_sizes[0].batches, 996);
  EXPECT_DOUBLE_EQ(o.step_sizes[0].tokens, 40000);
  EXPECT_DOUBLE_EQ(o.step_sizes[0].profile_s, 18);
  EXPECT_DOUBLE_EQ(o.step_sizes[0].elapsed_s, 37);
  EXPECT_TRUE(std::isinf(o.step_sizes[1].tokens_max));
  EXPECT_DOUBLE_EQ(o.step_sizes[1].elapsed_s, 8);
  // The legs of launch to result besides the engine (absent before: from 0).
  EXPECT_DOUBLE_EQ(o.to_worker_s, 0.2);
  EXPECT_DOUBLE_EQ(o.in_worker_s, 0.01);
  EXPECT_DOUBLE_EQ(o.from_worker_s, 0.3);
  EXPECT_DOUBLE_EQ(o.to_loop_s, 0.1);
  EXPECT_EQ(OverheadBetween(*a, *a).to_worker_s, 0);
  EXPECT_TRUE(OverheadBetween(*a, *a).step_sizes.empty());
  EXPECT_EQ(OverheadBetween(*a, *a).step_scale, 0);  // nothing ran between: not measured
  EXPECT_FALSE(OverheadBetween(*b, *b).valid);
  EXPECT_FALSE(ParsePrometheus("tediserve_x\n").ok());
  EXPECT_FALSE(ParsePrometheus("tediserve_x abc\n").ok());
  auto lbl = ParsePrometheus("m{a=\"x y}\"} 2\n");
  ASSERT_TRUE(lbl.ok());
  EXPECT_EQ(lbl->at("m{a=\"x y}\"}"), 2);
}

TEST(LoadgenTimeline, WindowsInTheSimulatorsColumns) {
  std::vector<RequestResult> rs(3);
  rs[0] = {};
  rs[0].planned_s = rs[0].sent_s = 0.1;
  rs[0].done_s = 0.5;
  rs[0].latency_s = 0.4;
  rs[0].outcome = "ok";
  rs[0].slo_met = true;
  rs[0].mean_threshold = 0.9;
  rs[1].planned_s = rs[1].sent_s = 0.6;
  rs[1].done_s = 1.7;
  rs[1].latency_s = 1.1;
  rs[1].outcome = "ok";
  rs[1].mean_threshold = 0.7;
  rs[2].planned_s = rs[2].sent_s = 1.2;
  rs[2].done_s = 1.3;
  rs[2].outcome = "rejected";
  const std::string csv = TimelineCsv(rs, {{0.9, 2, 1, {}}}, 1.0);
  EXPECT_EQ(csv,
            "t_s,arrival_rps,active,queued,mean_threshold,mean_cap,window_attainment,window_mean_latency_s\n"
            "1,2,1,1,0.9,nan,1,0.4\n"
            "2,1,0,nan,0.7,nan,0,1.1\n");
}

}  // namespace
}  // namespace tediserve::cli::loadgen
