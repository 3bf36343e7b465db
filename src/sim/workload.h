// Workloads for the simulator: when requests arrive and how long they are (paper 5.1).
//
// A workload is read from the `workload:` section of a run config:
//
//   workload:
//     arrivals: {type: poisson, rate: 8.0, duration_s: 600}   # or num_requests: N
//     lengths: {type: sharegpt, file: data/workload/sharegpt_first_turn_lengths.csv}
//     priority: {high_fraction: 0.1}                          # optional
//     slo_classes:                                            # optional
//       - {name: tight, share: 0.5, factor: 0.6}   # SLO = the run's SLO x factor
//       - {name: loose, share: 0.5, factor: 2.0}
//
// arrivals.type: poisson {rate, duration_s | num_requests}
//                gamma {rate, cv, duration_s | num_requests}   (Gamma inter-arrival times)
//                burstgpt {peak_rps, file, minutes_per_hour = 5} (the paper's real-world trace)
//                trace {file}                     (arrivals, lengths, SLO, priority from a file)
// lengths.type:  sharegpt {file, max_total = 4096, round_output_to = 32}
//                gsm8k {file, few_shot = 4, output_len = 256}
//                fixed {prompt_len, output_len}
// slo_classes: shares sum to 1; exactly round(share x N) requests per class (the last takes the
// rest), drawn from their own stream, so arrivals, lengths and priorities stay as without.
// `lengths` is required unless arrivals.type is trace, where it, `priority` and `slo_classes` are not
// allowed (the trace gives them). Unknown keys are errors. ParseWorkload loads every file the
// section names, so GenerateWorkload does no I/O and a bad file is reported up front.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "policy/request.h"

namespace YAML {
class Node;
}

namespace tediserve::sim {

// Upper bound on the (expected) number of requests of a generated workload: catches typos
// such as a rate in requests per hour before they fill the memory.
inline constexpr int64_t kMaxRequests = 10'000'000;

struct ArrivalSpec {
  enum class Type { kPoisson, kGamma, kBurstGpt, kTrace };
  Type type = Type::kPoisson;

  // poisson, gamma: mean rate (requests/s) and the end condition, exactly one set (> 0).
  double rate = 0;
  double duration_s = 0;     // arrivals in [0, duration_s)
  int64_t num_requests = 0;  // exactly this many arrivals
  double cv = 1;             // gamma: coefficient of variation of the inter-arrival times

  // burstgpt: one window per profile row (hour of day); each hour becomes
  // minutes_per_hour minutes with Poisson arrivals at that hour's rate, the whole profile
  // scaled so that its highest hour runs at peak_rps.
  double peak_rps = 0;
  double minutes_per_hour = 5;
  std::vector<double> hourly_rps;  // the profile as read (unscaled), hour 0 first

  // trace: the requests read from the file (sorted, ids dense).
  std::vector<policy::RequestSpec> trace;

  std::string file;  // burstgpt / trace: the resolved path, for messages
};

struct LengthSpec {
  enum class Type { kShareGpt, kGsm8k, kFixed };
  Type type = Type::kFixed;

  // sharegpt: the (prompt, output) pairs left after filtering and rounding.
  int max_total = 4096;
  int round_output_to = 32;
  std::vector<std::pair<int, int>> pairs;

  // gsm8k: per test question its estimated tokens; the k-shot prompt is
  // few_shot * exemplar_tokens + question_tokens.
  int few_shot = 4;
  int exemplar_tokens = 0;  // mean (question + answer) tokens of one exemplar, rounded
  std::vector<int> question_tokens;

  // fixed: every request the same; gsm8k: output_len for every request.
  int prompt_len = 0;
  int output_len = 0;

  std::string file;  // the resolved path, for messages
};

struct SloClass {
  std::string name;
  double share = 1;   // of the requests
  double factor = 1;  // its SLO is the run's SLO times this
};

struct WorkloadSpec {
  ArrivalSpec arrivals;
  LengthSpec lengths;         // unused for a trace
  double high_fraction = 0;   // this fraction of requests (rounded) gets priority 1
  std::vector<SloClass> slo_classes;  // empty: one class, the run's SLO
};

// Parses the value of the `workload:` key. Relative file paths are tried against base_dir
// (the config file's folder) first, then against the current directory. Errors name the
// field (`workload.arrivals.rate: must be > 0, got -3`) or the file and line.
StatusOr<WorkloadSpec> ParseWorkload(const YAML::Node& node, const std::string& base_dir);

// The requests of a workload: sorted by arrival, ids 0..N-1, slo 0 (the run's SLO) unless a
// trace gives one. Deterministic for a seed: the random numbers come from std::mt19937_64
// (fully specified by the standard) through this file's own uniform, exponential, normal and
// gamma samplers, never the standard library's distributions (their output differs between
// implementations). Only std::log/cos/pow may differ by an ulp between C libraries.
// Arrivals, lengths and priorities draw from separate streams derived from the seed, so
// changing the length model leaves the arrival times unchanged.
StatusOr<std::vector<policy::RequestSpec>> GenerateWorkload(const WorkloadSpec& spec,
                                                            uint64_t seed);

// The pieces GenerateWorkload combines, for tests and plots.

// Sorted arrival times (poisson, gamma, burstgpt; a trace's own times for a trace).
StatusOr<std::vector<double>> ArrivalTimes(const ArrivalSpec& spec, uint64_t seed);

// n (prompt_len, output_len) pairs. sharegpt: uniform draws with replacement from the
// filtered pairs; gsm8k: the questions in a seeded random order, every question once before
// any repeats (a benchmark sends each sample).
StatusOr<std::vector<std::pair<int, int>>> SampleLengths(const LengthSpec& spec, size_t n,
                                                         uint64_t seed);

// ShareGPT filter (data/workload/README.md): drop pairs with prompt + output > max_total or
// either < 4, round outputs up to a multiple of round_output_to, drop pairs whose rounded
// total exceeds max_total.
std::vector<std::pair<int, int>> FilterShareGpt(const std::vector<std::pair<int, int>>& raw,
                                                int max_total, int round_output_to);

// burstgpt: each window's target rate (requests/s) after scaling, and the window length in
// seconds. Empty / 0 for the other arrival types.
std::vector<double> WindowRates(const ArrivalSpec& spec);
double WindowSeconds(const ArrivalSpec& spec);

// The expected number of arrivals (rate * duration, num_requests, the sum over burstgpt
// windows, the trace's size).
double ExpectedRequests(const ArrivalSpec& spec);

}  // namespace tediserve::sim
