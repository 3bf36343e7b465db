// Runs a set of requests to completion at a fixed threshold, one batched step at a time:
// the simplest driver of the engine (the `generate` and `eval` commands use it; the
// scheduler drives steps itself).
#pragma once

#include <functional>
#include <string>
#include <span>

#include "engine/decoder.h"

namespace tediserve::engine {

// Called after every step with the batch's results and the step's wall time.
using StepObserver = std::function<void(const std::vector<StepResult>&, const BatchStats&, double)>;

// Steps every request of `states` that is not done until all are. At most `max_batch`
// requests go into one step (0 = all); requests enter in order as others finish.
Status RunToCompletion(DiffusionEngine& engine, std::span<DecodeState* const> states, float threshold,
                       int max_batch = 0, const StepObserver& observer = nullptr);

// One JSON object (one line) describing a step's result, for --trace and step logs.
std::string StepResultJson(const StepResult& r, int batch_size, int64_t batch_tokens, double step_ms);

// The output up to (not including) its first end-of-text token (any of the model's EOS ids).
std::vector<int32_t> UntilEos(const std::vector<int32_t>& ids, const ModelConfig& config);

}  // namespace tediserve::engine
