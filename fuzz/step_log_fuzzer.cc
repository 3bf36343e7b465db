// Step logs (JSONL rows from collect-steps / eval --step-log): predictor::ReadStepLog.
#include "fuzz_util.h"
#include "predictor/step_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, "steps.jsonl");
  (void)predictor::ReadStepLog(path);
  return 0;
}
