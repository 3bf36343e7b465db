#include "predictor/step_predictor.h"

#include <algorithm>
#include <cmath>

namespace tediserve::predictor {
namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

}  // namespace

StatusOr<StepPredictor> StepPredictor::FromGbm(Gbm gbm, policy::FeatureSet set) {
  if (gbm.num_features() != policy::NumFeatures(set))
    return InvalidArgument("step predictor: model has " + std::to_string(gbm.num_features()) + " features, the " +
                           policy::FeatureSetName(set) + " set has " + std::to_string(policy::NumFeatures(set)));
  RETURN_IF_ERROR(gbm.SetAttribute(kAttrFeatureSet, policy::FeatureSetName(set)));
  RETURN_IF_ERROR(gbm.SetAttribute(kAttrFeatures, JoinNames(policy::FeatureNames(set))));
  ASSIGN_OR_RETURN(std::string json, gbm.ToJson());
  ASSIGN_OR_RETURN(Forest forest, Forest::FromXgboostJson(json));
  return StepPredictor(std::move(gbm), std::move(forest), set);
}

StatusOr<StepPredictor> StepPredictor::Load(const std::string& path) {
  ASSIGN_OR_RETURN(Gbm gbm, Gbm::Load(path));
  const std::string set_name = gbm.Attribute(kAttrFeatureSet);
  policy::FeatureSet set;
  if (!policy::ParseFeatureSet(set_name, &set))
    return InvalidArgument("step predictor model " + path + " has no TeDiServe feature set (not made by train-predictor?)");
  if (gbm.num_features() != policy::NumFeatures(set) || gbm.Attribute(kAttrFeatures) != JoinNames(policy::FeatureNames(set)))
    return InvalidArgument("step predictor model " + path + " has " + std::to_string(gbm.num_features()) +
                           " features [" + gbm.Attribute(kAttrFeatures) + "], this build's \"" + set_name + "\" set has " +
                           std::to_string(policy::NumFeatures(set)) + " [" + JoinNames(policy::FeatureNames(set)) +
                           "]: retrain it");
  ASSIGN_OR_RETURN(std::string json, gbm.ToJson());
  auto forest = Forest::FromXgboostJson(json);
  if (!forest.ok()) return forest.status().WithContext("step predictor model " + path);
  StepPredictor p(std::move(gbm), std::move(*forest), set);
  const std::string k = p.gbm_.Attribute(kAttrRefreshTokens);
  if (!k.empty()) {
    char* end = nullptr;
    const long v = std::strtol(k.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > (1 << 20)) return InvalidArgument("step predictor model " + path + ": bad refresh tokens \"" + k + "\"");
    p.refresh_tokens_ = static_cast<int>(v);
  }
  return p;
}

Status StepPredictor::Save(const std::string& path) const { return gbm_.Save(path); }

Status StepPredictor::set_refresh_tokens(int k) {
  refresh_tokens_ = k;
  return gbm_.SetAttribute(kAttrRefreshTokens, std::to_string(k));
}

Status StepPredictor::Predict(std::span<const policy::RequestState* const> requests, std::span<const double> thresholds,
                              std::span<double> out) {
  const size_t nt = thresholds.size(), nf = static_cast<size_t>(policy::NumFeatures(set_));
  if (out.size() != requests.size() * nt) return InvalidArgument("step predictor: output size mismatch");
  if (nt == 0) return Status::Ok();
  if (nt > 32) return InvalidArgument("step predictor: at most 32 thresholds per call");
  row_.resize(nf);
  values_.assign(thresholds.begin(), thresholds.end());
  raw_.resize(nt);
  for (size_t i = 0; i < requests.size(); ++i) {
    const policy::RequestState& r = *requests[i];
    policy::StepFeatures(r, thresholds[0], set_, row_);
    forest_.PredictVarying(row_, policy::kThresholdFeature, values_, raw_);
    for (size_t k = 0; k < nt; ++k) {
      const double v = raw_[k] * r.spec.output_len;
      out[i * nt + k] = std::max<double>(std::isfinite(v) ? v : 0.0, r.MinRemainingSteps());
    }
  }
  return Status::Ok();
}

void TrainedEstimator::Predict(const policy::RequestState& r, std::span<const double> thresholds,
                               std::span<double> out) {
  const policy::RequestState* one[] = {&r};
  if (!predictor_->Predict(one, thresholds, out).ok()) {
    ++fallbacks_;
    fallback_.Predict(r, thresholds, out);
  }
}

}  // namespace tediserve::predictor

namespace tediserve::predictor {

void TrainedEstimator::PredictBatch(std::span<const policy::RequestState* const> requests,
                                    std::span<const double> thresholds, std::span<double> out) {
  if (predictor_->Predict(requests, thresholds, out).ok()) return;
  fallbacks_ += static_cast<int64_t>(requests.size());
  const size_t n = thresholds.size();
  for (size_t i = 0; i < requests.size(); ++i) fallback_.Predict(*requests[i], thresholds, out.subspan(i * n, n));
}

}  // namespace tediserve::predictor
