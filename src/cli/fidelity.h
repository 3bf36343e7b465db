// Simulator fidelity (`tediserve bench-serve --fidelity`, docs/design.md section 5, "Load
// generator"): the simulator (src/sim) replays exactly what a live run sent — the same
// arrivals, prompts, output lengths, SLOs, layout, policy, latency profile and calibration,
// with the real engine in the loop deciding what each step unmasks — and its SLO attainment
// and latency are set against the live run's.
//
// The live path costs more than the profile's engine steps: every step batch crosses gRPC
// and the runtime loop, every request crosses HTTP. Those costs are measured, never fitted to
// the result: before each live run, `probes` requests are sent one at a time to the idle
// server, and each is compared with the simulator's prediction for it alone:
//   per request = median(client latency - the server's own latency)      (HTTP in and out)
//   per step    = median((server latency - simulated latency) / steps)   (RPC, loop, worker)
// The simulation then charges every step batch the profile's time plus `per step` (a second,
// "truth" profile, docs/design.md section 4.4: the policy still prices steps with the
// profile, as the live server does) and adds `per request` to every request's latency. A
// constant per-request term is exact to add afterwards: it shifts every arrival and every
// departure alike. Everything here is deterministic and unit-tested (fidelity_test.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/loadgen.h"
#include "common/status.h"
#include "engine/task_file.h"
#include "policy/latency_profile.h"

