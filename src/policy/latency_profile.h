// Step latency of a model on one kind of hardware, per tensor-parallel degree:
// l_d(n) = seconds of one denoising step whose batch pushes n tokens through the network.
// Measured once per model x hardware x TP degree and loaded from files (docs/design.md
// section 3.7).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace tediserve::policy {

class LatencyProfile {
 public:
  // CSV `num_batched_tokens,tp1_ms,tp2_ms,...` (milliseconds; the shipped H100 format).
  static StatusOr<LatencyProfile> LoadCsv(const std::string& path);
  // One JSON object `{"tokens": seconds, ...}` per TP degree (the shipped GH200 format).
  static StatusOr<LatencyProfile> LoadJson(const std::map<int, std::string>& path_by_tp);
  // From points (tokens ascending, seconds > 0) per TP degree; used by the loaders and tests.
  static StatusOr<LatencyProfile> FromPoints(
      std::map<int, std::vector<std::pair<double, double>>> points, const std::string& source);

  bool HasTp(int tp) const { return curves_.count(tp) != 0; }
  std::vector<int> TpDegrees() const;
  // Seconds of one step of `tokens` tokens at TP `tp` (which must exist). Linear between
  // measured points; below the first point the first value (the per-step floor); above the
  // last point extended at the mean per-token cost of the top quarter of the curve.
  double StepSeconds(int tp, double tokens) const;
  // Tokens per second a TP-tp instance sustains when every batch holds `batch_tokens` tokens.
  double TokensPerSecond(int tp, double batch_tokens) const {
    return batch_tokens / StepSeconds(tp, batch_tokens);
  }
  double MaxMeasuredTokens(int tp) const;
  const std::string& source() const { return source_; }

 private:
  struct Curve {
    std::vector<double> tokens, seconds;
    double tail_slope = 0;  // seconds per token beyond the last point
  };
  std::map<int, Curve> curves_;
  std::string source_;
};

}  // namespace tediserve::policy
