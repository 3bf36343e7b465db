#include "sim/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "common/temp_dir.h"
#include "sim/trace.h"

namespace tediserve::sim {
namespace {

using policy::RequestSpec;
using ::testing::HasSubstr;

const std::string kRepo = TEDI_SOURCE_DIR;
const std::string kShareGpt = "data/workload/sharegpt_first_turn_lengths.csv";
const std::string kBurstGpt = "data/workload/burstgpt_hourly_rps.csv";
const std::string kGsm8k = "data/workload/gsm8k_prompt_lengths.csv";

// Parses `yaml` (a document with a top-level `workload:` key) against the repo root.
StatusOr<WorkloadSpec> Parse(const std::string& yaml, const std::string& base = kRepo) {
  return ParseWorkload(YAML::Load(yaml)["workload"], base);
}

WorkloadSpec MustParse(const std::string& yaml) {
  StatusOr<WorkloadSpec> spec = Parse(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString() << "\n" << yaml;
  return spec.ok() ? *spec : WorkloadSpec{};
}

std::vector<RequestSpec> MustGenerate(const WorkloadSpec& spec, uint64_t seed) {
  StatusOr<std::vector<RequestSpec>> r = GenerateWorkload(spec, seed);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<RequestSpec>{};
}

std::string ParseError(const std::string& yaml, const std::string& base = kRepo) {
  StatusOr<WorkloadSpec> spec = Parse(yaml, base);
  EXPECT_FALSE(spec.ok()) << yaml;
  return spec.ok() ? "" : spec.status().message();
}

const std::string kFixed = "  lengths: {type: fixed, prompt_len: 512, output_len: 256}\n";

// Mean and coefficient of variation of the gaps between consecutive arrivals (the first gap
// is from 0).
std::pair<double, double> GapStats(const std::vector<RequestSpec>& r) {
  std::vector<double> gaps;
  double prev = 0;
  for (const RequestSpec& x : r) {
    gaps.push_back(x.arrival - prev);
    prev = x.arrival;
  }
  const double n = static_cast<double>(gaps.size());
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / n;
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= n - 1;
  return {mean, std::sqrt(var) / mean};
}

void ExpectSortedDense(const std::vector<RequestSpec>& r) {
  for (size_t i = 0; i < r.size(); ++i) {
    ASSERT_EQ(r[i].id, static_cast<int64_t>(i));
    if (i > 0) {
      ASSERT_LE(r[i - 1].arrival, r[i].arrival) << i;
    }
    ASSERT_GE(r[i].arrival, 0);
    ASSERT_EQ(r[i].slo, 0);
  }
}

// ---------------------------------------------------------------------------------------
// Arrival processes.

TEST(WorkloadTest, PoissonRateAndCount) {
  const WorkloadSpec spec =
      MustParse("workload:\n  arrivals: {type: poisson, rate: 8.0, duration_s: 2000}\n" + kFixed);
  const std::vector<RequestSpec> r = MustGenerate(spec, 1);
  ExpectSortedDense(r);
  // 16000 expected, standard deviation 126: 3% is almost 4 sigma.
  EXPECT_NEAR(static_cast<double>(r.size()), 16000, 480);
  EXPECT_LT(r.back().arrival, 2000);
  const auto [mean, cv] = GapStats(r);
  EXPECT_NEAR(mean, 1 / 8.0, 0.004);
  EXPECT_NEAR(cv, 1.0, 0.03);  // exponential gaps
  for (const RequestSpec& x : r) {
    ASSERT_EQ(x.prompt_len, 512);
    ASSERT_EQ(x.output_len, 256);
    ASSERT_EQ(x.priority, 0);
  }
}

TEST(WorkloadTest, PoissonByCountGivesExactlyThatMany) {
  const WorkloadSpec spec =
      MustParse("workload:\n  arrivals: {type: poisson, rate: 2, num_requests: 5000}\n" + kFixed);
  const std::vector<RequestSpec> r = MustGenerate(spec, 7);
  ASSERT_EQ(r.size(), 5000u);
  ExpectSortedDense(r);
  EXPECT_NEAR(r.back().arrival, 2500, 2500 * 0.06);  // about 4 sigma
}

TEST(WorkloadTest, GammaCoefficientOfVariationMatches) {
  for (const double cv : {0.5, 1.0, 3.0}) {
    WorkloadSpec spec;
    spec.arrivals.type = ArrivalSpec::Type::kGamma;
    spec.arrivals.rate = 8;
    spec.arrivals.cv = cv;
    spec.arrivals.num_requests = 200'000;
    spec.lengths.type = LengthSpec::Type::kFixed;
    spec.lengths.prompt_len = 1;
    spec.lengths.output_len = 1;
    const std::vector<RequestSpec> r = MustGenerate(spec, 11);
    ASSERT_EQ(r.size(), 200'000u);
    ExpectSortedDense(r);
    const auto [mean, measured_cv] = GapStats(r);
    EXPECT_NEAR(mean, 1 / 8.0, 0.03 / 8.0) << cv;
    EXPECT_NEAR(measured_cv, cv, 0.05 * cv) << cv;
  }
}

TEST(WorkloadTest, GammaParsesAndHonoursDuration) {
  const WorkloadSpec spec = MustParse(
      "workload:\n  arrivals: {type: gamma, rate: 8.0, cv: 3.0, duration_s: 600}\n" + kFixed);
  EXPECT_EQ(spec.arrivals.type, ArrivalSpec::Type::kGamma);
  EXPECT_EQ(spec.arrivals.cv, 3.0);
  const std::vector<RequestSpec> r = MustGenerate(spec, 3);
  ASSERT_FALSE(r.empty());
  EXPECT_LT(r.back().arrival, 600);
  ExpectSortedDense(r);
}

TEST(WorkloadTest, BurstGptWindowsAndRates) {
  const WorkloadSpec spec = MustParse(
      "workload:\n  arrivals: {type: burstgpt, peak_rps: 20, file: " + kBurstGpt + "}\n" + kFixed);
  const std::vector<double> rates = WindowRates(spec.arrivals);
  ASSERT_EQ(rates.size(), 24u);
  EXPECT_EQ(WindowSeconds(spec.arrivals), 300);  // minutes_per_hour defaults to 5: 2 h total
  EXPECT_DOUBLE_EQ(*std::max_element(rates.begin(), rates.end()), 20);
  EXPECT_EQ(std::max_element(rates.begin(), rates.end()) - rates.begin(), 14);  // peak hour
  // The shape is the file's: hour 7 (the trough) is 0.0426 / 0.4989 of the peak.
  EXPECT_NEAR(rates[7], 20 * 0.0426 / 0.4989, 1e-9);
  EXPECT_NEAR(rates[0], 20 * 0.2612 / 0.4989, 1e-9);

  const std::vector<RequestSpec> r = MustGenerate(spec, 2024);
  ExpectSortedDense(r);
  EXPECT_LT(r.back().arrival, 24 * 300);
  std::vector<int> counts(24, 0);
  for (const RequestSpec& x : r) ++counts[static_cast<int>(x.arrival / 300)];
  for (int w = 0; w < 24; ++w) {
    const double expected = rates[w] * 300;
    EXPECT_NEAR(counts[w], expected, 5 * std::sqrt(expected)) << "window " << w;
  }
}

// The paper (5.1) scales the profile to a 20 RPS peak and gets 63,736 requests over 2 h. The
// profile shipped here (all 1.43 M BurstGPT_1 requests) is flatter than the paper's: its mean
// is 54% of its peak, so a 20 RPS peak gives about 78.3k requests, 23% more. (The reference
// code averages only the ChatGPT "Conversation log" rows; its 18 RPS trace has 57,764
// requests, i.e. about 64.2k at 20 RPS.) The generator must match the profile it is given;
// this test pins both numbers so that a change of data or of scaling shows up here.
TEST(WorkloadTest, BurstGptRequestCountAtPeak20) {
  const WorkloadSpec spec =
      MustParse("workload:\n  arrivals: {type: burstgpt, peak_rps: 20, file: " + kBurstGpt +
                ", minutes_per_hour: 5}\n" + kFixed);
  const double expected = ExpectedRequests(spec.arrivals);
  EXPECT_NEAR(expected, 78'300, 100);
  EXPECT_NEAR(expected / 63'736, 1.23, 0.01);  // the documented gap to the paper's trace
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<RequestSpec> r = MustGenerate(spec, seed);
    EXPECT_NEAR(static_cast<double>(r.size()), expected, 0.015 * expected) << seed;  // ~4 sigma
  }
}

TEST(WorkloadTest, BurstGptMinutesPerHourStretchesTheWindows) {
  const WorkloadSpec spec =
      MustParse("workload:\n  arrivals: {type: burstgpt, peak_rps: 2, file: " + kBurstGpt +
                ", minutes_per_hour: 10}\n" + kFixed);
  EXPECT_EQ(WindowSeconds(spec.arrivals), 600);
  const std::vector<RequestSpec> r = MustGenerate(spec, 5);
  EXPECT_LT(r.back().arrival, 24 * 600);
  EXPECT_GT(r.back().arrival, 23 * 600);
}

// ---------------------------------------------------------------------------------------
// Length models.

TEST(WorkloadTest, ShareGptFilterAndRoundingHoldOnEveryRequest) {
  const WorkloadSpec spec = MustParse(
      "workload:\n  arrivals: {type: poisson, rate: 50, num_requests: 20000}\n"
      "  lengths: {type: sharegpt, file: " +
      kShareGpt + "}\n");
  EXPECT_EQ(spec.lengths.max_total, 4096);
  EXPECT_EQ(spec.lengths.round_output_to, 32);
  // 84,226 rows; 81,269 pass the raw filter and 81,258 still fit once rounded (checked
  // independently with a few lines of Python).
  EXPECT_EQ(spec.lengths.pairs.size(), 81'258u);
  const std::vector<RequestSpec> r = MustGenerate(spec, 9);
  ASSERT_EQ(r.size(), 20000u);
  std::map<std::pair<int, int>, int> distinct;
  for (const RequestSpec& x : r) {
    ASSERT_GE(x.prompt_len, 4);
    ASSERT_GE(x.output_len, 32);
    ASSERT_EQ(x.output_len % 32, 0);
    ASSERT_LE(x.prompt_len + x.output_len, 4096);
    ++distinct[{x.prompt_len, x.output_len}];
  }
  EXPECT_GT(distinct.size(), 5000u);  // really sampled, not one row repeated
}

// data/workload/README.md: filtered to in + out <= 2048 and both >= 4, the means are
// 163.7 in / 346.2 out.
TEST(WorkloadTest, ShareGptMeansMatchTheDataReadme) {
  const WorkloadSpec spec = MustParse(
      "workload:\n  arrivals: {type: poisson, rate: 1, num_requests: 1}\n"
      "  lengths: {type: sharegpt, file: " +
      kShareGpt + ", max_total: 2048, round_output_to: 1}\n");
  const auto& pairs = spec.lengths.pairs;
  ASSERT_FALSE(pairs.empty());
  double in = 0, out = 0;
  for (const auto& [p, o] : pairs) {
    in += p;
    out += o;
  }
  EXPECT_NEAR(in / static_cast<double>(pairs.size()), 163.7, 0.05);
  EXPECT_NEAR(out / static_cast<double>(pairs.size()), 346.2, 0.05);
}

TEST(WorkloadTest, FilterShareGptEdgeCases) {
  const std::vector<std::pair<int, int>> raw = {
      {3, 100},    // prompt < 4: dropped
      {100, 3},    // output < 4: dropped
      {4, 4},      // kept, output rounded up to 32
      {4000, 90},  // 4090 raw, 4096 rounded: kept
      {4000, 97},  // 4097 raw: dropped
      {4001, 90},  // 4091 raw but 4097 rounded: dropped
      {10, 64},    // already a multiple: unchanged
  };
  const std::vector<std::pair<int, int>> want = {{4, 32}, {4000, 96}, {10, 64}};
  EXPECT_EQ(FilterShareGpt(raw, 4096, 32), want);
  const std::vector<std::pair<int, int>> unrounded = {{4, 4}, {4000, 90}, {4001, 90}, {10, 64}};
  EXPECT_EQ(FilterShareGpt(raw, 4096, 1), unrounded);
}

TEST(WorkloadTest, Gsm8kPromptIsTheKShotFormula) {
  const WorkloadSpec spec = MustParse(
      "workload:\n  arrivals: {type: poisson, rate: 4, num_requests: 1319}\n"
      "  lengths: {type: gsm8k, file: " +
      kGsm8k + ", few_shot: 4, output_len: 256}\n");
  const LengthSpec& l = spec.lengths;
  ASSERT_EQ(l.question_tokens.size(), 1319u);
  // Mean question + answer tokens over the test set, 138.7 (tools/gsm8k_prompt_lengths.py).
  EXPECT_EQ(l.exemplar_tokens, 139);
  const std::vector<RequestSpec> r = MustGenerate(spec, 4);
  ASSERT_EQ(r.size(), 1319u);
  std::vector<int> questions;
  for (const RequestSpec& x : r) {
    ASSERT_EQ(x.output_len, 256);
    questions.push_back(x.prompt_len - 4 * 139);
  }
  // One request per question: the question lengths are the file's, each used once.
  std::vector<int> want = l.question_tokens;
  std::sort(want.begin(), want.end());
  std::sort(questions.begin(), questions.end());
  EXPECT_EQ(questions, want);
}

TEST(WorkloadTest, Gsm8kDefaultsAndZeroShot) {
  const WorkloadSpec defaults = MustParse(
      "workload:\n  arrivals: {type: poisson, rate: 4, num_requests: 10}\n"
      "  lengths: {type: gsm8k, file: " +
      kGsm8k + "}\n");
  EXPECT_EQ(defaults.lengths.few_shot, 4);
  EXPECT_EQ(defaults.lengths.output_len, 256);

  WorkloadSpec zero = defaults;
  zero.lengths.few_shot = 0;
  zero.arrivals.num_requests = 3000;  // more than one pass over the questions
  const std::vector<RequestSpec> r = MustGenerate(zero, 4);
  const std::vector<int>& q = zero.lengths.question_tokens;
  const int lo = *std::min_element(q.begin(), q.end());
  const int hi = *std::max_element(q.begin(), q.end());
  for (const RequestSpec& x : r) {
    ASSERT_GE(x.prompt_len, lo);
    ASSERT_LE(x.prompt_len, hi);
  }
}

// ---------------------------------------------------------------------------------------
// Seeds, priority, traces.

TEST(WorkloadTest, SameSeedSameWorkloadDifferentSeedDifferent) {
  const WorkloadSpec spec = MustParse(
      "workload:\n  arrivals: {type: gamma, rate: 8, cv: 2, num_requests: 3000}\n"
      "  lengths: {type: sharegpt, file: " +
      kShareGpt + "}\n  priority: {high_fraction: 0.3}\n");
  const std::vector<RequestSpec> a = MustGenerate(spec, 42);
  const std::vector<RequestSpec> b = MustGenerate(spec, 42);
  const std::vector<RequestSpec> c = MustGenerate(spec, 43);
  ASSERT_EQ(a.size(), b.size());
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].arrival, b[i].arrival);
    ASSERT_EQ(a[i].prompt_len, b[i].prompt_len);
    ASSERT_EQ(a[i].output_len, b[i].output_len);
    ASSERT_EQ(a[i].priority, b[i].priority);
    differ += a[i].arrival != c[i].arrival;
  }
  EXPECT_GT(differ, 2900);
  int length_differ = 0, priority_differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    length_differ += a[i].prompt_len != c[i].prompt_len;
    priority_differ += a[i].priority != c[i].priority;
  }
  EXPECT_GT(length_differ, 2500);
  EXPECT_GT(priority_differ, 500);
}

// The arrivals stream does not depend on the length model: swapping ShareGPT for fixed
// lengths keeps every arrival time.
TEST(WorkloadTest, ArrivalsIndependentOfLengthModel) {
  WorkloadSpec spec = MustParse(
      "workload:\n  arrivals: {type: poisson, rate: 8, duration_s: 100}\n"
      "  lengths: {type: sharegpt, file: " +
      kShareGpt + "}\n");
  const std::vector<RequestSpec> a = MustGenerate(spec, 5);
  spec.lengths.type = LengthSpec::Type::kFixed;
  spec.lengths.prompt_len = spec.lengths.output_len = 8;
  const std::vector<RequestSpec> b = MustGenerate(spec, 5);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].arrival, b[i].arrival);
}

