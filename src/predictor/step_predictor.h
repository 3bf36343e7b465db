// The trained step predictor (docs/design.md section 3.3): a gradient-boosted model of
// remaining steps / output length over policy::StepFeatures rows, loaded from one file that
// records its feature set and column names, so that a model built for other features is an
// error at load time and never a silent wrong prediction.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/request_state.h"
#include "policy/step_estimator.h"
#include "policy/step_features.h"
#include "predictor/forest.h"
#include "predictor/gbm.h"

namespace tediserve::predictor {

// Attribute keys in the model file.
inline constexpr const char* kAttrFeatureSet = "tediserve_feature_set";
inline constexpr const char* kAttrFeatures = "tediserve_features";
inline constexpr const char* kAttrRefreshTokens = "tediserve_refresh_tokens";

class StepPredictor {
 public:
  // Wraps a freshly trained model (tags it with the feature set).
  static StatusOr<StepPredictor> FromGbm(Gbm gbm, policy::FeatureSet set);
  // Missing, corrupt, untagged, or a feature list other than this build's: an error.
  static StatusOr<StepPredictor> Load(const std::string& path);
  Status Save(const std::string& path) const;

  policy::FeatureSet feature_set() const { return set_; }
  // Refresh granularity k recorded at training (0: unknown, refresh at block starts).
  int refresh_tokens() const { return refresh_tokens_; }
  Status set_refresh_tokens(int k);

  // Predicted remaining steps, out[i * thresholds.size() + k] for requests[i] under
  // thresholds[k], in one model call; never below the request's unfinished block count.
  Status Predict(std::span<const policy::RequestState* const> requests, std::span<const double> thresholds,
                 std::span<double> out);
  // Raw model output (remaining / output_len) for prepared rows.
  Status PredictRows(std::span<const float> rows, std::span<float> out) const { return gbm_.Predict(rows, out); }

 private:
  StepPredictor(Gbm gbm, Forest forest, policy::FeatureSet set)
      : gbm_(std::move(gbm)), forest_(std::move(forest)), set_(set) {}
  Gbm gbm_;
  Forest forest_;
  policy::FeatureSet set_;
  int refresh_tokens_ = 0;
  std::vector<float> row_, values_, raw_;  // scratch
};

// The policy core's estimator backed by the predictor. Predict() is one request's batched
// call over all thresholds; a failed call falls back to the one-shot estimate and is
// counted (fallbacks()), so the caller can log and export it.
class TrainedEstimator : public policy::StepEstimator {
 public:
  TrainedEstimator(StepPredictor* predictor, policy::OneShotEstimator fallback, int refresh_tokens)
      : predictor_(predictor), fallback_(std::move(fallback)), refresh_tokens_(refresh_tokens) {}
  void Predict(const policy::RequestState& r, std::span<const double> thresholds, std::span<double> out) override;
  void PredictBatch(std::span<const policy::RequestState* const> requests, std::span<const double> thresholds,
                    std::span<double> out) override;
  int refresh_tokens() const override { return refresh_tokens_; }
  const char* name() const override { return "predictor"; }
  int64_t fallbacks() const { return fallbacks_; }

 private:
  StepPredictor* predictor_;
  policy::OneShotEstimator fallback_;
  int refresh_tokens_;
  int64_t fallbacks_ = 0;
};

}  // namespace tediserve::predictor
