// Summaries of a simulation run and the files a run writes (all deterministic: no wall time).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "sim/simulator.h"

namespace tediserve::sim {

struct Period {
  std::string name;
  double from_s = 0, to_s = 0;  // by arrival time, [from, to)
};

struct Summary {
  std::string name;  // period name, or "overall"
  int requests = 0;
  // How they ended: completed, cancelled by the client, or failed (rejected, aborted, or no
  // instance left). Attainment and quality count every request that was not cancelled (a
  // failed one as missed and wrong); latency, threshold and steps are over the completed ones
  // (a request turned away at arrival has none of them).
  int completed = 0, cancelled = 0, failed = 0;
  double attainment = 0;
  double mean_latency = 0, p50_latency = 0, p99_latency = 0;
  double quality = 0;
  double mean_threshold = 0;
  double mean_steps = 0;
  int64_t migrations = 0;
};

Summary Summarize(const std::vector<RequestResult>& requests, const std::string& name,
                  double from_s = -1e300, double to_s = 1e300);

// A named subset of a run's requests: one SLO class, or the requests of one priority.
struct Group {
  std::string name;
  int slo_class = -1;  // -1: any
  int priority = -1;   // -1: any
};
Summary Summarize(const std::vector<RequestResult>& requests, const Group& group);
nlohmann::json SummaryJson(const Summary& s);

// Writes requests.csv, timeline.csv, periods.csv and summary.json into dir (created).
Status WriteRunFiles(const std::string& dir, const SimResult& result, const std::vector<Period>& periods,
                     const nlohmann::json& run_info, const std::vector<Group>& groups = {});

}  // namespace tediserve::sim
