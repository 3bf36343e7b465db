#include "sim/plots.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include "common/input.h"
#include "common/temp_dir.h"

extern char** environ;

namespace tediserve::sim {
namespace {

namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- CSV ------------------------------------------------------------------------------

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

using Csv = CsvTable;

// The common CSV reader, plus: a file to plot needs data rows.
StatusOr<Csv> ReadPlotCsv(const std::string& path) {
  ASSIGN_OR_RETURN(Csv csv, ::tediserve::ReadCsv(path));
  if (csv.rows.empty()) return InvalidArgument(path + ": no data rows");
  return csv;
}

// Indices of the named columns, in the order asked.
StatusOr<std::vector<int>> Columns(const Csv& csv, const std::vector<std::string>& names) {
  std::vector<int> idx;
  for (const auto& name : names) {
    auto it = std::find(csv.columns.begin(), csv.columns.end(), name);
    if (it == csv.columns.end()) return InvalidArgument(csv.path + ": missing column '" + name + "'");
    idx.push_back(static_cast<int>(it - csv.columns.begin()));
  }
  return idx;
}

// A number; "", "nan" (any case) and "-" are missing values.
StatusOr<double> Number(const Csv& csv, size_t row, int col) {
  const std::string& f = csv.rows[row].cells[col];
  std::string lower = f;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (f.empty() || lower == "nan" || lower == "-nan" || f == "-") return kNaN;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(f.c_str(), &end);
  if (end != f.c_str() + f.size() || errno == ERANGE)
    return InvalidArgument(csv.path + ":" + std::to_string(csv.rows[row].line) + ": column '" + csv.columns[col] +
                           "': not a number: '" + f + "'");
  return v;
}

// ---- gnuplot script -------------------------------------------------------------------

// A gnuplot single-quoted string: nothing inside is interpreted (no escapes, no backquote
// commands, no macros) except '' for a quote. Control characters would end the command.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "''";
    } else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      out += ' ';
    } else {
      out += ch;
    }
  }
  return out + "'";
}

std::string Num(double v) {
  if (!std::isfinite(v)) return "NaN";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// Inline data: `name` << EOD, one row per line.
void DataBlock(std::ostringstream& gp, const std::string& name, const std::vector<std::vector<double>>& rows) {
  gp << name << " << EOD\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) gp << (i ? " " : "") << Num(r[i]);
    gp << "\n";
  }
  gp << "EOD\n";
}

bool AnyFinite(const std::vector<std::vector<double>>& rows, int col) {
  return std::any_of(rows.begin(), rows.end(), [&](const auto& r) { return std::isfinite(r[col]); });
}

std::string Terminal(int width, int height) {
  const std::string size = " noenhanced size " + std::to_string(width) + "," + std::to_string(height);
  // pngcairo draws anti-aliased lines; plain png (libgd) is the fallback of minimal builds.
  return "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo" + size +
         " } else { set terminal png" + size + " }\n";
}

struct Series {
  std::string block;  // data block name
  int col = 0;        // 0-based column in the block (x is column 0)
  std::string title;
  std::string style;  // e.g. "lw 2 lc 1 dt 2"
  bool y2 = false;
  bool points = true;  // linespoints; false: lines (long timelines)
};

// One `plot` command over the series that have data; a panel with none says "no data"
// (gnuplot refuses to plot only undefined points).
std::string PlotCommand(const std::vector<Series>& series, const std::vector<bool>& has_data) {
  std::string cmd;
  for (size_t i = 0; i < series.size(); ++i) {
    if (!has_data[i]) continue;
    const Series& s = series[i];
    cmd += cmd.empty() ? "plot " : ", \\\n     ";
    cmd += s.block + " using 1:" + std::to_string(s.col + 1) + (s.y2 ? " axes x1y2" : "") +
           (s.points ? " with linespoints pt 7 ps 0.6 " : " with lines ") + s.style + " title " + Quote(s.title);
  }
  if (cmd.empty())
    return "set label 99 'no data' at graph 0.5, graph 0.5 center\nplot [0:1] [0:1] 2 notitle\nunset label 99\n";
  return cmd + "\n";
}

