#include "host/estimators.h"

namespace tediserve::host {

StatusOr<std::unique_ptr<Estimators>> Estimators::Create(const EstimatorOptions& o,
                                                         policy::OracleEstimator::Truth truth) {
  std::unique_ptr<Estimators> e(new Estimators());
  if (o.kind == "oneshot") {
    if (o.tokens_per_step.size() != o.thresholds.size()) {
      return InvalidArgument("the one-shot estimator needs tokens per step for every candidate threshold");
    }
    e->estimator_ = std::make_unique<policy::OneShotEstimator>(o.thresholds, o.tokens_per_step);
  } else if (o.kind == "oracle") {
    if (!truth) return InvalidArgument("policy.estimator: oracle needs a denoising model that knows the future");
    e->estimator_ = std::make_unique<policy::OracleEstimator>(std::move(truth), o.oracle_refresh_tokens);
  } else if (o.kind == "predictor") {
    if (o.tokens_per_step.size() != o.thresholds.size()) {
      return InvalidArgument("the predictor's one-shot fallback needs tokens per step for every candidate threshold");
    }
    auto p = predictor::StepPredictor::Load(o.predictor_model);
    if (!p.ok()) return p.status().WithContext("policy.predictor");
    e->predictor_ = std::make_unique<predictor::StepPredictor>(std::move(*p));
    const int k = o.predictor_refresh_tokens >= 0 ? o.predictor_refresh_tokens : e->predictor_->refresh_tokens();
    auto t = std::make_unique<predictor::TrainedEstimator>(
        e->predictor_.get(), policy::OneShotEstimator(o.thresholds, o.tokens_per_step), k);
    e->trained_ = t.get();
    e->estimator_ = std::move(t);
    if (o.predictor_async) {
      // The prediction thread gets its own copy of the model (a StepPredictor is not shared
      // between threads); arrivals keep predicting inline on the first one.
      auto q = predictor::StepPredictor::Load(o.predictor_model);
      if (!q.ok()) return q.status().WithContext("policy.predictor");
      e->worker_predictor_ = std::make_unique<predictor::StepPredictor>(std::move(*q));
      e->worker_estimator_ = std::make_unique<predictor::TrainedEstimator>(
          e->worker_predictor_.get(), policy::OneShotEstimator(o.thresholds, o.tokens_per_step), k);
      e->worker_ = std::make_unique<predictor::PredictionWorker>(e->worker_estimator_.get(), o.thresholds);
    }
  } else {
    return InvalidArgument("policy.estimator: unknown \"" + o.kind + "\" (expected oneshot, oracle, predictor)");
  }
  return e;
}

int64_t Estimators::fallbacks() const {
  int64_t n = trained_ != nullptr ? trained_->fallbacks() : 0;
  if (worker_estimator_) n += worker_estimator_->fallbacks();
  return n;
}

}  // namespace tediserve::host
