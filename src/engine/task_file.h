// Task files: JSONL problems {"prompt": ..., "answer": ...[, "task": ...]}, one per line,
// read by `tediserve eval`, the e2e quality test and the simulator's engine-in-the-loop mode.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/tokenizer.h"

namespace tediserve::engine {

struct TaskProblem {
  std::string task;  // "all" when the line has no "task"
  std::string prompt, answer;
  std::vector<int32_t> ids;  // the tokenized prompt, never empty
};

// Blank lines are skipped. Errors name the file and line: not a JSON object, a missing or
// non-string field, a prompt the tokenizer rejects or that is empty, or no problems at all.
StatusOr<std::vector<TaskProblem>> ReadTaskFile(const std::string& path, const Tokenizer& tokenizer);

// The grading of a problem, for `tediserve eval` and the load generator alike: the output text
// (decoded up to EOS) must equal the answer exactly.
inline bool IsCorrectAnswer(std::string_view output_text, std::string_view answer) { return output_text == answer; }

}  // namespace tediserve::engine
