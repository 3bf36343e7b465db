#include "policy/step_estimator.h"

#include <algorithm>
#include <cassert>

namespace tediserve::policy {

OneShotEstimator::OneShotEstimator(std::vector<double> thresholds, std::vector<double> tokens_per_step)
    : thresholds_(std::move(thresholds)), tokens_per_step_(std::move(tokens_per_step)) {
  assert(!thresholds_.empty() && thresholds_.size() == tokens_per_step_.size());
}

double OneShotEstimator::TokensPerStep(double c) const {
  // thresholds_ descend; interpolate steps per token (what adds up over a request).
  if (c >= thresholds_.front()) return tokens_per_step_.front();
  if (c <= thresholds_.back()) return tokens_per_step_.back();
  for (size_t k = 1; k < thresholds_.size(); ++k) {
    if (c >= thresholds_[k]) {
      const double f = (thresholds_[k - 1] - c) / (thresholds_[k - 1] - thresholds_[k]);
      const double spt = (1 - f) / tokens_per_step_[k - 1] + f / tokens_per_step_[k];
      return 1.0 / spt;
    }
  }
  return tokens_per_step_.back();
}

void OneShotEstimator::Predict(const RequestState& r, std::span<const double> thresholds,
                               std::span<double> out) {
  for (size_t k = 0; k < thresholds.size(); ++k) {
    const double total = r.spec.output_len / TokensPerStep(thresholds[k]);
    out[k] = std::max<double>(r.MinRemainingSteps(), total - r.steps);
  }
}

}  // namespace tediserve::policy
