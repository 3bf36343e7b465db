#include "cli/loadgen.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>

#include "common/input.h"
#include "host/host.h"
#include "sim/workload.h"

namespace tediserve::cli::loadgen {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A uniform integer in [0, n) without the standard library's distributions (their output
// differs between implementations): rejection keeps it unbiased.
uint64_t Below(std::mt19937_64& g, uint64_t n) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t v = g();
  while (v >= limit) v = g();
  return v % n;
}

// A CSV cell: NaN is written as "nan" (a missing value for the plots).
std::string Cell(double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The series value of a metric in a scrape (0 when absent).
double Get(const std::map<std::string, double>& m, const std::string& key, bool* found = nullptr) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  if (found) *found = true;
  return it->second;
}

}  // namespace

StatusOr<std::vector<policy::RequestSpec>> Arrivals(const ArrivalOptions& o) {
  YAML::Node workload;
  std::string base_dir = ".";
  uint64_t seed = o.seed;
  const bool capped_type = o.type == "trace" || o.type == "burstgpt" || o.type == "workload";
  if (o.type == "poisson" || o.type == "gamma") {
    if (!(o.rate > 0) || !std::isfinite(o.rate)) return InvalidArgument("--rate: must be > 0");
    if ((o.requests > 0) == (o.duration_s > 0))
      return InvalidArgument("--arrivals " + o.type + ": give exactly one of --requests and --duration");
    if (o.requests > kMaxRequests) return InvalidArgument("--requests: at most " + std::to_string(kMaxRequests));
    if (o.duration_s > 0 && o.rate * o.duration_s > static_cast<double>(kMaxRequests))
      return InvalidArgument("--rate x --duration: more than " + std::to_string(kMaxRequests) + " requests");
    YAML::Node a;
    a["type"] = o.type;
    a["rate"] = o.rate;
    if (o.type == "gamma") a["cv"] = o.cv;
    if (o.requests > 0) a["num_requests"] = o.requests;
    else a["duration_s"] = o.duration_s;
    workload["arrivals"] = a;
  } else if (o.type == "burstgpt") {
    if (!(o.rate > 0) || !std::isfinite(o.rate)) return InvalidArgument("--rate (the peak hour's rate): must be > 0");
    if (o.file.empty()) return InvalidArgument("--arrivals burstgpt needs --trace FILE (the hourly profile CSV)");
    YAML::Node a;
    a["type"] = "burstgpt";
    a["peak_rps"] = o.rate;
    a["file"] = o.file;
    a["minutes_per_hour"] = o.minutes_per_hour;
    workload["arrivals"] = a;
  } else if (o.type == "trace") {
    if (o.file.empty()) return InvalidArgument("--arrivals trace needs --trace FILE");
    YAML::Node a;
    a["type"] = "trace";
    a["file"] = o.file;
    workload["arrivals"] = a;
  } else if (o.type == "workload") {
    if (o.file.empty()) return InvalidArgument("--workload needs a file");
    YAML::Node root;
    try {
      root = YAML::LoadFile(o.file);
    } catch (const YAML::Exception& e) {
      return InvalidArgument("--workload " + o.file + ": " + e.what());
    }
    if (!root.IsMap() || !root["workload"].IsDefined())
      return InvalidArgument("--workload " + o.file + ": no workload: section (a `tediserve simulate` config)");
    workload = root["workload"];
    base_dir = fs::path(o.file).parent_path().string();
    if (base_dir.empty()) base_dir = ".";
    if (root["seed"].IsDefined() && !o.seed_given) {
      try {
        seed = root["seed"].as<uint64_t>();
      } catch (const YAML::Exception&) {
        return InvalidArgument("--workload " + o.file + ": seed must be a non-negative integer");
      }
    }
  } else {
    return InvalidArgument("--arrivals: unknown \"" + o.type + "\" (expected poisson, gamma, burstgpt or trace)");
  }
  if (o.type != "trace" && o.type != "workload") {
    // Placeholders: the held-out problems give the real lengths.
    YAML::Node l;
    l["type"] = "fixed";
    l["prompt_len"] = 1;
    l["output_len"] = 1;
    workload["lengths"] = l;
  }
  auto spec = sim::ParseWorkload(workload, base_dir);
  if (!spec.ok()) return spec.status().WithContext("arrivals");
  if (capped_type && spec->arrivals.type != sim::ArrivalSpec::Type::kTrace) {
    const double expected = sim::ExpectedRequests(spec->arrivals);
    if (expected > 10.0 * kMaxRequests) return InvalidArgument("arrivals: far too many requests");
  }
  auto reqs = sim::GenerateWorkload(*spec, seed);
  if (!reqs.ok()) return reqs.status().WithContext("arrivals");
  std::vector<policy::RequestSpec> out = std::move(reqs).value();
  if (capped_type) {
    if (o.duration_s > 0)
      out.erase(std::remove_if(out.begin(), out.end(), [&](const auto& r) { return r.arrival >= o.duration_s; }),
                out.end());
    if (o.requests > 0 && static_cast<int64_t>(out.size()) > o.requests) out.resize(static_cast<size_t>(o.requests));
  }
  if (out.empty()) return InvalidArgument("arrivals: no request to send (check --rate, --requests, --duration)");
  if (static_cast<int64_t>(out.size()) > kMaxRequests)
    return InvalidArgument("arrivals: " + std::to_string(out.size()) + " requests, more than " +
                           std::to_string(kMaxRequests) + " (use --requests or --duration to cut)");
  return out;
}

