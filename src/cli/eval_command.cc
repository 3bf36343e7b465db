#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "engine/generate.h"

namespace tediserve::cli {
namespace {

struct Problem {
  std::string task, prompt, answer;
  std::vector<int32_t> ids;
};

StatusOr<std::vector<Problem>> ReadProblems(const std::string& path, const engine::Tokenizer& tok) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open task file " + path);
  std::vector<Problem> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    const std::string where = path + ":" + std::to_string(n);
    if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
    if (!j.contains("prompt") || !j["prompt"].is_string()) return InvalidArgument(where + ": missing string field \"prompt\"");
    if (!j.contains("answer") || !j["answer"].is_string()) return InvalidArgument(where + ": missing string field \"answer\"");
    Problem p;
    p.prompt = j["prompt"];
    p.answer = j["answer"];
    p.task = j.contains("task") && j["task"].is_string() ? j["task"].get<std::string>() : "all";
    auto ids = tok.Encode(p.prompt);
    if (!ids.ok()) return ids.status().WithContext(where);
    p.ids = std::move(ids).value();
    out.push_back(std::move(p));
  }
  if (out.empty()) return InvalidArgument(path + ": no problems");
  return out;
}

struct Row {
  bool cache = false;
  double threshold = 0;
  double accuracy = 0, mean_steps = 0, tokens_per_step = 0, wall_s = 0;
  double agree_with_nocache = -1;  // fraction of problems with the same answer, if both ran
  std::map<std::string, std::pair<int, int>> per_task;  // task -> (correct, total)
  std::map<std::string, double> per_task_steps;
  std::vector<std::string> answers;
};

}  // namespace

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
  if (a.batch < 1 || a.limit < 0) {
    std::cerr << "error: --batch must be >= 1 and --limit >= 0\n";
    return 2;
  }
  auto bundle = LoadBundle(a.engine.model_dir);
  if (!bundle.ok()) {
    std::cerr << "error: " << bundle.status().message() << "\n";
    return 2;
  }
  auto lengths = ResolveLengths(a.engine.gen_length, a.engine.block_size, bundle->default_gen_length,
                                bundle->default_block_size);
  if (!lengths.ok()) {
    std::cerr << "error: " << lengths.status().message() << "\n";
    return 2;
  }
  const std::string tasks =
      a.tasks.empty() ? (std::filesystem::path(a.engine.model_dir) / "heldout.jsonl").string() : a.tasks;
  auto problems = ReadProblems(tasks, *bundle->tokenizer);
  if (!problems.ok()) {
    std::cerr << "error: " << problems.status().message() << "\n";
    return 2;
  }
  if (a.limit > 0 && static_cast<size_t>(a.limit) < problems->size()) problems->resize(a.limit);
  auto engine = engine::DiffusionEngine::Create(bundle->model, a.engine.tp);
  if (!engine.ok()) {
    std::cerr << "error: " << engine.status().message() << "\n";
    return 2;
  }
  std::ofstream log;
  if (!a.step_log.empty()) {
    log.open(a.step_log);
    if (!log) {
      std::cerr << "error: cannot write step log " << a.step_log << "\n";
      return 2;
    }
  }
  const int eos = bundle->model->config.eos_token_id;
  std::vector<bool> modes;
  if (a.cache != "on") modes.push_back(false);
  if (a.cache != "off") modes.push_back(true);
  std::vector<Row> rows;
  for (bool cache : modes)
    for (double th : a.thresholds) {
      engine::DecodeOptions o;
      o.gen_length = lengths->gen_length;
      o.block_size = lengths->block_size;
      o.use_cache = cache;
      o.eos_early_stop = a.engine.eos_early_stop;
      std::vector<std::unique_ptr<engine::DecodeState>> states;
      std::vector<engine::DecodeState*> ptrs;
      for (size_t i = 0; i < problems->size(); ++i) {
        auto s = (*engine)->NewRequest(static_cast<int64_t>(i), (*problems)[i].ids, o);
        if (!s.ok()) {
          std::cerr << "error: " << tasks << ": problem " << i + 1 << ": " << s.status().message() << "\n";
          return 2;
        }
        ptrs.push_back(s->get());
        states.push_back(std::move(s).value());
      }
      int64_t unmasked = 0, steps = 0;
      const auto t0 = std::chrono::steady_clock::now();
      Status st = engine::RunToCompletion(
          **engine, ptrs, static_cast<float>(th), a.batch,
          [&](const std::vector<engine::StepResult>& rs, const engine::BatchStats& bs, double ms) {
            for (const auto& r : rs) {
              unmasked += static_cast<int64_t>(r.unmasked.size());
              ++steps;
              if (log) log << engine::StepResultJson(r, static_cast<int>(rs.size()), bs.tokens, ms) << "\n";
            }
          });
      if (!st.ok()) {
        std::cerr << "error: " << st.message() << "\n";
        return 1;
      }
      Row row;
      row.cache = cache;
      row.threshold = th;
      row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      int correct = 0;
      for (size_t i = 0; i < problems->size(); ++i) {
        const Problem& p = (*problems)[i];
        std::string ans = bundle->tokenizer->Decode(states[i]->output_tokens(), eos);
        const bool ok = ans == p.answer;
        correct += ok;
        auto& pt = row.per_task[p.task];
        pt.first += ok;
        pt.second += 1;
        row.per_task_steps[p.task] += states[i]->steps();
        row.answers.push_back(std::move(ans));
      }
      for (auto& [task, s] : row.per_task_steps) s /= row.per_task[task].second;
      row.accuracy = static_cast<double>(correct) / problems->size();
      row.mean_steps = static_cast<double>(steps) / problems->size();
      row.tokens_per_step = steps ? static_cast<double>(unmasked) / steps : 0;
      rows.push_back(std::move(row));
    }
  // Agreement of cached answers with uncached ones at the same threshold.
  for (Row& r : rows) {
    if (!r.cache) continue;
    for (const Row& n : rows)
      if (!n.cache && n.threshold == r.threshold) {
        int same = 0;
        for (size_t i = 0; i < r.answers.size(); ++i) same += r.answers[i] == n.answers[i];
        r.agree_with_nocache = static_cast<double>(same) / r.answers.size();
      }
  }

  std::printf("eval: %zu problems from %s, gen length %d, block %d, batch %d, TP %d\n", problems->size(),
              tasks.c_str(), lengths->gen_length, lengths->block_size, a.batch, a.engine.tp);
  std::printf("%-6s %9s %9s %11s %12s %8s %10s\n", "cache", "threshold", "accuracy", "mean_steps",
              "tokens/step", "wall_s", "same_ans");
  for (const Row& r : rows) {
    char agree[16] = "-";
    if (r.agree_with_nocache >= 0) std::snprintf(agree, sizeof agree, "%.3f", r.agree_with_nocache);
    std::printf("%-6s %9.2f %9.3f %11.2f %12.2f %8.2f %10s\n", r.cache ? "on" : "off", r.threshold, r.accuracy,
                r.mean_steps, r.tokens_per_step, r.wall_s, agree);
  }
  std::printf("per task (accuracy / mean steps):\n%-6s %9s", "cache", "threshold");
  for (const auto& [task, _] : rows[0].per_task) std::printf(" %14s", task.c_str());
  std::printf("\n");
  for (const Row& r : rows) {
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
    j["tasks_file"] = tasks;
    j["batch"] = a.batch;
    j["tp"] = a.engine.tp;
    nlohmann::json arr = nlohmann::json::array();
    for (const Row& r : rows) {
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
      std::cerr << "error: cannot write " << a.json_out << "\n";
      return 1;
    }
    out << j.dump(1) << "\n";
  }
  return 0;
}

}  // namespace tediserve::cli
