// The subcommands of the `tediserve` binary. Each returns the process exit code and prints
// a clear message on bad input (exit 2) or failure (exit 1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tediserve::cli {

struct EngineArgs {
  std::string model_dir;
  int tp = 1;             // tensor-parallel degree (threads; one "device" = one core)
  std::optional<int> gen_length;  // unset: the model's default
  std::optional<int> block_size;  // unset: the model's default
  bool no_cache = false;
  bool eos_early_stop = false;
};

struct GenerateArgs {
  EngineArgs engine;
  std::string prompt;
  double threshold = 0.9;
  double temperature = 0.0;
  uint64_t seed = 0;
  bool trace = false;        // print each step (JSONL) to stderr
  std::string step_log;      // write each step (JSONL) to this file
};
int RunGenerate(const GenerateArgs& args);

struct EvalArgs {
  EngineArgs engine;
  std::string tasks;         // JSONL {"prompt","answer"[,"task"]}; default: the model's heldout.jsonl
  std::vector<double> thresholds = {0.9, 0.8, 0.7, 0.6, 0.5};
  std::string cache = "both";  // on | off | both
  int batch = 16;
  int limit = 0;             // 0: all problems
  std::string json_out;
  std::string step_log;
};
int RunEval(const EvalArgs& args);

struct BenchArgs {
  EngineArgs engine;
  std::vector<int> batches = {1, 4, 16, 64};
  int prompt_length = 24;
  int reps = 5;
  std::string json_out;
  // --large: the benchmark for checkpoints at real scale (no tokenizer needed): load time and
  // resident memory, `step_tokens`-token recompute steps and cache steps of one request, and
  // the sgemm rate of the same GEMM shapes measured in the same run.
  bool large = false;
  int step_tokens = 1024;
  int recompute_reps = 2;  // recompute steps (the median of those after the first is reported)
  int cache_reps = 3;      // cache steps after each recompute step
  std::string layout = "auto";  // auto | packed | mapped
  bool no_prefault = false;     // leave the weights to be paged in by the first step
};
int RunBench(const BenchArgs& args);

struct SimulateArgs {
  std::string config;        // YAML/JSON experiment file
  std::string out_dir;       // overrides output.dir
  bool no_plots = false;
  bool quiet = false;
};
int RunSimulate(const SimulateArgs& args);

}  // namespace tediserve::cli