std::vector<size_t> ProblemOrder(size_t problems, size_t n, uint64_t seed) {
  std::vector<size_t> out;
  if (problems == 0) return out;
  out.reserve(n);
  std::mt19937_64 g(seed ^ 0x6c6f616467656e31ULL);  // "loadgen1": its own stream of the seed
  std::vector<size_t> perm(problems);
  while (out.size() < n) {
    for (size_t i = 0; i < problems; ++i) perm[i] = i;
    for (size_t i = problems; i > 1; --i) std::swap(perm[i - 1], perm[Below(g, i)]);
    for (size_t i = 0; i < problems && out.size() < n; ++i) out.push_back(perm[i]);
  }
  return out;
}

double ProfileSoloLatency(const SloOptions& slo, int prompt_len, int output_len) {
  policy::RequestSpec s;
  s.prompt_len = prompt_len;
  s.output_len = output_len;
  return host::SoloLatency(s, *slo.profile, slo.solo_tp, slo.block_size, slo.cache, slo.tokens_per_step);
}

StatusOr<std::vector<PlannedRequest>> Plan(const std::vector<policy::RequestSpec>& arrivals,
                                           const std::vector<engine::TaskProblem>& problems, int output_len,
                                           const SloOptions& slo, uint64_t seed) {
  if (problems.empty()) return InvalidArgument("no held-out problems");
  if (output_len < 1) return InvalidArgument("output length must be >= 1");
  const bool by_scale = !(slo.fixed_ms > 0) && slo.scale > 0;
  if (by_scale && (slo.profile == nullptr || slo.block_size < 1 || !(slo.tokens_per_step > 0)))
    return InvalidArgument("--slo-scale needs the model's latency profile and calibration");
  if (by_scale && !(slo.live_factor > 0 && std::isfinite(slo.live_factor)))
    return InvalidArgument("the measured latency alone must be a positive factor of the profile's");
  const std::vector<size_t> order = ProblemOrder(problems.size(), arrivals.size(), seed);
  std::vector<PlannedRequest> out;
  out.reserve(arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const policy::RequestSpec& a = arrivals[i];
    PlannedRequest r;
    r.id = static_cast<int64_t>(i);
    r.send_s = a.arrival;
    r.problem = order[i];
    r.prompt_len = static_cast<int>(problems[r.problem].ids.size());
    r.output_len = output_len;
    r.priority = a.priority;
    // As host::Host::Submit defaults a request's SLO.
    if (a.slo > 0) {
      r.slo_s = a.slo;
    } else {
      if (slo.fixed_ms > 0) {
        r.slo_s = slo.fixed_ms / 1000;
      } else if (by_scale) {
        r.slo_s = slo.scale * slo.live_factor * ProfileSoloLatency(slo, r.prompt_len, r.output_len);
      }
      r.slo_s *= a.slo_factor;
    }
    if (r.slo_s > 3600) return InvalidArgument("request " + std::to_string(i) + ": SLO over an hour");
    out.push_back(r);
  }
  return out;
}

