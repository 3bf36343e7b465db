// The load generator's logic without I/O to a server (`tediserve bench-serve`, docs/design.md
// section 5, "Load generator"): which requests to send and when, how each response is read
// and graded, and what a run reports. The HTTP client, the server processes and the files live
// in bench_serve_command.cc; everything here is pure and unit-tested (loadgen_test.cc).
//
// Arrivals come from the simulator's own generators (sim::ParseWorkload + GenerateWorkload),
// so a live run and `tediserve simulate` given the same arrivals section and seed see the same
// arrival times. Prompts are the model's held-out problems, graded as `tediserve eval` grades
// them (engine::IsCorrectAnswer). SLOs are set as the simulator sets them: a fixed value, or a
// scale times the request's latency alone (host::SoloLatency over the model's latency profile
// and calibration).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/task_file.h"
#include "policy/latency_profile.h"
#include "policy/request.h"

namespace tediserve::cli::loadgen {

// Hard bound on the requests of one run (a typo in --rate must not fill the memory).
inline constexpr int64_t kMaxRequests = 1'000'000;

// ---- What to send, and when ------------------------------------------------------------

struct ArrivalOptions {
  std::string type = "poisson";  // poisson | gamma | burstgpt | trace | workload
  double rate = 0;               // poisson, gamma: mean requests/s; burstgpt: the peak hour's
  double cv = 1;                 // gamma: CV of the inter-arrival times
  int64_t requests = 0;          // poisson, gamma: this many (or duration_s); others: at most this many
  double duration_s = 0;         // poisson, gamma: arrivals in [0, duration_s); others: cut there
  std::string file;              // trace: a simulator trace (.csv/.jsonl); burstgpt: the hourly profile;
                                 // workload: a simulator config whose workload: section is used
  double minutes_per_hour = 5;   // burstgpt
  uint64_t seed = 1;             // the simulator's run seed (its default is 1 too)
  bool seed_given = false;       // workload: else the config's own seed, if it has one
};

// The arrivals as the simulator generates them for these options: sorted, ids 0..N-1, with
// the trace's (or workload's) SLO, SLO factor and priority; lengths are placeholders (the
// held-out problems replace them). Errors name the flag.
StatusOr<std::vector<policy::RequestSpec>> Arrivals(const ArrivalOptions& options);

// How SLOs are set: fixed_ms > 0 gives every request that SLO; else scale > 0 gives each
// scale x its latency alone (on one TP-`solo_tp` instance at `top_threshold`'s tokens per
// step, as host::Host defaults a request's SLO); else requests carry no slo_ms (the server's
// default). A trace's own SLO always wins; an SLO class factor multiplies.
struct SloOptions {
  double fixed_ms = 0;
  double scale = 10;
  // The inputs of the latency alone (used when fixed_ms is 0 and scale > 0).
  const policy::LatencyProfile* profile = nullptr;
  int solo_tp = 1;
  int block_size = 0;
  bool cache = true;
  double tokens_per_step = 0;  // the calibration's at the policy's top threshold
  // The latency alone measured on the server over the profile's (1: the profile as it is).
  double live_factor = 1;
};

// The latency alone of a request of these lengths as `SloOptions` prices it from the profile
// (before live_factor).
double ProfileSoloLatency(const SloOptions& slo, int prompt_len, int output_len);

struct PlannedRequest {
  int64_t id = 0;
  double send_s = 0;     // since the start of the run
  size_t problem = 0;    // index into the held-out problems
  int prompt_len = 0;    // tokens
  int output_len = 0;    // tokens (the gen length the server will use)
  double slo_s = 0;      // 0: none sent (the server's default)
  int priority = 0;
};

// Problem indices for n requests: a seeded random order of the problems, each used once
// before any repeats (as the simulator's gsm8k lengths are drawn). Deterministic for a seed
// on every platform (mt19937_64 and our own bounded draw).
std::vector<size_t> ProblemOrder(size_t problems, size_t n, uint64_t seed);

// The requests of a run: the arrivals, a problem each, its lengths and SLO. output_len is the
// gen length every request asks for (max_tokens rounded up to the block size, or the model's).
StatusOr<std::vector<PlannedRequest>> Plan(const std::vector<policy::RequestSpec>& arrivals,
                                           const std::vector<engine::TaskProblem>& problems, int output_len,
                                           const SloOptions& slo, uint64_t seed);

// The planned requests as a simulator trace (sim::WriteTrace's rows: arrival, lengths, SLO,
// priority), so that `tediserve simulate` can replay exactly what was sent.
std::vector<policy::RequestSpec> AsTrace(const std::vector<PlannedRequest>& plan);

// The /v1/completions body of a planned request.
nlohmann::json RequestBody(const PlannedRequest& r, const std::string& prompt, int max_tokens);

// ---- What came back --------------------------------------------------------------------

struct RequestResult {
  int64_t id = 0;
  size_t problem = 0;
  std::string task;
  double planned_s = 0, sent_s = 0, done_s = 0;  // since the start of the run
  double latency_s = 0;  // done - planned: from its arrival time, so a wait for a free connection counts
  int http_status = 0;                           // 0: no response (connection, timeout)
  std::string outcome;  // ok | rejected (429) | unavailable (503) | cancelled (499) | client_error | server_error |
                       // transport | bad_response
  std::string error;    // the server's message or the transport error
  std::string text;
  bool correct = false;
  double slo_s = 0;       // the SLO the server applied (tediserve.slo_ms), else the one sent
  bool slo_met = false;   // ok and latency_s <= slo_s (the client's view, HTTP included)
  bool server_slo_met = false;  // tediserve.slo_met (the server's view: from its arrival)
  double server_latency_s = 0;  // tediserve.latency_ms
  int steps = 0;
  double mean_threshold = 0;
  int completion_tokens = 0;
  int migrations = 0;
  std::string finish_reason;
};

// Reads a response (status and body) into `r` and grades it against `answer`; sets outcome,
// text, correct, the tediserve fields and slo_met (latency_s and slo_s as sent must be set).
void ReadResponse(int http_status, const std::string& body, const std::string& answer, RequestResult* r);

// Linear interpolation between closest ranks (numpy's default); NaN for an empty set.
double Percentile(std::vector<double> values, double q);

struct Summary {
  int64_t requests = 0, completed = 0, met = 0, met_server = 0, correct = 0;
  std::map<std::string, int64_t> outcomes;  // outcome -> count (ok included)
  double attainment = 0;          // met / requests (a request that failed missed its SLO)
  double attainment_server = 0;   // met_server / requests
  double accuracy = 0;            // correct / requests (a failed request is wrong)
  double accuracy_completed = 0;  // correct / completed
  double latency_mean_s = 0, latency_p50_s = 0, latency_p90_s = 0, latency_p99_s = 0, latency_max_s = 0;
  double server_latency_mean_s = 0;
  double offered_rps = 0;     // requests / the span of planned sends
  double wall_s = 0;          // first planned send to the last answer
  double throughput_rps = 0;  // completed / wall_s
  double goodput_rps = 0;     // met / wall_s
  double tokens_per_s = 0;    // completion tokens / wall_s
  double mean_threshold = 0;  // over every step of the completed requests
  double mean_steps = 0;      // per completed request
  double send_lag_mean_s = 0, send_lag_max_s = 0;  // sent - planned (the client's own delay)
};
Summary Summarize(const std::vector<RequestResult>& results);
nlohmann::json ToJson(const Summary& s);

// Several runs of the same policy and rate (repeated rounds on a noisy machine), averaged:
// each summary counts once whatever its request count.
struct RunSummary {
  std::string label;  // the policy
  double rate = 0;
  Summary summary;
};
struct Aggregate {
  std::string label;
  double rate = 0;
  int runs = 0;
  int64_t requests = 0, failed = 0;  // summed over the runs
  double attainment = 0, attainment_min = 0, attainment_max = 0, attainment_server = 0;
  double accuracy = 0, accuracy_min = 0, accuracy_max = 0;
  double latency_mean_s = 0, latency_p99_s = 0, mean_threshold = 0;
};
// One aggregate per (label, rate), in order of first appearance.
std::vector<Aggregate> AggregateRuns(const std::vector<RunSummary>& runs);
nlohmann::json ToJson(const Aggregate& a);

// The highest rate whose attainment is at least `target` (0.9 in the paper); none if no rate
// reaches it. rates[i] goes with attainment[i].
std::optional<double> GoodputRate(const std::vector<double>& rates, const std::vector<double>& attainment,
                                  double target);

// ---- The server's /metrics -------------------------------------------------------------

// Prometheus text format: series (name with its labels, as written) -> value. Comment lines
// and blank lines are skipped; a line without a number is an error naming its line.
StatusOr<std::map<std::string, double>> ParsePrometheus(const std::string& text);

// The scheduler's cost over a run, from two scrapes: tediserve_scheduler_seconds_total (CPU
// time in the policy core), tediserve_scheduler_wall_seconds_total (its wall time),
// tediserve_loop_seconds_total (all the loop thread's CPU time) and
// tediserve_step_seconds_total (worker step time), per step batch
// (tediserve_step_seconds_count) and batch sizes (tediserve_batch_requests).
// The step batches of one size class (the server's tediserve_step_size_* series, label
// tokens_max) that returned between two scrapes.
struct StepSizeClass {
  // Tokens per step of the class's batches.
  double TokensPerStep() const { return tokens / (steps > 0 ? steps : batches); }
  double tokens_max = 0;  // the class's upper bound (infinity for the last one)
  double batches = 0, tokens = 0;
  double profile_s = 0, elapsed_s = 0;  // the profile's time for them, their launch-to-result time
  double ratio_sum = 0, ratio_squares = 0;  // each batch's own launch-to-result / profile, summed; squared
  double steps = 0;  // steps those batches ran (0 from a server that does not say: one each)
};

struct Overhead {
  double scheduler_s = 0;       // policy core CPU time on the loop thread
  double scheduler_wall_s = 0;  // the same calls' wall time (0 if the server has no such series)
  double loop_s = 0;            // loop thread CPU time in all (0 if absent)
  double step_s = 0;            // step time summed over workers
  double batches = 0;           // step batches with a result
  double request_steps = 0;     // request steps (one request in one batch)
  double mean_batch = 0;        // requests per batch
  double batches_over_4 = 0;    // share of batches of 5 or more requests
  double batches_over_8 = 0;    // share of batches of 9 or more requests
  double policy_ms_per_step = 0;  // scheduler_s / batches
  double step_ms = 0;             // step_s / batches
  double overhead = 0;            // scheduler_s / step_s (policy time per step / step time)
  double wall_overhead = 0;       // scheduler_wall_s / step_s
  double loop_overhead = 0;       // loop_s / step_s
  // Launch-to-result time of the step batches that returned over the profile's time for them
  // (0 if the server has no such series).
  double step_elapsed_s = 0, step_profile_s = 0, step_scale = 0;
  // The same by batch size, bounds ascending (empty if the server has no such series).
  std::vector<StepSizeClass> step_sizes;
  // Launch to result besides the engine's time, by leg (tediserve_step_overhead_seconds_total;
  // workers on the server's machine; 0 if absent): to the worker, in the worker, back, in
  // the server's loop.
  double to_worker_s = 0, in_worker_s = 0, from_worker_s = 0, to_loop_s = 0;
  bool valid = false;             // both scrapes had the series and some batches ran
};
Overhead OverheadBetween(const std::map<std::string, double>& before, const std::map<std::string, double>& after);
// The step-size classes' increases between two scrapes (bounds ascending, classes without a
// batch left out); `before` empty: the totals in `after`.
std::vector<StepSizeClass> StepSizesBetween(const std::map<std::string, double>& before,
                                            const std::map<std::string, double>& after);
// Class by class, what `after` counted beyond `before` (two samples of the same counters;
// classes matched by bound, those without a batch between left out).
std::vector<StepSizeClass> StepSizesMinus(const std::vector<StepSizeClass>& after,
                                          const std::vector<StepSizeClass>& before);
nlohmann::json ToJson(const Overhead& o);

// ---- Plots -----------------------------------------------------------------------------

// Samples of the server's gauges taken while the run went (t since the start of the run).
struct GaugeSample {
  double t = 0;
  double live = 0, waiting = 0;
  // The step-size counters at t, totals since the server started (--fidelity runs): the
  // differences between samples are how fast the steps ran in each interval.
  std::vector<StepSizeClass> step_sizes;
};

// A timeline CSV in the simulator's columns (sim::PlotTimeline): per `window_s` window, the
// arrival rate sent, requests in flight at the client (active) and waiting at the server
// (queued: the last gauge sample in the window), the mean threshold of the requests that
// finished in it, their SLO attainment and mean latency. mean_cap is not known here (NaN).
std::string TimelineCsv(const std::vector<RequestResult>& results, const std::vector<GaugeSample>& gauges,
                        double window_s);

}  // namespace tediserve::cli::loadgen
