#include "sim/workload.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>

#include "sim/trace.h"
#include "sim/yaml_fields.h"

namespace tediserve::sim {
namespace {

using policy::RequestSpec;

// ---------------------------------------------------------------------------------------
// Random numbers. Everything is built on std::mt19937_64, whose output sequence the standard
// fixes; the distributions are our own so that a seed gives the same workload everywhere.

// SplitMix64 finaliser: turns (seed, stream) into well-separated engine seeds.
uint64_t SubSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

enum Stream : uint64_t { kArrivalStream = 1, kLengthStream = 2, kPriorityStream = 3, kClassStream = 4 };

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  // Uniform on [0, 1): the top 53 bits of one draw.
  double Uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  // Uniform on (0, 1]: safe to take the log of.
  double UniformPositive() { return static_cast<double>((gen_() >> 11) + 1) * 0x1.0p-53; }

  // Uniform integer in [0, n), n >= 1, without modulo bias (rejects the short last range).
  uint64_t Index(uint64_t n) {
    const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                           std::numeric_limits<uint64_t>::max() % n;
    uint64_t x;
    do {
      x = gen_();
    } while (x >= limit);
    return x % n;
  }

  // Exponential with the given rate, by inversion: -ln(U) / rate, U in (0, 1].
  double Exponential(double rate) { return -std::log(UniformPositive()) / rate; }

  // Standard normal by Box-Muller (the cosine branch only; one normal per two uniforms).
  double Normal() {
    const double r = std::sqrt(-2.0 * std::log(UniformPositive()));
    return r * std::cos(2.0 * std::numbers::pi * Uniform());
  }

