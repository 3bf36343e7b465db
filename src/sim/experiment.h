// `tediserve simulate CONFIG`: a YAML (or JSON) file describes the cluster, model, policy,
// workload and SLO; optional `policies:` and `sweep:` turn one file into a whole experiment
// (every policy at every sweep value). Writes JSON + CSV results and PNG plots.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/request.h"
#include "sim/denoiser.h"

namespace tediserve::sim {

struct ExperimentOptions {
  std::string config_path;
  std::string out_dir;      // overrides output.dir when not empty
  bool plots = true;        // gnuplot PNGs (a missing gnuplot is a warning)
  bool progress = true;     // a progress line on long runs
  bool quiet = false;
};

// Runs the experiment; prints the results table to stdout. A bad config is an
// InvalidArgument naming the field.
Status RunExperiment(const ExperimentOptions& options);

class EngineDenoiser;

// The denoising model and the requests one run of a config describes (its workload, block
// size and candidate thresholds), for tools that drive the model directly rather than
// simulate a cluster (`tediserve collect-steps`).
struct ExperimentModel {
  std::unique_ptr<DenoiserModel> denoiser;
  EngineDenoiser* engine = nullptr;  // the same object when the engine is in the loop
  std::vector<policy::RequestSpec> requests;
  int block_size = 32;
  bool cache = true;
  std::vector<double> thresholds;       // the policy's candidates, descending
  std::vector<double> tokens_per_step;  // T_c of the calibration at each candidate
};
StatusOr<ExperimentModel> LoadExperimentModel(const std::string& config_path);

}  // namespace tediserve::sim
