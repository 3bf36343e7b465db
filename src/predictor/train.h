// Training and evaluating the step predictor from step logs: a held-out split by problem,
// one model per feature set, the one-shot baseline fitted on the same training rows, and
// the refresh-granularity sweep of docs/design.md section 3.3 (`tediserve train-predictor`
// prints it).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/step_features.h"
#include "predictor/gbm.h"
#include "predictor/step_log.h"
#include "predictor/step_predictor.h"

namespace tediserve::predictor {

struct TrainOptions {
  GbmParams gbm;
  double heldout_fraction = 0.2;  // of the problems
  uint64_t seed = 1;
  std::vector<int> refresh_candidates{1, 2, 4, 8, 16, 32, 64};
  double refresh_tolerance = 0.05;  // k: the largest whose error is within 5% of k = 1
};

struct RefreshPoint {
  int k = 0;              // tokens between refreshes (0: at block starts)
  double mape = 0;
  double refreshes_per_request = 0;
  double predict_us_per_request = 0;  // refreshes x the measured cost of one refresh
};

struct TrainReport {
  int train_rows = 0, heldout_rows = 0, train_problems = 0, heldout_problems = 0;
  std::map<double, double> tokens_per_step;        // one-shot's T_c, fitted on the training split
  double mape_oneshot = 0, mape_progress = 0, mape_full = 0;  // held-out rows, refreshed every step
  std::map<double, std::array<double, 3>> mape_by_threshold;  // oneshot, progress, full
  std::vector<RefreshPoint> refresh;               // full model
  int chosen_refresh_tokens = 0;
  double refresh_us = 0;  // measured cost of one request's refresh (all thresholds), full model
  double train_seconds = 0;
};

struct Trained {
  StepPredictor full, progress;
  TrainReport report;
};

StatusOr<Trained> TrainPredictors(const std::vector<StepLogRow>& rows, const TrainOptions& options);

// Human-readable report (the tables `train-predictor` prints).
std::string FormatReport(const TrainReport& report);

}  // namespace tediserve::predictor