  // Gamma(shape, scale 1) by Marsaglia and Tsang (2000). For shape < 1 it uses
  // Gamma(shape) = Gamma(shape + 1) * U^(1/shape).
  double Gamma(double shape) {
    if (shape < 1.0) return Gamma(shape + 1.0) * std::pow(UniformPositive(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      const double x = Normal();
      double v = 1.0 + c * x;
      if (v <= 0) continue;
      v = v * v * v;
      const double u = UniformPositive();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }

 private:
  std::mt19937_64 gen_;
};

// ---------------------------------------------------------------------------------------
// Reading the YAML section. Every message starts with the field's path.

std::string FormatDouble(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// A relative path is looked up next to the config first, then from the current directory.
StatusOr<std::string> ResolveFile(const YAML::Node& map, const std::string& path,
                                  const std::string& base_dir) {
  ASSIGN_OR_RETURN(const std::string file, GetString(map, path, "file"));
  const std::string field = path + ".file";
  if (file.empty()) return InvalidArgument(field + ": must not be empty");
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(file);
  if (p.is_absolute()) {
    if (fs::is_regular_file(p, ec)) return file;
    return NotFound(field + ": file not found: \"" + file + "\"");
  }
  std::string tried;
  if (!base_dir.empty()) {
    const fs::path in_base = fs::path(base_dir) / p;
    if (fs::is_regular_file(in_base, ec)) return in_base.string();
    tried = "\"" + in_base.string() + "\" and ";
  }
  if (fs::is_regular_file(p, ec)) return file;
  return NotFound(field + ": file not found: \"" + file + "\" (tried " + tried + "\"" + file +
                  "\" from the current directory)");
}

// ---------------------------------------------------------------------------------------
// Loading the data files.

// The hourly profile: rows hour_of_day = 0, 1, 2, ... in order; the avg_rps column.
Status LoadBurstGpt(const std::string& file, ArrivalSpec* spec) {
  ASSIGN_OR_RETURN(const CsvTable table, ReadCsv(file));
  ASSIGN_OR_RETURN(const int hour_col, table.RequireColumn("hour_of_day"));
  ASSIGN_OR_RETURN(const int rps_col, table.RequireColumn("avg_rps"));
  if (table.rows.empty()) return InvalidArgument(file + ": no data rows");
  spec->hourly_rps.clear();
  for (const CsvTable::Row& row : table.rows) {
    ASSIGN_OR_RETURN(const int hour, CsvInt(table, row, hour_col));
    const int expected = static_cast<int>(spec->hourly_rps.size());
    if (hour != expected) {
      return InvalidArgument(file + ":" + std::to_string(row.line) + ": hour_of_day: expected " +
                             std::to_string(expected) + ", got " + std::to_string(hour));
    }
    ASSIGN_OR_RETURN(const double rps, CsvDouble(table, row, rps_col));
    if (!std::isfinite(rps) || rps < 0) {
      return InvalidArgument(file + ":" + std::to_string(row.line) +
                             ": avg_rps: must be finite and >= 0, got " + FormatDouble(rps));
    }
    spec->hourly_rps.push_back(rps);
  }
  if (*std::max_element(spec->hourly_rps.begin(), spec->hourly_rps.end()) <= 0) {
    return InvalidArgument(file + ": every avg_rps is 0");
  }
  return Status::Ok();
}

// Raw ShareGPT pairs (columns input_len, output_len), before filtering.
StatusOr<std::vector<std::pair<int, int>>> LoadShareGpt(const std::string& file) {
  ASSIGN_OR_RETURN(const CsvTable table, ReadCsv(file));
  ASSIGN_OR_RETURN(const int in_col, table.RequireColumn("input_len"));
  ASSIGN_OR_RETURN(const int out_col, table.RequireColumn("output_len"));
  std::vector<std::pair<int, int>> raw;
  raw.reserve(table.rows.size());
  for (const CsvTable::Row& row : table.rows) {
    ASSIGN_OR_RETURN(const int in, CsvInt(table, row, in_col));
    ASSIGN_OR_RETURN(const int out, CsvInt(table, row, out_col));
    if (in < 0 || out < 0) {
      return InvalidArgument(file + ":" + std::to_string(row.line) +
                             ": lengths must be >= 0, got " + std::to_string(in) + "," +
                             std::to_string(out));
    }
    raw.emplace_back(in, out);
  }
  return raw;
}

// GSM8K question lengths (columns question_tokens, answer_tokens, tools/gsm8k_prompt_lengths.py)
// and the rounded mean exemplar length.
Status LoadGsm8k(const std::string& file, LengthSpec* spec) {
  ASSIGN_OR_RETURN(const CsvTable table, ReadCsv(file));
  ASSIGN_OR_RETURN(const int q_col, table.RequireColumn("question_tokens"));
  ASSIGN_OR_RETURN(const int a_col, table.RequireColumn("answer_tokens"));
  if (table.rows.empty()) return InvalidArgument(file + ": no data rows");
  spec->question_tokens.clear();
  int64_t exemplar_sum = 0;
  for (const CsvTable::Row& row : table.rows) {
    ASSIGN_OR_RETURN(const int q, CsvInt(table, row, q_col));
    ASSIGN_OR_RETURN(const int a, CsvInt(table, row, a_col));
    if (q <= 0 || a <= 0 || q > 1'000'000 || a > 1'000'000) {
      return InvalidArgument(file + ":" + std::to_string(row.line) +
                             ": token counts must be in [1, 1000000], got " + std::to_string(q) +
                             "," + std::to_string(a));
    }
    spec->question_tokens.push_back(q);
    exemplar_sum += q + a;
  }
  // Round half up, in integers: the same on every platform.
  const int64_t n = static_cast<int64_t>(spec->question_tokens.size());
  spec->exemplar_tokens = static_cast<int>((2 * exemplar_sum + n) / (2 * n));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// The three parts of the section.

constexpr const char* kArrivalTypes = "poisson, gamma, burstgpt, trace";
constexpr const char* kLengthTypes = "sharegpt, gsm8k, fixed";

// duration_s or num_requests, exactly one.
Status ParseEnd(const YAML::Node& node, const std::string& path, ArrivalSpec* spec) {
  const bool has_duration = node["duration_s"].IsDefined();
  const bool has_count = node["num_requests"].IsDefined();
  if (has_duration == has_count) {
    return InvalidArgument(path + ": set exactly one of duration_s and num_requests (" +
                           (has_duration ? "both are" : "neither is") + " set)");
  }
  if (has_duration) {
    ASSIGN_OR_RETURN(spec->duration_s, GetPositive(node, path, "duration_s"));
  } else {
    ASSIGN_OR_RETURN(spec->num_requests, GetInt(node, path, "num_requests", 1, kMaxRequests));
  }
  return Status::Ok();
}

Status ParseArrivals(const YAML::Node& node, const std::string& base_dir, ArrivalSpec* spec) {
  const std::string path = "workload.arrivals";
  RETURN_IF_ERROR(ExpectMap(node, path));
  ASSIGN_OR_RETURN(const std::string type, GetString(node, path, "type"));
  const std::string for_type = " for type " + type;
  if (type == "poisson") {
    spec->type = ArrivalSpec::Type::kPoisson;
    RETURN_IF_ERROR(CheckKeys(node, path, {"type", "rate", "duration_s", "num_requests"},
                              for_type));
    ASSIGN_OR_RETURN(spec->rate, GetPositive(node, path, "rate"));
    RETURN_IF_ERROR(ParseEnd(node, path, spec));
  } else if (type == "gamma") {
    spec->type = ArrivalSpec::Type::kGamma;
    RETURN_IF_ERROR(CheckKeys(node, path, {"type", "rate", "cv", "duration_s", "num_requests"},
                              for_type));
    ASSIGN_OR_RETURN(spec->rate, GetPositive(node, path, "rate"));
    ASSIGN_OR_RETURN(spec->cv, GetPositive(node, path, "cv"));
    // cv = 100 already means shape 1e-4; beyond that the gamma sampler underflows.
    if (spec->cv > 100) {
      return InvalidArgument(path + ".cv: must be <= 100, got " + FormatDouble(spec->cv));
    }
    RETURN_IF_ERROR(ParseEnd(node, path, spec));
  } else if (type == "burstgpt") {
    spec->type = ArrivalSpec::Type::kBurstGpt;
    RETURN_IF_ERROR(CheckKeys(node, path, {"type", "peak_rps", "file", "minutes_per_hour"},
                              for_type));
    ASSIGN_OR_RETURN(spec->peak_rps, GetPositive(node, path, "peak_rps"));
    spec->minutes_per_hour = 5;
    if (node["minutes_per_hour"].IsDefined()) {
      ASSIGN_OR_RETURN(spec->minutes_per_hour, GetPositive(node, path, "minutes_per_hour"));
    }
    ASSIGN_OR_RETURN(spec->file, ResolveFile(node, path, base_dir));
    RETURN_IF_ERROR(LoadBurstGpt(spec->file, spec).WithContext(path + ".file"));
  } else if (type == "trace") {
    spec->type = ArrivalSpec::Type::kTrace;
    RETURN_IF_ERROR(CheckKeys(node, path, {"type", "file"}, for_type));
    ASSIGN_OR_RETURN(spec->file, ResolveFile(node, path, base_dir));
    StatusOr<std::vector<RequestSpec>> trace = ReadTrace(spec->file);
    if (!trace.ok()) return trace.status().WithContext(path + ".file");
    spec->trace = std::move(trace).value();
  } else {
    return InvalidArgument(path + ".type: unknown \"" + type + "\" (expected " + kArrivalTypes +
                           ")");
  }
  const double expected = ExpectedRequests(*spec);
  if (expected > static_cast<double>(kMaxRequests)) {
    return InvalidArgument(path + ": about " + FormatDouble(std::round(expected)) +
                           " requests expected, more than the limit " +
                           std::to_string(kMaxRequests));
  }
  return Status::Ok();
}

Status ParseLengths(const YAML::Node& node, const std::string& base_dir, LengthSpec* spec) {
  const std::string path = "workload.lengths";
  RETURN_IF_ERROR(ExpectMap(node, path));
  ASSIGN_OR_RETURN(const std::string type, GetString(node, path, "type"));
  const std::string for_type = " for type " + type;
  constexpr int kMaxLen = 1'000'000;  // tokens; far beyond any model's context
  if (type == "sharegpt") {
    spec->type = LengthSpec::Type::kShareGpt;
    RETURN_IF_ERROR(
        CheckKeys(node, path, {"type", "file", "max_total", "round_output_to"}, for_type));
    // The smallest total the >= 4 filter can keep is 4 + 4.
    ASSIGN_OR_RETURN(spec->max_total, GetIntOr(node, path, "max_total", 4096, 8, kMaxLen));
    ASSIGN_OR_RETURN(spec->round_output_to,
                     GetIntOr(node, path, "round_output_to", 32, 1, kMaxLen));
    ASSIGN_OR_RETURN(spec->file, ResolveFile(node, path, base_dir));
    StatusOr<std::vector<std::pair<int, int>>> raw = LoadShareGpt(spec->file);
    if (!raw.ok()) return raw.status().WithContext(path + ".file");
    spec->pairs = FilterShareGpt(*raw, spec->max_total, spec->round_output_to);
    if (spec->pairs.empty()) {
      return InvalidArgument(path + ": no row of " + spec->file +
                             " passes the filter (max_total " + std::to_string(spec->max_total) +
                             ", round_output_to " + std::to_string(spec->round_output_to) + ")");
    }
  } else if (type == "gsm8k") {
    spec->type = LengthSpec::Type::kGsm8k;
    RETURN_IF_ERROR(CheckKeys(node, path, {"type", "file", "few_shot", "output_len"}, for_type));
    ASSIGN_OR_RETURN(spec->few_shot, GetIntOr(node, path, "few_shot", 4, 0, 100));
    ASSIGN_OR_RETURN(spec->output_len, GetIntOr(node, path, "output_len", 256, 1, kMaxLen));
    ASSIGN_OR_RETURN(spec->file, ResolveFile(node, path, base_dir));
    RETURN_IF_ERROR(LoadGsm8k(spec->file, spec).WithContext(path + ".file"));
  } else if (type == "fixed") {
    spec->type = LengthSpec::Type::kFixed;
    RETURN_IF_ERROR(CheckKeys(node, path, {"type", "prompt_len", "output_len"}, for_type));
    ASSIGN_OR_RETURN(const int64_t prompt, GetInt(node, path, "prompt_len", 1, kMaxLen));
    ASSIGN_OR_RETURN(const int64_t output, GetInt(node, path, "output_len", 1, kMaxLen));
    spec->prompt_len = static_cast<int>(prompt);
    spec->output_len = static_cast<int>(output);
  } else {
    return InvalidArgument(path + ".type: unknown \"" + type + "\" (expected " + kLengthTypes +
                           ")");
  }
  return Status::Ok();
}

Status ParsePriority(const YAML::Node& node, double* high_fraction) {
  const std::string path = "workload.priority";
  RETURN_IF_ERROR(ExpectMap(node, path));
  RETURN_IF_ERROR(CheckKeys(node, path, {"high_fraction"}, ""));
  ASSIGN_OR_RETURN(*high_fraction, GetDouble(node, path, "high_fraction"));
  if (*high_fraction < 0 || *high_fraction > 1) {
    return InvalidArgument(path + ".high_fraction: must be in [0, 1], got " +
                           FormatDouble(*high_fraction));
  }
  return Status::Ok();
}

constexpr size_t kMaxSloClasses = 16;

Status ParseSloClasses(const YAML::Node& node, std::vector<SloClass>* out) {
  const std::string path = "workload.slo_classes";
  if (!node.IsSequence() || node.size() == 0 || node.size() > kMaxSloClasses) {
    return InvalidArgument(path + ": must be a list of 1 to " + std::to_string(kMaxSloClasses) +
                           " {name, share, factor}");
  }
  double total = 0;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(ExpectMap(node[i], at));
    RETURN_IF_ERROR(CheckKeys(node[i], at, {"name", "share", "factor"}, ""));
    SloClass c;
    ASSIGN_OR_RETURN(c.name, GetString(node[i], at, "name"));
    if (c.name.empty() || c.name.size() > 32 ||
        !std::all_of(c.name.begin(), c.name.end(), [](char ch) {
          return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
        })) {
      return InvalidArgument(at + ".name: must be 1-32 characters of a-z, 0-9, - and _");
    }
    for (const SloClass& o : *out) {
      if (o.name == c.name) return InvalidArgument(at + ".name: \"" + c.name + "\" is used twice");
    }
    ASSIGN_OR_RETURN(c.share, GetDouble(node[i], at, "share", 0, 1));
    ASSIGN_OR_RETURN(c.factor, GetDouble(node[i], at, "factor", 0, 1000));
    if (!(c.factor > 0)) return InvalidArgument(at + ".factor: must be > 0");
    total += c.share;
    out->push_back(std::move(c));
  }
  if (std::abs(total - 1) > 1e-9) {
    return InvalidArgument(path + ": the shares must sum to 1, got " + FormatDouble(total));
  }
  return Status::Ok();
}

StatusOr<WorkloadSpec> ParseWorkloadOrThrow(const YAML::Node& node, const std::string& base_dir) {
  RETURN_IF_ERROR(ExpectMap(node, "workload"));
  RETURN_IF_ERROR(CheckKeys(node, "workload", {"arrivals", "lengths", "priority", "slo_classes"}, ""));
  WorkloadSpec spec;
  RETURN_IF_ERROR(ParseArrivals(node["arrivals"], base_dir, &spec.arrivals));
  if (spec.arrivals.type == ArrivalSpec::Type::kTrace) {
    for (const char* key : {"lengths", "priority", "slo_classes"}) {
      if (node[key].IsDefined()) {
        return InvalidArgument(std::string("workload.") + key +
                               ": not allowed with arrivals.type trace (the trace gives it)");
      }
    }
    return spec;
  }
  RETURN_IF_ERROR(ParseLengths(node["lengths"], base_dir, &spec.lengths));
  if (node["priority"].IsDefined()) {
    RETURN_IF_ERROR(ParsePriority(node["priority"], &spec.high_fraction));
  }
  if (node["slo_classes"].IsDefined()) RETURN_IF_ERROR(ParseSloClasses(node["slo_classes"], &spec.slo_classes));
  return spec;
}

// ---------------------------------------------------------------------------------------
// Generation.

Status CheckEnd(const ArrivalSpec& spec) {
  const bool by_duration = spec.duration_s > 0 && std::isfinite(spec.duration_s);
  const bool by_count = spec.num_requests > 0 && spec.num_requests <= kMaxRequests;
  if (by_duration == by_count) {
    return InvalidArgument("arrivals: need exactly one of duration_s > 0 and num_requests in [1, " +
                           std::to_string(kMaxRequests) + "]");
  }
  return Status::Ok();
}

// A renewal process: arrivals at the partial sums of `interval()` from 0, until duration_s or
// num_requests.
template <typename Interval>
StatusOr<std::vector<double>> Renewal(const ArrivalSpec& spec, Interval interval) {
  std::vector<double> times;
  double t = 0;
  while (true) {
    if (spec.num_requests > 0 && static_cast<int64_t>(times.size()) == spec.num_requests) break;
    t += interval();
    if (spec.duration_s > 0 && t >= spec.duration_s) break;
    if (static_cast<int64_t>(times.size()) >= kMaxRequests) {
      return InvalidArgument("arrivals: more than " + std::to_string(kMaxRequests) + " requests");
    }
    times.push_back(t);
  }
  return times;
}

}  // namespace

StatusOr<WorkloadSpec> ParseWorkload(const YAML::Node& node, const std::string& base_dir) {
  // yaml-cpp reports some misuse by throwing; none of it may escape.
  try {
    return ParseWorkloadOrThrow(node, base_dir);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("workload: ") + e.what());
  }
}

std::vector<std::pair<int, int>> FilterShareGpt(const std::vector<std::pair<int, int>>& raw,
                                                int max_total, int round_output_to) {
  std::vector<std::pair<int, int>> kept;
  kept.reserve(raw.size());
  for (const auto& [prompt, output] : raw) {
    // 64-bit sums: the inputs come from a file.
    if (prompt < 4 || output < 4 || int64_t{prompt} + output > max_total) continue;
    const int64_t rounded =
        round_output_to <= 1
            ? output
            : (int64_t{output} + round_output_to - 1) / round_output_to * round_output_to;
    if (prompt + rounded > max_total) continue;
    kept.emplace_back(prompt, static_cast<int>(rounded));
  }
  return kept;
}

std::vector<double> WindowRates(const ArrivalSpec& spec) {
  if (spec.type != ArrivalSpec::Type::kBurstGpt || spec.hourly_rps.empty()) return {};
  const double peak = *std::max_element(spec.hourly_rps.begin(), spec.hourly_rps.end());
  if (!(peak > 0)) return {};
  std::vector<double> rates;
  rates.reserve(spec.hourly_rps.size());
  for (double r : spec.hourly_rps) rates.push_back(r * (spec.peak_rps / peak));
  return rates;
}

double WindowSeconds(const ArrivalSpec& spec) {
  return spec.type == ArrivalSpec::Type::kBurstGpt ? spec.minutes_per_hour * 60.0 : 0.0;
}

double ExpectedRequests(const ArrivalSpec& spec) {
  switch (spec.type) {
    case ArrivalSpec::Type::kPoisson:
    case ArrivalSpec::Type::kGamma:
      return spec.num_requests > 0 ? static_cast<double>(spec.num_requests)
                                   : spec.rate * spec.duration_s;
    case ArrivalSpec::Type::kBurstGpt: {
      const std::vector<double> rates = WindowRates(spec);
      return std::accumulate(rates.begin(), rates.end(), 0.0) * WindowSeconds(spec);
    }
    case ArrivalSpec::Type::kTrace:
      return static_cast<double>(spec.trace.size());
  }
  return 0;
}

StatusOr<std::vector<double>> ArrivalTimes(const ArrivalSpec& spec, uint64_t seed) {
  Rng rng(seed);
  switch (spec.type) {
    case ArrivalSpec::Type::kPoisson: {
      if (!(spec.rate > 0) || !std::isfinite(spec.rate)) {
        return InvalidArgument("arrivals.rate: must be > 0");
      }
      RETURN_IF_ERROR(CheckEnd(spec));
      return Renewal(spec, [&] { return rng.Exponential(spec.rate); });
    }
    case ArrivalSpec::Type::kGamma: {
      if (!(spec.rate > 0) || !std::isfinite(spec.rate)) {
        return InvalidArgument("arrivals.rate: must be > 0");
      }
      if (!(spec.cv > 0) || spec.cv > 100) {
        return InvalidArgument("arrivals.cv: must be in (0, 100]");
      }
      RETURN_IF_ERROR(CheckEnd(spec));
      // Shape k = 1/cv^2 and scale 1/(k*rate): mean 1/rate, standard deviation cv/rate.
      const double shape = 1.0 / (spec.cv * spec.cv);
      const double scale = 1.0 / (shape * spec.rate);
      return Renewal(spec, [&] { return rng.Gamma(shape) * scale; });
    }
    case ArrivalSpec::Type::kBurstGpt: {
      const std::vector<double> rates = WindowRates(spec);
      const double window = WindowSeconds(spec);
      if (rates.empty() || !(spec.peak_rps > 0) || !(window > 0) || !std::isfinite(window)) {
        return InvalidArgument(
            "arrivals: burstgpt needs hourly_rps with a positive peak, peak_rps > 0 and "
            "minutes_per_hour > 0");
      }
      // Piecewise-constant rate: a Poisson process restarted at each window boundary is
      // exact, since exponential gaps are memoryless.
      std::vector<double> times;
      for (size_t w = 0; w < rates.size(); ++w) {
        if (rates[w] <= 0) continue;
        const double start = static_cast<double>(w) * window;
        const double end = start + window;
        for (double t = start + rng.Exponential(rates[w]); t < end;
             t += rng.Exponential(rates[w])) {
          if (static_cast<int64_t>(times.size()) >= kMaxRequests) {
            return InvalidArgument("arrivals: more than " + std::to_string(kMaxRequests) +
                                   " requests");
          }
          times.push_back(t);
        }
      }
      return times;
    }
    case ArrivalSpec::Type::kTrace: {
      std::vector<double> times;
      times.reserve(spec.trace.size());
      for (const RequestSpec& r : spec.trace) times.push_back(r.arrival);
      std::sort(times.begin(), times.end());
      return times;
    }
  }
  return InvalidArgument("arrivals: unknown type");
}

StatusOr<std::vector<std::pair<int, int>>> SampleLengths(const LengthSpec& spec, size_t n,
                                                         uint64_t seed) {
  Rng rng(seed);
  std::vector<std::pair<int, int>> out;
  out.reserve(n);
  switch (spec.type) {
    case LengthSpec::Type::kShareGpt:
      if (spec.pairs.empty()) return InvalidArgument("lengths: sharegpt has no pairs");
      for (size_t i = 0; i < n; ++i) out.push_back(spec.pairs[rng.Index(spec.pairs.size())]);
      return out;
    case LengthSpec::Type::kGsm8k: {
      if (spec.question_tokens.empty()) return InvalidArgument("lengths: gsm8k has no questions");
      if (spec.few_shot < 0 || spec.exemplar_tokens < 0 || spec.output_len <= 0) {
        return InvalidArgument("lengths: gsm8k needs few_shot >= 0 and output_len > 0");
      }
      std::vector<size_t> order(spec.question_tokens.size());
      for (size_t i = 0; i < n; ++i) {
        const size_t pos = i % order.size();
        if (pos == 0) {
          // A fresh Fisher-Yates shuffle for every pass over the questions.
          std::iota(order.begin(), order.end(), size_t{0});
          for (size_t j = order.size() - 1; j > 0; --j) {
            std::swap(order[j], order[rng.Index(j + 1)]);
          }
        }
        const int prompt = spec.few_shot * spec.exemplar_tokens + spec.question_tokens[order[pos]];
        out.emplace_back(prompt, spec.output_len);
      }
      return out;
    }
    case LengthSpec::Type::kFixed:
      if (spec.prompt_len <= 0 || spec.output_len <= 0) {
        return InvalidArgument("lengths: fixed needs prompt_len > 0 and output_len > 0");
      }
      out.assign(n, {spec.prompt_len, spec.output_len});
      return out;
  }
  return InvalidArgument("lengths: unknown type");
}

StatusOr<std::vector<RequestSpec>> GenerateWorkload(const WorkloadSpec& spec, uint64_t seed) {
  if (spec.arrivals.type == ArrivalSpec::Type::kTrace) {
    if (spec.arrivals.trace.empty()) return InvalidArgument("arrivals: the trace is empty");
    std::vector<RequestSpec> requests = spec.arrivals.trace;
    std::stable_sort(
        requests.begin(), requests.end(),
        [](const RequestSpec& a, const RequestSpec& b) { return a.arrival < b.arrival; });
    for (size_t i = 0; i < requests.size(); ++i) requests[i].id = static_cast<int64_t>(i);
    return requests;
  }
  if (!(spec.high_fraction >= 0 && spec.high_fraction <= 1)) {
    return InvalidArgument("priority.high_fraction: must be in [0, 1]");
  }
  ASSIGN_OR_RETURN(const std::vector<double> times,
                   ArrivalTimes(spec.arrivals, SubSeed(seed, kArrivalStream)));
  ASSIGN_OR_RETURN(const auto lengths,
                   SampleLengths(spec.lengths, times.size(), SubSeed(seed, kLengthStream)));
  std::vector<RequestSpec> requests(times.size());
  for (size_t i = 0; i < times.size(); ++i) {
    requests[i].id = static_cast<int64_t>(i);
    requests[i].arrival = times[i];
    requests[i].prompt_len = lengths[i].first;
    requests[i].output_len = lengths[i].second;
  }
  // Exactly round(fraction * N) high-priority requests, chosen by a partial Fisher-Yates.
  const size_t high = static_cast<size_t>(
      std::llround(spec.high_fraction * static_cast<double>(requests.size())));
  if (high > 0) {
    Rng rng(SubSeed(seed, kPriorityStream));
    std::vector<size_t> index(requests.size());
    std::iota(index.begin(), index.end(), size_t{0});
    for (size_t j = 0; j < high; ++j) {
      std::swap(index[j], index[j + rng.Index(index.size() - j)]);
      requests[index[j]].priority = 1;
    }
  }
  // SLO classes: a shuffled order, cut into runs of round(share x N) (the last class takes the rest).
  if (spec.slo_classes.size() > 1) {
    Rng rng(SubSeed(seed, kClassStream));
    std::vector<size_t> index(requests.size());
    std::iota(index.begin(), index.end(), size_t{0});
    for (size_t j = 0; j + 1 < index.size(); ++j) std::swap(index[j], index[j + rng.Index(index.size() - j)]);
    size_t at = 0;
    for (size_t c = 0; c < spec.slo_classes.size(); ++c) {
      const bool last = c + 1 == spec.slo_classes.size();
      const size_t want = last ? index.size() - at
                               : std::min(index.size() - at, static_cast<size_t>(std::llround(
                                     spec.slo_classes[c].share * static_cast<double>(index.size()))));
      for (size_t k = 0; k < want; ++k, ++at) {
        requests[index[at]].slo_class = static_cast<int>(c);
        requests[index[at]].slo_factor = spec.slo_classes[c].factor;
      }
    }
  } else if (spec.slo_classes.size() == 1) {
    for (RequestSpec& r : requests) r.slo_factor = spec.slo_classes[0].factor;
  }
  return requests;
}

}  // namespace tediserve::sim