// ---- running gnuplot ------------------------------------------------------------------

// Runs gnuplot on `script` (written to a temp file and passed as an argument: no shell,
// no pipe). Its stderr goes to a temp file whose tail becomes the error message.
Status RunGnuplot(const std::string& script, const PlotOptions& options, const std::string& what) {
  TempDir tmp("tedi_plot");
  if (tmp.path().empty()) return Internal("cannot create a temp folder for the gnuplot script");
  const std::string script_path = tmp.File("plot.gp"), err_path = tmp.File("stderr.txt");
  {
    std::ofstream f(script_path);
    f << script;
    if (!f) return Internal("cannot write " + script_path);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv = {const_cast<char*>(options.gnuplot.c_str()), const_cast<char*>(script_path.c_str()),
                             nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, options.gnuplot.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc == ENOENT)
    return FailedPrecondition("gnuplot not found ('" + options.gnuplot +
                              "'); install gnuplot-nox to get PNG plots");
  if (rc != 0) return FailedPrecondition("cannot run '" + options.gnuplot + "': " + std::strerror(rc));
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return Internal(std::string("waitpid on gnuplot: ") + std::strerror(errno));
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127)  // a shell-less exec failure in some libcs
    return FailedPrecondition("gnuplot not found ('" + options.gnuplot + "'); install gnuplot-nox");
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::ifstream ef(err_path);
    std::stringstream ss;
    ss << ef.rdbuf();
    std::string err = Trim(ss.str());
    if (err.size() > 600) err = "..." + err.substr(err.size() - 600);
    return Internal("gnuplot failed drawing " + what + ": " + (err.empty() ? "no message" : err));
  }
  return Status::Ok();
}

Status CheckOutput(const std::string& png) {
  std::error_code ec;
  if (!fs::exists(png, ec) || fs::file_size(png, ec) == 0) return Internal("gnuplot wrote no image to " + png);
  return Status::Ok();
}

Status CheckDir(const fs::path& dir) {
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) return NotFound("output folder " + dir.string() + " does not exist");
  return Status::Ok();
}

}  // namespace

Status PlotTimeline(const std::string& run_dir, const std::string& title, const PlotOptions& options) {
  const std::string csv_path = (fs::path(run_dir) / "timeline.csv").string();
  const std::string png = (fs::path(run_dir) / "timeline.png").string();
  ASSIGN_OR_RETURN(Csv csv, ReadPlotCsv(csv_path));
  const std::vector<std::string> names = {"t_s",      "arrival_rps",      "active",            "queued",
                                          "mean_threshold", "mean_cap", "window_attainment", "window_mean_latency_s"};
  ASSIGN_OR_RETURN(std::vector<int> cols, Columns(csv, names));
  std::vector<std::vector<double>> rows;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    std::vector<double> v;
    for (int c : cols) {
      ASSIGN_OR_RETURN(double x, Number(csv, r, c));
      v.push_back(x);
    }
    if (std::isfinite(v[0])) rows.push_back(std::move(v));
  }
  if (rows.empty()) return InvalidArgument(csv_path + ": no row has a time (t_s)");
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });

  std::ostringstream gp;
  gp << Terminal(1000, 960) << "set output " << Quote(png) << "\n";
  // Keys above each panel: inside they would hide the curves.
  gp << "set datafile missing 'NaN'\nset grid\nset key outside top center horizontal\n";
  DataBlock(gp, "$T", rows);
  gp << "set multiplot layout 3,1 title " << Quote(title) << "\n";
  gp << "set lmargin 10\nset rmargin 10\n";
  auto panel = [&](const std::vector<Series>& s) {
    std::vector<bool> has;
    std::vector<Series> lines = s;
    for (auto& x : lines) {
      x.points = false;
      has.push_back(AnyFinite(rows, x.col));
    }
    gp << PlotCommand(lines, has);
  };
  // Load: arrival rate on the left axis, requests in the system on the right.
  gp << "set ylabel 'arrivals (req/s)'\nset y2label 'requests'\nset ytics nomirror\nset y2tics\n"
        "set yrange [0:*]\nset y2range [0:*]\nunset xlabel\n";
  panel({{"$T", 1, "arrival rate (req/s)", "lw 2 lc 1", false},
         {"$T", 2, "active", "lw 2 lc 2", true},
         {"$T", 3, "queued", "lw 2 lc 7 dt 2", true}});
  gp << "unset y2tics\nunset y2label\nset ytics mirror\n";
  gp << "set ylabel 'threshold'\nset yrange [0:1.05]\n";
  panel({{"$T", 4, "mean threshold", "lw 2 lc 3", false}, {"$T", 5, "mean cap", "lw 2 lc 4 dt 2", false}});
  gp << "set ylabel 'SLO attainment'\nset yrange [0:1.05]\nset y2label 'latency (s)'\nset ytics nomirror\n"
        "set y2tics\nset y2range [0:*]\nset xlabel 'time (s)'\n";
  panel({{"$T", 6, "windowed attainment", "lw 2 lc 6", false},
         {"$T", 7, "windowed mean latency (s)", "lw 2 lc 8 dt 2", true}});
  gp << "unset multiplot\n";
  RETURN_IF_ERROR(RunGnuplot(gp.str(), options, png));
  return CheckOutput(png);
}

