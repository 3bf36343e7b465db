// An independent check of Stage 1 for small clusters (tests): enumerate every packable
// instance count vector and every choice of batch bins, solve the remaining LP (no products
// to linearise once the bins are fixed) lexicographically, and keep the best.
#pragma once

#include <map>

#include "common/status.h"
#include "plan/stage1.h"

namespace tediserve::plan {

struct BruteForceStage1Result {
  bool feasible = false;
  double mean_threshold = 0;
  double mean_latency_s = 0;
  double third = 0;              // the third objective's value (same definition as the MILP's)
  std::map<int, int> instances;  // one optimal layout
  int combinations = 0;          // (layout, bins) pairs tried
};

// Packability by direct search over nodes (independent of MaximalPatterns).
bool Packable(const std::vector<int>& gpus_per_node, const std::vector<int>& degrees, const std::vector<int>& counts);

StatusOr<BruteForceStage1Result> BruteForceStage1(const Stage1Inputs& inputs, const Stage1Options& options = {});

}  // namespace tediserve::plan
