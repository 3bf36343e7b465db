// Stage 1 of the reconfigurator (paper sections 3.3 and 3.4, ../shared/DESIGN.md 3.6,
// docs/design.md section 10): how many instances of each TP degree, by a MILP.
//
// Variables: instance counts X_d (integer; node packing checked exactly through node
// patterns, see below), one recompute batch bin z_{d,b} and one cache batch bin z'_{d,b}
// per degree (binary), recompute and cache steps per class and threshold (s_{k,c},
// s'_{k,c}), and per class, degree and bin (w_{k,d,b}, w'_{k,d,b}: the products
// z_{d,b} * s_{k,d}, linearised exactly as s_{k,d} = sum_b w_{k,d,b}, 0 <= w <= U_k z).
// Constraints: sum_c T_c (s + s') = O_k; recompute steps = blocks O_k / B (by threshold and
// by degree); cache steps equal by threshold and by degree; SLO per class; stability per
// degree: sum_k RPS_k sum_b (w (P+O) + w' B) L_{d,b} / b <= X_d.
// Objectives one after another: max the RPS- and token-weighted mean threshold; then min
// the RPS-weighted mean latency; then fewest instances (among layouts that use as many GPUs
// as the packing allows, unless use_all_gpus is off). Infeasible: every GPU as TP-1 (the
// smallest degree).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/mip.h"
#include "plan/workload_monitor.h"
#include "policy/latency_profile.h"

namespace tediserve::plan {

struct Stage1Inputs {
  std::vector<int> gpus_per_node;       // GPUs of each node
  std::vector<int> tp_degrees;          // candidate TP degrees (each in the profile)
  const policy::LatencyProfile* profile = nullptr;  // l_d(n), seconds per step of n tokens
  std::vector<double> thresholds;       // candidate thresholds, high to low
  std::vector<double> tokens_per_step;  // T_c per threshold (mean tokens unmasked per step)
  int block_size = 32;                  // B
  int max_context = 4096;               // longest prompt + output a request may have
  int token_budget = 8192;              // largest batch (tokens) an instance runs
  // Batch bins in tokens (ascending, distinct): the mean tokens per step of an instance's
  // recompute / cache batches (the stability row makes the chosen bin hold the batch the
  // load builds up). Empty: the sizes 2^i and 1.5 * 2^i (32, 48, 64, 96, ...); recompute bins
  // from the largest such size <= the smallest class's P+O up to the token budget (which is
  // always the last), cache bins from B up to 32B or the budget.
  std::vector<int> recompute_bins;
  std::vector<int> cache_bins;
  // Mixed batches: an instance runs recompute and cache steps in one batch (continuous
  // batching), so each degree has one bin that holds both: z_{d,b} = z'_{d,b}, one bin list
  // (recompute_bins; cache_bins must be empty or the same; default 2^i and 1.5 * 2^i from B
  // to the token budget), and a cache step costs l_d(b) of the whole batch. Off: the paper's
  // separate recompute and cache bins (the instance alternates recompute and cache batches).
  bool mixed_batches = false;
  std::vector<LengthClass> classes;     // classes with rps 0 are ignored
};

struct Stage1Options {
  MipOptions mip;               // per objective
  double tolerance = 1e-7;      // relative slack when an objective's optimum is fixed
  bool use_all_gpus = true;     // third objective: fewest instances among those that use
                                // the most GPUs (false: fewest instances, GPUs may idle)
  // Evaluate this layout (degree -> instances) instead of choosing one: X_d is fixed. Used to
  // score the current layout before switching. Must pack into the nodes.
  std::optional<std::map<int, int>> fixed_instances;
};

enum class Stage1Outcome {
  kPlanned,             // the MILP's layout
  kInfeasibleFallback,  // no layout meets every SLO and stays stable: all smallest-degree
  kEmptyWorkload,       // no arrivals: nothing to plan (instances is empty)
};
const char* Stage1OutcomeName(Stage1Outcome o);

struct ClassPlan {
  LengthClass cls;
  double latency_s = 0;                // modelled latency (sum of its steps' latencies)
  std::vector<double> recompute_at;    // s_{k,c} per threshold
  std::vector<double> cache_at;        // s'_{k,c} per threshold
  std::map<int, double> recompute_on;  // s_{k,d} per degree
  std::map<int, double> cache_on;      // s'_{k,d} per degree
};

struct ObjectiveSolve {
  std::string objective;
  MipStatus status = MipStatus::kNoSolution;
  std::string detail;
  double value = 0;
  double seconds = 0;
  int64_t nodes = 0;
};

struct Stage1Result {
  Stage1Outcome outcome = Stage1Outcome::kPlanned;
  std::string reason;                  // why a fallback / empty result, in words
  std::map<int, int> instances;        // R_d: degree -> instances (degrees with 0 left out)
  std::map<int, int> recompute_bin;    // degree -> chosen recompute bin (tokens), degrees in use
  std::map<int, int> cache_bin;
  double mean_threshold = 0;           // token-weighted over classes by RPS
  double mean_latency_s = 0;           // RPS-weighted
  int total_instances = 0;
  int gpus_used = 0;
  std::vector<ClassPlan> classes;
  std::vector<ObjectiveSolve> solves;  // one per objective solved
  double seconds = 0;                  // wall time of the whole stage
  bool limited = false;                // a solve stopped at a limit (status kFeasible)
};

// Errors (kInvalidArgument / kOutOfRange, naming the field or class): no GPUs, bad degrees
// or thresholds, a degree the profile lacks, a class with P + O beyond the context or the
// largest recompute bin, an output length that is not a block multiple. An SLO shorter than a
// class's fastest possible run is not an error: the result is the fallback, with the reason.
StatusOr<Stage1Result> PlanStage1(const Stage1Inputs& inputs, const Stage1Options& options = {});

// The validated, defaulted view of the inputs that both the MILP and the brute-force check
// use (exposed for tests and tools).
struct Stage1Problem {
  std::vector<int> gpus_per_node;
  std::vector<int> degrees;
  std::vector<double> thresholds, tokens_per_step;
  int block_size = 0;
  std::vector<int> recompute_bins, cache_bins;  // equal when mixed_batches
  bool mixed_batches = false;
  std::vector<LengthClass> classes;  // rps > 0 only
  // L[d][b]: step seconds of degree index d at recompute bin b / cache bin b
  std::vector<std::vector<double>> rec_lat, cache_lat;
  // rec_lat_k[k][d][b]: what a recompute step of class k costs in recompute bin b of degree
  // d: l_d(max(b, P_k + O_k)) (the step's batch holds at least the class's own tokens).
  std::vector<std::vector<std::vector<double>>> rec_lat_k;
};
StatusOr<Stage1Problem> MakeStage1Problem(const Stage1Inputs& inputs);

// Node patterns: for each distinct node size (GPUs), every maximal multiset of degrees that
// fits one node (counts per degree index). A count vector X is packable iff
// X_d <= sum over nodes of the pattern chosen for each node.
std::vector<std::vector<int>> MaximalPatterns(int gpus, const std::vector<int>& degrees);

// The layout when nothing else works: as many instances of the smallest degree as fit.
std::map<int, int> FallbackLayout(const std::vector<int>& gpus_per_node, const std::vector<int>& degrees);

}  // namespace tediserve::plan
