#include "sim/reconfig.h"

#include <algorithm>
#include <cmath>

#include "plan/stage1.h"

namespace tediserve::sim {

StatusOr<Reconfigurator> Reconfigurator::Create(const ReconfigOptions& o, const policy::LatencyProfile* profile,
                                                const std::vector<double>& thresholds,
                                                const std::vector<double>& tokens_per_step, int block_size,
                                                int token_budget) {
  if (!(o.period_s > 0 && std::isfinite(o.period_s))) return InvalidArgument("reconfig.period_s: must be > 0");
  if (!(o.load_delay_s >= 0 && std::isfinite(o.load_delay_s))) return InvalidArgument("reconfig.load_delay_s: must be >= 0");
  if (!(o.min_gain >= 0 && o.min_gain < 10)) return InvalidArgument("reconfig.min_gain: must be in [0, 10)");
  if (o.output_round % block_size != 0)
    return InvalidArgument("reconfig.output_round: must be a multiple of the block size " + std::to_string(block_size));
  if (o.gpus_per_node.empty()) return InvalidArgument("reconfig: the cluster has no nodes");
  plan::MonitorOptions mo;
  mo.window_s = o.window_s;
  mo.prompt_round = o.prompt_round;
  mo.output_round = o.output_round;
  ASSIGN_OR_RETURN(plan::WorkloadMonitor mon, plan::WorkloadMonitor::Create(mo));
  Reconfigurator r(o, std::move(mon));
  r.profile_ = profile;
  r.thresholds_ = thresholds;
  r.tokens_per_step_ = tokens_per_step;
  r.block_size_ = block_size;
  r.token_budget_ = token_budget;
  // Check the static inputs once (a bad degree or profile fails here, not mid-run).
  plan::Stage1Inputs in;
  in.gpus_per_node = o.gpus_per_node;
  in.tp_degrees = o.tp_degrees;
  in.profile = profile;
  in.thresholds = thresholds;
  in.tokens_per_step = tokens_per_step;
  in.block_size = block_size;
  in.max_context = o.max_context;
  in.token_budget = token_budget;
  RETURN_IF_ERROR(plan::MakeStage1Problem(in).status().WithContext("reconfig"));
  return r;
}

StatusOr<std::vector<plan::PlanStep>> Reconfigurator::Decide(double now, const std::vector<policy::InstanceInfo>& live) {
  PlanRecord rec;
  rec.time = now;
  for (const policy::InstanceInfo& i : live) ++rec.current[i.tp];
  std::vector<plan::LengthClass> classes = monitor_.Classes(now);
  // Classes the planner cannot take (longer than the context or the largest batch) are left
  // out of the plan rather than stopping the run.
  std::vector<plan::LengthClass> kept;
  for (const plan::LengthClass& c : classes)
    if (c.prompt_len + c.output_len <= std::min(options_.max_context, token_budget_)) kept.push_back(c);
  rec.classes = static_cast<int>(kept.size());
  plan::Stage1Inputs in;
  in.gpus_per_node = options_.gpus_per_node;
  in.tp_degrees = options_.tp_degrees;
  in.profile = profile_;
  in.thresholds = thresholds_;
  in.tokens_per_step = tokens_per_step_;
  in.block_size = block_size_;
  in.max_context = options_.max_context;
  in.token_budget = token_budget_;
  in.classes = kept;
  plan::Stage1Options so;
  so.mip.node_limit = options_.node_limit;
  ASSIGN_OR_RETURN(plan::Stage1Result chosen, plan::PlanStage1(in, so));
  rec.outcome = plan::Stage1OutcomeName(chosen.outcome);
  rec.solve_seconds = chosen.seconds;
  std::vector<plan::PlanStep> steps;
  if (chosen.outcome == plan::Stage1Outcome::kEmptyWorkload) {
    rec.reason = "no arrivals in the window";
    records_.push_back(rec);
    return steps;
  }
  rec.chosen = chosen.instances;
  rec.chosen_threshold = chosen.mean_threshold;
  rec.chosen_latency_s = chosen.mean_latency_s;
  // Score the current layout with the same model (degrees outside the candidates: infeasible).
  bool current_ok = true;
  for (const auto& [d, n] : rec.current)
    if (std::find(options_.tp_degrees.begin(), options_.tp_degrees.end(), d) == options_.tp_degrees.end()) current_ok = false;
  double slo_mean = 0, rps = 0;
  for (const plan::LengthClass& c : kept) {
    slo_mean += c.rps * c.slo_s;
    rps += c.rps;
  }
  slo_mean /= rps;
  if (current_ok) {
    plan::Stage1Options fo = so;
    fo.fixed_instances = rec.current;
    ASSIGN_OR_RETURN(plan::Stage1Result cur, plan::PlanStage1(in, fo));
    rec.solve_seconds += cur.seconds;
    rec.current_feasible = cur.outcome == plan::Stage1Outcome::kPlanned;
    rec.current_threshold = cur.mean_threshold;
    rec.current_latency_s = cur.mean_latency_s;
  }
  bool sw = false;
  if (rec.chosen == rec.current) {
    rec.reason = "the current layout is the chosen one";
  } else if (chosen.outcome != plan::Stage1Outcome::kPlanned) {
    sw = !rec.current_feasible;
    rec.reason = sw ? "no layout is feasible: fall back to the smallest degree" : "infeasible now; current layout kept";
  } else if (!rec.current_feasible) {
    sw = true;
    rec.reason = "the current layout cannot meet the SLOs with a stable load";
  } else if (chosen.mean_threshold > rec.current_threshold * (1 + options_.min_gain)) {
    sw = true;
    rec.reason = "mean threshold materially higher";
  } else if (std::abs(chosen.mean_threshold - rec.current_threshold) <= 1e-4 &&
             slo_mean - chosen.mean_latency_s > (slo_mean - rec.current_latency_s) * (1 + options_.min_gain)) {
    sw = true;
    rec.reason = "same threshold, materially more SLO slack";
  } else {
    rec.reason = "not materially better";
  }
  if (sw) {
    plan::Stage2Inputs s2;
    s2.gpus_per_node = options_.gpus_per_node;
    s2.target = rec.chosen;
    for (const policy::InstanceInfo& i : live)
      s2.current.push_back({static_cast<int>(i.id), i.node, i.tp, i.devices});
    plan::MipOptions mo;
    mo.node_limit = options_.node_limit;
    ASSIGN_OR_RETURN(plan::Stage2Result r2, plan::PlanStage2(s2, mo));
    rec.solve_seconds += r2.seconds;
    steps = r2.steps;
    rec.switched = !steps.empty();
  }
  records_.push_back(rec);
  return steps;
}

}  // namespace tediserve::sim