std::vector<policy::RequestSpec> AsTrace(const std::vector<PlannedRequest>& plan) {
  std::vector<policy::RequestSpec> out;
  out.reserve(plan.size());
  for (const auto& p : plan) {
    policy::RequestSpec s;
    s.id = p.id;
    s.arrival = p.send_s;
    s.prompt_len = p.prompt_len;
    s.output_len = p.output_len;
    s.slo = p.slo_s;
    s.priority = p.priority;
    out.push_back(s);
  }
  return out;
}

json RequestBody(const PlannedRequest& r, const std::string& prompt, int max_tokens) {
  json b = {{"prompt", prompt}};
  if (r.slo_s > 0) b["slo_ms"] = r.slo_s * 1000;
  if (r.priority != 0) b["priority"] = r.priority;
  if (max_tokens > 0) b["max_tokens"] = max_tokens;
  return b;
}

void ReadResponse(int status, const std::string& body, const std::string& answer, RequestResult* r) {
  r->http_status = status;
  r->correct = false;
  r->slo_met = false;
  r->server_slo_met = false;
  if (status == 0) {
    r->outcome = "transport";
    return;
  }
  const json j = json::parse(body, nullptr, false);
  if (status != 200) {
    r->outcome = status == 429   ? "rejected"
                 : status == 503 ? "unavailable"
                 : status == 499 ? "cancelled"
                 : status < 500  ? "client_error"
                                 : "server_error";
    if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
        j["error"]["message"].is_string())
      r->error = j["error"]["message"].get<std::string>();
    else
      r->error = body.substr(0, 200);
    return;
  }
  auto bad = [&](const std::string& why) {
    r->outcome = "bad_response";
    r->error = why;
  };
  if (!j.is_object()) return bad("the body is not a JSON object");
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() || !j["choices"][0].is_object())
    return bad("no choices");
  const json& c = j["choices"][0];
  if (!c.contains("text") || !c["text"].is_string()) return bad("choices[0].text is not a string");
  r->text = c["text"].get<std::string>();
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) r->finish_reason = c["finish_reason"];
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
      j["usage"]["completion_tokens"].is_number_integer())
    r->completion_tokens = j["usage"]["completion_tokens"].get<int>();
  if (!j.contains("tediserve") || !j["tediserve"].is_object()) return bad("no tediserve object");
  const json& t = j["tediserve"];
  auto num = [&](const char* k, double dflt) { return t.contains(k) && t[k].is_number() ? t[k].get<double>() : dflt; };
  r->steps = static_cast<int>(num("steps", 0));
  r->mean_threshold = num("mean_threshold", 0);
  r->migrations = static_cast<int>(num("migrations", 0));
  r->server_latency_s = num("latency_ms", 0) / 1000;
  if (t.contains("slo_ms") && t["slo_ms"].is_number()) r->slo_s = t["slo_ms"].get<double>() / 1000;
  r->server_slo_met = t.contains("slo_met") && t["slo_met"].is_boolean() && t["slo_met"].get<bool>();
  r->outcome = "ok";
  r->correct = engine::IsCorrectAnswer(r->text, answer);
  r->slo_met = r->slo_s > 0 ? r->latency_s <= r->slo_s : r->server_slo_met;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Summary Summarize(const std::vector<RequestResult>& results) {
  Summary s;
  s.requests = static_cast<int64_t>(results.size());
  if (results.empty()) return s;
  std::vector<double> lat;
  double server_lat = 0, steps = 0, threshold_steps = 0, tokens = 0, lag = 0;
  double first = std::numeric_limits<double>::infinity(), last_planned = -first, last = -first;
  for (const auto& r : results) {
    ++s.outcomes[r.outcome.empty() ? "unsent" : r.outcome];
    first = std::min(first, r.planned_s);
    last_planned = std::max(last_planned, r.planned_s);
    last = std::max(last, r.done_s);
    const double l = std::max(0.0, r.sent_s - r.planned_s);
    lag += l;
    s.send_lag_max_s = std::max(s.send_lag_max_s, l);
    if (r.outcome != "ok") continue;
    ++s.completed;
    s.met += r.slo_met;
    s.met_server += r.server_slo_met;
    s.correct += r.correct;
    lat.push_back(r.latency_s);
    server_lat += r.server_latency_s;
    steps += r.steps;
    threshold_steps += r.mean_threshold * r.steps;
    tokens += r.completion_tokens;
  }
  const double n = static_cast<double>(s.requests);
  s.attainment = s.met / n;
  s.attainment_server = s.met_server / n;
  s.accuracy = s.correct / n;
  s.accuracy_completed = s.completed ? static_cast<double>(s.correct) / s.completed : kNaN;
  s.send_lag_mean_s = lag / n;
  if (!lat.empty()) {
    double sum = 0;
    for (double x : lat) sum += x;
    s.latency_mean_s = sum / lat.size();
    s.latency_p50_s = Percentile(lat, 0.5);
    s.latency_p90_s = Percentile(lat, 0.9);
    s.latency_p99_s = Percentile(lat, 0.99);
    s.latency_max_s = *std::max_element(lat.begin(), lat.end());
    s.server_latency_mean_s = server_lat / lat.size();
    s.mean_steps = steps / lat.size();
    s.mean_threshold = steps > 0 ? threshold_steps / steps : kNaN;
  } else {
    s.latency_mean_s = s.latency_p50_s = s.latency_p90_s = s.latency_p99_s = s.latency_max_s = kNaN;
    s.server_latency_mean_s = s.mean_steps = s.mean_threshold = kNaN;
  }
  s.offered_rps = s.requests > 1 && last_planned > first ? (n - 1) / (last_planned - first) : kNaN;
  s.wall_s = std::isfinite(last) && last > first ? last - first : 0;
  if (s.wall_s > 0) {
    s.throughput_rps = s.completed / s.wall_s;
    s.goodput_rps = s.met / s.wall_s;
    s.tokens_per_s = tokens / s.wall_s;
  }
  return s;
}

