#include "sim/step_collection.h"

#include <algorithm>
#include <map>

namespace tediserve::sim {

StatusOr<std::vector<predictor::StepLogRow>> CollectStepLog(DenoiserModel& model,
                                                            std::span<const policy::RequestSpec> requests,
                                                            std::span<const double> thresholds,
                                                            const CollectionOptions& options) {
  if (requests.empty()) return InvalidArgument("collect: no requests");
  if (options.block_size <= 0 || options.batch <= 0) return InvalidArgument("collect: block size and batch must be > 0");
  const int64_t stride = options.id_stride > 0 ? options.id_stride : static_cast<int64_t>(requests.size());
  if (stride < static_cast<int64_t>(requests.size())) return InvalidArgument("collect: id stride below the request count");
  std::vector<predictor::StepLogRow> rows;
  for (size_t k = 0; k < thresholds.size(); ++k) {
    const double c = thresholds[k];
    // Per request: its state and its rows (remaining is filled in when it finishes).
    struct Live {
      policy::RequestState state;
      std::vector<size_t> rows;
    };
    std::map<policy::RequestId, Live> live;
    std::map<policy::RequestId, size_t> order_index;
    std::vector<policy::RequestId> order;
    for (size_t i = 0; i < requests.size(); ++i) {
      policy::RequestSpec spec = requests[i];
      if (spec.output_len <= 0) return InvalidArgument("collect: request " + std::to_string(i) + " has no output");
      spec.id = static_cast<int64_t>(k) * stride + static_cast<int64_t>(i);
      model.Start(spec, options.block_size, options.seed + i);
      Live l;
      l.state = policy::MakeRequestState(spec, options.block_size, /*cache=*/true, c);
      live.emplace(spec.id, l);
      order_index[spec.id] = i;
      order.push_back(spec.id);
    }
    size_t next = 0;  // requests enter the batch in order as others finish
    std::vector<policy::RequestId> active;
    while (next < order.size() || !active.empty()) {
      while (active.size() < static_cast<size_t>(options.batch) && next < order.size()) active.push_back(order[next++]);
      std::vector<DenoiseCommand> batch;
      for (policy::RequestId id : active) {
        Live& l = live.at(id);
        l.rows.push_back(rows.size());
        rows.push_back({l.state, c, 0, static_cast<int64_t>(order_index.at(id))});
        batch.push_back({id, c});
      }
      const std::vector<policy::StepOutcome> outs = model.Step(batch);
      if (outs.size() != batch.size()) return Internal("collect: the model returned a wrong number of outcomes");
      std::vector<policy::RequestId> still;
      for (const policy::StepOutcome& o : outs) {
        auto it = live.find(o.id);
        if (it == live.end()) return Internal("collect: the model returned an outcome for unknown request " + std::to_string(o.id));
        Live& l = it->second;
        if (o.unmasked <= 0 && !o.request_done) return Internal("collect: a step unmasked nothing");
        if (!l.state.Apply(o)) {
          still.push_back(o.id);
          continue;
        }
        model.Finish(o.id);
        for (size_t j : l.rows) rows[j].remaining = l.state.steps - rows[j].state.steps;
        live.erase(it);
      }
      active = std::move(still);
    }
  }
  return rows;
}

}  // namespace tediserve::sim
