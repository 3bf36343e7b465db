#include "predictor/gbm.h"

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "predictor/model_check.h"

#include <xgboost/c_api.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

namespace tediserve::predictor {
namespace {

Status XgbError(const std::string& what) { return Internal(what + ": " + XGBGetLastError()); }

#define XGB_CHECK(call, what)                   \
  do {                                          \
    if ((call) != 0) return XgbError(what);     \
  } while (0)

}  // namespace

Gbm::~Gbm() {
  if (booster_ != nullptr) XGBoosterFree(booster_);
}

Gbm::Gbm(Gbm&& o) noexcept : booster_(o.booster_), num_features_(o.num_features_) { o.booster_ = nullptr; }

Gbm& Gbm::operator=(Gbm&& o) noexcept {
  if (this != &o) {
    if (booster_ != nullptr) XGBoosterFree(booster_);
    booster_ = o.booster_;
    num_features_ = o.num_features_;
    o.booster_ = nullptr;
  }
  return *this;
}

StatusOr<Gbm> Gbm::Train(std::span<const float> x, std::span<const float> y, int cols, const GbmParams& p) {
  if (cols <= 0 || y.empty() || x.size() != y.size() * static_cast<size_t>(cols))
    return InvalidArgument("gbm: " + std::to_string(x.size()) + " values do not make " + std::to_string(y.size()) +
                           " rows of " + std::to_string(cols) + " features");
  if (p.rounds <= 0 || p.max_depth <= 0 || !(p.eta > 0) || !(p.subsample > 0 && p.subsample <= 1))
    return InvalidArgument("gbm: rounds, max_depth and eta must be > 0 and subsample in (0, 1]");
  DMatrixHandle dm = nullptr;
  XGB_CHECK(XGDMatrixCreateFromMat(x.data(), y.size(), static_cast<bst_ulong>(cols), NAN, &dm), "creating the training matrix");
  struct Free {
    DMatrixHandle h;
    ~Free() { XGDMatrixFree(h); }
  } free_dm{dm};
  XGB_CHECK(XGDMatrixSetFloatInfo(dm, "label", y.data(), y.size()), "setting labels");
  Gbm g;
  XGB_CHECK(XGBoosterCreate(&dm, 1, &g.booster_), "creating the booster");
  const std::pair<const char*, std::string> params[] = {
      {"objective", "reg:squarederror"},
      {"tree_method", "hist"},
      {"max_depth", std::to_string(p.max_depth)},
      {"eta", std::to_string(p.eta)},
      {"subsample", std::to_string(p.subsample)},
      {"min_child_weight", std::to_string(p.min_child_weight)},
      {"nthread", std::to_string(p.threads)},
      {"seed", std::to_string(p.seed)},
      {"verbosity", "0"},
  };
  for (const auto& [k, v] : params) XGB_CHECK(XGBoosterSetParam(g.booster_, k, v.c_str()), std::string("setting ") + k);
  for (int it = 0; it < p.rounds; ++it) XGB_CHECK(XGBoosterUpdateOneIter(g.booster_, it, dm), "training");
  g.num_features_ = cols;
  return g;
}

StatusOr<Gbm> Gbm::Load(const std::string& path) {
  // Read and checked here first: libxgboost crashes on some malformed models.
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "step predictor model", 512u << 20));
  const std::string where = "step predictor model " + SanitizeUtf8(path);
  ASSIGN_OR_RETURN(const nlohmann::json model, ParseJson(text, where));
  RETURN_IF_ERROR(CheckXgboostModel(model).WithContext(where));
  Gbm g;
  XGB_CHECK(XGBoosterCreate(nullptr, 0, &g.booster_), "creating the booster");
  if (XGBoosterLoadModelFromBuffer(g.booster_, text.data(), text.size()) != 0)
    return InvalidArgument(where + " cannot be read: " + XGBGetLastError());
  bst_ulong n = 0;
  XGB_CHECK(XGBoosterGetNumFeature(g.booster_, &n), "reading the feature count of " + path);
  int rounds = 0;
  XGB_CHECK(XGBoosterBoostedRounds(g.booster_, &rounds), "reading " + path);
  if (n == 0 || rounds == 0) return InvalidArgument("step predictor model " + path + " has no trees");
  g.num_features_ = static_cast<int>(n);
  RETURN_IF_ERROR(g.set_threads(1));
  return g;
}

Status Gbm::Save(const std::string& path) const {
  XGB_CHECK(XGBoosterSaveModel(booster_, path.c_str()), "saving " + path);
  return Status::Ok();
}

StatusOr<std::string> Gbm::ToJson() const {
  bst_ulong len = 0;
  const char* data = nullptr;
  XGB_CHECK(XGBoosterSaveModelToBuffer(booster_, "{\"format\": \"json\"}", &len, &data), "serialising the model");
  return std::string(data, len);
}

Status Gbm::set_threads(int threads) {
  XGB_CHECK(XGBoosterSetParam(booster_, "nthread", std::to_string(threads).c_str()), "setting nthread");
  return Status::Ok();
}

Status Gbm::Predict(std::span<const float> x, std::span<float> out) const {
  if (x.size() != out.size() * static_cast<size_t>(num_features_))
    return InvalidArgument("gbm: " + std::to_string(x.size()) + " values for " + std::to_string(out.size()) +
                           " rows of " + std::to_string(num_features_) + " features");
  if (out.empty()) return Status::Ok();
  // Array interface of the dense batch; cache_id 0 so that nothing is cached per call.
  const std::string array = "{\"data\": [" + std::to_string(reinterpret_cast<uintptr_t>(x.data())) +
                            ", true], \"shape\": [" + std::to_string(out.size()) + ", " +
                            std::to_string(num_features_) + "], \"typestr\": \"<f4\", \"version\": 3}";
  const char* config =
      "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, "
      "\"strict_shape\": false, \"cache_id\": 0, \"missing\": NaN}";
  const bst_ulong* shape = nullptr;
  bst_ulong dim = 0;
  const float* result = nullptr;
  XGB_CHECK(XGBoosterPredictFromDense(booster_, array.c_str(), config, nullptr, &shape, &dim, &result), "predicting");
  bst_ulong total = 1;
  for (bst_ulong i = 0; i < dim; ++i) total *= shape[i];
  if (total != out.size()) return Internal("gbm: prediction has " + std::to_string(total) + " values, expected " + std::to_string(out.size()));
  std::copy(result, result + out.size(), out.begin());
  return Status::Ok();
}

Status Gbm::SetAttribute(const std::string& key, const std::string& value) {
  XGB_CHECK(XGBoosterSetAttr(booster_, key.c_str(), value.c_str()), "setting attribute " + key);
  return Status::Ok();
}

std::string Gbm::Attribute(const std::string& key) const {
  const char* v = nullptr;
  int ok = 0;
  if (XGBoosterGetAttr(booster_, key.c_str(), &v, &ok) != 0 || ok == 0 || v == nullptr) return "";
  return v;
}

}  // namespace tediserve::predictor
