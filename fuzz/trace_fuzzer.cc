// Request traces: sim::ReadTrace, built twice (TEDI_TRACE_EXT .csv / .jsonl) since the
// format follows the file's extension.
#include "fuzz_util.h"
#include "sim/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, std::string("trace") + TEDI_TRACE_EXT);
  (void)sim::ReadTrace(path);
  return 0;
}
