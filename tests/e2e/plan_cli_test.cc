// `tediserve plan` end to end (issue 15, docs/design.md section 10): the real binary on the
// example inputs in experiments/plan/, the paper's 8-GPU example through files, a trace, and
// bad or degenerate inputs (a clear message and exit 2, or a stated result; never a hang).
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"
#include "e2e/cli_runner.h"

namespace tediserve {
namespace {

using namespace e2e;  // NOLINT: the runner helpers
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kPlanDir = std::string(TEDI_SOURCE_DIR) + "/experiments/plan/";
const std::string kCluster16 = kPlanDir + "cluster_16gpu.yaml";

std::vector<std::string> Plan(const std::string& cluster, const std::string& workload, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"plan", "--cluster", cluster, "--workload", workload};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Instances per degree from the JSON plan.
std::map<int, int> Instances(const nlohmann::json& j) {
  std::map<int, int> out;
  for (const auto& [d, n] : j.at("stage1").at("instances").items()) out[std::stoi(d)] = n.get<int>();
  return out;
}

TEST(PlanCli, ExampleLowLoadMovesOffAllTp1AndThePlanStepsAddUp) {
  TempDir tmp("tedi_plan_cli");
  const std::string json = tmp.File("plan.json");
  RunResult r = RunCli(Plan(kCluster16, kPlanDir + "classes_low.yaml", {"--json", json}));
  ExpectSuccess(r);
  EXPECT_THAT(r.out, HasSubstr("stage 1: planned"));
  EXPECT_THAT(r.out, HasSubstr("current layout: 16 x TP1"));
  EXPECT_THAT(r.out, HasSubstr("stage 1 time:"));
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["stage1"]["outcome"], "planned");
  EXPECT_NEAR(j["stage1"]["mean_threshold"].get<double>(), 0.9, 1e-6);  // light load: no quality given up
  for (const auto& s : j["stage1"]["solves"]) EXPECT_EQ(s["status"], "optimal") << s.dump();
  const std::map<int, int> inst = Instances(j);
  int gpus = 0, high_tp = 0;
  for (const auto& [d, n] : inst) {
    gpus += d * n;
    if (d > 1) high_tp += n;
  }
  EXPECT_LE(gpus, 16);
  EXPECT_GT(high_tp, 0) << "at light load some instance should be TP > 1: " << j["stage1"].dump();
  // Replay the steps from 16 x TP1: every launch lands on GPUs no running instance holds, and
  // the result is the chosen layout.
  std::map<std::pair<int, int>, int> busy;  // (node, gpu) -> instance count
  std::map<int, int> running = {{1, 16}};
  for (int n = 0; n < 4; ++n)
    for (int g = 0; g < 4; ++g) busy[{n, g}] = 1;
  for (const auto& st : j["stage2"]["steps"]) {
    const int tp = st["tp"], node = st["node"];
    ASSERT_EQ(st["gpus"].size(), static_cast<size_t>(tp)) << st.dump();
    if (st["action"] == "terminate") {
      --running[tp];
      for (int g : st["gpus"]) EXPECT_EQ(--busy[std::make_pair(node, g)], 0) << st.dump();
    } else {
      ASSERT_EQ(st["action"], "launch");
      ++running[tp];
      for (int g : st["gpus"]) EXPECT_EQ(++busy[std::make_pair(node, g)], 1) << "launch onto a busy GPU: " << st.dump();
    }
  }
  std::erase_if(running, [](const auto& kv) { return kv.second == 0; });
  EXPECT_EQ(running, inst);
}

TEST(PlanCli, ExampleHighLoadAndTheEightGpuExampleRun) {
  ExpectSuccess(RunCli(Plan(kCluster16, kPlanDir + "classes_high.yaml")));
  RunResult r = RunCli(Plan(kPlanDir + "cluster_8gpu_tp4.yaml", kPlanDir + "classes_low.yaml"));
  ExpectSuccess(r);
  EXPECT_THAT(r.out, HasSubstr("current layout: 2 x TP4"));
}

// The paper's section 2.2.2 through files: a linear profile (a request takes 3.6 s on TP-1, 2 s
// on TP-4: one 64-token recompute step and three 32-token cache steps at 8 tokens a step).
class PaperExampleFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(tmp_.File("profile.csv"),
              "num_batched_tokens,tp1_ms,tp4_ms\n1,22.5,12.5\n16384,368640,204800\n");
    nlohmann::json cal = nlohmann::json::parse(ReadFile(std::string(TEDI_SOURCE_DIR) + "/data/calibrations/llada-8b-gsm8k.json"));
    cal["thresholds"] = {0.9};
    cal["tokens_per_step"] = {8.0};
    cal["accuracy"] = {0.785};
    cal.erase("fit");
    WriteFile(tmp_.File("cal.json"), cal.dump());
    WriteFile(tmp_.File("cluster.yaml"),
              "nodes: 2\ngpus_per_node: 4\ntp_degrees: [1, 4]\nrecompute_bins: [64, 128]\ncache_bins: [32, 64]\n");
  }
  RunResult RunAt(double rps) {
    WriteFile(tmp_.File("classes.yaml"),
              "classes:\n  - {prompt_len: 32, output_len: 32, rps: " + std::to_string(rps) + ", slo_s: 10}\n");
    return RunCli(Plan(tmp_.File("cluster.yaml"), tmp_.File("classes.yaml"),
                       {"--profile", tmp_.File("profile.csv"), "--calibration", tmp_.File("cal.json")}));
  }
  TempDir tmp_{"tedi_plan_paper"};
};

