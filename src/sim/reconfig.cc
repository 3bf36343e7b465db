#include "sim/reconfig.h"

#include <algorithm>
#include <cmath>

#include "plan/decide.h"
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
  mo.mean_lengths_block = o.class_means ? block_size : 0;
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
  in.mixed_batches = o.mixed_batches;
  RETURN_IF_ERROR(plan::MakeStage1Problem(in).status().WithContext("reconfig"));
  return r;
}

StatusOr<std::vector<plan::PlanStep>> Reconfigurator::Decide(double now, const std::vector<policy::InstanceInfo>& live) {
  PlanRecord rec;
  rec.time = now;
  std::map<int, int> current;
  for (const policy::InstanceInfo& i : live) ++current[i.tp];
  plan::Stage1Inputs in;
  in.gpus_per_node = options_.gpus_per_node;
  in.tp_degrees = options_.tp_degrees;
  in.profile = profile_;
  in.thresholds = thresholds_;
  in.tokens_per_step = tokens_per_step_;
  in.block_size = block_size_;
  in.max_context = options_.max_context;
  in.token_budget = token_budget_;
  in.mixed_batches = options_.mixed_batches;
  in.classes = monitor_.Classes(now);
  plan::MipOptions mip;
  mip.node_limit = options_.node_limit;
  ASSIGN_OR_RETURN(plan::LayoutDecision d, plan::DecideLayout(in, current, options_.min_gain, mip));
  rec.current = d.current;
  rec.classes = d.classes;
  rec.outcome = plan::Stage1OutcomeName(d.outcome);
  rec.solve_seconds = d.solve_seconds;
  rec.reason = d.reason;
  rec.chosen = d.chosen;
  rec.chosen_threshold = d.chosen_threshold;
  rec.chosen_latency_s = d.chosen_latency_s;
  rec.current_feasible = d.current_feasible;
  rec.current_threshold = d.current_threshold;
  rec.current_latency_s = d.current_latency_s;
  std::vector<plan::PlanStep> steps;
  if (d.change) {
    plan::Stage2Inputs s2;
    s2.gpus_per_node = options_.gpus_per_node;
    s2.target = d.chosen;
    for (const policy::InstanceInfo& i : live)
      s2.current.push_back({static_cast<int>(i.id), i.node, i.tp, i.devices});
    ASSIGN_OR_RETURN(plan::Stage2Result r2, plan::PlanStage2(s2, mip));
    rec.solve_seconds += r2.seconds;
    steps = r2.steps;
    rec.switched = !steps.empty();
  }
  records_.push_back(rec);
  return steps;
}

}  // namespace tediserve::sim