Status PlotSweep(const std::string& sweep_csv, const std::string& x_label, const std::string& out_prefix,
                 const std::string& title, const PlotOptions& options) {
  if (out_prefix.empty()) return InvalidArgument("empty output prefix for the sweep plots");
  ASSIGN_OR_RETURN(Csv csv, ReadPlotCsv(sweep_csv));
  ASSIGN_OR_RETURN(std::vector<int> cols,
                   Columns(csv, {"policy", "x", "attainment", "mean_latency_s", "p50_latency_s", "p99_latency_s",
                                 "quality"}));
  RETURN_IF_ERROR(CheckDir(fs::path(out_prefix).parent_path()));
  // Rows per policy, policies in order of first appearance (the caller's order).
  std::vector<std::string> policies;
  std::map<std::string, std::vector<std::vector<double>>> by_policy;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const std::string& p = csv.rows[r].cells[cols[0]];
    if (p.empty())
      return InvalidArgument(sweep_csv + ":" + std::to_string(csv.rows[r].line) + ": empty policy name");
    std::vector<double> v;
    for (size_t i = 1; i < cols.size(); ++i) {
      ASSIGN_OR_RETURN(double x, Number(csv, r, cols[i]));
      v.push_back(x);
    }
    if (!std::isfinite(v[0]))
      return InvalidArgument(sweep_csv + ":" + std::to_string(csv.rows[r].line) + ": x is missing");
    if (!by_policy.count(p)) policies.push_back(p);
    by_policy[p].push_back(std::move(v));
  }
  std::string blocks;
  {
    std::ostringstream gp;
    for (size_t i = 0; i < policies.size(); ++i) {
      auto& rows = by_policy[policies[i]];
      std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
      DataBlock(gp, "$P" + std::to_string(i), rows);
    }
    blocks = gp.str();
  }
  // Columns of each block: 0 x, 1 attainment, 2 mean, 3 p50, 4 p99, 5 quality.
  struct Figure {
    std::string suffix, ylabel, yrange;
    std::vector<std::pair<int, std::string>> cols;  // (column, dash style)
  };
  const std::vector<Figure> figures = {
      {"attainment", "SLO attainment", "[0:1.05]", {{1, ""}}},
      {"latency", "latency (s): mean (solid), p99 (dashed)", "[0:*]", {{2, "dt 1"}, {4, "dt 2"}}},
      {"quality", "quality", "[*:*]", {{5, ""}}},
  };
  for (const Figure& f : figures) {
    const std::string png = out_prefix + "_" + f.suffix + ".png";
    std::ostringstream gp;
    gp << Terminal(900, 560) << "set output " << Quote(png) << "\n";
    gp << "set datafile missing 'NaN'\nset grid\nset key outside right top vertical\n";
    gp << "set title " << Quote(title) << "\nset xlabel " << Quote(x_label) << "\nset ylabel " << Quote(f.ylabel)
       << "\nset yrange " << f.yrange << "\n";
    gp << blocks;
    std::vector<Series> series;
    std::vector<bool> has;
    for (size_t i = 0; i < policies.size(); ++i)
      for (const auto& [col, dash] : f.cols) {
        const std::string name = f.cols.size() > 1 ? policies[i] + (col == 2 ? " mean" : " p99") : policies[i];
        // The same colour for a policy in every figure.
        series.push_back({"$P" + std::to_string(i), col, name, "lw 2 lc " + std::to_string(i + 1) + " " + dash, false});
        has.push_back(AnyFinite(by_policy[policies[i]], col));
      }
    gp << PlotCommand(series, has);
    RETURN_IF_ERROR(RunGnuplot(gp.str(), options, png));
    RETURN_IF_ERROR(CheckOutput(png));
  }
  return Status::Ok();
}