TEST_F(PaperExampleFiles, LowLoadPicksTwoTp4HighLoadDoesNot) {
  RunResult lo = RunAt(0.3);
  ExpectSuccess(lo);
  EXPECT_THAT(lo.out, HasSubstr("chosen layout:  2 x TP4  (2 instances, 8 GPUs)"));
  EXPECT_THAT(lo.out, HasSubstr("mean planned latency 2.000 s"));
  RunResult hi = RunAt(1.5);  // 2 x TP-4 sustain only 1.0 req/s
  ExpectSuccess(hi);
  EXPECT_THAT(hi.out, Not(HasSubstr("chosen layout:  2 x TP4 ")));
  EXPECT_THAT(hi.out, HasSubstr("chosen layout:  1 x TP4 + 4 x TP1"));
}

TEST(PlanCli, TraceInputBuildsClassesFromArrivals) {
  TempDir tmp("tedi_plan_trace");
  std::string csv = "arrival_s,prompt_len,output_len,slo_s,priority\n";
  // 200 requests over 100 s: two classes after rounding to 256 (prompt 100 -> 256, outputs
  // 64 -> 256 and 300 -> 512).
  for (int i = 0; i < 200; ++i)
    csv += std::to_string(i * 0.5) + ",100," + (i % 2 ? "64" : "300") + ",,0\n";
  WriteFile(tmp.File("trace.csv"), csv);
  RunResult r = RunCli({"plan", "--cluster", kCluster16, "--trace", tmp.File("trace.csv"), "--slo-s", "30"});
  ExpectSuccess(r);
  EXPECT_THAT(r.out, HasSubstr("classes: 2"));
  EXPECT_THAT(r.out, HasSubstr("prompt   256 output   256"));
  EXPECT_THAT(r.out, HasSubstr("prompt   256 output   512"));
  EXPECT_THAT(r.out, HasSubstr("stage 1: planned"));
  // Planning before the first arrival: an empty workload keeps the layout.
  RunResult early = RunCli({"plan", "--cluster", kCluster16, "--trace", tmp.File("trace.csv"), "--slo-s", "30", "--at-s", "-1"});
  ExpectSuccess(early);
  EXPECT_THAT(early.out, HasSubstr("empty workload"));
  EXPECT_THAT(early.out, HasSubstr("chosen layout:  16 x TP1  (kept"));
  // A trace without SLOs needs --slo-s.
  ExpectBadInput(RunCli({"plan", "--cluster", kCluster16, "--trace", tmp.File("trace.csv")}), "has no SLO; give --slo-s");
  ExpectBadInput(RunCli({"plan", "--cluster", kCluster16, "--trace", tmp.File("trace.csv"), "--slo-s", "30", "--at-s", "nan"}),
                 "--at-s must be a finite time");
  ExpectBadInput(RunCli({"plan", "--cluster", kCluster16, "--trace", tmp.File("trace.csv"), "--slo-s", "30", "--output-round", "100"}),
                 "not a multiple of the block size 32");
  ExpectBadInput(RunCli({"plan", "--cluster", kCluster16, "--trace", tmp.File("trace.csv"), "--slo-s", "30", "--window-s", "0"}),
                 "--window-s must be > 0");
}

TEST(PlanCli, DegenerateWorkloadsAreResultsNotErrors) {
  TempDir tmp("tedi_plan_degenerate");
  WriteFile(tmp.File("empty.yaml"), "classes: []\n");
  RunResult e = RunCli(Plan(kCluster16, tmp.File("empty.yaml")));
  ExpectSuccess(e);
  EXPECT_THAT(e.out, HasSubstr("stage 1: empty workload"));
  EXPECT_THAT(e.out, HasSubstr("no change needed"));

  WriteFile(tmp.File("slo.yaml"), "classes:\n  - {prompt_len: 256, output_len: 256, rps: 1, slo_s: 0.01}\n");
  RunResult s = RunCli(Plan(kCluster16, tmp.File("slo.yaml")));
  ExpectSuccess(s);
  EXPECT_THAT(s.out, HasSubstr("stage 1: infeasible: fallback"));
  EXPECT_THAT(s.out, HasSubstr("shorter than its fastest possible run"));
  EXPECT_THAT(s.out, HasSubstr("chosen layout:  16 x TP1"));

  WriteFile(tmp.File("flood.yaml"), "classes:\n  - {prompt_len: 256, output_len: 256, rps: 1000, slo_s: 10}\n");
  RunResult f = RunCli(Plan(kCluster16, tmp.File("flood.yaml")));
  ExpectSuccess(f);
  EXPECT_THAT(f.out, HasSubstr("no layout meets every SLO"));
  EXPECT_THAT(f.out, HasSubstr("chosen layout:  16 x TP1"));
}

