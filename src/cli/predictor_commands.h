// The step predictor's commands (docs/design.md section 3.3):
//   collect-steps    step logs: requests run under every candidate threshold, one row per step
//   train-predictor  step logs -> XGBoost model file, with a held-out report
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tediserve::cli {

struct CollectStepsArgs {
  std::string config;     // an experiment file: its denoising model, workload and thresholds
  std::string model_dir;  // or the engine on a model folder and its held-out problems
  std::string tasks;
  std::vector<double> thresholds{0.9, 0.8, 0.7, 0.6, 0.5};
  int block_size = 0;     // with --model: 0 = the model's
  int requests = 100;
  int batch = 64;
  uint64_t seed = 1;
  std::string out;
};

struct TrainPredictorArgs {
  std::vector<std::string> logs;
  std::string out;
  std::string feature_set = "full";
  int rounds = 40;  // 40 trees of depth 6: a 500 x 5 batch in < 1 ms (predictor_bench)
  int max_depth = 6;
  double eta = 0.3;
  double heldout = 0.2;
  uint64_t seed = 1;
  std::string json;
};

CLI::App* AddCollectStepsCommand(CLI::App& app, CollectStepsArgs* args);
CLI::App* AddTrainPredictorCommand(CLI::App& app, TrainPredictorArgs* args);
// Exit codes: 0 ok, 2 bad input, 1 failure.
int RunCollectSteps(const CollectStepsArgs& args);
int RunTrainPredictor(const TrainPredictorArgs& args);

}  // namespace tediserve::cli
