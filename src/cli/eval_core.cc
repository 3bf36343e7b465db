#include "cli/eval_core.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tediserve::cli {

StatusOr<EvalRow> RunEvalRow(engine::DiffusionEngine& engine, const engine::Tokenizer& tokenizer,
                             const std::vector<EvalProblem>& problems, const engine::DecodeOptions& options,
                             double threshold, int batch, const engine::StepObserver& observer) {
  std::vector<std::unique_ptr<engine::DecodeState>> states;
  std::vector<engine::DecodeState*> ptrs;
  for (size_t i = 0; i < problems.size(); ++i) {
    auto s = engine.NewRequest(static_cast<int64_t>(i), problems[i].ids, options);
    if (!s.ok()) return s.status().WithContext("problem " + std::to_string(i + 1));
    ptrs.push_back(s->get());
    states.push_back(std::move(s).value());
  }
  int64_t unmasked = 0, steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(engine::RunToCompletion(
      engine, ptrs, static_cast<float>(threshold), batch,
      [&](const std::vector<engine::StepResult>& rs, const engine::BatchStats& bs, double ms) {
        for (const auto& r : rs) {
          unmasked += static_cast<int64_t>(r.unmasked.size());
          ++steps;
        }
        if (observer) observer(rs, bs, ms);
      }));
  EvalRow row;
  row.cache = options.use_cache;
  row.threshold = threshold;
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int correct = 0;
  const int32_t eos = engine.config().eos_token_id;
  for (size_t i = 0; i < problems.size(); ++i) {
    std::string ans = tokenizer.Decode(engine::UntilEos(states[i]->output_tokens(), engine.config()), eos);
    const bool ok = engine::IsCorrectAnswer(ans, problems[i].answer);
    correct += ok;
    auto& pt = row.per_task[problems[i].task];
    pt.first += ok;
    pt.second += 1;
    row.per_task_steps[problems[i].task] += states[i]->steps();
    row.answers.push_back(std::move(ans));
  }
  for (auto& [task, s] : row.per_task_steps) s /= row.per_task[task].second;
  row.accuracy = static_cast<double>(correct) / problems.size();
  row.mean_steps = static_cast<double>(steps) / problems.size();
  row.tokens_per_step = steps ? static_cast<double>(unmasked) / steps : 0;
  return row;
}

void FillAgreement(std::vector<EvalRow>* rows) {
  for (EvalRow& r : *rows) {
    if (!r.cache) continue;
    for (const EvalRow& n : *rows)
      if (!n.cache && n.threshold == r.threshold && n.answers.size() == r.answers.size()) {
        int same = 0;
        for (size_t i = 0; i < r.answers.size(); ++i) same += r.answers[i] == n.answers[i];
        r.agree_with_nocache = static_cast<double>(same) / r.answers.size();
      }
  }
}

}  // namespace tediserve::cli
