// The policy core's view of one live request: spec, decoding progress as reported by steps,
// placement, and the current step-count predictions. Owned by the Scheduler; made by
// MakeRequestState wherever a request starts (the scheduler, step collection), so training
// and serving see the same initial state.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "policy/request.h"

namespace tediserve::policy {

inline constexpr int kMaxThresholds = 8;

struct RequestState {
  RequestSpec spec;
  Seconds deadline = 0;
  int block_size = 0;
  int num_blocks = 0;
  bool cache = true;

  // Progress (updated from StepOutcomes).
  int block = 0;              // index of the current block
  int steps = 0;              // steps done
  int steps_in_block = 0;     // steps done in the current block
  int unmasked = 0;           // tokens unmasked so far
  int unmasked_in_block = 0;
  bool done = false;
  ConfidenceFeatures features;  // of the latest step (count 0 before the first)

  // Placement.
  InstanceId instance = -1;   // resident instance, -1 when waiting
  bool in_flight = false;     // part of a step that has not come back yet
  int64_t batch = 0;          // the step batch it is in while in_flight (0: none)
  // False once the KV cache the request had on an instance is gone (the instance failed or
  // its step was lost): the next step must push the whole sequence (a recompute step).
  bool kv_valid = true;
  int failures = 0;           // its steps lost to failed batches or instances
  // Past its deadline when the scheduler last looked (only with PolicyOptions::defer_late):
  // it can no longer meet its SLO, so it yields to requests that still can.
  bool late = false;
  int migrations = 0;
  int queued_tokens = 0;      // this request's share of its instance's next batch

  // Thresholds: the one of its next step, and its cap: from load control (Algorithm 2), or
  // the threshold planned at arrival (ThresholdKind::kPlannedRescue).
  double threshold = 0.9;
  double cap = 1.0;

  // Predicted remaining steps per candidate threshold (index as in the policy's list),
  // refreshed every `refresh_tokens` newly unmasked tokens and decremented by one per step
  // in between (docs/design.md section 3.3).
  std::array<double, kMaxThresholds> predicted{};
  int tokens_since_refresh = 0;
  bool needs_prediction = true;
  bool prediction_pending = false;  // async: a refresh was sent out and has not come back
  int prediction_steps = 0;         // steps done when it was sent

  // The next step pushes the whole sequence through the network (recompute) or only the
  // block (cache step).
  bool NextIsRecompute() const { return !cache || steps_in_block == 0 || !kv_valid; }
  int NextStepTokens() const {
    return NextIsRecompute() ? spec.prompt_len + spec.output_len : block_size;
  }
  // Tokens of the step after one with outcome `o` within the same batch (the KV cache stays
  // valid there): the sequence where o ended a block (or without the cache), else the block.
  int TokensAfter(const StepOutcome& o) const {
    return !cache || o.block_done ? spec.prompt_len + spec.output_len : block_size;
  }
  // R_r: recompute steps still to come (one per block not yet started; every step without
  // the cache is a recompute step, so then it is the step count itself and not known here).
  // A lost cache adds one recompute step inside the current block.
  int RemainingRecomputeSteps() const {
    return num_blocks - block - (steps_in_block > 0 && kv_valid ? 1 : 0);
  }
  // Lower bound on remaining steps: every unfinished block needs one more step at least.
  int MinRemainingSteps() const { return num_blocks - block; }

  // Counts a finished step into the progress fields; true when the request is now done.
  bool Apply(const StepOutcome& o) {
    steps += 1;
    steps_in_block += 1;
    kv_valid = true;  // whatever step ran, the instance now holds this request's KV cache
    unmasked += o.unmasked;
    unmasked_in_block += o.unmasked;
    features = o.features;
    if (o.block_done) {
      block += 1;
      steps_in_block = 0;
      unmasked_in_block = 0;
    }
    done = o.request_done || block >= num_blocks;
    return done;
  }
};

// The state of a request before its first step: blocks of `block_size` over its output (at
// least one), decoding starting at `first_threshold`.
inline RequestState MakeRequestState(const RequestSpec& spec, int block_size, bool cache, double first_threshold) {
  RequestState r;
  r.spec = spec;
  r.deadline = spec.arrival + spec.slo;
  r.block_size = block_size;
  r.num_blocks = std::max(1, (spec.output_len + block_size - 1) / block_size);
  r.cache = cache;
  r.threshold = first_threshold;
  return r;
}

}  // namespace tediserve::policy
