// Latency profiles in JSON (`{"tokens": seconds, ...}` per TP degree):
// LatencyProfile::LoadJson with the bytes as the TP-1 file.
#include "fuzz_util.h"
#include "policy/latency_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, "profile.json");
  (void)policy::LatencyProfile::LoadJson({{1, path}});
  return 0;
}
