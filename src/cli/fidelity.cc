#include "cli/fidelity.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "common/temp_dir.h"
#include "host/accounting.h"
#include "policy/scheduler.h"
#include "sim/calibration.h"
#include "sim/engine_denoiser.h"
#include "sim/simulator.h"

namespace tediserve::cli::fidelity {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// sim / live - 1; NaN when either is missing.
double RelDiff(double sim, double live) {
  if (!std::isfinite(sim) || !std::isfinite(live) || live <= 0) return kNaN;
  return sim / live - 1;
}

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

Overhead EstimateOverhead(const std::vector<Probe>& probes) {
  std::vector<double> client, server, simulated, steps, http, per_step;
  for (const Probe& p : probes) {
    if (!(p.client_s > 0) || !(p.server_s > 0) || p.steps < 1) continue;
    client.push_back(p.client_s);
    server.push_back(p.server_s);
    simulated.push_back(p.simulated_s);
    steps.push_back(p.steps);
    http.push_back(p.client_s - p.server_s);
    per_step.push_back((p.server_s - p.simulated_s) / p.steps);
  }
  Overhead o;
  o.probes = static_cast<int>(client.size());
  if (client.empty()) return o;
  o.per_request_s = std::max(0.0, Median(http));
  o.per_step_s = Median(per_step);  // may be negative: the profile slower than the live steps
  o.client_s = Median(client);
  o.server_s = Median(server);
  o.simulated_s = Median(simulated);
  o.steps = Median(steps);
  return o;
}

double StepScale::At(double tokens) const {
  if (points.empty()) return overall;
  if (tokens <= points.front().first) return points.front().second;
  if (tokens >= points.back().first) return points.back().second;
  const auto hi = std::upper_bound(points.begin(), points.end(), tokens,
                                   [](double t, const std::pair<double, double>& p) { return t < p.first; });
  const auto lo = hi - 1;
  const double w = (tokens - lo->first) / (hi->first - lo->first);
  return lo->second + w * (hi->second - lo->second);
}

StepScale StepScaleFrom(const std::vector<loadgen::StepSizeClass>& classes, double overall, double per_batch_s) {
  StepScale s(overall);
  for (const loadgen::StepSizeClass& c : classes) {
    if (!(c.batches >= kMinClassBatches) || !(c.profile_s > 0) || !(c.elapsed_s > 0) || !(c.tokens > 0)) continue;
    const double tokens = c.TokensPerStep();  // the replay prices each step by its tokens
    if (!s.points.empty() && !(tokens > s.points.back().first)) continue;  // classes out of order: keep the first
    const double engine_s = c.elapsed_s - std::max(0.0, per_batch_s) * c.batches;
    if (!(engine_s > 0)) continue;
    s.points.emplace_back(tokens, engine_s / c.profile_s);
  }
  return s;
}

double StepSigmaFrom(const std::vector<loadgen::StepSizeClass>& classes) {
  double n = 0, cv2 = 0;
  for (const loadgen::StepSizeClass& c : classes) {
    if (!(c.batches >= kMinClassBatches) || !(c.ratio_sum > 0)) continue;
    const double mean = c.ratio_sum / c.batches;
    const double var = std::max(0.0, c.ratio_squares / c.batches - mean * mean);
    n += c.batches;
    cv2 += c.batches * var / (mean * mean);
  }
  if (!(n > 0)) return 0;
  return std::min(3.0, std::sqrt(std::log1p(cv2 / n)));
}

double StepLevelFrom(const std::vector<loadgen::GaugeSample>& samples, StepScale* scale, double per_batch_s) {
  scale->level.clear();
  std::vector<double> logs, weights;
  double level = 1;
  for (size_t i = 1; i < samples.size(); ++i) {
    double batches = 0, elapsed = 0, expected = 0;
    for (const loadgen::StepSizeClass& d : loadgen::StepSizesMinus(samples[i].step_sizes, samples[i - 1].step_sizes)) {
      batches += d.batches;
      elapsed += d.elapsed_s;
      expected += d.profile_s * scale->At(d.TokensPerStep());
    }
    elapsed -= std::max(0.0, per_batch_s) * batches;
    if (batches >= kMinLevelBatches && expected > 0 && elapsed > 0) {
      level = elapsed / expected;
      logs.push_back(std::log(level));
      weights.push_back(batches);
    }
    scale->level.emplace_back(samples[i - 1].t, level);
  }
  double w = 0, m = 0, v = 0;
  for (size_t i = 0; i < logs.size(); ++i) {
    w += weights[i];
    m += weights[i] * logs[i];
  }
  if (!(w > 0)) return 0;
  m /= w;
  for (size_t i = 0; i < logs.size(); ++i) v += weights[i] * (logs[i] - m) * (logs[i] - m);
  return std::sqrt(v / w);
}

double StepScale::LevelAt(double t) const {
  if (level.empty() || t < level.front().first) return 1;
  const auto it = std::upper_bound(level.begin(), level.end(), t,
                                   [](double x, const std::pair<double, double>& p) { return x < p.first; });
  return (it - 1)->second;
}

StatusOr<policy::LatencyProfile> OffsetProfile(const policy::LatencyProfile& profile, double offset_s,
                                               int max_tokens, const StepScale& scale) {
  if (max_tokens < 1) return InvalidArgument("OffsetProfile: max_tokens must be >= 1");
  if (!(scale.overall > 0) || !std::isfinite(scale.overall)) return InvalidArgument("OffsetProfile: scale must be > 0");
  for (const auto& [tokens, ratio] : scale.points)
    if (!(ratio > 0) || !std::isfinite(ratio) || !std::isfinite(tokens))
      return InvalidArgument("OffsetProfile: every point of the scale must be finite and > 0");
  // Every integer token count up to the larger of max_tokens and the measured range, then
  // the same number of points along the profile's tail, so that the new curve's own tail
  // (the slope of its top quarter) is the old one's.
  std::map<int, std::vector<std::pair<double, double>>> points;
  for (int tp : profile.TpDegrees()) {
    const int top = std::max(max_tokens, static_cast<int>(std::ceil(profile.MaxMeasuredTokens(tp))));
    auto& pts = points[tp];
    pts.reserve(static_cast<size_t>(2 * top));
    for (int n = 1; n <= 2 * top; ++n) {
      const double s = scale.At(n) * profile.StepSeconds(tp, n) + offset_s;
      if (!(s > 0)) {
        return InvalidArgument("the per-step overhead " + std::to_string(offset_s * 1e3) +
                               " ms makes a TP-" + std::to_string(tp) + " step of " + std::to_string(n) +
                               " tokens take no time");
      }
      pts.emplace_back(n, s);
    }
  }
  return policy::LatencyProfile::FromPoints(std::move(points), profile.source() + " + overhead");
}

std::vector<loadgen::PlannedRequest> ProbePlan(size_t problems, int n, int output_len) {
  std::vector<loadgen::PlannedRequest> out;
  if (problems == 0) return out;
  for (int i = 0; i < n; ++i) {
    loadgen::PlannedRequest p;
    p.id = i;
    p.send_s = i;  // a second apart: each runs alone
    p.problem = static_cast<size_t>(i) * 37 % problems;
    p.output_len = output_len;
    p.slo_s = 60;
    out.push_back(p);
  }
  return out;
}

StatusOr<std::vector<loadgen::RequestResult>> SimulatePlan(const SimSetup& setup,
                                                           const std::vector<loadgen::PlannedRequest>& plan,
                                                           const std::vector<engine::TaskProblem>& problems,
                                                           ReplayBatches* batches) {
  if (plan.empty()) return std::vector<loadgen::RequestResult>{};
  if (setup.layout.empty()) return InvalidArgument("fidelity: an empty layout");
  ASSIGN_OR_RETURN(policy::LatencyProfile profile, policy::LatencyProfile::LoadCsv(setup.profile_csv));
  for (int tp : setup.layout)
    if (!profile.HasTp(tp))
      return InvalidArgument("the latency profile " + setup.profile_csv + " has no TP " + std::to_string(tp));
  auto cal = sim::LoadCalibration(setup.calibration);
  if (!cal.ok()) return cal.status().WithContext("--calibration");

  // The engine decodes request i's problem: problem = id mod the file's lines, so the file
  // lists the plan's problems in request order.
  TempDir tmp("tedi_fidelity");
  const std::string file = tmp.File("problems.jsonl");
  int output_len = 0;
  {
    std::ofstream f(file);
    for (size_t i = 0; i < plan.size(); ++i) {
      if (plan[i].id != static_cast<int64_t>(i)) return InvalidArgument("fidelity: plan ids must be 0..N-1");
      if (plan[i].problem >= problems.size()) return InvalidArgument("fidelity: a planned problem out of range");
      if (i > 0 && plan[i].send_s < plan[i - 1].send_s) return InvalidArgument("fidelity: plan not sorted by time");
      const auto& p = problems[plan[i].problem];
      f << json{{"task", p.task}, {"prompt", p.prompt}, {"answer", p.answer}}.dump() << "\n";
      output_len = std::max(output_len, plan[i].output_len);
    }
    if (!f) return IoError("cannot write " + file);
  }

  ASSIGN_OR_RETURN(policy::PolicyOptions po, policy::PolicyOptions::Named(setup.policy));
  sim::EngineDenoiserOptions eo;
  eo.problems_file = file;
  eo.use_cache = setup.cache;
  eo.max_output_len = output_len;
  eo.eos_early_stop = true;  // as every request the server runs (GenerateParams)
  ASSIGN_OR_RETURN(std::unique_ptr<sim::EngineDenoiser> engine, sim::EngineDenoiser::Create(setup.model_dir, eo));

  // The policy as serve::Runtime::Start sets it up.
  sim::SimOptions so;
  po.block_size = engine->default_block_size();
  po.cache = setup.cache;
  po.max_live_requests = setup.max_live;
  po.batch_steps = setup.batch_steps;
  po.steps_cv = cal->steps_cv;
  po.tokens_per_step.clear();
  po.accuracy.clear();
  for (double c : po.thresholds) {
    po.tokens_per_step.push_back(cal->TokensPerStepAt(c));
    po.accuracy.push_back(cal->AccuracyAt(c));
  }
  so.policy = po;
  so.tokens_per_step = po.tokens_per_step;
  so.estimator = "oneshot";
  so.slo_scale = setup.slo_scale;
  so.tick = setup.tick_s;
  so.timeline_interval = 3600;
  for (size_t i = 0; i < setup.layout.size(); ++i) {
    std::vector<int> devices;
    for (int d = 0; d < setup.layout[i]; ++d) devices.push_back(static_cast<int>(i) * 64 + d);
    so.instances.emplace_back(static_cast<policy::InstanceId>(i), setup.layout[i], 0, devices);
  }
  std::optional<policy::LatencyProfile> truth;
  // The round trip is paid once per batch: on every step's time when a batch is one step,
  // on the batch otherwise.
  const bool per_batch = setup.batch_steps > 1 && setup.overhead.per_step_s >= 0;
  if (per_batch) so.batch_overhead = setup.overhead.per_step_s;
  const double offset = per_batch ? 0 : setup.overhead.per_step_s;
  if (offset != 0 || !setup.overhead.step_scale.IsOne()) {
    int max_tokens = 0;
    for (const auto& p : plan) max_tokens = std::max(max_tokens, p.prompt_len + p.output_len);
    max_tokens *= std::max(1, setup.max_live);  // the largest batch there can be
    ASSIGN_OR_RETURN(truth, OffsetProfile(profile, offset, max_tokens, setup.overhead.step_scale));
    so.truth_profile = &*truth;
  }
  so.step_time_sigma = setup.overhead.step_sigma;
  so.seed = setup.seed;
  if (!setup.overhead.step_scale.level.empty()) {
    const StepScale scale = setup.overhead.step_scale;
    so.step_time_factor = [scale](policy::Seconds t) { return scale.LevelAt(t); };
  }

  std::vector<policy::RequestSpec> requests = loadgen::AsTrace(plan);
  for (auto& r : requests) r.prompt_len = engine->ProblemPromptLength(r.id);
  sim::EngineDenoiser* e = engine.get();
  const sim::Calibration c = *cal;
  sim::AccuracyFn acc = [c](double t) { return c.AccuracyAt(t); };
  sim::MeasuredQualityFn measured = [e](policy::RequestId id) -> std::optional<double> {
    auto ok = e->Correct(id);
    if (!ok) return std::nullopt;
    return *ok ? 1.0 : 0.0;
  };
  ASSIGN_OR_RETURN(sim::SimResult res, sim::Simulate(so, profile, *engine, requests, acc, measured));
  if (!engine->status().ok()) return engine->status().WithContext("engine in the loop");
  if (batches != nullptr) *batches = {res.batches, res.batch_requests};

  std::vector<loadgen::RequestResult> out(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const host::RequestRecord& rec = res.requests[i];
    loadgen::RequestResult& r = out[i];
    r.id = plan[i].id;
    r.problem = plan[i].problem;
    r.task = problems[plan[i].problem].task;
    r.planned_s = r.sent_s = plan[i].send_s;
    r.slo_s = plan[i].slo_s > 0 ? plan[i].slo_s : rec.slo;
    r.server_latency_s = rec.latency;
    r.latency_s = rec.latency + setup.overhead.per_request_s;
    r.done_s = r.planned_s + r.latency_s;
    switch (rec.outcome) {
      case host::Outcome::kCompleted: r.outcome = "ok"; break;
      case host::Outcome::kRejected: r.outcome = "rejected"; break;
      case host::Outcome::kCancelled: r.outcome = "cancelled"; break;
      default: r.outcome = "server_error"; break;
    }
    if (r.outcome != "ok") r.error = host::OutcomeName(rec.outcome) + std::string(": ") + rec.reason;
    r.http_status = r.outcome == "ok" ? 200 : 0;
    r.correct = r.outcome == "ok" && rec.quality > 0.5;
    r.slo_met = r.outcome == "ok" && r.latency_s <= r.slo_s;
    r.server_slo_met = rec.met;
    r.steps = rec.steps;
    r.mean_threshold = rec.mean_threshold;
    r.completion_tokens = rec.output_len;
    r.migrations = rec.migrations;
  }
  return out;
}

Comparison Compare(const loadgen::Summary& live, const loadgen::Summary& sim,
                   const loadgen::Summary& sim_profile_only, const Overhead& overhead,
                   const std::vector<std::pair<std::string, loadgen::Summary>>& alternatives) {
  Comparison c;
  c.live = live;
  c.sim = sim;
  c.sim_profile_only = sim_profile_only;
  for (const auto& [name, summary] : alternatives)
    c.alternatives.push_back({name, summary, 100 * (summary.attainment - live.attainment),
                              RelDiff(summary.latency_mean_s, live.latency_mean_s)});
  c.overhead = overhead;
  c.attainment_diff_points = 100 * (sim.attainment - live.attainment);
  c.mean_latency_diff = RelDiff(sim.latency_mean_s, live.latency_mean_s);
  c.p90_latency_diff = RelDiff(sim.latency_p90_s, live.latency_p90_s);
  c.profile_only_attainment_diff_points = 100 * (sim_profile_only.attainment - live.attainment);
  c.profile_only_mean_latency_diff = RelDiff(sim_profile_only.latency_mean_s, live.latency_mean_s);
  c.server_attainment_diff_points = 100 * (sim.attainment_server - live.attainment_server);
  c.server_mean_latency_diff = RelDiff(sim.server_latency_mean_s, live.server_latency_mean_s);
  c.attainment_within = std::abs(c.attainment_diff_points) <= kAttainmentTargetPoints;
  c.mean_latency_within = std::isfinite(c.mean_latency_diff) && std::abs(c.mean_latency_diff) <= kMeanLatencyTarget;
  return c;
}

json ToJson(const Overhead& o) {
  return {{"per_step_ms", 1e3 * o.per_step_s},   {"per_request_ms", 1e3 * o.per_request_s},
          {"step_scale", o.step_scale.overall},
          {"step_sigma", o.step_sigma},
          {"step_level", [&] {
             json a = json::array();
             for (const auto& [t, f] : o.step_scale.level) a.push_back({{"from_s", t}, {"factor", f}});
             return a;
           }()},
          {"step_scale_by_tokens", [&] {
             json a = json::array();
             for (const auto& [tokens, ratio] : o.step_scale.points) a.push_back({{"tokens", tokens}, {"scale", ratio}});
             return a;
           }()},
          {"probes", o.probes},                  {"probe_client_ms", 1e3 * o.client_s},
          {"probe_server_ms", 1e3 * o.server_s}, {"probe_simulated_ms", 1e3 * o.simulated_s},
          {"probe_steps", o.steps}};
}

json ToJson(const Comparison& c) {
  auto side = [](const loadgen::Summary& s) {
    return json{{"attainment", Num(s.attainment)},
                {"attainment_server", Num(s.attainment_server)},
                {"server_latency_mean_ms", Num(1e3 * s.server_latency_mean_s)},
                {"latency_mean_ms", Num(1e3 * s.latency_mean_s)},
                {"latency_p50_ms", Num(1e3 * s.latency_p50_s)},
                {"latency_p90_ms", Num(1e3 * s.latency_p90_s)},
                {"latency_p99_ms", Num(1e3 * s.latency_p99_s)},
                {"accuracy", Num(s.accuracy)},
                {"completed", s.completed},
                {"requests", s.requests},
                {"mean_threshold", Num(s.mean_threshold)},
                {"mean_steps", Num(s.mean_steps)}};
  };
  return {{"live", side(c.live)},
          {"simulated", side(c.sim)},
          {"simulated_profile_only", side(c.sim_profile_only)},
          {"alternatives", [&] {
             json a = json::object();
             for (const auto& alt : c.alternatives)
               a[alt.name] = {{"simulated", side(alt.sim)},
                              {"attainment_diff_points", Num(alt.attainment_diff_points)},
                              {"mean_latency_diff", Num(alt.mean_latency_diff)}};
             return a;
           }()},
          {"overhead", ToJson(c.overhead)},
          {"attainment_diff_points", Num(c.attainment_diff_points)},
          {"mean_latency_diff", Num(c.mean_latency_diff)},
          {"p90_latency_diff", Num(c.p90_latency_diff)},
          {"profile_only_attainment_diff_points", Num(c.profile_only_attainment_diff_points)},
          {"profile_only_mean_latency_diff", Num(c.profile_only_mean_latency_diff)},
          {"server_attainment_diff_points", Num(c.server_attainment_diff_points)},
          {"server_mean_latency_diff", Num(c.server_mean_latency_diff)},
          {"simulated_batches", c.sim_batches.batches},
          {"simulated_request_steps", c.sim_batches.request_steps},
          {"attainment_within_5_points", c.attainment_within},
          {"mean_latency_within_10_percent", c.mean_latency_within}};
}

}  // namespace tediserve::cli::fidelity
