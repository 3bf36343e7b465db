// `tediserve fit-denoiser`: fits a calibration of the simulator's statistical denoising model
// (docs/design.md section 4.2 (b), data/calibrations/README.md) and measures its speed.
//   fit-denoiser targets  measured targets given as flags -> calibration JSON
//   fit-denoiser logs     `tediserve eval --step-log/--json` outputs -> calibration JSON
//   fit-denoiser bench    simulated request-steps per second, with and without features
#pragma once

#include <string>
#include <vector>

#include "sim/calibration.h"

namespace CLI {
class App;
}

namespace tediserve::cli {

struct FitDenoiserArgs {
  // targets
  sim::FitTargets targets;
  std::string targets_out;
  // logs
  std::vector<std::string> logs;
  sim::StepLogOptions log_options;
  std::string note;  // appended to the calibration's source text
  std::string logs_out;
  // bench
  std::string calibration;
  int requests = 64000;
  int output_len = 256;
  int concurrency = 256;
  double threshold = 0.9;
};

// Adds `fit-denoiser` with its three subcommands to `app`, filling `args` on parse.
CLI::App* AddFitDenoiserCommand(CLI::App& app, FitDenoiserArgs* args);

// Runs the subcommand that was parsed; the process exit code (2: bad input, 1: failure).
int RunFitDenoiser(const CLI::App& command, const FitDenoiserArgs& args);

}  // namespace tediserve::cli
