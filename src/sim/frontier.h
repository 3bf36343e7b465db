// The attainment-quality frontier of a set of runs at one load point (issue 13).
//
// A user who wants both SLO attainment and answer quality can pick any policy, including any
// static threshold, so a policy is judged against every other run at the same load: it is
// dominated when another run has at least its attainment and at least its quality, and more
// of one. How far off the frontier it is reads as two gaps: the most attainment any run of at
// least its quality has over it, and the most quality any run of at least its attainment has
// over it (both 0 on the frontier).
#pragma once

#include <string>
#include <vector>

namespace tediserve::sim {

struct FrontierPoint {
  std::string policy;
  double attainment = 0;  // fraction in [0, 1]
  double quality = 0;
};

struct FrontierVerdict {
  std::string policy;
  bool dominated = false;
  std::string dominated_by;       // the dominating run with the largest attainment gap, then quality gap
  double attainment_gap = 0;      // max(attainment of others with >= quality) - own, at least 0
  std::string attainment_gap_by;  // empty when the gap is 0
  double quality_gap = 0;         // max(quality of others with >= attainment) - own, at least 0
  std::string quality_gap_by;
};

// One verdict per point, in the points' order. Points with a non-finite attainment or
// quality are never dominating and are judged dominated by nothing.
std::vector<FrontierVerdict> JudgeFrontier(const std::vector<FrontierPoint>& points);

}  // namespace tediserve::sim