// Determinism rests on std::mt19937_64, whose 10000th output the standard fixes.
TEST(WorkloadTest, EngineIsTheStandardOne) {
  std::mt19937_64 gen;
  gen.discard(9999);
  EXPECT_EQ(gen(), 9981545732273789042ULL);
}

// Pinned outputs (first seen with GCC 12 / glibc): switching to a standard-library
// distribution, or changing a sampler or the seed derivation, changes them. DOUBLE_EQ leaves
// room for the last-ulp differences a different libm may give std::log.
TEST(WorkloadTest, GoldenArrivalsForSeedOne) {
  WorkloadSpec spec;
  spec.arrivals.type = ArrivalSpec::Type::kPoisson;
  spec.arrivals.rate = 8;
  spec.arrivals.num_requests = 3;
  spec.lengths.prompt_len = spec.lengths.output_len = 1;
  std::vector<RequestSpec> r = MustGenerate(spec, 1);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r[0].arrival, 0.021975221414866807);
  EXPECT_DOUBLE_EQ(r[1].arrival, 0.071831408756013029);
  EXPECT_DOUBLE_EQ(r[2].arrival, 0.13300436953255607);
  spec.arrivals.type = ArrivalSpec::Type::kGamma;
  spec.arrivals.cv = 3;
  r = MustGenerate(spec, 1);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r[0].arrival, 1.2940231213721375e-06);
  EXPECT_DOUBLE_EQ(r[2].arrival, 1.2940671962041826e-06);
}

