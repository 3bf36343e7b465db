// Estimates of remaining denoising steps S_r(c) for every candidate threshold c, read by
// Algorithms 1 and 2. The trained predictor is its own module; here are the interface, the
// one-shot baseline, and an oracle adapter (the simulator knows the truth).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "policy/request_state.h"

namespace tediserve::policy {

class StepEstimator {
 public:
  virtual ~StepEstimator() = default;
  // Writes the predicted remaining steps of `r` under each of `thresholds` to `out`
  // (same length). Called on refresh only; the scheduler decrements in between.
  virtual void Predict(const RequestState& r, std::span<const double> thresholds,
                       std::span<double> out) = 0;
  // The same for many requests in one call: out[i * thresholds.size() + k]. The default
  // calls Predict per request; a model-backed estimator makes it one batched call.
  virtual void PredictBatch(std::span<const RequestState* const> requests, std::span<const double> thresholds,
                            std::span<double> out) {
    const size_t n = thresholds.size();
    for (size_t i = 0; i < requests.size(); ++i) Predict(*requests[i], thresholds, out.subspan(i * n, n));
  }
  // Tokens unmasked between refreshes (k of docs/design.md section 3.3); 0 = refresh at
  // block starts.
  virtual int refresh_tokens() const = 0;
  virtual const char* name() const = 0;
};

// One-shot: O x (historical mean steps per token at c), minus the steps already done, never
// below one step per unfinished block. It knows nothing of this request's progress.
class OneShotEstimator : public StepEstimator {
 public:
  // tokens_per_step[k]: historical mean tokens unmasked per step at thresholds[k] (T_c).
  OneShotEstimator(std::vector<double> thresholds, std::vector<double> tokens_per_step);
  void Predict(const RequestState& r, std::span<const double> thresholds,
               std::span<double> out) override;
  int refresh_tokens() const override { return 0; }
  const char* name() const override { return "oneshot"; }
  // T_c at any threshold: linear interpolation in steps per token, clamped at the ends.
  double TokensPerStep(double threshold) const;

 private:
  std::vector<double> thresholds_, tokens_per_step_;
};

// Oracle: asks whoever knows the true future (the simulator's denoising model).
class OracleEstimator : public StepEstimator {
 public:
  using Truth = std::function<int(RequestId, double threshold)>;
  explicit OracleEstimator(Truth truth, int refresh_tokens = 0)
      : truth_(std::move(truth)), refresh_tokens_(refresh_tokens) {}
  void Predict(const RequestState& r, std::span<const double> thresholds,
               std::span<double> out) override {
    for (size_t k = 0; k < thresholds.size(); ++k) out[k] = truth_(r.spec.id, thresholds[k]);
  }
  int refresh_tokens() const override { return refresh_tokens_; }
  const char* name() const override { return "oracle"; }

 private:
  Truth truth_;
  int refresh_tokens_;
};

}  // namespace tediserve::policy
