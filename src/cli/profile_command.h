// `tediserve profile`: measures a model's step-latency profile l_d(n) on this machine, in
// the CSV format of the shipped LLaDA H100 profile (`num_batched_tokens,tp1_ms,tp2_ms,...`,
// median milliseconds of one engine step whose batch pushes n tokens).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tediserve::cli {

struct ProfileArgs {
  std::string model_dir;
  std::vector<int> tp = {1, 2};  // one column per degree
  int min_tokens = 8;
  int max_tokens = 1024;
  int step_tokens = 8;           // linear grid min, min+step, ..., max
  bool geometric = false;        // instead: min, 2*min, 4*min, ... (and max)
  int repeats = 5;               // timed steps per point (median), after one warm-up
  std::string kind = "recompute";  // recompute | cache: which step kind fills the batch
  int prompt_length = 24;        // per request; a request's sequence = prompt + gen length
  std::optional<int> gen_length;  // unset: the model's default
  std::optional<int> block_size;  // unset: the model's default (cache kind only)
  std::string out;               // CSV path; empty: stdout
};

// Adds the `profile` subcommand and its flags to `app`, filling `args` on parse.
CLI::App* AddProfileCommand(CLI::App& app, ProfileArgs* args);

// Runs it; the process exit code (2: bad flags or model, 1: failure).
int RunProfile(const ProfileArgs& args);

}  // namespace tediserve::cli
