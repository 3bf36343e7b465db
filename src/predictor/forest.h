// A compiled copy of a trained XGBoost regression forest for the step predictor's hot path.
// XGBoost trains and stores the model; this evaluates it. Why our own evaluator: a request's
// rows for the candidate thresholds differ only in the threshold column, so one walk of each
// tree per request serves all thresholds, splitting only at nodes that test the threshold
// (XGBoost walks every row separately and costs ~0.5 us per row even at 30 trees; measured
// in predictor_bench). Results equal XGBoost's (a test checks it).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tediserve::predictor {

class Forest {
 public:
  static constexpr int kMaxDepth = 48;
  // The JSON of a gbtree regression model (XGBoost's own format, as saved by Gbm), numeric
  // splits only. Anything else is an InvalidArgument naming what is wrong.
  static StatusOr<Forest> FromXgboostJson(std::string_view json);

  int num_features() const { return num_features_; }
  int num_trees() const { return static_cast<int>(roots_.size()); }

  // One row (num_features values).
  float Predict(std::span<const float> row) const;
  // The rows equal to `row` except column `vary`, which takes each of `values` in turn
  // (at most 32): out[k] is the prediction with row[vary] = values[k].
  void PredictVarying(std::span<const float> row, int vary, std::span<const float> values, std::span<float> out) const;

 private:
  struct Node {
    int32_t feature;  // -1: leaf
    float value;      // split condition (go left when x < value), or the leaf value
    int32_t left, right;
  };
  std::vector<Node> nodes_;
  std::vector<int32_t> roots_;
  float base_score_ = 0;
  int num_features_ = 0;
};

}  // namespace tediserve::predictor