TEST(WorkloadTest, HighFractionGivesThatManyHighPriority) {
  for (const double f : {0.0, 0.25, 1.0}) {
    WorkloadSpec spec =
        MustParse("workload:\n  arrivals: {type: poisson, rate: 8, num_requests: 1000}\n" + kFixed +
                  "  priority: {high_fraction: " + std::to_string(f) + "}\n");
    const std::vector<RequestSpec> r = MustGenerate(spec, 8);
    int high = 0;
    for (const RequestSpec& x : r) {
      ASSERT_TRUE(x.priority == 0 || x.priority == 1);
      high += x.priority;
    }
    EXPECT_EQ(high, static_cast<int>(std::lround(f * 1000))) << f;
  }
}

TEST(WorkloadTest, SloClassesGetTheirSharesAndFactorsAndChangeNothingElse) {
  const std::string base = "workload:\n  arrivals: {type: poisson, rate: 50, num_requests: 1001}\n" + kFixed;
  const std::vector<RequestSpec> plain = MustGenerate(MustParse(base), 7);
  const std::vector<RequestSpec> classed = MustGenerate(
      MustParse(base + "  slo_classes:\n    - {name: tight, share: 0.3, factor: 0.5}\n"
                       "    - {name: loose, share: 0.7, factor: 2}\n"),
      7);
  ASSERT_EQ(classed.size(), 1001u);
  int tight = 0;
  for (size_t i = 0; i < classed.size(); ++i) {
    const RequestSpec& r = classed[i];
    EXPECT_EQ(r.arrival, plain[i].arrival);
    EXPECT_EQ(r.prompt_len, plain[i].prompt_len);
    EXPECT_EQ(r.slo_factor, r.slo_class == 0 ? 0.5 : 2.0);
    tight += r.slo_class == 0;
  }
  EXPECT_EQ(tight, 300);  // round(0.3 x 1001)
  for (const auto& [yaml, error] : std::vector<std::pair<std::string, std::string>>{
           {"  slo_classes: [{name: a, share: 0.5, factor: 1}]\n", "the shares must sum to 1, got 0.5"},
           {"  slo_classes: [{name: A, share: 1, factor: 1}]\n", "name: must be 1-32 characters"},
           {"  slo_classes: [{name: a, share: 0.5, factor: 1}, {name: a, share: 0.5, factor: 2}]\n",
            "is used twice"},
           {"  slo_classes: [{name: a, share: 1, factor: 0}]\n", "factor: must be > 0"},
           {"  slo_classes: [{name: a, share: 1, factor: 1, x: 2}]\n", "x"},
           {"  slo_classes: {name: a}\n", "must be a list"},
       }) {
    EXPECT_THAT(ParseError(base + yaml), HasSubstr(error)) << yaml;
  }
}

