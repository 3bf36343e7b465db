// Calibrations of the statistical denoising model: the targets measured on a real model
// (tokens per step and accuracy by threshold, spread of steps between requests), the
// parameters fitted to them, and the files they live in (data/calibrations/*.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/statistical_denoiser.h"

namespace tediserve::sim {

struct Calibration {
  std::string name;
  int block_size = 32;
  std::vector<double> thresholds;       // descending, each in (0, 1]
  std::vector<double> tokens_per_step;  // T_c: mean tokens unmasked per step, per threshold
  std::vector<double> accuracy;         // task accuracy per threshold, in [0, 1]
  double steps_cv = 0;                  // CV of steps per request at thresholds[0] ...
  int cv_output_len = 256;              // ... over requests of this output length
  DenoiserParams params;
  // What the fitted model achieves (the real simulator over 10000 requests of
  // cv_output_len); informational, empty when unknown.
  std::vector<double> fitted_tokens_per_step;
  double fitted_steps_cv = 0;
  std::string source;  // provenance, free text

  // Accuracy at any threshold: linear between the calibrated ones, clamped outside.
  double AccuracyAt(double threshold) const;
  // T_c the same way (the one-shot estimate of steps is output_len / T_c).
  double TokensPerStepAt(double threshold) const;
};

// Reads and fully validates a calibration file; errors name the file and the field.
StatusOr<Calibration> LoadCalibration(const std::string& path);
// Validates, then writes `cal` as JSON.
Status SaveCalibration(const std::string& path, const Calibration& cal);
Status ValidateCalibration(const Calibration& cal);

// What a fit must reproduce.
struct FitTargets {
  std::string name;
  int block_size = 32;
  std::vector<double> thresholds;       // descending, in (0, 1]
  std::vector<double> tokens_per_step;  // non-decreasing as the threshold falls, in [1, B]
  std::vector<double> accuracy;         // carried into the calibration, not fitted
  double steps_cv = 0.3;                // target CV of steps per request at thresholds[0]
  int cv_output_len = 256;              // a multiple of block_size
  // Spread of a block's mean logit within a request. Not identifiable from T_c and one CV,
  // so it is an input (an assumption), not fitted.
  double sigma_block = 0.5;
  std::string source;
};
Status ValidateTargets(const FitTargets& t);

// Fits mu, sigma, sigma_request, delta and eta so that the simulated T_c match the targets
// (squared relative errors) and the steps CV matches steps_cv (weighted 1/4). A fixed sample
// of 4096 blocks (stratified request effects), a fixed coarse design, then Nelder-Mead from
// its best three points: the same targets give the same parameters. ~4 s for B = 32, well
// under 1 s for B = 4. fitted_* are then measured on the real simulator.
StatusOr<Calibration> FitCalibration(const FitTargets& targets);

// Statistics of the real simulator over `requests` requests of `output_len` tokens run at
// each fixed threshold (request seeds 0..requests-1 under run_seed).
struct SimulatedStats {
  std::vector<double> tokens_per_step;  // per threshold: total unmasked / total steps
  std::vector<double> steps_mean;       // per threshold: mean steps per request
  std::vector<double> steps_cv;         // per threshold: CV of steps per request
};
SimulatedStats SimulateFixedThresholds(const DenoiserParams& params, int block_size, int output_len,
                                       const std::vector<double>& thresholds, int requests, uint64_t run_seed);

// Targets from the engine's own step logs (`tediserve eval --step-log FILE`, one JSON object
// per step and request). T_c = unmasked tokens / steps over the steps taken at c (from the
// "threshold" field; float in the log, matched to 1e-4). steps_cv = CV of steps per request
// over the requests whose steps all used the top threshold. The block size is inferred from
// the unmasked positions (B = min over steps of block b >= 1 of floor(position / b)), the CV
// output length from the longest request. A request id seen again after its "done" step is a
// new request (eval reuses ids per row). Unfinished requests are ignored. If noise makes T_c
// fall as the threshold falls, T_c is made monotone (pool-adjacent-violators, weighted by
// steps) and `source` says so.
struct StepLogOptions {
  std::string name;
  // `tediserve eval --json FILE` output; accuracy per threshold comes from its "rows".
  std::string eval_json;
  bool cache_rows = true;          // rows with this "cache" value, if both kinds exist
  std::vector<double> accuracy;    // or given here, one per threshold found (high to low)
  int block_size = 0;              // > 0 overrides the inferred block size
  double sigma_block = 0.5;
};
StatusOr<FitTargets> TargetsFromStepLogs(const std::vector<std::string>& jsonl_paths,
                                         const StepLogOptions& options);

}  // namespace tediserve::sim
