#include "sim/results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace tediserve::sim {
namespace {

double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(std::ceil(q * v.size())) - (q > 0 ? 1 : 0));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// Fixed precision so that files are byte-identical across runs and easy to diff.
std::string F(double x, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

double Round(double x, int digits = 6) {
  const double p = std::pow(10.0, digits);
  return std::round(x * p) / p;
}

}  // namespace

namespace {

template <typename Keep>
Summary SummarizeIf(const std::vector<RequestResult>& requests, const std::string& name, Keep keep) {
  Summary s;
  s.name = name;
  std::vector<double> lat;  // of the completed requests
  double met = 0, q = 0, th = 0, st = 0;
  for (const RequestResult& r : requests) {
    if (!keep(r)) continue;
    if (r.outcome == host::Outcome::kCancelled) {
      ++s.cancelled;
      continue;
    }
    met += r.met;
    q += r.quality;
    s.migrations += r.migrations;
    if (r.outcome != host::Outcome::kCompleted) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    lat.push_back(r.latency);
    th += r.mean_threshold;
    st += r.steps;
  }
  s.requests = s.completed + s.failed + s.cancelled;
  const int counted = s.completed + s.failed;
  if (counted == 0) return s;
  s.attainment = met / counted;
  s.quality = q / counted;
  if (lat.empty()) return s;
  const double n = lat.size();
  double sum = 0;
  for (double x : lat) sum += x;
  s.mean_latency = sum / n;
  s.p50_latency = Quantile(lat, 0.5);
  s.p99_latency = Quantile(lat, 0.99);
  s.mean_threshold = th / n;
  s.mean_steps = st / n;
  return s;
}

}  // namespace

Summary Summarize(const std::vector<RequestResult>& requests, const std::string& name, double from_s, double to_s) {
  return SummarizeIf(requests, name,
                     [&](const RequestResult& r) { return r.arrival >= from_s && r.arrival < to_s; });
}

Summary Summarize(const std::vector<RequestResult>& requests, const Group& g) {
  return SummarizeIf(requests, g.name, [&](const RequestResult& r) {
    return (g.slo_class < 0 || r.slo_class == g.slo_class) && (g.priority < 0 || r.priority == g.priority);
  });
}

nlohmann::json SummaryJson(const Summary& s) {
  return {{"name", s.name},
          {"requests", s.requests},
          {"slo_attainment", Round(s.attainment)},
          {"latency_s", {{"mean", Round(s.mean_latency)}, {"p50", Round(s.p50_latency)}, {"p99", Round(s.p99_latency)}}},
          {"quality", Round(s.quality)},
          {"mean_threshold", Round(s.mean_threshold)},
          {"mean_steps", Round(s.mean_steps)},
          {"migrations", s.migrations},
          {"completed", s.completed},
          {"cancelled", s.cancelled},
          {"failed", s.failed}};
}

Status WriteRunFiles(const std::string& dir, const SimResult& result, const std::vector<Period>& periods,
                     const nlohmann::json& run_info, const std::vector<Group>& groups) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("output.dir: cannot create " + dir + ": " + ec.message());
  {
    std::ofstream f(dir + "/requests.csv");
    if (!f) return IoError("cannot write " + dir + "/requests.csv");
    f << "id,arrival_s,finish_s,latency_s,slo_s,met,quality,mean_threshold,steps,migrations,priority,prompt_len,"
         "output_len,outcome\n";
    for (const RequestResult& r : result.requests) {
      f << r.id << ',' << F(r.arrival) << ',' << F(r.finish) << ',' << F(r.latency) << ',' << F(r.slo) << ','
        << (r.met ? 1 : 0) << ',' << F(r.quality) << ',' << F(r.mean_threshold, 4) << ',' << r.steps << ','
        << r.migrations << ',' << r.priority << ',' << r.prompt_len << ',' << r.output_len << ','
        << host::OutcomeName(r.outcome) << '\n';
    }
  }
  {
    std::ofstream f(dir + "/timeline.csv");
    if (!f) return IoError("cannot write " + dir + "/timeline.csv");
    f << "t_s,arrival_rps,active,queued,mean_threshold,mean_cap,window_attainment,window_mean_latency_s\n";
    for (const TimelinePoint& p : result.timeline) {
      f << F(p.t, 3) << ',' << F(p.arrival_rps, 4) << ',' << p.active << ',' << p.queued << ','
        << F(p.mean_threshold, 4) << ',' << F(p.mean_cap, 4) << ',' << F(p.window_attainment, 4) << ','
        << F(p.window_mean_latency, 4) << '\n';
    }
  }
  nlohmann::json summary = run_info;
  summary["overall"] = SummaryJson(Summarize(result.requests, "overall"));
  nlohmann::json per = nlohmann::json::array();
  {
    std::ofstream f(dir + "/periods.csv");
    if (!f) return IoError("cannot write " + dir + "/periods.csv");
    f << "period,from_s,to_s,requests,attainment,mean_latency_s,p50_latency_s,p99_latency_s,quality,mean_threshold\n";
    for (const Period& p : periods) {
      const Summary s = Summarize(result.requests, p.name, p.from_s, p.to_s);
      per.push_back(SummaryJson(s));
      f << p.name << ',' << F(p.from_s, 1) << ',' << F(p.to_s, 1) << ',' << s.requests << ',' << F(s.attainment, 4)
        << ',' << F(s.mean_latency, 4) << ',' << F(s.p50_latency, 4) << ',' << F(s.p99_latency, 4) << ','
        << F(s.quality, 4) << ',' << F(s.mean_threshold, 4) << '\n';
    }
  }
  summary["periods"] = per;
  if (!groups.empty()) {
    nlohmann::json gs = nlohmann::json::array();
    for (const Group& g : groups) gs.push_back(SummaryJson(Summarize(result.requests, g)));
    summary["groups"] = gs;
  }
  const auto& st = result.scheduler_stats;
  summary["scheduler"] = {{"dispatch_decisions", st.dispatch_decisions}, {"migrations", st.migrations},
                          {"load_control_runs", st.load_control_runs},
                          {"threshold_selections", st.threshold_selections}, {"predictions", st.predictions},
                          {"predictor_fallbacks", result.predictor_fallbacks}, {"lost_steps", st.lost_steps}};
  summary["faults"] = {{"instance_failures", result.instance_failures}, {"drains", result.drains},
                       {"failed_batches", result.failed_batches}, {"cancellations", result.cancellations}};
  summary["events"] = result.events;
  summary["instance_steps"] = result.steps;
  summary["request_steps"] = result.request_steps;
  std::ofstream f(dir + "/summary.json");
  if (!f) return IoError("cannot write " + dir + "/summary.json");
  f << summary.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  return Status::Ok();
}

}  // namespace tediserve::sim
