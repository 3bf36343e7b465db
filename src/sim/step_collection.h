// Collects step logs for the step predictor (docs/design.md sections 3.3, 4.6): runs
// requests through a denoising model under every candidate threshold, one fixed threshold
// per run, and records each request's state before every step with the steps it truly had
// left.
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "predictor/step_log.h"
#include "sim/denoiser.h"

namespace tediserve::sim {

struct CollectionOptions {
  int block_size = 32;
  int batch = 64;       // requests per batched step
  uint64_t seed = 1;    // request r gets seed + r under every threshold (the same problem)
  // Ids are threshold_index * id_stride + r: the engine in the loop maps id mod its number of
  // problems to a problem, so a stride of that number keeps every threshold on the same one.
  int64_t id_stride = 0;  // 0: requests.size()
};

// requests: specs (prompt_len, output_len > 0, a multiple of block_size when caching).
StatusOr<std::vector<predictor::StepLogRow>> CollectStepLog(DenoiserModel& model,
                                                            std::span<const policy::RequestSpec> requests,
                                                            std::span<const double> thresholds,
                                                            const CollectionOptions& options);

}  // namespace tediserve::sim