namespace {
// NaN is not JSON: null.
json J(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

json ToJson(const Aggregate& a) {
  return {{"policy", a.label},
          {"rate", a.rate > 0 ? json(a.rate) : json(nullptr)},
          {"runs", a.runs},
          {"requests", a.requests},
          {"failed", a.failed},
          {"attainment", J(a.attainment)},
          {"attainment_min", J(a.attainment_min)},
          {"attainment_max", J(a.attainment_max)},
          {"attainment_server", J(a.attainment_server)},
          {"accuracy", J(a.accuracy)},
          {"accuracy_min", J(a.accuracy_min)},
          {"accuracy_max", J(a.accuracy_max)},
          {"latency_mean_s", J(a.latency_mean_s)},
          {"latency_p99_s", J(a.latency_p99_s)},
          {"mean_threshold", J(a.mean_threshold)}};
}

json ToJson(const Summary& s) {
  return {{"requests", s.requests},
          {"completed", s.completed},
          {"slo_met", s.met},
          {"slo_met_server", s.met_server},
          {"correct", s.correct},
          {"outcomes", s.outcomes},
          {"attainment", J(s.attainment)},
          {"attainment_server", J(s.attainment_server)},
          {"accuracy", J(s.accuracy)},
          {"accuracy_completed", J(s.accuracy_completed)},
          {"latency_mean_s", J(s.latency_mean_s)},
          {"latency_p50_s", J(s.latency_p50_s)},
          {"latency_p90_s", J(s.latency_p90_s)},
          {"latency_p99_s", J(s.latency_p99_s)},
          {"latency_max_s", J(s.latency_max_s)},
          {"server_latency_mean_s", J(s.server_latency_mean_s)},
          {"offered_rps", J(s.offered_rps)},
          {"wall_s", J(s.wall_s)},
          {"throughput_rps", J(s.throughput_rps)},
          {"goodput_rps", J(s.goodput_rps)},
          {"tokens_per_s", J(s.tokens_per_s)},
          {"mean_threshold", J(s.mean_threshold)},
          {"mean_steps", J(s.mean_steps)},
          {"send_lag_mean_s", J(s.send_lag_mean_s)},
          {"send_lag_max_s", J(s.send_lag_max_s)}};
}

std::vector<Aggregate> AggregateRuns(const std::vector<RunSummary>& runs) {
  std::vector<Aggregate> out;
  for (const RunSummary& r : runs) {
    auto it = std::find_if(out.begin(), out.end(), [&](const Aggregate& a) { return a.label == r.label && a.rate == r.rate; });
    const Summary& s = r.summary;
    if (it == out.end()) {
      Aggregate a;
      a.label = r.label;
      a.rate = r.rate;
      a.attainment_min = a.accuracy_min = std::numeric_limits<double>::infinity();
      a.attainment_max = a.accuracy_max = -std::numeric_limits<double>::infinity();
      out.push_back(a);
      it = out.end() - 1;
    }
    Aggregate& a = *it;
    ++a.runs;
    a.requests += s.requests;
    a.failed += s.requests - s.completed;
    a.attainment += s.attainment;
    a.attainment_server += s.attainment_server;
    a.accuracy += s.accuracy;
    a.attainment_min = std::min(a.attainment_min, s.attainment);
    a.attainment_max = std::max(a.attainment_max, s.attainment);
    a.accuracy_min = std::min(a.accuracy_min, s.accuracy);
    a.accuracy_max = std::max(a.accuracy_max, s.accuracy);
    a.latency_mean_s += s.latency_mean_s;
    a.latency_p99_s += s.latency_p99_s;
    a.mean_threshold += s.mean_threshold;
  }
  for (Aggregate& a : out) {
    const double n = a.runs;
    a.attainment /= n;
    a.attainment_server /= n;
    a.accuracy /= n;
    a.latency_mean_s /= n;  // NaN when a run completed nothing
    a.latency_p99_s /= n;
    a.mean_threshold /= n;
  }
  return out;
}

std::optional<double> GoodputRate(const std::vector<double>& rates, const std::vector<double>& attainment,
                                  double target) {
  std::optional<double> best;
  for (size_t i = 0; i < rates.size() && i < attainment.size(); ++i)
    if (attainment[i] >= target && (!best || rates[i] > *best)) best = rates[i];
  return best;
}

StatusOr<std::map<std::string, double>> ParsePrometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    // The series ends at the first blank outside the label braces.
    size_t i = b;
    bool in_labels = false, in_string = false;
    for (; i < line.size(); ++i) {
      const char ch = line[i];
      if (in_string) {
        if (ch == '\\') ++i;
        else if (ch == '"') in_string = false;
      } else if (ch == '"' && in_labels) {
        in_string = true;
      } else if (ch == '{') {
        in_labels = true;
      } else if (ch == '}') {
        in_labels = false;
      } else if ((ch == ' ' || ch == '\t') && !in_labels) {
        break;
      }
    }
    const std::string series = line.substr(b, i - b);
    std::istringstream rest(line.substr(std::min(i, line.size())));
    std::string value;
    rest >> value;
    if (series.empty() || value.empty()) return InvalidArgument("/metrics line " + std::to_string(n) + ": no value");
    double v = 0;
    if (value == "+Inf" || value == "Inf") v = std::numeric_limits<double>::infinity();
    else if (value == "-Inf") v = -std::numeric_limits<double>::infinity();
    else if (value == "NaN") v = kNaN;
    else {
      char* end = nullptr;
      v = std::strtod(value.c_str(), &end);
      if (end != value.c_str() + value.size())
        return InvalidArgument("/metrics line " + std::to_string(n) + ": not a number: " + value);
    }
    out[series] = v;
  }
  return out;
}

