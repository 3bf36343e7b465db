// Denoiser calibrations (JSON from fit-denoiser): sim::LoadCalibration.
#include "fuzz_util.h"
#include "sim/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, "calibration.json");
  (void)sim::LoadCalibration(path);
  return 0;
}
