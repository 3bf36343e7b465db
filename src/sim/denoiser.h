// A denoising model for the simulator: decides how many tokens each step unmasks.
// Two implementations (docs/design.md section 4.2): the real engine in the loop, and a
// fitted statistical model of per-token confidences.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/request.h"

namespace tediserve::sim {

struct DenoiseCommand {
  policy::RequestId id = 0;
  double threshold = 0.9;
};

class DenoiserModel {
 public:
  virtual ~DenoiserModel() = default;

  // A request enters (before its first step). block_size is the decoding block B; the
  // request's output_len is a multiple of it. seed makes its behaviour reproducible.
  virtual void Start(const policy::RequestSpec& spec, int block_size, uint64_t seed) = 0;

  // Runs one denoising step for each command (one batched call), in order. Every id must
  // have been started and not finished; ids are distinct.
  virtual std::vector<policy::StepOutcome> Step(const std::vector<DenoiseCommand>& batch) = 0;

  // Oracle: the exact number of steps the request still needs if every remaining step
  // used `threshold`. Must not change the request's state.
  virtual int RemainingSteps(policy::RequestId id, double threshold) const = 0;

  // The request left (finished or aborted); its state may be dropped.
  virtual void Finish(policy::RequestId id) = 0;
};

}  // namespace tediserve::sim