namespace tediserve::cli::fidelity {

// A run's measured step time over the profile's, as a function of a batch's tokens.
struct StepScale {
  double overall = 1;  // over the whole run; where no size class has enough batches
  // (mean tokens of a size class, its ratio), tokens ascending: linear between points, flat
  // beyond the first and the last.
  std::vector<std::pair<double, double>> points;
  // How fast the machine ran over time: (from second, factor) since the run's start, times
  // ascending; a step that starts in an interval takes At(tokens) x its factor (empty: 1).
  std::vector<std::pair<double, double>> level;
  StepScale(double s = 1) : overall(s) {}  // NOLINT: one ratio everywhere
  double At(double tokens) const;
  double LevelAt(double t) const;  // 1 before the first interval
  bool IsOne() const { return overall == 1 && points.empty() && level.empty(); }
};
// A size class gives a point once it holds this many batches: fewer are too noisy to trust.
inline constexpr double kMinClassBatches = 10;
// The run's ratio by size class (loadgen::Overhead::step_sizes) with `overall` for the rest.
// With `per_batch_s` > 0 each batch's launch-to-result time is that fixed cost (the round trip,
// paid by the replay once per batch) plus a ratio of its profile time: the ratio is fitted on
// what is left after the fixed cost (a class left with nothing gives no point).
StepScale StepScaleFrom(const std::vector<loadgen::StepSizeClass>& classes, double overall,
                        double per_batch_s = 0);
// How much single batches scatter around their class's mean ratio, as the log-sd of a
// lognormal factor with mean 1 and the same coefficient of variation (sim::SimOptions::
// step_time_sigma): sigma^2 = ln(1 + CV^2), CV^2 pooled over the classes (weighted by batches;
// classes of fewer than kMinClassBatches batches left out). 0 when nothing qualifies.
double StepSigmaFrom(const std::vector<loadgen::StepSizeClass>& classes);
// The level over time from the step counters sampled during the run (loadgen::GaugeSample::
// step_sizes, totals, the first sample at the start): in each interval between two samples,
// the launch-to-result time of its batches over what `scale` gives them (each class's profile
// time x At(its mean tokens)); an interval of fewer than kMinLevelBatches batches keeps the
// previous level (1 at first). Sets scale->level and returns the log-sd of the level across
// the run's batches (each interval weighted by its batches), the part of the scatter that the
// level already holds.
inline constexpr double kMinLevelBatches = 5;
// With `per_batch_s` > 0 the level scales only what is left of each interval's batches after
// that fixed cost per batch (as StepScaleFrom fits them).
double StepLevelFrom(const std::vector<loadgen::GaugeSample>& samples, StepScale* scale, double per_batch_s = 0);

// Costs of the live path that the latency profile leaves out.
struct Overhead {
  double per_step_s = 0;     // added to every step batch's duration
  double per_request_s = 0;  // added to every request's latency
  // Every step batch's duration is the profile's times this (then + per_step_s): the run's own
  // launch-to-result time of its batches over the profile's time for them, by batch size,
  // from the server's /metrics (1: not measured). It replaces per_step_s when measured: the
  // probes run alone, the run's steps share the cores with the load it puts on them.
  StepScale step_scale;
  double step_sigma = 0;  // each batch's duration times a lognormal factor of this log-sd (mean 1)
  int probes = 0;            // solo requests it was measured on (0: not measured, zero overhead)
  // The probes' medians, for the report.
  double client_s = 0, server_s = 0, simulated_s = 0, steps = 0;
};

// One solo request of the probe phase: measured live, and predicted by the simulator alone
// with the bare profile.
struct Probe {
  double client_s = 0;     // at the client, send to answer
  double server_s = 0;     // the server's own latency (tediserve.latency_ms)
  int steps = 0;           // the server's count
  double simulated_s = 0;  // the simulator's latency for it alone (no overhead)
  int simulated_steps = 0;
};

// The medians above. Probes that failed (client_s <= 0) are skipped; none left: zero overhead.
Overhead EstimateOverhead(const std::vector<Probe>& probes);

// `profile` times `scale` (at each token count), with `offset_s` added to every step, at every
// TP degree and token count (exact on integer token counts up to `max_tokens`, and beyond it
// along the profile's own tail).
StatusOr<policy::LatencyProfile> OffsetProfile(const policy::LatencyProfile& profile, double offset_s,
                                               int max_tokens, const StepScale& scale = {});

// What the live server ran with.
struct SimSetup {
  std::string model_dir;
  std::string profile_csv, calibration;
  std::string policy = "tediserve";
  std::vector<int> layout{1};  // TP degree of each instance
  bool cache = true;
  int max_live = 256;          // serve --max-queue (requests over it are rejected)
  int batch_steps = 2;         // serve --batch-steps (its default)
  double slo_scale = 10;       // serve --slo-scale (requests the plan sent without an SLO)
  double tick_s = 0.005;       // the simulator's housekeeping tick (the live loop ticks when due)
  uint64_t seed = 1;           // the simulator's random stream (the step-time noise)
  Overhead overhead;           // zero: the bare profile
};

// The step batches a replay ran, and the request steps in them (a request in one batch).
struct ReplayBatches {
  int64_t batches = 0, request_steps = 0;
};

// Simulates `plan` (request i decodes problems[plan[i].problem] with the real engine) and
// returns one result per planned request in the load generator's form, so that
// loadgen::Summarize counts attainment and latency exactly as for the live run: latency =
// simulated finish - arrival + overhead.per_request_s, slo_met = completed within slo_s,
// correct = the engine's answer is exact, server_latency_s = the simulated latency alone.
// `batches`, when given, receives how many step batches the replay ran and their requests.
StatusOr<std::vector<loadgen::RequestResult>> SimulatePlan(const SimSetup& setup,
                                                           const std::vector<loadgen::PlannedRequest>& plan,
                                                           const std::vector<engine::TaskProblem>& problems,
                                                           ReplayBatches* batches = nullptr);

// `n` probes: spread over the problems (i * 37 mod problems), one second apart, SLO 60 s.
std::vector<loadgen::PlannedRequest> ProbePlan(size_t problems, int n, int output_len);

// Live against simulated, for one run.
struct Comparison {
  loadgen::Summary live, sim, sim_profile_only;
  // Simpler replays of the same run, to show what each part of the step-time model adds
  // (bench-serve --fidelity: "one_ratio", the run's overall ratio for every batch and no
  // scatter; "no_level", the ratio by size and all the scatter as independent noise).
  struct Alternative {
    std::string name;
    loadgen::Summary sim;
    double attainment_diff_points = 0, mean_latency_diff = 0;
  };
  std::vector<Alternative> alternatives;
  Overhead overhead;
  double attainment_diff_points = 0;  // 100 x (sim - live)
  double mean_latency_diff = 0;       // sim / live - 1
  double p90_latency_diff = 0;
  double profile_only_attainment_diff_points = 0, profile_only_mean_latency_diff = 0;
  // The server's view: from a request's arrival at the runtime (after HTTP) to its end, the
  // server's slo_met and latency against the simulation without the per-request term.
  double server_attainment_diff_points = 0, server_mean_latency_diff = 0;
  ReplayBatches sim_batches;          // the replay's (first draw) step batches, against live
  bool attainment_within = false;     // |attainment diff| <= 5 points
  bool mean_latency_within = false;   // |mean latency diff| <= 10%
};
inline constexpr double kAttainmentTargetPoints = 5;
inline constexpr double kMeanLatencyTarget = 0.10;
Comparison Compare(const loadgen::Summary& live, const loadgen::Summary& sim,
                   const loadgen::Summary& sim_profile_only, const Overhead& overhead,
                   const std::vector<std::pair<std::string, loadgen::Summary>>& alternatives = {});
nlohmann::json ToJson(const Overhead& o);
nlohmann::json ToJson(const Comparison& c);

}  // namespace tediserve::cli::fidelity
