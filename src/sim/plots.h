// PNG plots of the simulator's CSV outputs, drawn by gnuplot run as a child process.
//
// The CSVs are read here (header row, comma-separated, columns found by name, extra
// columns ignored; "nan" or an empty field is a missing value) and handed to gnuplot as
// inline data, so a malformed file is reported with its name and line rather than as a
// gnuplot message. Paths and titles go into the script as quoted strings and gnuplot runs
// without a shell. gnuplot missing is kFailedPrecondition: callers treat it as a warning.
#pragma once

#include <string>

#include "common/status.h"

namespace tediserve::sim {

struct PlotOptions {
  std::string gnuplot = "gnuplot";  // program name (looked up on PATH) or path
};

// <run_dir>/timeline.csv (t_s, arrival_rps, active, queued, mean_threshold, mean_cap,
// window_attainment, window_mean_latency_s) -> <run_dir>/timeline.png: three stacked
// panels over time: load (arrival rate; active and queued requests), mean threshold and
// mean cap, windowed SLO attainment and mean latency.
Status PlotTimeline(const std::string& run_dir, const std::string& title, const PlotOptions& options = {});

// A sweep CSV (policy, x, attainment, mean_latency_s, p50_latency_s, p99_latency_s,
// quality) -> <out_prefix>_attainment.png, <out_prefix>_latency.png (mean solid, p99
// dashed) and <out_prefix>_quality.png, one line per policy (in order of first
// appearance) over x (sorted), x axis labelled `x_label`.
Status PlotSweep(const std::string& sweep_csv, const std::string& x_label, const std::string& out_prefix,
                 const std::string& title, const PlotOptions& options = {});

// A frontier CSV (x, policy, attainment, quality, dominated; src/sim/frontier.h) ->
// out_png: one panel per x value (at most 16), quality against SLO attainment, each run a
// labelled point, filled on the frontier and open where another run dominates it.
Status PlotFrontier(const std::string& frontier_csv, const std::string& x_label, const std::string& out_png,
                    const std::string& title, const PlotOptions& options = {});

// <run_dir>/layouts.csv (t_s, then tp<d> columns: instances of each TP degree accepting
// work) and the arrival rate of <run_dir>/timeline.csv -> <run_dir>/layouts.png: arrivals on
// top, instances per TP degree over time below (paper Figure 12; reconfiguration runs).
Status PlotLayouts(const std::string& run_dir, const std::string& title, const PlotOptions& options = {});

}  // namespace tediserve::sim
