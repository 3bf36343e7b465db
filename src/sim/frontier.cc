#include "sim/frontier.h"

#include <cmath>

namespace tediserve::sim {

std::vector<FrontierVerdict> JudgeFrontier(const std::vector<FrontierPoint>& points) {
  auto finite = [](const FrontierPoint& p) { return std::isfinite(p.attainment) && std::isfinite(p.quality); };
  std::vector<FrontierVerdict> out;
  out.reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const FrontierPoint& me = points[i];
    FrontierVerdict v;
    v.policy = me.policy;
    if (finite(me)) {
      double best_dom_a = -1, best_dom_q = -1;
      for (size_t j = 0; j < points.size(); ++j) {
        const FrontierPoint& o = points[j];
        if (j == i || !finite(o)) continue;
        const double da = o.attainment - me.attainment, dq = o.quality - me.quality;
        if (dq >= 0 && da > v.attainment_gap) {
          v.attainment_gap = da;
          v.attainment_gap_by = o.policy;
        }
        if (da >= 0 && dq > v.quality_gap) {
          v.quality_gap = dq;
          v.quality_gap_by = o.policy;
        }
        if (da >= 0 && dq >= 0 && (da > 0 || dq > 0) && (da > best_dom_a || (da == best_dom_a && dq > best_dom_q))) {
          v.dominated = true;
          v.dominated_by = o.policy;
          best_dom_a = da;
          best_dom_q = dq;
        }
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace tediserve::sim
