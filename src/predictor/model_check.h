// Structural checks of an XGBoost JSON model before XGBoost sees it. libxgboost trusts its
// model files: a mutated `parents`, `id`, `num_trees` or `tree_info` makes it crash or spin
// (fuzzing found both), so every step predictor file is checked here first: the version, the
// learner's parameters, and per tree the node arrays (lengths, child links, parents, feature
// indices, finite values). Only what TeDiServe trains is accepted: gbtree boosters with
// reg:squarederror, one target, numerical splits.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tediserve::predictor {

inline constexpr int kMaxModelFeatures = 10000;
inline constexpr int kMaxModelTrees = 100000;
inline constexpr int kMaxTreeNodes = 1 << 20;

// Ok when `model` (a parsed XGBoost JSON model) is well formed; otherwise an InvalidArgument
// naming the field ("trees[3].parents[7]: ...").
Status CheckXgboostModel(const nlohmann::json& model);

}  // namespace tediserve::predictor
