// Step logs for training the step predictor: one row per request per step (and one before
// its first step), holding the request's progress and confidence features at that point and
// the true number of steps it still needed at the threshold it ran under. Rows are JSONL;
// the feature vector is rebuilt from a row with policy::StepFeatures, so a log serves every
// feature set.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/request_state.h"

namespace tediserve::predictor {

struct StepLogRow {
  policy::RequestState state;  // spec (id, prompt_len, output_len), block_size, num_blocks, progress, features
  double threshold = 0.9;      // every step of this request ran at it
  int remaining = 0;           // true steps still to run (>= 1)
  int64_t problem = 0;         // the same problem under every threshold (train/held-out split key)
};

// One JSON object on one line, no trailing newline.
std::string StepLogRowJson(const StepLogRow& row);
// Reads a whole log; errors name the file and line (bad JSON, missing or out-of-range field).
StatusOr<std::vector<StepLogRow>> ReadStepLog(const std::string& path);
Status WriteStepLog(const std::string& path, const std::vector<StepLogRow>& rows);

}  // namespace tediserve::predictor