Status PlotFrontier(const std::string& frontier_csv, const std::string& x_label, const std::string& out_png,
                    const std::string& title, const PlotOptions& options) {
  if (out_png.empty()) return InvalidArgument("empty output path for the frontier plot");
  ASSIGN_OR_RETURN(Csv csv, ReadPlotCsv(frontier_csv));
  ASSIGN_OR_RETURN(std::vector<int> cols, Columns(csv, {"x", "policy", "attainment", "quality", "dominated"}));
  RETURN_IF_ERROR(CheckDir(fs::path(out_png).parent_path()));
  // Points per load value, in order of first appearance.
  struct Run {
    std::string policy;
    double attainment, quality;
    bool dominated;
  };
  std::vector<std::string> loads;
  std::map<std::string, std::vector<Run>> by_load;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const std::string& x = csv.rows[r].cells[cols[0]];
    const std::string& policy = csv.rows[r].cells[cols[1]];
    if (policy.empty())
      return InvalidArgument(frontier_csv + ":" + std::to_string(csv.rows[r].line) + ": empty policy name");
    ASSIGN_OR_RETURN(const double a, Number(csv, r, cols[2]));
    ASSIGN_OR_RETURN(const double q, Number(csv, r, cols[3]));
    ASSIGN_OR_RETURN(const double d, Number(csv, r, cols[4]));
    if (!by_load.count(x)) loads.push_back(x);
    by_load[x].push_back({policy, a, q, d != 0});
  }
  constexpr size_t kMaxPanels = 16;
  if (loads.size() > kMaxPanels) loads.resize(kMaxPanels);
  const int ncols = loads.size() <= 1 ? 1 : loads.size() <= 4 ? 2 : loads.size() <= 9 ? 3 : 4;
  const int nrows = static_cast<int>((loads.size() + ncols - 1) / ncols);
  std::ostringstream gp;
  gp << Terminal(520 * ncols, 420 * nrows) << "set output " << Quote(out_png) << "\n";
  gp << "set datafile missing 'NaN'\nset grid\nset key off\n";
  gp << "set multiplot layout " << nrows << "," << ncols << " title " << Quote(title + ": SLO attainment vs quality")
     << "\n";
  for (size_t i = 0; i < loads.size(); ++i) {
    // Columns: quality, attainment (%), label; frontier points filled, dominated ones open.
    for (int dominated = 0; dominated < 2; ++dominated) {
      gp << "$F" << i << "_" << dominated << " << EOD\n";
      for (const Run& r : by_load[loads[i]]) {
        if (r.dominated != (dominated == 1)) continue;
        gp << Num(r.quality) << " " << Num(100 * r.attainment) << " \"";
        for (char ch : r.policy) gp << (ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20 ? '_' : ch);
        gp << "\"\n";
      }
      gp << "EOD\n";
    }
    gp << "set title " << Quote(x_label + " = " + loads[i]) << "\nset xlabel 'quality'\nset ylabel 'SLO attainment (%)'\n";
    const auto& runs = by_load[loads[i]];
    const bool any_front = std::any_of(runs.begin(), runs.end(), [](const Run& r) { return !r.dominated; });
    const bool any_dom = std::any_of(runs.begin(), runs.end(), [](const Run& r) { return r.dominated; });
    std::string cmd;
    auto add = [&](const std::string& part) { cmd += (cmd.empty() ? "plot " : ", ") + part; };
    if (any_front) {
      add("$F" + std::to_string(i) + "_0 using 1:2 with points pt 7 ps 1.2 lc 1");
      add("$F" + std::to_string(i) + "_0 using 1:2:3 with labels offset char 0.8,0.6 left font ',8' tc lt 1");
    }
    if (any_dom) {
      add("$F" + std::to_string(i) + "_1 using 1:2 with points pt 6 ps 1.2 lc 8");
      add("$F" + std::to_string(i) + "_1 using 1:2:3 with labels offset char 0.8,-0.6 left font ',8' tc lt 8");
    }
    gp << (cmd.empty() ? "plot [0:1] [0:1] 2 notitle" : cmd) << "\n";
  }
  gp << "unset multiplot\n";
  RETURN_IF_ERROR(RunGnuplot(gp.str(), options, out_png));
  return CheckOutput(out_png);
}

