// End-to-end tests of `tediserve simulate`: real configs through the real binary. Good runs
// write their files and are byte-identical for a seed; bad configs and traces exit 2 with a
// message that names the field or the file and line.
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "e2e/cli_runner.h"

namespace tediserve {
namespace {

using namespace e2e;  // NOLINT: the runner helpers

std::string Repo(const std::string& rel) { return (fs::path(TEDI_SOURCE_DIR) / rel).string(); }

// A small statistical-model experiment: 4 x TP1, GSM8K-like lengths, 60 s of arrivals.
std::string SmallConfig(const std::string& out_dir, const std::string& extra = "", int seed = 7,
                        const std::string& arrivals = "{type: poisson, rate: 10, duration_s: 60}") {
  std::ostringstream c;
  c << "name: small\nseed: " << seed << "\n"
    << "cluster: {nodes: 1, gpus_per_node: 4, token_budget: 8192}\n"
    << "model:\n  profile: {csv: " << Repo("data/profiles/llada-8b-base/h100_step_latency_ms.csv") << "}\n"
    << "  denoiser: {type: statistical, calibration: " << Repo("data/calibrations/llada-8b-gsm8k.json") << "}\n"
    << "  block_size: 32\n  cache: true\n"
    << "policy: {name: tediserve}\n"
    << "workload:\n  arrivals: " << arrivals << "\n"
    << "  lengths: {type: gsm8k, file: " << Repo("data/workload/gsm8k_prompt_lengths.csv")
    << ", few_shot: 4, output_len: 256}\n"
    << "slo: {scale: 5}\n"
    << "timeline_interval_s: 5\n"
    << "output: {dir: " << out_dir << "}\n"
    << extra;
  return c.str();
}

class SimulateTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string p = dir_.File(name);
    WriteFile(p, text);
    return p;
  }
  std::string Out(const std::string& name) { return dir_.File(name); }
  TempDir dir_{"tedi_sim_e2e"};
};

TEST_F(SimulateTest, RunWritesResultsAndIsDeterministic) {
  const std::string a = Out("a"), b = Out("b"), c = Out("c");
  const auto ra = RunCli({"simulate", Write("a.yaml", SmallConfig(a)), "--no-plots", "--quiet"});
  ExpectSuccess(ra);
  EXPECT_THAT(ra.out, HasSubstr("| tediserve |"));
  for (const char* f : {"requests.csv", "timeline.csv", "periods.csv", "summary.json"}) {
    EXPECT_TRUE(fs::exists(a + "/tediserve/" + f)) << f;
  }
  const auto summary = nlohmann::json::parse(ReadFile(a + "/tediserve/summary.json"));
  const int n = summary["overall"]["requests"].get<int>();
  EXPECT_GT(n, 500);  // 10 RPS for 60 s
  EXPECT_GT(summary["overall"]["slo_attainment"].get<double>(), 0.5);
  EXPECT_EQ(Lines(ReadFile(a + "/tediserve/requests.csv")).size(), static_cast<size_t>(n) + 1);

  ExpectSuccess(RunCli({"simulate", Write("b.yaml", SmallConfig(b)), "--no-plots", "--quiet"}));
  for (const char* f : {"requests.csv", "timeline.csv", "summary.json"}) {
    EXPECT_EQ(ReadFile(a + "/tediserve/" + f), ReadFile(b + "/tediserve/" + f)) << f << " differs for the same seed";
  }
  ExpectSuccess(RunCli({"simulate", Write("c.yaml", SmallConfig(c, "", 8)), "--no-plots", "--quiet"}));
  EXPECT_NE(ReadFile(a + "/tediserve/requests.csv"), ReadFile(c + "/tediserve/requests.csv"));
}

