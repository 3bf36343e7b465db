#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

namespace tediserve::engine {

Status RunToCompletion(DiffusionEngine& engine, std::span<DecodeState* const> states, float threshold,
                       int max_batch, const StepObserver& observer) {
  std::vector<StepRequest> batch;
  std::vector<StepResult> results;
  size_t next = 0;  // states before `next` have been admitted
  std::vector<DecodeState*> active;
  const size_t cap = max_batch > 0 ? static_cast<size_t>(max_batch) : states.size();
  for (;;) {
    std::erase_if(active, [](DecodeState* s) { return s->done(); });
    while (active.size() < cap && next < states.size()) {
      if (!states[next]->done()) active.push_back(states[next]);
      ++next;
    }
    if (active.empty()) return Status::Ok();
    batch.clear();
    for (DecodeState* s : active) batch.push_back({s, threshold});
    BatchStats stats;
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(engine.Step(batch, &results, &stats));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (observer) observer(results, stats, ms);
  }
}

namespace {
nlohmann::json SummaryJson(const ConfidenceSummary& s) {
  return {{"count", s.count}, {"min", s.min}, {"q1", s.q1}, {"median", s.median}, {"q3", s.q3}, {"mean", s.mean}};
}
}  // namespace

std::string StepResultJson(const StepResult& r, int batch_size, int64_t batch_tokens, double step_ms) {
  nlohmann::json j;
  j["request"] = r.id;
  j["kind"] = StepKindName(r.kind);
  j["block"] = r.block;
  j["threshold"] = r.threshold;
  nlohmann::json un = nlohmann::json::array();
  for (auto [pos, tok] : r.unmasked) un.push_back({pos, tok});
  j["unmasked"] = un;
  j["block_done"] = r.block_done;
  j["done"] = r.request_done;
  j["stats"] = {{"block", SummaryJson(r.stats.block)},
                {"output", SummaryJson(r.stats.output)},
                {"block_above", r.stats.block_above}};
  j["batch_size"] = batch_size;
  j["batch_tokens"] = batch_tokens;
  j["step_ms"] = step_ms;
  return j.dump();
}

std::vector<int32_t> UntilEos(const std::vector<int32_t>& ids, const ModelConfig& config) {
  const auto end = std::find_if(ids.begin(), ids.end(), [&config](int32_t t) { return config.IsEos(t); });
  return {ids.begin(), end};
}

}  // namespace tediserve::engine