Status PlotLayouts(const std::string& run_dir, const std::string& title, const PlotOptions& options) {
  const std::string lay_path = (fs::path(run_dir) / "layouts.csv").string();
  const std::string png = (fs::path(run_dir) / "layouts.png").string();
  ASSIGN_OR_RETURN(Csv lay, ReadPlotCsv(lay_path));
  ASSIGN_OR_RETURN(Csv tl, ReadPlotCsv((fs::path(run_dir) / "timeline.csv").string()));
  ASSIGN_OR_RETURN(std::vector<int> tcols, Columns(tl, {"t_s", "arrival_rps"}));
  if (lay.columns.empty() || lay.columns[0] != "t_s") return InvalidArgument(lay_path + ": the first column must be t_s");
  std::vector<std::vector<double>> lrows, trows;
  for (size_t r = 0; r < lay.rows.size(); ++r) {
    std::vector<double> v;
    for (size_t c = 0; c < lay.columns.size(); ++c) {
      ASSIGN_OR_RETURN(double x, Number(lay, r, static_cast<int>(c)));
      v.push_back(x);
    }
    lrows.push_back(std::move(v));
  }
  for (size_t r = 0; r < tl.rows.size(); ++r) {
    ASSIGN_OR_RETURN(double t, Number(tl, r, tcols[0]));
    ASSIGN_OR_RETURN(double a, Number(tl, r, tcols[1]));
    trows.push_back({t, a});
  }
  // Hold the last layout to the end of the timeline.
  if (!trows.empty() && trows.back()[0] > lrows.back()[0]) {
    std::vector<double> last = lrows.back();
    last[0] = trows.back()[0];
    lrows.push_back(last);
  }
  std::ostringstream gp;
  gp << Terminal(1000, 640) << "set output " << Quote(png) << "\n";
  gp << "set grid\nset key outside top center horizontal\nset lmargin 10\nset rmargin 4\n";
  DataBlock(gp, "$T", trows);
  DataBlock(gp, "$L", lrows);
  gp << "set multiplot layout 2,1 title " << Quote(title) << "\n";
  gp << "set ylabel 'arrivals (req/s)'\nset yrange [0:*]\nunset xlabel\n";
  gp << "plot $T using 1:2 with lines lw 2 lc 1 title 'arrival rate'\n";
  gp << "set ylabel 'instances'\nset xlabel 'time (s)'\nset yrange [0:*]\n";
  gp << "plot ";
  for (size_t c = 1; c < lay.columns.size(); ++c)
    gp << (c > 1 ? ", " : "") << "$L using 1:" << c + 1 << " with steps lw 2 lc " << c + 1 << " title "
       << Quote(lay.columns[c]);
  gp << "\nunset multiplot\n";
  RETURN_IF_ERROR(RunGnuplot(gp.str(), options, png));
  return CheckOutput(png);
}

}  // namespace tediserve::sim
