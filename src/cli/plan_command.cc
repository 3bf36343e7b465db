// `tediserve plan` (see plan_command.h).
#include "cli/plan_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "plan/stage1.h"
#include "plan/stage2.h"
#include "plan/workload_monitor.h"
#include "policy/latency_profile.h"
#include "sim/calibration.h"
#include "sim/trace.h"
#include "sim/yaml_fields.h"

namespace tediserve::cli {

CLI::App* AddPlanCommand(CLI::App& app, PlanArgs* a) {
  CLI::App* p = app.add_subcommand("plan", "reconfiguration planner: workload + cluster -> TP layout and plan steps");
  a->profile = std::string(TEDI_SOURCE_DIR) + "/data/profiles/llada-8b-base/h100_step_latency_ms.csv";
  a->calibration = std::string(TEDI_SOURCE_DIR) + "/data/calibrations/llada-8b-gsm8k.json";
  p->add_option("--cluster", a->cluster, "cluster description (YAML or JSON)")->required();
  p->add_option("--workload", a->workload, "workload statistics: {classes: [{prompt_len, output_len, rps, slo_s}]}");
  p->add_option("--trace", a->trace, "a request trace (CSV or JSONL, the simulator's format) instead of --workload");
  p->add_option_function<double>(
      "--at-s",
      [a](const double& t) {
        a->at_s = t;
        a->at_s_given = true;
      },
      "trace: plan at this time (default: the last arrival)");
  p->add_option("--window-s", a->window_s, "trace: arrival-rate window (seconds)");
  p->add_option("--slo-s", a->slo_s, "trace: SLO (seconds) of requests that have none");
  p->add_option("--prompt-round", a->prompt_round, "trace: prompt lengths rounded up to a multiple of this")
      ->check(CLI::Range(1, 1 << 20));
  p->add_option("--output-round", a->output_round, "trace: output lengths rounded up to a multiple of this (a block multiple)")
      ->check(CLI::Range(1, 1 << 20));
  p->add_option("--profile", a->profile, "latency profile CSV (num_batched_tokens,tp1_ms,...)");
  p->add_option("--calibration", a->calibration, "calibration JSON: thresholds, tokens_per_step, block_size");
  p->add_option("--node-limit", a->node_limit, "branch-and-bound nodes per solve (0: none; deterministic)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  p->add_option("--time-limit-s", a->time_limit_s, "wall-clock limit per solve (0: none)")->check(CLI::Range(0.0, 86400.0));
  p->add_option("--json", a->json_out, "also write the plan as JSON to this file");
  return p;
}

namespace {

using plan::LengthClass;
using plan::Placement;

struct Cluster {
  std::vector<int> gpus_per_node;
  std::vector<int> degrees;
  int max_context = 4096;
  int token_budget = 8192;
  std::vector<int> recompute_bins, cache_bins;
  bool has_current = false;
  std::vector<Placement> current;
};

StatusOr<std::vector<int>> IntList(const YAML::Node& map, const std::string& path, const std::string& key, int lo, int hi,
                                   size_t min_count, size_t max_count) {
  ASSIGN_OR_RETURN(std::vector<double> v, sim::GetDoubleList(map, path, key, lo, hi, min_count, max_count));
  std::vector<int> out;
  for (double x : v) {
    if (x != std::floor(x)) return InvalidArgument(sim::FieldPath(path, key) + ": entries must be integers");
    out.push_back(static_cast<int>(x));
  }
  return out;
}

StatusOr<Cluster> LoadCluster(const std::string& file) {
  ASSIGN_OR_RETURN(YAML::Node root, sim::LoadYamlFile(file));
  const std::string p = "";
  RETURN_IF_ERROR(sim::CheckKeys(root, p,
                                 {"nodes", "gpus_per_node", "tp_degrees", "max_context", "token_budget", "recompute_bins",
                                  "cache_bins", "current"}));
  Cluster c;
  ASSIGN_OR_RETURN(int64_t nodes, sim::GetInt(root, p, "nodes", 1, 4096));
  const YAML::Node g = sim::Field(root, "gpus_per_node");
  if (g.IsSequence()) {
    ASSIGN_OR_RETURN(c.gpus_per_node, IntList(root, p, "gpus_per_node", 0, 1024, 1, 4096));
    if (static_cast<int64_t>(c.gpus_per_node.size()) != nodes)
      return InvalidArgument("gpus_per_node: " + std::to_string(c.gpus_per_node.size()) + " entries for " + std::to_string(nodes) +
                             " nodes");
  } else {
    ASSIGN_OR_RETURN(int64_t per, sim::GetInt(root, p, "gpus_per_node", 0, 1024));
    c.gpus_per_node.assign(nodes, static_cast<int>(per));
  }
  ASSIGN_OR_RETURN(c.degrees, IntList(root, p, "tp_degrees", 1, 1024, 1, 16));
  ASSIGN_OR_RETURN(c.max_context, sim::GetIntOr(root, p, "max_context", 4096, 2, 1 << 24));
  ASSIGN_OR_RETURN(c.token_budget, sim::GetIntOr(root, p, "token_budget", 8192, 1, 1 << 24));
  if (sim::HasField(root, "recompute_bins")) {
    ASSIGN_OR_RETURN(c.recompute_bins, IntList(root, p, "recompute_bins", 1, 1 << 24, 1, 64));
  }
  if (sim::HasField(root, "cache_bins")) {
    ASSIGN_OR_RETURN(c.cache_bins, IntList(root, p, "cache_bins", 1, 1 << 24, 1, 64));
  }
  if (sim::HasField(root, "current")) {
    const YAML::Node cur = sim::Field(root, "current");
    if (!cur.IsSequence()) return InvalidArgument("current: must be a list of {node, tp, gpus}");
    c.has_current = true;
    for (size_t i = 0; i < cur.size(); ++i) {
      const std::string ip = "current[" + std::to_string(i) + "]";
      RETURN_IF_ERROR(sim::ExpectMap(cur[i], ip));
      RETURN_IF_ERROR(sim::CheckKeys(cur[i], ip, {"node", "tp", "gpus", "id"}));
      Placement pl;
      ASSIGN_OR_RETURN(int64_t node, sim::GetInt(cur[i], ip, "node", 0, nodes - 1));
      ASSIGN_OR_RETURN(int64_t tp, sim::GetInt(cur[i], ip, "tp", 1, 1024));
      ASSIGN_OR_RETURN(pl.id, sim::GetIntOr(cur[i], ip, "id", static_cast<int>(i), 0, 1 << 30));
      ASSIGN_OR_RETURN(pl.gpus, IntList(cur[i], ip, "gpus", 0, 1023, 1, 1024));
      std::sort(pl.gpus.begin(), pl.gpus.end());
      pl.node = static_cast<int>(node);
      pl.tp = static_cast<int>(tp);
      c.current.push_back(pl);
    }
  }
  return c;
}

StatusOr<std::vector<LengthClass>> LoadClasses(const std::string& file) {
  ASSIGN_OR_RETURN(YAML::Node root, sim::LoadYamlFile(file));
  RETURN_IF_ERROR(sim::CheckKeys(root, "", {"classes"}));
  const YAML::Node list = sim::Field(root, "classes");
  if (!list.IsSequence()) return InvalidArgument("classes: missing or not a list");
  if (list.size() > 1000) return InvalidArgument("classes: at most 1000");
  std::vector<LengthClass> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ip = "classes[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(sim::ExpectMap(list[i], ip));
    RETURN_IF_ERROR(sim::CheckKeys(list[i], ip, {"prompt_len", "output_len", "rps", "slo_s"}));
    LengthClass c;
    ASSIGN_OR_RETURN(int64_t pl, sim::GetInt(list[i], ip, "prompt_len", 1, 1 << 24));
    ASSIGN_OR_RETURN(int64_t ol, sim::GetInt(list[i], ip, "output_len", 1, 1 << 24));
    ASSIGN_OR_RETURN(c.rps, sim::GetDouble(list[i], ip, "rps", 0, 1e9));
    ASSIGN_OR_RETURN(c.slo_s, sim::GetPositive(list[i], ip, "slo_s", 1e9));
    c.prompt_len = static_cast<int>(pl);
    c.output_len = static_cast<int>(ol);
    out.push_back(c);
  }
  return out;
}

StatusOr<std::vector<LengthClass>> ClassesFromTrace(const PlanArgs& a, int block_size) {
  if (a.output_round % block_size != 0)
    return InvalidArgument("--output-round " + std::to_string(a.output_round) + " is not a multiple of the block size " +
                           std::to_string(block_size));
  if (!(std::isfinite(a.window_s) && a.window_s > 0)) return InvalidArgument("--window-s must be > 0");
  if (!(std::isfinite(a.slo_s) && a.slo_s >= 0)) return InvalidArgument("--slo-s must be >= 0");
  if (a.at_s_given && !std::isfinite(a.at_s)) return InvalidArgument("--at-s must be a finite time");
  ASSIGN_OR_RETURN(std::vector<policy::RequestSpec> reqs, sim::ReadTrace(a.trace));
  const double at = a.at_s_given ? a.at_s : reqs.back().arrival;
  plan::MonitorOptions mo;
  mo.window_s = a.window_s;
  mo.prompt_round = a.prompt_round;
  mo.output_round = a.output_round;
  mo.start_s = std::min(0.0, reqs.front().arrival);
  ASSIGN_OR_RETURN(plan::WorkloadMonitor mon, plan::WorkloadMonitor::Create(mo));
  for (const policy::RequestSpec& r : reqs) {
    if (r.arrival > at) break;
    const double slo = r.slo > 0 ? r.slo : a.slo_s;
    if (slo <= 0)
      return InvalidArgument(a.trace + ": request " + std::to_string(r.id) + " has no SLO; give --slo-s");
    RETURN_IF_ERROR(mon.Record(r.arrival, r.prompt_len, r.output_len, slo).WithContext(a.trace));
  }
  return mon.Classes(at);
}

std::string Layout(const std::map<int, int>& inst) {
  if (inst.empty()) return "(none)";
  std::string s;
  for (auto it = inst.rbegin(); it != inst.rend(); ++it)
    s += (s.empty() ? "" : " + ") + std::to_string(it->second) + " x TP" + std::to_string(it->first);
  return s;
}

nlohmann::json PlacementJson(const Placement& p) {
  nlohmann::json j = {{"node", p.node}, {"tp", p.tp}, {"gpus", p.gpus}};
  if (p.id >= 0) j["id"] = p.id;
  return j;
}

std::string GpuList(const Placement& p) {
  std::string s;
  for (int g : p.gpus) s += (s.empty() ? "" : ",") + std::to_string(g);
  return "node " + std::to_string(p.node) + " GPUs {" + s + "}";
}

}  // namespace

int RunPlan(const PlanArgs& a) {
  auto fail = [](const Status& s) {
    std::cerr << "error: " << s.message() << "\n";
    return ExitCode(s);
  };
  if (a.workload.empty() == a.trace.empty()) return fail(InvalidArgument("give exactly one of --workload and --trace"));
  StatusOr<Cluster> cluster = LoadCluster(a.cluster);
  if (!cluster.ok()) return fail(cluster.status().WithContext(a.cluster));
  StatusOr<policy::LatencyProfile> prof = policy::LatencyProfile::LoadCsv(a.profile);
  if (!prof.ok()) return fail(prof.status());
  StatusOr<sim::Calibration> cal = sim::LoadCalibration(a.calibration);
  if (!cal.ok()) return fail(cal.status());
  StatusOr<std::vector<LengthClass>> classes =
      a.trace.empty() ? LoadClasses(a.workload) : ClassesFromTrace(a, cal->block_size);
  if (!classes.ok()) return fail(a.trace.empty() ? classes.status().WithContext(a.workload) : classes.status());

  plan::Stage1Inputs in;
  in.gpus_per_node = cluster->gpus_per_node;
  in.tp_degrees = cluster->degrees;
  in.profile = &prof.value();
  in.thresholds = cal->thresholds;
  in.tokens_per_step = cal->tokens_per_step;
  in.block_size = cal->block_size;
  in.max_context = cluster->max_context;
  in.token_budget = cluster->token_budget;
  in.recompute_bins = cluster->recompute_bins;
  in.cache_bins = cluster->cache_bins;
  in.classes = *classes;
  plan::Stage1Options opt;
  opt.mip.node_limit = a.node_limit;
  opt.mip.time_limit_s = a.time_limit_s;
  StatusOr<plan::Stage1Result> s1 = plan::PlanStage1(in, opt);
  // Stage 1's errors name the class or degree at fault; say which two inputs met.
  if (!s1.ok()) return fail(s1.status().WithContext("planning " + (a.trace.empty() ? a.workload : a.trace) + " on " + a.cluster));

  // Current layout: given, or every GPU a smallest-degree instance.
  plan::Stage2Inputs s2in;
  s2in.gpus_per_node = cluster->gpus_per_node;
  if (cluster->has_current) {
    s2in.current = cluster->current;
  } else {
    const int d = *std::min_element(cluster->degrees.begin(), cluster->degrees.end());
    int id = 0;
    for (size_t n = 0; n < cluster->gpus_per_node.size(); ++n)
      for (int g = 0; g + d <= cluster->gpus_per_node[n]; g += d) {
        Placement p{id++, static_cast<int>(n), d, {}};
        for (int k = g; k < g + d; ++k) p.gpus.push_back(k);
        s2in.current.push_back(p);
      }
  }
  std::map<int, int> current_layout;
  for (const Placement& p : s2in.current) ++current_layout[p.tp];
  // An empty workload keeps the current layout.
  s2in.target = s1->outcome == plan::Stage1Outcome::kEmptyWorkload ? current_layout : s1->instances;
  StatusOr<plan::Stage2Result> s2 = plan::PlanStage2(s2in, opt.mip);
  if (!s2.ok()) return fail(s2.status().WithContext(a.cluster));

  // Text report.
  std::printf("classes: %zu\n", classes->size());
  for (const plan::ClassPlan& c : s1->classes) {
    std::printf("  prompt %5d output %5d  %8.4f req/s  SLO %7.2f s  planned latency %7.3f s  steps:", c.cls.prompt_len,
                c.cls.output_len, c.cls.rps, c.cls.slo_s, c.latency_s);
    for (size_t i = 0; i < c.recompute_at.size(); ++i)
      if (c.recompute_at[i] + c.cache_at[i] > 1e-6)
        std::printf(" %.2f@%.2f", c.recompute_at[i] + c.cache_at[i], in.thresholds[i]);
    std::printf("  on TP:");
    std::set<int> ds;
    for (const auto& [d, v] : c.recompute_on) ds.insert(d);
    for (const auto& [d, v] : c.cache_on) ds.insert(d);
    for (int d : ds) {
      const double rec = c.recompute_on.count(d) ? c.recompute_on.at(d) : 0, ca = c.cache_on.count(d) ? c.cache_on.at(d) : 0;
      std::printf(" %d(%.2f rec, %.2f cache)", d, rec, ca);
    }
    std::printf("\n");
  }
  std::printf("stage 1: %s%s%s\n", plan::Stage1OutcomeName(s1->outcome), s1->reason.empty() ? "" : ": ", s1->reason.c_str());
  if (s1->outcome == plan::Stage1Outcome::kEmptyWorkload)
    std::printf("  current layout: %s\n  chosen layout:  %s  (kept: nothing to plan for)\n", Layout(current_layout).c_str(),
                Layout(current_layout).c_str());
  else
    std::printf("  current layout: %s\n  chosen layout:  %s  (%d instances, %d GPUs)\n", Layout(current_layout).c_str(),
                Layout(s1->instances).c_str(), s1->total_instances, s1->gpus_used);
  if (s1->outcome == plan::Stage1Outcome::kPlanned) {
    std::printf("  mean threshold %.4f, mean planned latency %.3f s\n", s1->mean_threshold, s1->mean_latency_s);
    for (const auto& [d, b] : s1->recompute_bin)
      std::printf("  TP%d batch bins: recompute %d tokens, cache %d tokens\n", d, b, s1->cache_bin.count(d) ? s1->cache_bin.at(d) : 0);
  }
  for (const plan::ObjectiveSolve& s : s1->solves)
    std::printf("  solve %-18s %-26s value %.6g  %.4f s  %lld nodes  [%s]\n", s.objective.c_str(), plan::MipStatusName(s.status),
                s.value, s.seconds, static_cast<long long>(s.nodes), s.detail.c_str());
  std::printf("  stage 1 time: %.4f s\n", s1->seconds);
  std::printf("stage 2: %s, kept %zu, terminated %zu, launched %zu, %.4f s, %lld nodes [%s]\n", plan::MipStatusName(s2->status),
              s2->kept.size(), s2->terminated.size(), s2->launched.size(), s2->seconds, static_cast<long long>(s2->nodes),
              s2->detail.c_str());
  if (s2->unchanged()) std::printf("  no change needed\n");
  for (size_t i = 0; i < s2->steps.size(); ++i) {
    const plan::PlanStep& st = s2->steps[i];
    if (st.kind == plan::PlanStep::kTerminate)
      std::printf("  step %zu: drain and stop instance %d (TP%d, %s)\n", i + 1, st.instance.id, st.instance.tp, GpuList(st.instance).c_str());
    else
      std::printf("  step %zu: launch TP%d on %s\n", i + 1, st.instance.tp, GpuList(st.instance).c_str());
  }

  if (!a.json_out.empty()) {
    nlohmann::json j;
    j["stage1"] = {{"outcome", plan::Stage1OutcomeName(s1->outcome)},
                   {"reason", s1->reason},
                   {"mean_threshold", s1->mean_threshold},
                   {"mean_latency_s", s1->mean_latency_s},
                   {"seconds", s1->seconds}};
    nlohmann::json lay = nlohmann::json::object();
    for (const auto& [d, n] : s1->instances) lay[std::to_string(d)] = n;
    j["stage1"]["instances"] = lay;
    nlohmann::json solves = nlohmann::json::array();
    for (const plan::ObjectiveSolve& s : s1->solves)
      solves.push_back({{"objective", s.objective}, {"status", plan::MipStatusName(s.status)}, {"detail", s.detail},
                        {"value", s.value}, {"seconds", s.seconds}, {"nodes", s.nodes}});
    j["stage1"]["solves"] = solves;
    nlohmann::json cls = nlohmann::json::array();
    for (const plan::ClassPlan& c : s1->classes)
      cls.push_back({{"prompt_len", c.cls.prompt_len}, {"output_len", c.cls.output_len}, {"rps", c.cls.rps},
                     {"slo_s", c.cls.slo_s}, {"latency_s", c.latency_s}, {"recompute_steps", c.recompute_at},
                     {"cache_steps", c.cache_at}});
    j["stage1"]["classes"] = cls;
    nlohmann::json steps = nlohmann::json::array();
    for (const plan::PlanStep& st : s2->steps) {
      nlohmann::json sj = PlacementJson(st.instance);
      sj["action"] = st.kind == plan::PlanStep::kTerminate ? "terminate" : "launch";
      steps.push_back(sj);
    }
    nlohmann::json kept = nlohmann::json::array();
    for (const Placement& p : s2->kept) kept.push_back(PlacementJson(p));
    j["stage2"] = {{"status", plan::MipStatusName(s2->status)}, {"seconds", s2->seconds}, {"nodes", s2->nodes},
                   {"kept", kept}, {"steps", steps}};
    std::ofstream f(a.json_out);
    f << j.dump(2) << "\n";
    if (!f) return fail(IoError("cannot write " + a.json_out));
  }
  return 0;
}

}  // namespace tediserve::cli
