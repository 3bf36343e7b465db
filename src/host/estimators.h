// The step estimators a host can run (docs/design.md section 3.3): the one-shot baseline, the
// oracle (simulation only: the denoising model knows the truth), and the trained predictor,
// inline or on its own prediction thread. One place builds them for every driver.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/step_estimator.h"
#include "predictor/prediction_worker.h"
#include "predictor/step_predictor.h"

namespace tediserve::host {

struct EstimatorOptions {
  std::string kind = "oneshot";        // oneshot | oracle | predictor
  int oracle_refresh_tokens = 0;       // 0: refresh at block starts
  std::string predictor_model;         // the trained step predictor's file (kind predictor)
  int predictor_refresh_tokens = -1;   // k; -1: the one recorded in the model file
  bool predictor_async = false;        // refreshes on the prediction thread
  std::vector<double> thresholds;       // the policy's candidates, high to low
  std::vector<double> tokens_per_step;  // T_c at each candidate: the one-shot estimate (and
                                        // the predictor's fallback)
};

class Estimators {
 public:
  // `truth` answers the oracle (required for kind oracle, unused otherwise).
  static StatusOr<std::unique_ptr<Estimators>> Create(const EstimatorOptions& options,
                                                      policy::OracleEstimator::Truth truth = nullptr);
  policy::StepEstimator* estimator() { return estimator_.get(); }
  // The prediction thread (null unless predictor_async).
  predictor::PredictionWorker* worker() { return worker_.get(); }
  // Predictions that fell back to one-shot (kind predictor), on either thread. Read it on
  // the loop thread while the prediction thread is idle (e.g. at the end of a run).
  int64_t fallbacks() const;

 private:
  Estimators() = default;
  std::unique_ptr<predictor::StepPredictor> predictor_, worker_predictor_;
  std::unique_ptr<policy::StepEstimator> estimator_;
  predictor::TrainedEstimator* trained_ = nullptr;  // estimator_, when it is the predictor
  std::unique_ptr<predictor::TrainedEstimator> worker_estimator_;
  std::unique_ptr<predictor::PredictionWorker> worker_;  // declared last: joins first
};

}  // namespace tediserve::host
