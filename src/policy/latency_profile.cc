#include "policy/latency_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tediserve::policy {
namespace {

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) {
    while (!cell.empty() && (cell.back() == '\r' || cell.back() == ' ')) cell.pop_back();
    while (!cell.empty() && cell.front() == ' ') cell.erase(cell.begin());
    out.push_back(cell);
  }
  return out;
}

}  // namespace

StatusOr<LatencyProfile> LatencyProfile::FromPoints(
    std::map<int, std::vector<std::pair<double, double>>> points, const std::string& source) {
  if (points.empty()) return InvalidArgument(source + ": no TP degree in the latency profile");
  LatencyProfile p;
  p.source_ = source;
  for (auto& [tp, pts] : points) {
    if (tp <= 0) return InvalidArgument(source + ": TP degree must be > 0, got " + std::to_string(tp));
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
  std::ifstream in(path);
  if (!in) return NotFound("cannot open latency profile " + path);
  std::string line;
  if (!std::getline(in, line)) return InvalidArgument(path + ": empty latency profile");
  const auto header = SplitCsv(line);
  if (header.size() < 2 || header[0] != "num_batched_tokens") {
    return InvalidArgument(path + ":1: header must be num_batched_tokens,tp1_ms,...");
  }
  std::vector<int> tps;
  for (size_t i = 1; i < header.size(); ++i) {
    const std::string& h = header[i];
    int tp = 0;
    if (h.size() < 6 || h.rfind("tp", 0) != 0 || h.substr(h.size() - 3) != "_ms" ||
        std::sscanf(h.c_str() + 2, "%d", &tp) != 1 || tp <= 0) {
      return InvalidArgument(path + ":1: column '" + h + "' is not tpN_ms");
    }
    tps.push_back(tp);
  }
  std::map<int, std::vector<std::pair<double, double>>> points;
  for (int tp : tps) points[tp];  // a column without rows is "too few points", not absent
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line == "\r") continue;
    const auto cells = SplitCsv(line);
    if (cells.size() != header.size()) {
      return InvalidArgument(path + ":" + std::to_string(lineno) + ": expected " +
                             std::to_string(header.size()) + " columns, got " +
                             std::to_string(cells.size()));
    }
    double n = 0;
    if (!ParseDouble(cells[0], &n) || n <= 0) {
      return InvalidArgument(path + ":" + std::to_string(lineno) + ": bad token count '" + cells[0] + "'");
    }
    for (size_t i = 1; i < cells.size(); ++i) {
      double ms = 0;
      if (!ParseDouble(cells[i], &ms) || ms <= 0) {
        return InvalidArgument(path + ":" + std::to_string(lineno) + ": bad latency '" + cells[i] + "'");
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
    std::ifstream in(path);
    if (!in) return NotFound("cannot open latency profile " + path);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return InvalidArgument(path + ": not a JSON object {\"tokens\": seconds}");
    }
    auto& pts = points[tp];  // an empty object must fail as too few points, not vanish
    for (const auto& [k, v] : j.items()) {
      double n = 0;
      if (!ParseDouble(k, &n) || !v.is_number()) {
        return InvalidArgument(path + ": bad entry \"" + k + "\"");
      }
      pts.push_back({n, v.get<double>()});
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