TEST_F(SimulateTest, PoliciesAndSweepMakeATable) {
  const std::string o = Out("sweep");
  const auto r = RunCli({"simulate",
                         Write("s.yaml", SmallConfig(o, "policies: [tediserve, infaas]\n"
                                                        "sweep: {key: workload.arrivals.rate, values: [10, 20]}\n")),
                         "--no-plots", "--quiet"});
  ExpectSuccess(r);
  const auto rows = Lines(ReadFile(o + "/sweep.csv"));
  ASSERT_EQ(rows.size(), 5u) << ReadFile(o + "/sweep.csv");
  EXPECT_THAT(rows[0], HasSubstr("policy,x,attainment"));
  EXPECT_THAT(r.out, HasSubstr("goodput"));
  EXPECT_TRUE(fs::exists(o + "/infaas_20/summary.json"));
  // The table's row is the run's own summary.
  const auto s = nlohmann::json::parse(ReadFile(o + "/infaas_20/summary.json"));
  bool found = false;
  for (const std::string& row : rows) {
    if (row.rfind("infaas,20,", 0) != 0) continue;
    found = true;
    EXPECT_NEAR(std::stod(row.substr(10)), s["overall"]["slo_attainment"].get<double>(), 1e-5) << row;
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(r.out, HasSubstr("| infaas | 20 | " + std::to_string(s["overall"]["requests"].get<int>()) + " |"));
}

TEST_F(SimulateTest, FrontierTableJudgesLabelledPolicyVariants) {
  const std::string o = Out("frontier");
  const auto r = RunCli({"simulate",
                         Write("f.yaml", SmallConfig(o, "policies: [tediserve, {label: fixed-0.9, name: fixed, "
                                                        "fixed_threshold: 0.9}, {label: fixed-0.5, name: fixed, "
                                                        "fixed_threshold: 0.5}]\n"
                                                        "sweep: {key: workload.arrivals.rate, values: [10, 60]}\n"
                                                        "frontier: {target: tediserve}\n")),
                         "--no-plots", "--quiet"});
  ExpectSuccess(r);
  // Labels name the runs' folders and table rows; the overrides reached the policy.
  for (const char* run : {"tediserve_10", "fixed-0.9_60", "fixed-0.5_10"}) {
    EXPECT_TRUE(fs::exists(o + "/" + run + "/summary.json")) << run;
  }
  const auto s9 = nlohmann::json::parse(ReadFile(o + "/fixed-0.9_10/summary.json"));
  const auto s5 = nlohmann::json::parse(ReadFile(o + "/fixed-0.5_10/summary.json"));
  EXPECT_NEAR(s9["overall"]["mean_threshold"].get<double>(), 0.9, 1e-9);
  EXPECT_NEAR(s5["overall"]["mean_threshold"].get<double>(), 0.5, 1e-9);
  EXPECT_GT(s9["overall"]["quality"].get<double>(), s5["overall"]["quality"].get<double>());
  EXPECT_THAT(r.out, HasSubstr("| fixed-0.5 | 60 |"));
  EXPECT_THAT(r.out, HasSubstr("Frontier per workload.arrivals.rate"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("frontier check: tediserve within 1.0 pts of attainment and 0.0020 of "
                                              "quality at [0-2] of 2 points"));
  // frontier.csv: one row per run; at each rate the highest-quality run (0.9) is never dominated.
  const auto rows = Lines(ReadFile(o + "/frontier.csv"));
  ASSERT_EQ(rows.size(), 7u) << ReadFile(o + "/frontier.csv");
  EXPECT_THAT(rows[0], HasSubstr("x,policy,attainment,quality,dominated"));
  int checked = 0;
  for (const std::string& row : rows) {
    if (row.rfind("10,fixed-0.9,", 0) == 0 || row.rfind("60,fixed-0.9,", 0) == 0) {
      EXPECT_THAT(row, ::testing::MatchesRegex("[0-9]+,fixed-0.9,[0-9.]+,[0-9.]+,0,.*")) << row;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
}

// seeds: N runs each policy and point once per seed (folders NAME_seedS) and reports them
// pooled: the table's requests are the seeds' together, and each seed's own run is the run
// that seed alone gives.
TEST_F(SimulateTest, SeedsPoolTheRunsOfSeveralSeeds) {
  const std::string o = Out("seeds"), one = Out("one");
  const auto r = RunCli({"simulate",
                         Write("m.yaml", SmallConfig(o, "seeds: 2\npolicies: [tediserve, infaas]\n"
                                                        "sweep: {key: workload.arrivals.rate, values: [10, 20]}\n"
                                                        "frontier: {target: tediserve}\n")),
                         "--no-plots", "--quiet"});
  ExpectSuccess(r);
  int pooled_requests = 0;
  double pooled_met = 0;
  for (int seed : {7, 8}) {
    const std::string run = o + "/infaas_20_seed" + std::to_string(seed);
    ASSERT_TRUE(fs::exists(run + "/summary.json")) << run;
    const auto s = nlohmann::json::parse(ReadFile(run + "/summary.json"));
    pooled_requests += s["overall"]["requests"].get<int>();
    pooled_met += s["overall"]["slo_attainment"].get<double>() * s["overall"]["requests"].get<int>();
  }
  EXPECT_FALSE(fs::exists(o + "/infaas_20"));
  // The second seed's run is the same as a plain run with that seed.
  ExpectSuccess(RunCli({"simulate",
                        Write("s8.yaml", SmallConfig(one, "policies: [infaas]\nsweep: {key: workload.arrivals.rate, "
                                                          "values: [20]}\n", 8)),
                        "--no-plots", "--quiet"}));
  EXPECT_EQ(ReadFile(one + "/infaas_20/requests.csv"), ReadFile(o + "/infaas_20_seed8/requests.csv"));
  // The table and sweep.csv pool both seeds' requests.
  EXPECT_THAT(r.out, HasSubstr("| infaas | 20 | " + std::to_string(pooled_requests) + " |"));
  const auto rows = Lines(ReadFile(o + "/sweep.csv"));
  ASSERT_EQ(rows.size(), 5u);
  bool found = false;
  for (const std::string& row : rows) {
    if (row.rfind("infaas,20,", 0) != 0) continue;
    found = true;
    EXPECT_NEAR(std::stod(row.substr(10)), pooled_met / pooled_requests, 1e-5) << row;
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(r.out, HasSubstr("frontier check: tediserve"));
  // Out of range: 0 and 101 seeds.
  for (const char* bad : {"seeds: 0\n", "seeds: 101\n"}) {
    ExpectBadInput(RunCli({"simulate", Write("bad_seeds.yaml", SmallConfig(Out("bad_seeds"), bad)), "--no-plots",
                           "--quiet"}),
                   "seeds");
  }
}

TEST_F(SimulateTest, FaultsAndStepTimeErrorEndEveryRequestWithARecord) {
  const std::string o = Out("faults");
  const auto r = RunCli(
      {"simulate",
       Write("f.yaml", SmallConfig(o, "truth: {step_time_sigma: 0.2}\n"
                                      "sweep:\n  key: faults\n  values:\n    - {}\n"
                                      "    - {random_failures: 1, random_drains: 1, recover_after_s: 10, readd_after_s: 10,"
                                      " cancel_fraction: 0.1, from_s: 10, to_s: 40,"
                                      " events: [{time_s: 20, instance: 3, kind: fail, back_after_s: 5}]}\n")),
       "--no-plots", "--quiet"});
  ExpectSuccess(r);
  EXPECT_THAT(r.out, HasSubstr("| unaccounted |"));
  const auto clean = nlohmann::json::parse(ReadFile(o + "/tediserve_case0/summary.json"));
  const auto hit = nlohmann::json::parse(ReadFile(o + "/tediserve_case1/summary.json"));
  EXPECT_EQ(clean["faults"]["instance_failures"].get<int>(), 0);
  EXPECT_GE(hit["faults"]["instance_failures"].get<int>(), 2);
  EXPECT_EQ(hit["faults"]["drains"].get<int>(), 1);
  const auto& ov = hit["overall"];
  EXPECT_GT(ov["cancelled"].get<int>(), 0);
  EXPECT_EQ(ov["completed"].get<int>() + ov["cancelled"].get<int>() + ov["failed"].get<int>(), ov["requests"].get<int>());
  // Every request has a row with how it ended.
  const auto rows = Lines(ReadFile(o + "/tediserve_case1/requests.csv"));
  EXPECT_EQ(rows.size(), static_cast<size_t>(ov["requests"].get<int>()) + 1);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_THAT(rows[i], ::testing::MatchesRegex(".*,(completed|cancelled|failed|aborted|rejected)")) << rows[i];
  }
}

TEST_F(SimulateTest, TraceFileInAndOut) {
  const std::string trace = Write("t.csv",
                                  "arrival_s,prompt_len,output_len,slo_s,priority\n"
                                  "0.0,100,64,30,0\n0.5,200,128,,1\n1.0,50,32,0,0\n");
  const std::string o = Out("trace");
  std::string cfg = SmallConfig(o, "", 7, "{type: trace, file: " + trace + "}");
  cfg.erase(cfg.find("  lengths:"), cfg.find("slo:") - cfg.find("  lengths:"));
  const auto r = RunCli({"simulate", Write("t.yaml", cfg), "--no-plots", "--quiet"});
  ExpectSuccess(r);
  const auto rows = Lines(ReadFile(o + "/tediserve/requests.csv"));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_THAT(rows[1], HasSubstr(",30.000000,"));  // the trace's own SLO is kept
}

TEST_F(SimulateTest, PlotsArePngs) {
  if (std::system("gnuplot --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const std::string o = Out("plots");
  ExpectSuccess(RunCli({"simulate",
                        Write("p.yaml", SmallConfig(o, "sweep: {key: workload.arrivals.rate, values: [10, 20]}\n")),
                        "--quiet"}));
  for (const std::string& f : {o + "/tediserve_10/timeline.png", o + "/sweep_attainment.png"}) {
    const std::string png = ReadFile(f);
    ASSERT_GE(png.size(), 8u) << f;
    EXPECT_EQ(png.substr(1, 3), "PNG") << f;
  }
}

// The multi-block model in the loop: 4 blocks of 16 per request, so every request has
// recompute steps after the first and block boundaries where it can move.
TEST_F(SimulateTest, EngineInTheLoopMultiBlockModel) {
  const std::string o = Out("engine_long");
  const std::string m = Repo("models/tiny-llada-long");
  const auto cfg = nlohmann::json::parse(ReadFile(m + "/config.json"))["tediserve"];
  ASSERT_GE(cfg["gen_length"].get<int>() / cfg["block_size"].get<int>(), 4);
  std::ostringstream c;
  c << "name: engine_long\nseed: 3\n"
    << "cluster: {nodes: 1, gpus_per_node: 2, token_budget: 2048}\n"
    << "model:\n  profile: {csv: " << Repo("data/profiles/tiny-llada-long-cpu.csv") << "}\n"
    << "  denoiser: {type: engine, model: " << m << ", calibration: " << Repo("data/calibrations/tiny-llada-long.json")
    << "}\n  block_size: " << cfg["block_size"].get<int>() << "\n  cache: true\n"
    << "policy: {name: tediserve, estimator: predictor, predictor: " << m << "/step_predictor.json}\n"
    << "workload:\n  arrivals: {type: poisson, rate: 50, num_requests: 40}\n"
    << "  lengths: {type: fixed, prompt_len: 12, output_len: " << cfg["gen_length"].get<int>() << "}\n"
    << "slo: {scale: 5}\noutput: {dir: " << o << "}\n";
  ExpectSuccess(RunCli({"simulate", Write("el.yaml", c.str()), "--no-plots", "--quiet"}));
  const auto summary = nlohmann::json::parse(ReadFile(o + "/tediserve/summary.json"));
  EXPECT_EQ(summary["overall"]["requests"].get<int>(), 40);
  EXPECT_GT(summary["overall"]["quality"].get<double>(), 0.5);
  // Several steps per block: the policy has block boundaries and steps to act on.
  EXPECT_GT(summary["scheduler"]["predictions"].get<int>(), 4 * 40);
  EXPECT_EQ(summary["scheduler"]["predictor_fallbacks"].get<int>(), 0);
}

TEST_F(SimulateTest, EngineInTheLoop) {
  const std::string o = Out("engine");
  std::ostringstream c;
  c << "name: engine\nseed: 3\n"
    << "cluster: {nodes: 1, gpus_per_node: 2, token_budget: 2048}\n"
    << "model:\n  profile: {csv: " << Repo("data/profiles/tiny-llada-cpu.csv") << "}\n"
    << "  denoiser: {type: engine, model: " << Repo("models/tiny-llada")
    << ", calibration: " << Repo("data/calibrations/tiny-llada.json") << "}\n"
    << "  block_size: " << nlohmann::json::parse(ReadFile(Repo("models/tiny-llada/config.json")))["tediserve"]["block_size"]
    << "\n  cache: true\n"
    << "policy: {name: tediserve}\n"
    << "workload:\n  arrivals: {type: poisson, rate: 200, num_requests: 60}\n"
    << "  lengths: {type: fixed, prompt_len: 10, output_len: 8}\n"
    << "slo: {scale: 5}\noutput: {dir: " << o << "}\n";
  const auto r = RunCli({"simulate", Write("e.yaml", c.str()), "--no-plots", "--quiet"});
  ExpectSuccess(r);
  const auto summary = nlohmann::json::parse(ReadFile(o + "/tediserve/summary.json"));
  EXPECT_EQ(summary["overall"]["requests"].get<int>(), 60);
  // Quality is the engine's own exact match here: well above chance, at most 1.
  EXPECT_GT(summary["overall"]["quality"].get<double>(), 0.5);
  EXPECT_LE(summary["overall"]["quality"].get<double>(), 1.0);

  // The same with the tiny model's shipped step predictor on the engine's real features.
  std::string cfg = c.str();
  const std::string plain = "policy: {name: tediserve}";
  cfg.replace(cfg.find(plain), plain.size(),
              "policy: {name: tediserve, estimator: predictor, predictor: " + Repo("models/tiny-llada/step_predictor.json") + "}");
  ExpectSuccess(RunCli({"simulate", Write("ep.yaml", cfg), "--no-plots", "--quiet"}));
  const auto ps = nlohmann::json::parse(ReadFile(o + "/tediserve/summary.json"));
  EXPECT_EQ(ps["estimator"], "predictor");
  EXPECT_EQ(ps["overall"]["requests"].get<int>(), 60);
  EXPECT_GT(ps["scheduler"]["predictions"].get<int>(), 60);
  EXPECT_EQ(ps["scheduler"]["predictor_fallbacks"].get<int>(), 0);
}

// --- bad input -----------------------------------------------------------------------------

struct BadCase {
  const char* name;
  std::string from, to;  // replace `from` in the small config with `to`
  const char* message;
};

class SimulateBadConfig : public SimulateTest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(SimulateBadConfig, ExitsTwoNamingTheField) {
  std::string cfg = SmallConfig(Out("bad"));
  const BadCase& b = GetParam();
  const size_t at = cfg.find(b.from);
  ASSERT_NE(at, std::string::npos) << b.from;
  cfg.replace(at, b.from.size(), b.to);
  ExpectBadInput(RunCli({"simulate", Write("bad.yaml", cfg), "--no-plots", "--quiet"}), b.message);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SimulateBadConfig,
    ::testing::Values(
        BadCase{"NegativeRate", "rate: 10", "rate: -3", "workload.arrivals.rate"},
        BadCase{"UnknownPolicy", "name: tediserve", "name: fastest", "unknown policy \"fastest\""},
        BadCase{"EmptyCluster", "gpus_per_node: 4,", "gpus_per_node: 4, tp: [],", "cluster.tp"},
        BadCase{"ZeroGpus", "gpus_per_node: 4", "gpus_per_node: 0", "cluster.gpus_per_node"},
        BadCase{"MissingCluster", "cluster: {nodes: 1, gpus_per_node: 4, token_budget: 8192}\n", "",
                "cluster: missing"},
        BadCase{"MissingSlo", "slo: {scale: 5}\n", "", "slo: missing"},
        BadCase{"UnknownKey", "timeline_interval_s: 5", "timeline_intervals: 5", "the config: unknown key \"timeline_intervals\""},
        BadCase{"BadThreshold", "policy: {name: tediserve}", "policy: {name: tediserve, thresholds: [0.9, 1.5]}",
                "policy.thresholds"},
        BadCase{"TpNotInProfile", "gpus_per_node: 4,", "gpus_per_node: 4, tp: [3],", "TP degree 3"},
        BadCase{"MissingProfile", "h100_step_latency_ms.csv", "no_such_profile.csv", "no_such_profile.csv"},
        BadCase{"UnknownDenoiser", "type: statistical", "type: magic", "model.denoiser.type"},
        BadCase{"NotAMultipleOfBlock", "output_len: 256", "output_len: 250", "multiple of the block size"},
        BadCase{"YamlSyntax", "slo: {scale: 5}", "slo: {scale: 5", "bad.yaml"},
        BadCase{"UnknownFaultField", "slo: {scale: 5}", "slo: {scale: 5}\nfaults: {explode: 1}", "faults: unknown key \"explode\""},
        BadCase{"TooManyFailures", "slo: {scale: 5}", "slo: {scale: 5}\nfaults: {random_failures: 5}", "cluster has 4"},
        BadCase{"BadCancelFraction", "slo: {scale: 5}", "slo: {scale: 5}\nfaults: {cancel_fraction: 1.5}", "[0, 1]"},
        BadCase{"FaultOnUnknownInstance", "slo: {scale: 5}",
                "slo: {scale: 5}\nfaults: {events: [{time_s: 3, instance: 9}]}", "faults.events[0].instance"},
        BadCase{"BadFaultKind", "slo: {scale: 5}",
                "slo: {scale: 5}\nfaults: {events: [{time_s: 3, instance: 1, kind: melt}]}", "faults.events[0].kind"},
        BadCase{"NegativeSigma", "slo: {scale: 5}", "slo: {scale: 5}\ntruth: {step_time_sigma: -0.1}",
                "truth.step_time_sigma"},
        BadCase{"TinyTick", "timeline_interval_s: 5", "timeline_interval_s: 5\ntick_s: 1e-9", "tick_s: must be >= 0.001"},
        BadCase{"TinyTimeline", "timeline_interval_s: 5", "timeline_interval_s: 1e-9", "timeline_interval_s: must be >="},
        BadCase{"ThresholdsAMap", "policy: {name: tediserve}", "policy: {name: tediserve, thresholds: {a: 1}}",
                "policy.thresholds: expected a list of numbers"},
        BadCase{"ThresholdNotANumber", "policy: {name: tediserve}", "policy: {name: tediserve, thresholds: [0.9, [1]]}",
                "policy.thresholds[1]"},
        BadCase{"NameNotUtf8", "name: small", "name: x\xff", "name: not valid UTF-8"},
        BadCase{"HugeTokenBudget", "token_budget: 8192", "token_budget: 99999999999", "cluster.token_budget: must be <="},
        BadCase{"TooManyInstances", "nodes: 1", "nodes: 100000", "instances, more than"},
        BadCase{"SweepKeyEmptyPart", "slo: {scale: 5}", "slo: {scale: 5}\nsweep: {key: a..b, values: [1]}", "sweep.key"},
        BadCase{"PolicyEntryWithoutName", "slo: {scale: 5}", "slo: {scale: 5}\npolicies: [{label: x}]",
                "policies[0].name: missing"},
        BadCase{"PolicyEntryUnknownKey", "slo: {scale: 5}",
                "slo: {scale: 5}\npolicies: [{name: fixed, threshold: 0.7}]", "policies[0]: unknown key \"threshold\""},
        BadCase{"PolicyLabelTwice", "slo: {scale: 5}",
                "slo: {scale: 5}\npolicies: [{name: fixed, label: a}, {name: infaas, label: a}]", "used twice"},
        BadCase{"FrontierTargetNotARun", "slo: {scale: 5}", "slo: {scale: 5}\nfrontier: {target: proteus}",
                "frontier.target"},
        BadCase{"FrontierBadGap", "slo: {scale: 5}", "slo: {scale: 5}\nfrontier: {max_quality_gap: 2}",
                "frontier.max_quality_gap"},
        BadCase{"MissingTruthProfile", "slo: {scale: 5}", "slo: {scale: 5}\ntruth: {profile: {csv: no_truth.csv}}",
                "no_truth.csv"},
        BadCase{"NegativeChangeZ", "policy: {name: tediserve}", "policy: {name: tediserve, proteus_change_z: -1}",
                "policy.proteus_change_z"},
        BadCase{"ZeroRateWindow", "policy: {name: tediserve}", "policy: {name: tediserve, proteus_window: 0}",
                "policy.proteus_window"},
        BadCase{"NegativeLatencyZ", "policy: {name: tediserve}", "policy: {name: tediserve, plan_latency_z: -1}",
                "policy.plan_latency_z"},
        BadCase{"MissTargetOverOne", "policy: {name: tediserve}",
                "policy: {name: tediserve, plan_latency_miss_target: 1.5}", "policy.plan_latency_miss_target"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(SimulateTest, MalformedTraceNamesTheLine) {
  const std::string trace = Write("t.csv", "arrival_s,prompt_len,output_len\n0.0,100,64\n0.5,abc,64\n");
  std::string cfg = SmallConfig(Out("bt"), "", 7, "{type: trace, file: " + trace + "}");
  cfg.erase(cfg.find("  lengths:"), cfg.find("slo:") - cfg.find("  lengths:"));
  ExpectBadInput(RunCli({"simulate", Write("bt.yaml", cfg), "--no-plots", "--quiet"}), "t.csv:3");
}

TEST_F(SimulateTest, MissingConfigFile) {
  ExpectBadInput(RunCli({"simulate", Out("nope.yaml")}), "nope.yaml");
}

// The step predictor's recipe (docs/experiments.md, E4) on the tiny model: step logs from the
// engine under every threshold -> a trained model with a held-out report -> the simulator
// running on it.
TEST_F(SimulateTest, CollectStepsTrainPredictorAndSimulateWithIt) {
  const std::string log = Out("steps.jsonl"), model = Out("pred.json"), report = Out("report.json");
  const auto c = RunCli({"collect-steps", "--model", RealModelDir().string(), "--requests", "80", "--out", log});
  ExpectSuccess(c);
  EXPECT_THAT(c.out, HasSubstr("80 requests x 5 thresholds"));
  const auto t = RunCli({"train-predictor", "--log", log, "--out", model, "--json", report});
  ExpectSuccess(t);
  EXPECT_THAT(t.out, HasSubstr("MAPE of remaining steps"));
  EXPECT_THAT(t.out, HasSubstr("refresh granularity"));
  const auto j = nlohmann::json::parse(ReadFile(report));
  EXPECT_GT(j["heldout_rows"].get<int>(), 0);
  EXPECT_LE(j["mape_full"].get<double>(), j["mape_oneshot"].get<double>());

  // The simulator on the shipped LLaDA predictor; its summary says which estimator ran.
  const std::string o = Out("p");
  const std::string cfg = SmallConfig(o);
  const std::string with = std::regex_replace(
      cfg, std::regex("policy: \\{name: tediserve\\}"),
      "policy: {name: tediserve, estimator: predictor, predictor: " + Repo("data/calibrations/llada-8b-gsm8k.predictor.json") + "}");
  ASSERT_NE(with, cfg);
  ExpectSuccess(RunCli({"simulate", Write("q.yaml", with), "--no-plots", "--quiet"}));
  const auto s = nlohmann::json::parse(ReadFile(o + "/tediserve/summary.json"));
  EXPECT_EQ(s["estimator"], "predictor");
  EXPECT_GT(s["overall"]["slo_attainment"].get<double>(), 0.5);

  // Refreshes on the predictor's own thread: results arrive 1 ms later in virtual time and
  // runs stay byte-identical.
  const std::string async_cfg = std::regex_replace(with, std::regex("estimator: predictor,"),
                                                   "estimator: predictor, predictor_async: true,");
  ASSERT_NE(async_cfg, with);
  const std::string a1 = Out("a1"), a2 = Out("a2");
  auto at = [&](const std::string& dir) { return std::regex_replace(async_cfg, std::regex("dir: " + o), "dir: " + dir); };
  ExpectSuccess(RunCli({"simulate", Write("a1.yaml", at(a1)), "--no-plots", "--quiet"}));
  ExpectSuccess(RunCli({"simulate", Write("a2.yaml", at(a2)), "--no-plots", "--quiet"}));
  const std::string r1 = ReadFile(a1 + "/tediserve/requests.csv");
  EXPECT_FALSE(r1.empty());
  EXPECT_EQ(r1, ReadFile(a2 + "/tediserve/requests.csv"));
  const auto as = nlohmann::json::parse(ReadFile(a1 + "/tediserve/summary.json"));
  EXPECT_GT(as["scheduler"]["predictions"].get<int>(), as["overall"]["requests"].get<int>());
  EXPECT_GT(as["overall"]["slo_attainment"].get<double>(), 0.5);
}

TEST_F(SimulateTest, PredictorBadInput) {
  ExpectBadInput(RunCli({"train-predictor", "--log", Out("none.jsonl"), "--out", Out("m.json")}), "no such file");
  const std::string junk = Write("junk.jsonl", "{\"request\": 0}\n");
  ExpectBadInput(RunCli({"train-predictor", "--log", junk, "--out", Out("m.json")}), "junk.jsonl:1");
  ExpectBadInput(RunCli({"collect-steps", "--out", Out("x.jsonl")}), "--config or --model");
  ExpectBadInput(RunCli({"collect-steps", "--config", Out("none.yaml"), "--out", Out("x.jsonl")}), "none.yaml");

  auto with = [&](const std::string& policy) {
    return std::regex_replace(SmallConfig(Out("r")), std::regex("policy: \\{name: tediserve\\}"), "policy: " + policy);
  };
  ExpectBadInput(RunCli({"simulate", Write("a.yaml", with("{name: tediserve, estimator: predictor}")), "--quiet"}),
                 "policy.predictor");
  ExpectBadInput(RunCli({"simulate", Write("b.yaml", with("{name: tediserve, estimator: predictor, predictor: " + junk + "}")),
                         "--quiet"}),
                 "step predictor model");
  // A model whose recorded feature set does not match its trees: named, never used.
  std::string m = ReadFile(Repo("models/tiny-llada/step_predictor.json"));
  const std::string full = "\"tediserve_feature_set\":\"full\"";
  ASSERT_NE(m.find(full), std::string::npos);
  m.replace(m.find(full), full.size(), "\"tediserve_feature_set\":\"progress\"");
  const std::string wrong = Write("wrong.json", m);
  ExpectBadInput(RunCli({"simulate", Write("c.yaml", with("{name: tediserve, estimator: predictor, predictor: " + wrong + "}")),
                         "--quiet"}),
                 "has 26 features");
}

}  // namespace

// --- fit-denoiser ----------------------------------------------------------------------------

// The recipe of data/calibrations/README.md on a slice of the tiny model's held-out set:
// eval step logs -> fitted calibration that reproduces its targets.
TEST_F(SimulateTest, FitDenoiserFromEvalLogs) {
  const std::string logs = Out("steps.jsonl"), ev = Out("eval.json"), cal = Out("cal.json");
  ExpectSuccess(RunCli({"eval", "--cache", "on", "--thresholds", "0.9,0.5", "--limit", "48", "--step-log", logs,
                        "--json", ev}));
  const auto r = RunCli({"fit-denoiser", "logs", "--name", "tiny-slice", "--logs", logs, "--eval-json", ev,
                         "--note", "test", "--out", cal});
  ExpectSuccess(r);
  EXPECT_THAT(r.out, ::testing::HasSubstr("wrote " + cal));
  const auto c = nlohmann::json::parse(ReadFile(cal));
  EXPECT_EQ(c["name"], "tiny-slice");
  EXPECT_EQ(c["block_size"].get<int>(),
            nlohmann::json::parse(ReadFile(Repo("models/tiny-llada/config.json")))["tediserve"]["block_size"].get<int>());
  ASSERT_EQ(c["thresholds"].size(), 2u);
  // Tokens per step grow as the threshold falls, and the fit reproduces the targets.
  EXPECT_LE(c["tokens_per_step"][0].get<double>(), c["tokens_per_step"][1].get<double>());
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(c["fit"]["tokens_per_step"][i].get<double>(), c["tokens_per_step"][i].get<double>(),
                0.05 * c["tokens_per_step"][i].get<double>());
  EXPECT_THAT(c["source"].get<std::string>(), ::testing::HasSubstr("test"));
}

TEST_F(SimulateTest, FitDenoiserTargetsAndBench) {
  const std::string cal = Out("t.json");
  ExpectSuccess(RunCli({"fit-denoiser", "targets", "--name", "t", "--block-size", "8", "--thresholds", "0.9,0.5",
                        "--tokens-per-step", "2,4", "--accuracy", "0.9,0.8", "--cv-output-len", "32", "--out", cal}));
  const auto c = nlohmann::json::parse(ReadFile(cal));
  EXPECT_NEAR(c["fit"]["tokens_per_step"][1].get<double>(), 4.0, 0.2);
  const auto b = RunCli({"fit-denoiser", "bench", "--calibration", cal, "--requests", "500", "--output-len", "32"});
  ExpectSuccess(b);
  EXPECT_THAT(b.out, ::testing::HasSubstr("M steps/s"));
}

TEST_F(SimulateTest, FitDenoiserBadInput) {
  ExpectBadInput(RunCli({"fit-denoiser", "targets", "--name", "t", "--block-size", "8", "--thresholds", "0.9,0.5",
                         "--tokens-per-step", "2", "--accuracy", "0.9,0.8", "--out", Out("x.json")}),
                 "tokens_per_step");
  ExpectBadInput(RunCli({"fit-denoiser", "logs", "--name", "x", "--logs", Out("none.jsonl"), "--out", Out("y.json")}),
                 "none.jsonl");
  const std::string junk = Write("junk.jsonl", "{\"not\": \"a step\"}\nnot json\n");
  ExpectBadInput(RunCli({"fit-denoiser", "logs", "--name", "x", "--logs", junk, "--out", Out("z.json")}),
                 "junk.jsonl");
  ExpectBadInput(RunCli({"fit-denoiser", "bench", "--calibration", Out("missing.json")}), "missing.json");
  ExpectBadInput(RunCli({"fit-denoiser"}), "");
}

}  // namespace tediserve
