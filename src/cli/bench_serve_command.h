// `tediserve bench-serve`: the load generator of the serving runtime (docs/design.md section 5,
// "Load generator"). Sends the model's held-out problems to a running server's
// /v1/completions at Poisson or Gamma arrivals, a BurstGPT profile, a trace or a simulator
// workload, grades every answer, and reports SLO attainment, goodput, latency percentiles,
// accuracy, throughput and the scheduler's overhead from /metrics; with --policies it starts
// `tediserve serve` once per policy and rate itself and compares them on identical arrivals;
// with --fidelity it also replays each run in the simulator and prints live vs simulated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tediserve::cli {

struct BenchServeArgs {
  std::string url;                   // a running server (default http://127.0.0.1:8000)
  std::vector<std::string> policies; // start one server per policy (and rate) instead
  std::string model_dir;
  std::string tasks;                 // default MODEL/heldout.jsonl
  std::string arrivals = "poisson";  // poisson | gamma
  std::vector<double> rates;
  // Instead of --rate: rates as these multiples of the capacity measured on the server before
  // the runs (requests kept in flight, closed loop), so "1.3 x capacity" means the same on a
  // fast machine and a slow one.
  std::vector<double> load_factors;
  int capacity_concurrency = 64;
  double capacity_seconds = 6;
  double cv = 1;
  int64_t requests = 0;
  double duration_s = 0;
  std::string trace, burstgpt, workload;
  double minutes_per_hour = 5;
  uint64_t seed = 1;
  double slo_ms = 0;
  double slo_scale = 10;
  // --slo-scale's latency alone: "live" measures it on the server before the runs (solo
  // requests; the profile's times scaled by the median measured / profiled ratio), "profile"
  // takes the latency profile's as it is.
  std::string slo_basis = "live";
  int slo_probes = 10;
  std::string profile, calibration;
  int max_tokens = 0;
  int connections = 512;          // serve's --http-threads default
  double timeout_s = 120;
  int warmup = 8;
  int repeat = 1;
  double goodput_target = 0.9;
  double window_s = 1;
  std::string json_out, plots_dir, trace_out;
  bool quiet = false;
  std::string api_key;
  // Servers started with --policies.
  std::string layout, cores;
  bool no_cache = false;
  std::vector<std::string> serve_args;
  double server_start_timeout_s = 180;
  // --fidelity: after each live run, the simulator replays the same plan (cli/fidelity.h).
  bool fidelity = false;
  int fidelity_probes = 40;  // solo requests before each run that measure the live path's overhead
  // Replays of each run with different step-time noise, pooled: the simulator's prediction is
  // its mean over its own randomness, not one draw of it.
  int fidelity_draws = 5;
};

CLI::App* AddBenchServeCommand(CLI::App& app, BenchServeArgs* args);
int RunBenchServe(const CLI::App& command, const BenchServeArgs& args);

}  // namespace tediserve::cli