std::vector<StepSizeClass> StepSizesBetween(const std::map<std::string, double>& before,
                                            const std::map<std::string, double>& after) {
  auto d = [&](const std::string& k) { return Get(after, k) - Get(before, k); };
  std::vector<StepSizeClass> out;
  const std::string size_family = "tediserve_step_size_batches_total", size_label = "{tokens_max=\"";
  const std::string size_prefix = size_family + size_label;
  for (auto it = after.lower_bound(size_prefix); it != after.end() && it->first.rfind(size_prefix, 0) == 0; ++it) {
    if (it->first.size() < size_prefix.size() + 2 || it->first.compare(it->first.size() - 2, 2, "\"}") != 0) continue;
    const std::string bound = it->first.substr(size_prefix.size(), it->first.size() - size_prefix.size() - 2);
    const std::string label = size_label + bound + "\"}";
    StepSizeClass c;
    if (bound == "+Inf") {
      c.tokens_max = std::numeric_limits<double>::infinity();
    } else {
      char* end = nullptr;
      c.tokens_max = std::strtod(bound.c_str(), &end);
      if (end == bound.c_str() || *end != '\0') continue;  // not a class this version wrote
    }
    c.batches = d(size_family + label);
    c.tokens = d("tediserve_step_size_tokens_total" + label);
    c.steps = d("tediserve_step_size_steps_total" + label);
    c.profile_s = d("tediserve_step_size_profile_seconds_total" + label);
    c.elapsed_s = d("tediserve_step_size_elapsed_seconds_total" + label);
    c.ratio_sum = d("tediserve_step_size_ratio_total" + label);
    c.ratio_squares = d("tediserve_step_size_ratio_squares_total" + label);
    if (c.batches > 0) out.push_back(c);
  }
  std::sort(out.begin(), out.end(),
            [](const StepSizeClass& a, const StepSizeClass& b) { return a.tokens_max < b.tokens_max; });
  return out;
}

