// Latency profiles in CSV (`num_batched_tokens,tp1_ms,...`): LatencyProfile::LoadCsv.
#include "fuzz_util.h"
#include "policy/latency_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, "profile.csv");
  (void)policy::LatencyProfile::LoadCsv(path);
  return 0;
}