TEST(PlanCli, BadInputsExitTwoWithAClearMessage) {
  TempDir tmp("tedi_plan_bad");
  const std::string low = kPlanDir + "classes_low.yaml";
  auto file = [&](const std::string& name, const std::string& text) {
    WriteFile(tmp.File(name), text);
    return tmp.File(name);
  };
  ExpectBadInput(RunCli({"plan", "--cluster", kCluster16}), "give exactly one of --workload and --trace");
  ExpectBadInput(RunCli({"plan", "--cluster", kCluster16, "--workload", low, "--trace", low}),
                 "give exactly one of --workload and --trace");
  ExpectBadInput(RunCli({"plan", "--workload", low}), "--cluster is required");
  ExpectBadInput(RunCli(Plan(tmp.File("missing.yaml"), low)), "no such file");
  ExpectBadInput(RunCli(Plan(kCluster16, tmp.File("missing.yaml"))), "no such file");
  ExpectBadInput(RunCli(Plan(file("n0.yaml", "nodes: 0\ngpus_per_node: 4\ntp_degrees: [1]\n"), low)), "nodes: must be >= 1");
  ExpectBadInput(RunCli(Plan(file("g0.yaml", "nodes: 2\ngpus_per_node: 0\ntp_degrees: [1]\n"), low)), "the cluster has no GPUs");
  ExpectBadInput(RunCli(Plan(file("g3.yaml", "nodes: 2\ngpus_per_node: [4, 4, 4]\ntp_degrees: [1]\n"), low)),
                 "3 entries for 2 nodes");
  ExpectBadInput(RunCli(Plan(file("d3.yaml", "nodes: 2\ngpus_per_node: 4\ntp_degrees: [1, 3]\n"), low)),
                 "the latency profile has no TP-3 curve");
  ExpectBadInput(RunCli(Plan(file("unk.yaml", "nodes: 2\ngpus_per_node: 4\ntp_degrees: [1]\nfoo: 1\n"), low)),
                 "unknown key \"foo\"");
  ExpectBadInput(RunCli(Plan(file("cur.yaml", "nodes: 1\ngpus_per_node: 4\ntp_degrees: [1, 2]\n"
                                              "current:\n  - {node: 0, tp: 2, gpus: [0, 0]}\n"),
                             low)),
                 "GPU 0 of node 0 is used twice");
  ExpectBadInput(RunCli(Plan(file("cur2.yaml", "nodes: 1\ngpus_per_node: 4\ntp_degrees: [1, 2]\n"
                                               "current:\n  - {node: 0, tp: 2, gpus: [0]}\n"),
                             low)),
                 "needs exactly tp GPUs");
  ExpectBadInput(RunCli(Plan(kCluster16, file("ctx.yaml", "classes:\n  - {prompt_len: 4000, output_len: 512, rps: 1, slo_s: 100}\n"))),
                 "exceeds the context of 4096");
  ExpectBadInput(RunCli(Plan(kCluster16, file("blk.yaml", "classes:\n  - {prompt_len: 256, output_len: 250, rps: 1, slo_s: 100}\n"))),
                 "not a multiple of the block size 32");
  ExpectBadInput(RunCli(Plan(kCluster16, file("neg.yaml", "classes:\n  - {prompt_len: 256, output_len: 256, rps: -1, slo_s: 100}\n"))),
                 "classes[0].rps");
  ExpectBadInput(RunCli(Plan(kCluster16, file("slo0.yaml", "classes:\n  - {prompt_len: 256, output_len: 256, rps: 1, slo_s: 0}\n"))),
                 "classes[0].slo_s");
  ExpectBadInput(RunCli(Plan(kCluster16, file("junk.yaml", "classes: [ {prompt_len: 1\n"))), "junk.yaml");
  ExpectBadInput(RunCli(Plan(kCluster16, low, {"--profile", tmp.File("none.csv")})), "no such file");
  ExpectBadInput(RunCli(Plan(kCluster16, low, {"--node-limit", "-1"})), "--node-limit");
  // An output that cannot be written is a run failure (exit 1), not bad input.
  ExpectRunFailure(RunCli(Plan(kCluster16, low, {"--json", tmp.File("no/such/dir/plan.json")})), "cannot write");
}

}  // namespace
}  // namespace tediserve
