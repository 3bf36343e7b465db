// `tediserve simulate CONFIG`: runs the discrete-event simulator (src/sim/experiment.h).
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "sim/experiment.h"

namespace tediserve::cli {

int RunSimulate(const SimulateArgs& args) {
  sim::ExperimentOptions o;
  o.config_path = args.config;
  o.out_dir = args.out_dir;
  o.plots = !args.no_plots;
  o.progress = !args.quiet;
  o.quiet = args.quiet;
  const Status s = sim::RunExperiment(o);
  if (!s.ok()) return ReportError(s);
  return 0;
}

}  // namespace tediserve::cli
