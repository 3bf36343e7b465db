// `tediserve simulate CONFIG`: a YAML (or JSON) file describes the cluster, model, policy,
// workload and SLO; optional `policies:` and `sweep:` turn one file into a whole experiment
// (every policy at every sweep value). Writes JSON + CSV results and PNG plots.
#pragma once

#include <string>

#include "common/status.h"

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

}  // namespace tediserve::sim