TEST(WorkloadTest, TraceArrivalsComeFromTheFile) {
  TempDir dir;
  const std::string path = dir.File("trace.jsonl");
  std::ofstream(path) << "{\"arrival_s\": 2.5, \"prompt_len\": 100, \"output_len\": 64, "
                         "\"slo_s\": 9, \"priority\": 1}\n"
                         "{\"arrival_s\": 0.5, \"prompt_len\": 7, \"output_len\": 32}\n";
  // Relative to base_dir (the config's folder).
  StatusOr<WorkloadSpec> spec =
      Parse("workload:\n  arrivals: {type: trace, file: trace.jsonl}\n", dir.path().string());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const std::vector<RequestSpec> r = MustGenerate(*spec, 1);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].id, 0);
  EXPECT_EQ(r[0].arrival, 0.5);
  EXPECT_EQ(r[0].prompt_len, 7);
  EXPECT_EQ(r[0].slo, 0);
  EXPECT_EQ(r[1].arrival, 2.5);
  EXPECT_EQ(r[1].slo, 9);
  EXPECT_EQ(r[1].priority, 1);
  EXPECT_EQ(ExpectedRequests(spec->arrivals), 2);

  EXPECT_THAT(ParseError("workload:\n  arrivals: {type: trace, file: " + path + "}\n" + kFixed),
              HasSubstr("workload.lengths: not allowed with arrivals.type trace"));
}

