#include "plan/decide.h"

#include <algorithm>
#include <cmath>

namespace tediserve::plan {

StatusOr<LayoutDecision> DecideLayout(Stage1Inputs in, const std::map<int, int>& current, double min_gain,
                                      const MipOptions& mip) {
  if (!(min_gain >= 0 && std::isfinite(min_gain))) return InvalidArgument("min_gain must be >= 0");
  LayoutDecision d;
  for (const auto& [tp, n] : current)
    if (n > 0) d.current[tp] = n;
  // Classes the planner cannot take are left out of the plan rather than stopping it.
  std::vector<LengthClass> kept;
  for (const LengthClass& c : in.classes) {
    if (c.prompt_len + c.output_len <= std::min(in.max_context, in.token_budget)) {
      kept.push_back(c);
    } else {
      ++d.classes_left_out;
    }
  }
  in.classes = kept;
  d.classes = static_cast<int>(kept.size());
  Stage1Options so;
  so.mip = mip;
  ASSIGN_OR_RETURN(Stage1Result chosen, PlanStage1(in, so));
  d.outcome = chosen.outcome;
  d.solve_seconds = chosen.seconds;
  if (chosen.outcome == Stage1Outcome::kEmptyWorkload) {
    d.reason = "no arrivals in the window";
    return d;
  }
  d.chosen = chosen.instances;
  d.chosen_threshold = chosen.mean_threshold;
  d.chosen_latency_s = chosen.mean_latency_s;
  // Score the current layout with the same model (degrees outside the candidates: infeasible).
  bool current_ok = true;
  for (const auto& [tp, n] : d.current)
    if (std::find(in.tp_degrees.begin(), in.tp_degrees.end(), tp) == in.tp_degrees.end()) current_ok = false;
  double slo_mean = 0, rps = 0;
  for (const LengthClass& c : in.classes) {
    slo_mean += c.rps * c.slo_s;
    rps += c.rps;
  }
  if (rps > 0) slo_mean /= rps;
  if (current_ok && !d.current.empty()) {
    Stage1Options fo = so;
    fo.fixed_instances = d.current;
    ASSIGN_OR_RETURN(Stage1Result cur, PlanStage1(in, fo));
    d.solve_seconds += cur.seconds;
    d.current_feasible = cur.outcome == Stage1Outcome::kPlanned;
    d.current_threshold = cur.mean_threshold;
    d.current_latency_s = cur.mean_latency_s;
  }
  if (d.chosen == d.current) {
    d.reason = "the current layout is the chosen one";
  } else if (chosen.outcome != Stage1Outcome::kPlanned) {
    d.change = !d.current_feasible;
    d.reason = d.change ? "no layout is feasible: fall back to the smallest degree" : "infeasible now; current layout kept";
  } else if (!d.current_feasible) {
    d.change = true;
    d.reason = "the current layout cannot meet the SLOs with a stable load";
  } else if (chosen.mean_threshold > d.current_threshold * (1 + min_gain)) {
    d.change = true;
    d.reason = "mean threshold materially higher";
  } else if (std::abs(chosen.mean_threshold - d.current_threshold) <= 1e-4 &&
             slo_mean - chosen.mean_latency_s > (slo_mean - d.current_latency_s) * (1 + min_gain)) {
    d.change = true;
    d.reason = "same threshold, materially more SLO slack";
  } else {
    d.reason = "not materially better";
  }
  return d;
}

}  // namespace tediserve::plan
