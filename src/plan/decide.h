// When to change the layout (issue 15; docs/design.md section 10.5): Stage 1 for the observed
// classes, the current layout scored by the same model, and the rule that switches only when
// the new layout is materially better. Shared by the simulator's reconfigurator
// (src/sim/reconfig.*) and the serving runtime's (src/serve/reconfigurer.*), so both decide
// alike.
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "plan/stage1.h"

namespace tediserve::plan {

struct LayoutDecision {
  Stage1Outcome outcome = Stage1Outcome::kEmptyWorkload;  // of the free solve
  std::map<int, int> current, chosen;  // degree -> instances (chosen: empty for an empty workload)
  double chosen_threshold = 0, chosen_latency_s = 0;
  bool current_feasible = false;       // the current layout meets every SLO with a stable load
  double current_threshold = 0, current_latency_s = 0;
  bool change = false;                 // switch to `chosen`
  std::string reason;                  // in words, either way
  int classes = 0;                     // classes planned for
  int classes_left_out = 0;            // longer than the context or the largest batch
  double solve_seconds = 0;            // both Stage 1 solves (wall time; reporting only)
};

// `in` carries the cluster, profile, thresholds and the observed classes. Classes whose
// prompt + output exceed min(max_context, token_budget) are left out (counted) rather than
// failing the decision. Rule: no change when the chosen layout is the current one or nothing
// arrived; when no layout is feasible, fall back to the smallest degree only if the current
// layout is infeasible too; otherwise change when the current layout is infeasible, when the
// chosen layout's mean threshold is more than `min_gain` (relative) higher, or when the
// thresholds are equal (within 1e-4) and the mean slack (mean SLO - mean latency, RPS-weighted)
// is more than `min_gain` (relative) larger. A current degree that is not a candidate makes
// the current layout infeasible.
StatusOr<LayoutDecision> DecideLayout(Stage1Inputs in, const std::map<int, int>& current, double min_gain,
                                      const MipOptions& mip = {});

}  // namespace tediserve::plan