TEST(WorkloadTest, RelativePathsTryBaseDirThenCurrentDir) {
  // Not next to the config, but found from the current directory.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(kRepo);
  StatusOr<WorkloadSpec> spec = Parse(
      "workload:\n  arrivals: {type: burstgpt, peak_rps: 20, file: " + kBurstGpt + "}\n" + kFixed,
      "/nonexistent/config/dir");
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->arrivals.hourly_rps.size(), 24u);

  const std::string message =
      ParseError("workload:\n  arrivals: {type: burstgpt, peak_rps: 20, file: nope.csv}\n" + kFixed,
                 "/some/dir");
  EXPECT_THAT(message, HasSubstr("workload.arrivals.file: file not found: \"nope.csv\""));
  EXPECT_THAT(message, HasSubstr("/some/dir/nope.csv"));
}

// ---------------------------------------------------------------------------------------
// Bad input.

TEST(WorkloadTest, BadFieldsNameTheFieldPath) {
  const std::string poisson = "workload:\n  arrivals: {type: poisson, ";
  struct Case {
    std::string yaml;
    std::string want;
  };
  const Case cases[] = {
      {poisson + "rate: -3, duration_s: 600}\n" + kFixed,
       "workload.arrivals.rate: must be > 0, got -3"},
      {poisson + "rate: 0, duration_s: 600}\n" + kFixed,
       "workload.arrivals.rate: must be > 0, got 0"},
      {poisson + "rate: fast, duration_s: 600}\n" + kFixed,
       "workload.arrivals.rate: expected a number, got \"fast\""},
      {poisson + "rate: .inf, duration_s: 600}\n" + kFixed,
       "workload.arrivals.rate: must be finite"},
      {poisson + "duration_s: 600}\n" + kFixed, "workload.arrivals.rate: missing"},
      {poisson + "rate: 1, duration_s: 600, num_requests: 5}\n" + kFixed,
       "workload.arrivals: set exactly one of duration_s and num_requests (both are set)"},
      {poisson + "rate: 1}\n" + kFixed, "(neither is set)"},
      {poisson + "rate: 1, duration_s: [1, 2]}\n" + kFixed,
       "workload.arrivals.duration_s: expected a number, got a list"},
      {poisson + "rate: 1, num_requests: 2.5}\n" + kFixed,
       "workload.arrivals.num_requests: expected an integer, got \"2.5\""},
      {poisson + "rate: 1, num_requests: 0}\n" + kFixed,
       "workload.arrivals.num_requests: must be >= 1, got 0"},
      {poisson + "rat: 1, duration_s: 600}\n" + kFixed,
       "workload.arrivals: unknown key \"rat\" (allowed for type poisson: type, rate, "
       "duration_s, num_requests)"},
      {poisson + "rate: 1e6, duration_s: 1e6}\n" + kFixed, "more than the limit 10000000"},
      {"workload:\n  arrivals: {type: foo, rate: 1}\n" + kFixed,
       "workload.arrivals.type: unknown \"foo\" (expected poisson, gamma, burstgpt, trace)"},
      {"workload:\n  arrivals: {rate: 1}\n" + kFixed, "workload.arrivals.type: missing"},
      {"workload:\n  arrivals: [poisson]\n" + kFixed,
       "workload.arrivals: expected a map, got a list"},
      {"workload:\n" + kFixed, "workload.arrivals: missing"},
      {"other: 1\n", "workload: missing"},
      {"workload:\n  arrivals: {type: gamma, rate: 8, duration_s: 60}\n" + kFixed,
       "workload.arrivals.cv: missing"},
      {"workload:\n  arrivals: {type: gamma, rate: 8, cv: 0, duration_s: 60}\n" + kFixed,
       "workload.arrivals.cv: must be > 0, got 0"},
      {"workload:\n  arrivals: {type: burstgpt, file: " + kBurstGpt + "}\n" + kFixed,
       "workload.arrivals.peak_rps: missing"},
      {"workload:\n  arrivals: {type: burstgpt, peak_rps: 20, file: " + kBurstGpt +
           ", minutes_per_hour: 0}\n" + kFixed,
       "workload.arrivals.minutes_per_hour: must be > 0, got 0"},
      {"workload:\n  arrivals: {type: burstgpt, peak_rps: 20, file: " + kBurstGpt +
           ", duration_s: 60}\n" + kFixed,
       "workload.arrivals: unknown key \"duration_s\" (allowed for type burstgpt"},
      {"workload:\n  arrivals: {type: trace}\n", "workload.arrivals.file: missing"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n",
       "workload.lengths: missing"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n"
       "  lengths: {type: foo}\n",
       "workload.lengths.type: unknown \"foo\" (expected sharegpt, gsm8k, fixed)"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n"
       "  lengths: {type: fixed, prompt_len: 0, output_len: 32}\n",
       "workload.lengths.prompt_len: must be >= 1, got 0"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n"
       "  lengths: {type: fixed, prompt_len: 8}\n",
       "workload.lengths.output_len: missing"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n"
       "  lengths: {type: sharegpt, file: " +
           kShareGpt + ", round_output_to: 0}\n",
       "workload.lengths.round_output_to: must be >= 1, got 0"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n"
       "  lengths: {type: sharegpt, file: " +
           kShareGpt + ", max_len: 10}\n",
       "workload.lengths: unknown key \"max_len\""},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n"
       "  lengths: {type: gsm8k, file: " +
           kGsm8k + ", few_shot: -1}\n",
       "workload.lengths.few_shot: must be >= 0, got -1"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n"
       "  lengths: {type: sharegpt, file: missing.csv}\n",
       "workload.lengths.file: file not found: \"missing.csv\""},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n" + kFixed +
           "  priority: {high_fraction: 1.5}\n",
       "workload.priority.high_fraction: must be in [0, 1], got 1.5"},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n" + kFixed +
           "  priority: {fraction: 0.5}\n",
       "workload.priority: unknown key \"fraction\""},
      {"workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n" + kFixed +
           "  lenghts: {}\n  slo: 3\n",
       "workload: unknown key \"lenghts\", \"slo\" (allowed: arrivals, lengths, priority, slo_classes)"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseError(c.yaml), HasSubstr(c.want)) << c.yaml;
  }
}