std::vector<StepSizeClass> StepSizesMinus(const std::vector<StepSizeClass>& after,
                                          const std::vector<StepSizeClass>& before) {
  std::vector<StepSizeClass> out;
  for (StepSizeClass d : after) {
    for (const StepSizeClass& p : before)
      if (p.tokens_max == d.tokens_max) {
        d.batches -= p.batches;
        d.tokens -= p.tokens;
        d.steps -= p.steps;
        d.profile_s -= p.profile_s;
        d.elapsed_s -= p.elapsed_s;
        d.ratio_sum -= p.ratio_sum;
        d.ratio_squares -= p.ratio_squares;
      }
    if (d.batches > 0) out.push_back(d);
  }
  return out;
}

Overhead OverheadBetween(const std::map<std::string, double>& before, const std::map<std::string, double>& after) {
  Overhead o;
  bool has_sched = false, has_step = false;
  Get(after, "tediserve_scheduler_seconds_total", &has_sched);
  Get(after, "tediserve_step_seconds_total", &has_step);
  auto d = [&](const std::string& k) { return Get(after, k) - Get(before, k); };
  o.scheduler_s = d("tediserve_scheduler_seconds_total");
  o.scheduler_wall_s = d("tediserve_scheduler_wall_seconds_total");
  o.loop_s = d("tediserve_loop_seconds_total");
  o.step_s = d("tediserve_step_seconds_total");
  o.batches = d("tediserve_step_seconds_count");
  o.request_steps = d("tediserve_request_steps_total");
  const double bcount = d("tediserve_batch_requests_count");
  if (bcount > 0) {
    o.mean_batch = d("tediserve_batch_requests_sum") / bcount;
    o.batches_over_4 = 1 - d("tediserve_batch_requests_bucket{le=\"4\"}") / bcount;
    o.batches_over_8 = 1 - d("tediserve_batch_requests_bucket{le=\"8\"}") / bcount;
  }
  o.step_elapsed_s = d("tediserve_step_elapsed_seconds_total");
  o.step_profile_s = d("tediserve_step_profile_seconds_total");
  if (o.step_elapsed_s > 0 && o.step_profile_s > 0) o.step_scale = o.step_elapsed_s / o.step_profile_s;
  o.step_sizes = StepSizesBetween(before, after);
  o.to_worker_s = d("tediserve_step_overhead_seconds_total{leg=\"to_worker\"}");
  o.in_worker_s = d("tediserve_step_overhead_seconds_total{leg=\"worker\"}");
  o.from_worker_s = d("tediserve_step_overhead_seconds_total{leg=\"from_worker\"}");
  o.to_loop_s = d("tediserve_step_overhead_seconds_total{leg=\"loop\"}");
  o.valid = has_sched && has_step && o.batches > 0 && o.step_s > 0;
  if (o.valid) {
    o.policy_ms_per_step = 1000 * o.scheduler_s / o.batches;
    o.step_ms = 1000 * o.step_s / o.batches;
    o.overhead = o.scheduler_s / o.step_s;
    o.wall_overhead = o.scheduler_wall_s / o.step_s;
    o.loop_overhead = o.loop_s / o.step_s;
  }
  return o;
}

