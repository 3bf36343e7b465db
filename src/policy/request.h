// What the policy core knows about a request: its immutable spec, and what a step reports.
// Pure data; the policy core, the simulator and (later) the runtime all speak these types.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace tediserve::policy {

using Seconds = double;
using RequestId = int64_t;   // dense: 0, 1, 2, ... in arrival order within one run
using InstanceId = int32_t;

// The candidate thresholds the confidence counts refer to (docs/design.md section 3.3), high
// to low.
inline constexpr std::array<double, 5> kDefaultThresholds = {0.9, 0.8, 0.7, 0.6, 0.5};

struct RequestSpec {
  RequestId id = 0;
  Seconds arrival = 0;      // seconds since the start of the run
  int prompt_len = 0;       // P, tokens
  int output_len = 0;       // O, tokens (a multiple of block_size when caching)
  Seconds slo = 0;          // latency SLO s; deadline = arrival + slo
  int priority = 0;         // higher first in load control (paper 3.5)
  int slo_class = 0;        // index of its SLO class (reporting only)
  double slo_factor = 1;    // with slo 0: the SLO is the run's default SLO times this
  double min_threshold = 0; // optional per-request threshold bounds (0 / 1: none)
  double max_threshold = 1;
};

// Min, quartiles and mean of a set of confidences; count 0 means the set was empty.
struct ConfidenceSummary {
  int count = 0;
  float min = 0, q1 = 0, median = 0, q3 = 0, mean = 0;
};

// The confidence features of one step (taken before unmasking), as the step predictor reads
// them: the current block's masked positions, the whole output's masked positions, and how
// many masked block positions clear each candidate threshold (kDefaultThresholds order).
struct ConfidenceFeatures {
  ConfidenceSummary block;
  ConfidenceSummary output;
  std::array<int, kDefaultThresholds.size()> block_above{};
};

// What one denoising step did to one request.
struct StepOutcome {
  RequestId id = 0;
  int unmasked = 0;          // tokens unmasked by this step (>= 1)
  bool block_done = false;   // the current block has no masked position left
  bool request_done = false; // the whole output is unmasked (or stopped early)
  ConfidenceFeatures features;
};

}  // namespace tediserve::policy