TEST(WorkloadTest, MalformedDataFilesNameFileAndLine) {
  TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.File(name)) << text;
  };
  const std::string arrivals = "workload:\n  arrivals: {type: poisson, rate: 1, duration_s: 6}\n";
  write("a.csv", "input_len,output_len\n10,20\n12,abc\n");
  EXPECT_THAT(ParseError(arrivals + "  lengths: {type: sharegpt, file: a.csv}\n", dir.path()),
              HasSubstr("workload.lengths.file: " + dir.File("a.csv") +
                        ":3: column output_len: not an integer: \"abc\""));
  write("b.csv", "input_len,output_len\n10,20\n\n12\n");
  EXPECT_THAT(ParseError(arrivals + "  lengths: {type: sharegpt, file: b.csv}\n", dir.path()),
              HasSubstr("b.csv:4: expected 2 fields, got 1"));
  write("c.csv", "input_len,output\n10,20\n");
  EXPECT_THAT(ParseError(arrivals + "  lengths: {type: sharegpt, file: c.csv}\n", dir.path()),
              HasSubstr("c.csv: missing column \"output_len\""));
  write("d.csv", "input_len,output_len\n2,2\n5000,10\n");
  EXPECT_THAT(ParseError(arrivals + "  lengths: {type: sharegpt, file: d.csv}\n", dir.path()),
              HasSubstr("workload.lengths: no row of"));
  write("g.csv", "question_tokens,answer_tokens\n10,20\n0,5\n");
  EXPECT_THAT(ParseError(arrivals + "  lengths: {type: gsm8k, file: g.csv}\n", dir.path()),
              HasSubstr("g.csv:3: token counts must be in [1, 1000000], got 0,5"));
  write("h.csv", "hour_of_day,avg_rps\n0,0.1\n2,0.2\n");
  EXPECT_THAT(
      ParseError("workload:\n  arrivals: {type: burstgpt, peak_rps: 5, file: h.csv}\n" + kFixed,
                 dir.path()),
      HasSubstr("workload.arrivals.file: " + dir.File("h.csv") +
                ":3: hour_of_day: expected 1, got 2"));
  write("t.csv", "arrival_s,prompt_len,output_len\n1,2,3\n-1,2,3\n");
  EXPECT_THAT(ParseError("workload:\n  arrivals: {type: trace, file: t.csv}\n", dir.path()),
              HasSubstr("t.csv:3: arrival_s: must be finite and in [0, 31536000], got -1"));
}

TEST(WorkloadTest, GenerateRejectsHandBuiltNonsense) {
  WorkloadSpec spec;
  spec.arrivals.type = ArrivalSpec::Type::kPoisson;
  spec.arrivals.rate = 0;
  spec.arrivals.duration_s = 10;
  spec.lengths.type = LengthSpec::Type::kFixed;
  spec.lengths.prompt_len = spec.lengths.output_len = 1;
  EXPECT_FALSE(GenerateWorkload(spec, 1).ok());
  spec.arrivals.rate = 1;
  spec.arrivals.num_requests = 5;  // and duration_s: both
  EXPECT_FALSE(GenerateWorkload(spec, 1).ok());
  spec.arrivals.num_requests = 0;
  EXPECT_TRUE(GenerateWorkload(spec, 1).ok());
  spec.lengths.type = LengthSpec::Type::kShareGpt;  // no pairs loaded
  EXPECT_FALSE(GenerateWorkload(spec, 1).ok());
}

}  // namespace
}  // namespace tediserve::sim