json ToJson(const Overhead& o) {
  if (!o.valid) return {{"valid", false}};
  return {{"valid", true},
          {"scheduler_s", o.scheduler_s},
          {"step_s", o.step_s},
          {"batches", o.batches},
          {"request_steps", o.request_steps},
          {"mean_batch", o.mean_batch},
          {"batches_over_4", o.batches_over_4},
          {"batches_over_8", o.batches_over_8},
          {"policy_ms_per_step", o.policy_ms_per_step},
          {"step_ms", o.step_ms},
          {"overhead", o.overhead},
          {"scheduler_wall_s", o.scheduler_wall_s},
          {"wall_overhead", o.wall_overhead},
          {"loop_s", o.loop_s},
          {"loop_overhead", o.loop_overhead},
          {"step_elapsed_s", o.step_elapsed_s},
          {"step_profile_s", o.step_profile_s},
          {"step_scale", o.step_scale},
          {"overhead_legs_s",
           {{"to_worker", o.to_worker_s}, {"worker", o.in_worker_s}, {"from_worker", o.from_worker_s}, {"loop", o.to_loop_s}}},
          {"step_sizes", [&] {
             json a = json::array();
             for (const StepSizeClass& c : o.step_sizes)
               a.push_back({{"tokens_max", std::isfinite(c.tokens_max) ? json(c.tokens_max) : json("+Inf")},
                            {"batches", c.batches},
                            {"tokens", c.tokens},
                            {"steps", c.steps},
                            {"profile_s", c.profile_s},
                            {"elapsed_s", c.elapsed_s},
                            {"ratio_sum", c.ratio_sum},
                            {"ratio_squares", c.ratio_squares}});
             return a;
           }()}};
}

std::string TimelineCsv(const std::vector<RequestResult>& results, const std::vector<GaugeSample>& gauges,
                        double window_s) {
  std::string out = "t_s,arrival_rps,active,queued,mean_threshold,mean_cap,window_attainment,window_mean_latency_s\n";
  if (results.empty() || !(window_s > 0)) return out;
  double end = 0;
  for (const auto& r : results) end = std::max({end, r.done_s, r.planned_s});
  const size_t windows = std::max<size_t>(1, static_cast<size_t>(std::ceil(end / window_s)));
  if (windows > 1'000'000) return out;
  struct W {
    int arrivals = 0, finished = 0, met = 0, ok = 0;
    double threshold = 0, latency = 0;
    double queued = kNaN;
  };
  std::vector<W> w(windows);
  auto idx = [&](double t) { return std::min(windows - 1, static_cast<size_t>(std::max(0.0, t) / window_s)); };
  for (const auto& r : results) {
    ++w[idx(r.planned_s)].arrivals;
    if (r.outcome.empty()) continue;  // never sent
    W& f = w[idx(r.done_s)];
    ++f.finished;
    f.met += r.slo_met;
    if (r.outcome == "ok") {
      ++f.ok;
      f.threshold += r.mean_threshold;
      f.latency += r.latency_s;
    }
  }
  for (const auto& g : gauges) w[idx(g.t)].queued = g.waiting;
  // In flight at a window's end: sent by then, minus done by then.
  std::vector<double> sent, done;
  for (const auto& r : results)
    if (!r.outcome.empty()) {
      sent.push_back(r.sent_s);
      done.push_back(r.done_s);
    }
  std::sort(sent.begin(), sent.end());
  std::sort(done.begin(), done.end());
  for (size_t k = 0; k < windows; ++k) {
    const double t_end = static_cast<double>(k + 1) * window_s;
    const double active = static_cast<double>(std::upper_bound(sent.begin(), sent.end(), t_end) - sent.begin()) -
                          static_cast<double>(std::upper_bound(done.begin(), done.end(), t_end) - done.begin());
    const W& x = w[k];
    out += Cell(t_end) + "," + Cell(x.arrivals / window_s) + "," + Cell(active) + "," + Cell(x.queued) + "," +
           Cell(x.ok ? x.threshold / x.ok : kNaN) + ",nan," + Cell(x.finished ? static_cast<double>(x.met) / x.finished : kNaN) +
           "," + Cell(x.ok ? x.latency / x.ok : kNaN) + "\n";
  }
  return out;
}

}  // namespace tediserve::cli::loadgen
