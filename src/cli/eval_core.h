// Accuracy, steps and time of one model on a task set at one threshold: the core of
// `tediserve eval`, also used by the end-to-end quality test of the bundled model.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/decoder.h"
#include "engine/generate.h"
#include "engine/task_file.h"
#include "engine/tokenizer.h"

namespace tediserve::cli {

using EvalProblem = engine::TaskProblem;

struct EvalRow {
  bool cache = false;
  double threshold = 0;
  double accuracy = 0, mean_steps = 0, tokens_per_step = 0, wall_s = 0;
  double agree_with_nocache = -1;  // fraction with the same answer as the uncached run, if any
  std::map<std::string, std::pair<int, int>> per_task;  // task -> (correct, total)
  std::map<std::string, double> per_task_steps;         // task -> mean steps
  std::vector<std::string> answers;
};

// Runs every problem to completion at `threshold` with `options` (its gen length, block
// size and cache mode), `batch` requests per step, and scores exact matches.
StatusOr<EvalRow> RunEvalRow(engine::DiffusionEngine& engine, const engine::Tokenizer& tokenizer,
                             const std::vector<EvalProblem>& problems, const engine::DecodeOptions& options,
                             double threshold, int batch, const engine::StepObserver& observer = nullptr);

// Sets agree_with_nocache of each cached row from the uncached row at the same threshold.
void FillAgreement(std::vector<EvalRow>* rows);

}  // namespace tediserve::cli
