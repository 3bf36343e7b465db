// `tediserve plan`: the reconfiguration planner on its own (issue 15; docs/design.md section
// 10). Workload statistics (length classes with rates and SLOs) or a request trace, plus a
// cluster description -> the chosen layout (Stage 1), the plan steps from the current layout
// (Stage 2) and the solve times.
//
//   tediserve plan --cluster CLUSTER.yaml --workload CLASSES.yaml [--json OUT]
//   tediserve plan --cluster CLUSTER.yaml --trace TRACE.csv [--at-s T] [--window-s 300] [--slo-s S]
//
// CLUSTER (YAML or JSON): nodes, gpus_per_node (a number, or a list with one entry per node),
// tp_degrees, and optionally max_context, token_budget, recompute_bins, cache_bins and current
// (the running instances: [{node, tp, gpus: [...]}]; default: every GPU a smallest-degree
// instance). CLASSES: {classes: [{prompt_len, output_len, rps, slo_s}, ...]}.
// Exit 0 with a layout (a fallback or an empty workload is a result, said so), 2 on bad
// input (the message names the file and field), 1 on a solver failure.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace tediserve::cli {

struct PlanArgs {
  std::string cluster;
  std::string workload;     // classes file, or
  std::string trace;        // a request trace (sim trace format)
  double at_s = 0;          // trace: plan at this time (when at_s_given; default: the last arrival)
  bool at_s_given = false;
  double window_s = 300;    // trace: the monitor's window
  double slo_s = 0;         // trace: SLO of requests without one
  int prompt_round = 256;   // trace: class rounding
  int output_round = 256;
  std::string profile;      // latency profile CSV (default: the LLaDA-8B H100 profile)
  std::string calibration;  // thresholds, T_c and block size (default: llada-8b-gsm8k)
  int64_t node_limit = 0;   // branch-and-bound nodes per solve (0: none)
  double time_limit_s = 0;  // wall time per solve (0: none)
  std::string json_out;
};

CLI::App* AddPlanCommand(CLI::App& app, PlanArgs* args);
int RunPlan(const PlanArgs& args);

}  // namespace tediserve::cli
