// The step predictor's input (docs/design.md section 3.3): one feature row per (request,
// candidate threshold), computed from the request's progress and the confidence statistics
// of its latest step. Training (`tediserve train-predictor`) and prediction both build rows
// here, so the two cannot drift apart. Target of the model: remaining steps / output length.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "policy/request_state.h"

namespace tediserve::policy {

enum class FeatureSet {
  kProgress,  // lengths, progress and the threshold
  kFull,      // kProgress plus the confidence statistics
};

// "progress" or "full"; Parse fails (false) on anything else.
const char* FeatureSetName(FeatureSet set);
bool ParseFeatureSet(const std::string& name, FeatureSet* out);

// Column of the candidate threshold (the same in every set): rows of one request under
// different thresholds differ only there.
inline constexpr int kThresholdFeature = 3;

// Names of the columns of `set`, in order (the model file records them).
const std::vector<std::string>& FeatureNames(FeatureSet set);
inline int NumFeatures(FeatureSet set) { return static_cast<int>(FeatureNames(set).size()); }

// Writes the row of `r` under `threshold` to `out` (size NumFeatures(set)). Before the first
// step the confidence features are zero (count 0).
void StepFeatures(const RequestState& r, double threshold, FeatureSet set, std::span<float> out);

}  // namespace tediserve::policy
