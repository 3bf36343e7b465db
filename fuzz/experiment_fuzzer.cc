// Experiment files (YAML/JSON): sim::LoadExperimentModel, which parses the whole config
// (cluster, model, policy, workload, SLO) and builds the denoiser and the requests without
// running a simulation. Relative paths in seeds resolve against the source tree (the
// fuzzer runs there, see scripts/fuzz.sh).
#include "fuzz_util.h"
#include "sim/experiment.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, "experiment.yaml");
  (void)sim::LoadExperimentModel(path);
  return 0;
}
