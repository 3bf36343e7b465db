#include "cli/predictor_commands.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/model_setup.h"
#include "predictor/step_log.h"
#include "predictor/train.h"
#include "sim/engine_denoiser.h"
#include "sim/experiment.h"
#include "sim/step_collection.h"

namespace tediserve::cli {

CLI::App* AddCollectStepsCommand(CLI::App& app, CollectStepsArgs* a) {
  CLI::App* c = app.add_subcommand("collect-steps", "step logs for the step predictor: requests under every threshold");
  auto* cfg = c->add_option("--config", a->config, "experiment file: its denoising model, workload lengths and thresholds");
  auto* mdl = c->add_option("--model", a->model_dir, "or: run the engine on this model folder's problems");
  cfg->excludes(mdl);
  c->add_option("--tasks", a->tasks, "with --model: JSONL problems (default MODEL/heldout.jsonl)");
  c->add_option("--thresholds", a->thresholds, "with --model: candidate thresholds")->delimiter(',');
  c->add_option("--block-size", a->block_size, "with --model: decoding block size (default: the model's)")->check(CLI::Range(1, 4096));
  c->add_option("--requests", a->requests, "requests (problems) run under each threshold")->check(CLI::Range(1, 1000000));
  c->add_option("--batch", a->batch, "requests per batched step")->check(CLI::Range(1, 4096));
  c->add_option("--seed", a->seed, "request seeds");
  c->add_option("--out", a->out, "step log to write (JSONL)")->required();
  return c;
}

CLI::App* AddTrainPredictorCommand(CLI::App& app, TrainPredictorArgs* a) {
  CLI::App* t = app.add_subcommand("train-predictor", "train the step predictor (XGBoost) from step logs");
  t->add_option("--log", a->logs, "step log(s) from collect-steps")->required();
  t->add_option("--out", a->out, "model file to write (XGBoost JSON)")->required();
  t->add_option("--feature-set", a->feature_set, "model to write: full or progress")
      ->check(CLI::IsMember({"full", "progress"}));
  t->add_option("--rounds", a->rounds, "boosting rounds")->check(CLI::Range(1, 100000));
  t->add_option("--max-depth", a->max_depth, "tree depth")->check(CLI::Range(1, 32));
  t->add_option("--eta", a->eta, "learning rate")->check(CLI::Range(1e-6, 1.0));
  t->add_option("--heldout", a->heldout, "held-out fraction of the problems")->check(CLI::Range(0.01, 0.9));
  t->add_option("--seed", a->seed, "split and training seed");
  t->add_option("--json", a->json, "also write the report as JSON");
  return t;
}

int RunCollectSteps(const CollectStepsArgs& a) {
  if (a.config.empty() == a.model_dir.empty()) return ReportError(InvalidArgument("collect-steps: give --config or --model"));
  std::unique_ptr<sim::DenoiserModel> owned;
  sim::DenoiserModel* model = nullptr;
  sim::EngineDenoiser* engine = nullptr;  // the same object when the engine runs
  std::vector<policy::RequestSpec> specs;
  std::vector<double> thresholds = a.thresholds;
  sim::CollectionOptions o;
  o.batch = a.batch;
  o.seed = a.seed;
  if (!a.config.empty()) {
    auto m = sim::LoadExperimentModel(a.config);
    if (!m.ok()) return ReportError(m.status());
    thresholds = m->thresholds;
    o.block_size = m->block_size;
    specs = m->requests;
    engine = m->engine;
    if (m->engine != nullptr) {
      o.id_stride = m->engine->num_problems();
      if (static_cast<int>(specs.size()) > m->engine->num_problems()) specs.resize(m->engine->num_problems());
    }
    owned = std::move(m->denoiser);
  } else {
    for (double c : thresholds) {
      Status s = ValidateThreshold(c);
      if (!s.ok()) return ReportError(s);
    }
    sim::EngineDenoiserOptions eo;
    eo.problems_file = a.tasks;
    eo.block_size = a.block_size;
    auto e = sim::EngineDenoiser::Create(a.model_dir, eo);
    if (!e.ok()) return ReportError(e.status());
    engine = e->get();
    o.block_size = (*e)->default_block_size();
    o.id_stride = (*e)->num_problems();
    for (int i = 0; i < std::min(a.requests, (*e)->num_problems()); ++i)
      specs.push_back({i, 0, (*e)->ProblemPromptLength(i), (*e)->default_output_len()});
    owned = std::move(*e);
  }
  model = owned.get();
  if (static_cast<int>(specs.size()) > a.requests) specs.resize(a.requests);
  if (specs.empty()) return ReportError(InvalidArgument("collect-steps: the workload has no requests"));
  auto rows = sim::CollectStepLog(*model, specs, thresholds, o);
  if (!rows.ok()) return ReportError(rows.status());
  if (engine != nullptr && !engine->status().ok()) return ReportError(engine->status().WithContext("engine"));
  Status w = predictor::WriteStepLog(a.out, *rows);
  if (!w.ok()) return ReportError(w);
  std::map<double, std::pair<int, int>> per;  // c -> (requests, steps)
  for (const auto& r : *rows) {
    auto& p = per[r.threshold];
    p.second += 1;
    if (r.state.steps == 0) p.first += 1;
  }
  std::printf("collect-steps: %zu rows, %zu requests x %zu thresholds, block %d -> %s\n", rows->size(), specs.size(),
              thresholds.size(), o.block_size, a.out.c_str());
  for (auto it = per.rbegin(); it != per.rend(); ++it)
    std::printf("  threshold %.2f: mean steps per request %.2f\n", it->first,
                static_cast<double>(it->second.second) / std::max(1, it->second.first));
  return 0;
}

int RunTrainPredictor(const TrainPredictorArgs& a) {
  std::vector<predictor::StepLogRow> rows;
  int64_t offset = 0;
  const int64_t num_logs = static_cast<int64_t>(a.logs.size());
  for (int64_t li = 0; li < num_logs; ++li) {
    auto r = predictor::ReadStepLog(a.logs[li]);
    if (!r.ok()) return ReportError(r.status());
    // Problems and requests of different logs are different ones.
    int64_t top = 0;
    for (auto& row : *r) {
      top = std::max(top, row.problem + 1);
      row.problem += offset;
      row.state.spec.id = row.state.spec.id * num_logs + li;
      rows.push_back(std::move(row));
    }
    offset += top;
  }
  predictor::TrainOptions o;
  o.gbm.rounds = a.rounds;
  o.gbm.max_depth = a.max_depth;
  o.gbm.eta = a.eta;
  o.gbm.seed = a.seed;
  o.heldout_fraction = a.heldout;
  o.seed = a.seed;
  auto t = predictor::TrainPredictors(rows, o);
  if (!t.ok()) return ReportError(t.status());
  const predictor::TrainReport& r = t->report;
  std::printf("%s", predictor::FormatReport(r).c_str());
  const predictor::StepPredictor& chosen = a.feature_set == "progress" ? t->progress : t->full;
  Status s = chosen.Save(a.out);
  if (!s.ok()) return ReportError(s);
  std::printf("wrote %s (%s features, refresh every %d tokens)\n", a.out.c_str(), a.feature_set.c_str(),
              r.chosen_refresh_tokens);
  if (!a.json.empty()) {
    nlohmann::json j = {{"train_rows", r.train_rows},         {"heldout_rows", r.heldout_rows},
                        {"train_problems", r.train_problems}, {"heldout_problems", r.heldout_problems},
                        {"mape_oneshot", r.mape_oneshot},     {"mape_progress", r.mape_progress},
                        {"mape_full", r.mape_full},           {"refresh_tokens", r.chosen_refresh_tokens},
                        {"train_seconds", r.train_seconds}};
    for (const auto& p : r.refresh) j["refresh"].push_back({{"k", p.k}, {"mape", p.mape}, {"refreshes", p.refreshes_per_request},
                                       {"predict_us", p.predict_us_per_request}});
    std::ofstream f(a.json);
    if (!(f << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n')) return ReportError(IoError("cannot write " + a.json));
  }
  return 0;
}

}  // namespace tediserve::cli
