#include "policy/latency_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/input.h"

namespace tediserve::policy {
namespace {

// What a measured profile can hold: steps of up to 10M batched tokens, each taking at most an
// hour (anything slower is a unit mistake; it would also stall a simulation for ever).
constexpr double kMaxTokens = 1e7;
constexpr double kMaxStepSeconds = 3600;
constexpr size_t kMaxPoints = 100000;
constexpr int kMaxTp = 1024;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

StatusOr<LatencyProfile> LatencyProfile::FromPoints(
    std::map<int, std::vector<std::pair<double, double>>> points, const std::string& source) {
  if (points.empty()) return InvalidArgument(source + ": no TP degree in the latency profile");
  LatencyProfile p;
  p.source_ = source;
  for (auto& [tp, pts] : points) {
    if (tp <= 0 || tp > kMaxTp) {
      return InvalidArgument(source + ": TP degree must be > 0 and <= " + std::to_string(kMaxTp) +
                             ", got " + std::to_string(tp));
    }
    if (pts.size() > kMaxPoints) {
      return InvalidArgument(source + ": TP " + std::to_string(tp) + ": more than " +
                             std::to_string(kMaxPoints) + " points");
    }
    if (pts.size() < 2) {
      return InvalidArgument(source + ": TP " + std::to_string(tp) + " needs at least 2 points");
    }
    std::sort(pts.begin(), pts.end());
    Curve c;
    for (size_t i = 0; i < pts.size(); ++i) {
      const auto [n, s] = pts[i];
      if (!(n > 0) || !(s > 0)) {
        return InvalidArgument(source + ": TP " + std::to_string(tp) +
                               ": tokens and latency must be > 0 (point " + std::to_string(i) + ")");
      }
      if (!(n <= kMaxTokens) || !(s <= kMaxStepSeconds)) {
        return InvalidArgument(source + ": TP " + std::to_string(tp) + ": point " +
                               std::to_string(i) + " (" + Num(n) + " tokens, " + Num(s) +
                               " s): tokens must be <= " + Num(kMaxTokens) +
                               " and a step at most " + Num(kMaxStepSeconds) + " s");
      }
      if (i > 0 && n == pts[i - 1].first) {
        return InvalidArgument(source + ": TP " + std::to_string(tp) + ": token count " +
                               std::to_string(static_cast<long>(n)) + " appears twice");
      }
      // Measured curves are noisy; a step with more tokens is never cheaper than one with
      // fewer, so keep the running maximum (the scheduler's comparisons stay monotone).
      c.tokens.push_back(n);
      c.seconds.push_back(c.seconds.empty() ? s : std::max(s, c.seconds.back()));
    }
    const size_t q = c.tokens.size() * 3 / 4;
    const size_t last = c.tokens.size() - 1;
    const size_t first = std::min(q, last - 1);
    c.tail_slope = (c.seconds[last] - c.seconds[first]) / (c.tokens[last] - c.tokens[first]);
    if (c.tail_slope <= 0) c.tail_slope = c.seconds[last] / c.tokens[last];
    p.curves_[tp] = std::move(c);
  }
  return p;
}

StatusOr<LatencyProfile> LatencyProfile::LoadCsv(const std::string& path) {
  auto table_or = ReadCsv(path);
  if (!table_or.ok()) return table_or.status().WithContext("latency profile");
  const CsvTable& table = *table_or;
  const auto& header = table.columns;
  if (header.size() < 2 || header[0] != "num_batched_tokens") {
    return InvalidArgument(path + ": header must be num_batched_tokens,tp1_ms,...");
  }
  std::vector<int> tps;
  for (size_t i = 1; i < header.size(); ++i) {
    const std::string& h = header[i];
    std::int64_t tp = 0;
    if (h.size() < 6 || h.rfind("tp", 0) != 0 || h.substr(h.size() - 3) != "_ms" ||
        !ParseInt64(std::string_view(h).substr(2, h.size() - 5), &tp) || tp <= 0 || tp > kMaxTp) {
      return InvalidArgument(path + ": column '" + SanitizeUtf8(h.substr(0, 60)) +
                             "' is not tpN_ms (N in 1.." + std::to_string(kMaxTp) + ")");
    }
    tps.push_back(static_cast<int>(tp));
  }
  std::map<int, std::vector<std::pair<double, double>>> points;
  for (int tp : tps) points[tp];  // a column without rows is "too few points", not absent
  for (const CsvTable::Row& row : table.rows) {
    const std::string at = path + ":" + std::to_string(row.line) + ": ";
    ASSIGN_OR_RETURN(const double n, CsvDouble(table, row, 0));
    if (!(n > 0) || n > kMaxTokens) {
      return InvalidArgument(at + "num_batched_tokens must be in (0, " + Num(kMaxTokens) +
                             "], got " + Num(n));
    }
    for (size_t i = 1; i < row.cells.size(); ++i) {
      ASSIGN_OR_RETURN(const double ms, CsvDouble(table, row, static_cast<int>(i)));
      if (!(ms > 0) || ms > kMaxStepSeconds * 1000) {
        return InvalidArgument(at + header[i] + " must be in (0, " + Num(kMaxStepSeconds * 1000) +
                               "] ms, got " + Num(ms));
      }
      points[tps[i - 1]].push_back({n, ms / 1000.0});
    }
  }
  return FromPoints(std::move(points), path);
}

StatusOr<LatencyProfile> LatencyProfile::LoadJson(const std::map<int, std::string>& path_by_tp) {
  std::map<int, std::vector<std::pair<double, double>>> points;
  std::string source;
  for (const auto& [tp, path] : path_by_tp) {
    source += (source.empty() ? "" : ",") + path;
    ASSIGN_OR_RETURN(const nlohmann::json j, ReadJsonFile(path, "latency profile"));
    if (!j.is_object()) {
      return InvalidArgument(path + ": not a JSON object {\"tokens\": seconds}");
    }
    auto& pts = points[tp];  // an empty object must fail as too few points, not vanish
    for (const auto& [k, v] : j.items()) {
      double n = 0;
      if (!ParseDouble(k, &n)) {
        return InvalidArgument(path + ": key \"" + SanitizeUtf8(k.substr(0, 60)) +
                               "\" is not a token count");
      }
      ASSIGN_OR_RETURN(const double seconds, JsonNumber(v, path + ": \"" + SanitizeUtf8(k.substr(0, 60)) + "\"", -1e308, 1e308));
      pts.push_back({n, seconds});
    }
  }
  return FromPoints(std::move(points), source);
}

std::vector<int> LatencyProfile::TpDegrees() const {
  std::vector<int> out;
  for (const auto& [tp, c] : curves_) out.push_back(tp);
  return out;
}

double LatencyProfile::MaxMeasuredTokens(int tp) const { return curves_.at(tp).tokens.back(); }

double LatencyProfile::StepSeconds(int tp, double tokens) const {
  const Curve& c = curves_.at(tp);
  if (tokens <= c.tokens.front()) return c.seconds.front();
  if (tokens >= c.tokens.back()) return c.seconds.back() + (tokens - c.tokens.back()) * c.tail_slope;
  const size_t hi = std::upper_bound(c.tokens.begin(), c.tokens.end(), tokens) - c.tokens.begin();
  const size_t lo = hi - 1;
  const double f = (tokens - c.tokens[lo]) / (c.tokens[hi] - c.tokens[lo]);
  return c.seconds[lo] + f * (c.seconds[hi] - c.seconds[lo]);
}

}  // namespace tediserve::policy
