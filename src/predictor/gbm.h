// A gradient-boosted regression model on the XGBoost C API: train from a dense matrix, save
// and load one file (XGBoost's JSON format, with our string attributes inside), predict a
// dense batch. Errors are Status values; XGBoost's own messages are passed on.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace tediserve::predictor {

struct GbmParams {
  int rounds = 40;  // 40 trees of depth 6: a 500 x 5 batch in < 1 ms (predictor_bench)
  int max_depth = 6;
  double eta = 0.3;
  double subsample = 1.0;
  double min_child_weight = 1.0;
  int threads = 1;
  uint64_t seed = 0;
};

class Gbm {
 public:
  ~Gbm();
  Gbm(Gbm&&) noexcept;
  Gbm& operator=(Gbm&&) noexcept;

  // x: rows x cols, row-major; y: rows labels (squared-error regression).
  static StatusOr<Gbm> Train(std::span<const float> x, std::span<const float> y, int cols, const GbmParams& params);
  // A missing, truncated or non-XGBoost file is an error naming the path.
  static StatusOr<Gbm> Load(const std::string& path);
  Status Save(const std::string& path) const;
  // The model in XGBoost's JSON format.
  StatusOr<std::string> ToJson() const;

  // Predicts rows of x (rows x num_features(), row-major) into out (rows). Single-threaded
  // unless set_threads says otherwise; not safe to call from two threads at once.
  Status Predict(std::span<const float> x, std::span<float> out) const;
  int num_features() const { return num_features_; }
  Status set_threads(int threads);

  // String attributes stored in the model file.
  Status SetAttribute(const std::string& key, const std::string& value);
  // Empty string when absent.
  std::string Attribute(const std::string& key) const;

 private:
  Gbm() = default;
  void* booster_ = nullptr;  // BoosterHandle
  int num_features_ = 0;
};

}  // namespace tediserve::predictor
