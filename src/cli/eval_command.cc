#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/eval_core.h"
#include "cli/model_setup.h"
#include "common/input.h"
#include "engine/generate.h"

namespace tediserve::cli {
int RunEval(const EvalArgs& a) {
  for (double t : a.thresholds)
    if (Status s = ValidateThreshold(t); !s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      return 2;
    }
  if (a.cache != "on" && a.cache != "off" && a.cache != "both") {
    std::cerr << "error: --cache must be on, off or both\n";
    return 2;
  }
  if (a.batch < 1 || a.batch > 4096 || a.limit < 0) {
    std::cerr << "error: --batch must be in [1, 4096] and --limit >= 0\n";
    return 2;
  }
  auto bundle = LoadBundle(a.engine.model_dir);
  if (!bundle.ok()) return ReportError(bundle.status());
  auto lengths = ResolveLengths(a.engine.gen_length, a.engine.block_size, bundle->default_gen_length,
                                bundle->default_block_size);
  if (!lengths.ok()) return ReportError(lengths.status());
  const std::string tasks =
      a.tasks.empty() ? (std::filesystem::path(a.engine.model_dir) / "heldout.jsonl").string() : a.tasks;
  auto problems = engine::ReadTaskFile(tasks, *bundle->tokenizer);
  if (!problems.ok()) return ReportError(problems.status());
  if (a.limit > 0 && static_cast<size_t>(a.limit) < problems->size()) problems->resize(a.limit);
  {
    // Every problem's state (and KV buffer) lives for the whole row: check they all fit.
    size_t longest = 0;
    for (const auto& p : *problems) longest = std::max(longest, p.ids.size());
    const auto& c = bundle->model->config;
    if (static_cast<int64_t>(longest) + lengths->gen_length > c.max_seq_len)
      return ReportError(OutOfRange(SanitizeUtf8(tasks) + ": the longest prompt (" + std::to_string(longest) +
                                    " tokens) + gen length " + std::to_string(lengths->gen_length) +
                                    " exceeds the model's context of " + std::to_string(c.max_seq_len)));
    if (Status s = CheckBatchFits(*bundle->model, static_cast<int64_t>(problems->size()),
                                  static_cast<int64_t>(longest) + lengths->gen_length, "--tasks / --limit");
        !s.ok())
      return ReportError(s);
  }
  auto engine = engine::DiffusionEngine::Create(bundle->model, a.engine.tp);
  if (!engine.ok()) return ReportError(engine.status());
  std::ofstream log;
  if (Status s = OpenStepLog(a.step_log, &log); !s.ok()) return ReportError(s);
  std::vector<bool> modes;
  if (a.cache != "on") modes.push_back(false);
  if (a.cache != "off") modes.push_back(true);
  std::vector<EvalRow> rows;
  for (bool cache : modes)
    for (double th : a.thresholds) {
      engine::DecodeOptions o;
      o.gen_length = lengths->gen_length;
      o.block_size = lengths->block_size;
      o.use_cache = cache;
      o.eos_early_stop = a.engine.eos_early_stop;
      auto row = RunEvalRow(**engine, *bundle->tokenizer, *problems, o, th, a.batch,
                            [&](const std::vector<engine::StepResult>& rs, const engine::BatchStats& bs, double ms) {
                              if (!log) return;
                              for (const auto& r : rs)
                                log << engine::StepResultJson(r, static_cast<int>(rs.size()), bs.tokens, ms) << "\n";
                            });
      if (!row.ok()) {
        std::cerr << "error: " << SanitizeUtf8(tasks) << ": " << row.status().message() << "\n";
        return row.status().code() == StatusCode::kInvalidArgument || row.status().code() == StatusCode::kOutOfRange ? 2 : 1;
      }
      rows.push_back(std::move(row).value());
    }
  FillAgreement(&rows);

  std::printf("eval: %zu problems from %s, gen length %d, block %d, batch %d, TP %d\n", problems->size(),
              SanitizeUtf8(tasks).c_str(), lengths->gen_length, lengths->block_size, a.batch, a.engine.tp);
  std::printf("%-6s %9s %9s %11s %12s %8s %10s\n", "cache", "threshold", "accuracy", "mean_steps",
              "tokens/step", "wall_s", "same_ans");
  for (const EvalRow& r : rows) {
    char agree[16] = "-";
    if (r.agree_with_nocache >= 0) std::snprintf(agree, sizeof agree, "%.3f", r.agree_with_nocache);
    std::printf("%-6s %9.2f %9.3f %11.2f %12.2f %8.2f %10s\n", r.cache ? "on" : "off", r.threshold, r.accuracy,
                r.mean_steps, r.tokens_per_step, r.wall_s, agree);
  }
  std::printf("per task (accuracy / mean steps):\n%-6s %9s", "cache", "threshold");
  for (const auto& [task, _] : rows[0].per_task) std::printf(" %14s", task.c_str());
  std::printf("\n");
  for (const EvalRow& r : rows) {
    std::printf("%-6s %9.2f", r.cache ? "on" : "off", r.threshold);
    for (const auto& [task, ct] : r.per_task) {
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.3f / %.2f", static_cast<double>(ct.first) / ct.second,
                    r.per_task_steps.at(task));
      std::printf(" %14s", cell);
    }
    std::printf("\n");
  }
  if (!a.json_out.empty()) {
    nlohmann::json j;
    j["problems"] = problems->size();
    j["tasks_file"] = SanitizeUtf8(tasks);  // a path is bytes; JSON needs UTF-8
    j["batch"] = a.batch;
    j["tp"] = a.engine.tp;
    nlohmann::json arr = nlohmann::json::array();
    for (const EvalRow& r : rows) {
      nlohmann::json o = {{"cache", r.cache},           {"threshold", r.threshold},
                          {"accuracy", r.accuracy},     {"mean_steps", r.mean_steps},
                          {"tokens_per_step", r.tokens_per_step}, {"wall_s", r.wall_s}};
      if (r.agree_with_nocache >= 0) o["same_answer_as_nocache"] = r.agree_with_nocache;
      for (const auto& [task, ct] : r.per_task)
        o["per_task"][task] = {{"accuracy", static_cast<double>(ct.first) / ct.second},
                               {"mean_steps", r.per_task_steps.at(task)}};
      arr.push_back(o);
    }
    j["rows"] = arr;
    std::ofstream out(a.json_out);
    if (!out) {
      std::cerr << "error: cannot write " << SanitizeUtf8(a.json_out) << "\n";
      return 1;
    }
    out << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace tediserve::cli
