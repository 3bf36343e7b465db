// Step predictor model files (XGBoost JSON): our own evaluator's parser
// (Forest::FromXgboostJson) on the bytes, and the full load (StepPredictor::Load: XGBoost,
// the TeDiServe attributes, then the forest) from a file.
#include "fuzz_util.h"
#include "predictor/forest.h"
#include "predictor/step_predictor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  (void)predictor::Forest::FromXgboostJson(fuzz::AsText(data, size));
  const std::string path = fuzz::WriteInput(data, size, "predictor.json");
  (void)predictor::StepPredictor::Load(path);
  return 0;
}
