#include "predictor/model_check.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/input.h"

namespace tediserve::predictor {
namespace {

using json = nlohmann::json;

// XGBoost writes the root's parent as INT32_MAX.
constexpr int64_t kRootParent = 2147483647;

StatusOr<const json*> Member(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) return InvalidArgument(where + ": expected an object, got " + JsonSnippet(obj));
  const auto it = obj.find(key);
  if (it == obj.end()) return InvalidArgument(where + "." + key + ": missing");
  return &*it;
}

StatusOr<std::string> StringMember(const json& obj, const char* key, const std::string& where) {
  ASSIGN_OR_RETURN(const json* v, Member(obj, key, where));
  if (!v->is_string()) return InvalidArgument(where + "." + key + ": expected a string, got " + JsonSnippet(*v));
  return v->get<std::string>();
}

// XGBoost writes its integer parameters as strings ("num_feature": "26").
StatusOr<int64_t> IntParam(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  ASSIGN_OR_RETURN(const std::string s, StringMember(obj, key, where));
  int64_t v = 0;
  if (!ParseInt64(s, &v) || v < lo || v > hi) {
    return InvalidArgument(where + "." + key + ": expected an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got \"" + SanitizeUtf8(s.substr(0, 40)) + "\"");
  }
  return v;
}

StatusOr<const json*> Array(const json& obj, const char* key, const std::string& where, size_t n) {
  ASSIGN_OR_RETURN(const json* v, Member(obj, key, where));
  if (!v->is_array() || v->size() != n) {
    return InvalidArgument(where + "." + key + ": expected an array of " + std::to_string(n) + ", got " +
                           JsonSnippet(*v));
  }
  return v;
}

Status IntArray(const json& obj, const char* key, const std::string& where, size_t n, int64_t lo, int64_t hi,
                std::vector<int64_t>* out) {
  ASSIGN_OR_RETURN(const json* a, Array(obj, key, where, n));
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN((*out)[i], JsonInt((*a)[i], where + "." + key + "[" + std::to_string(i) + "]", lo, hi));
  }
  return Status::Ok();
}

Status NumberArray(const json& obj, const char* key, const std::string& where, size_t n) {
  ASSIGN_OR_RETURN(const json* a, Array(obj, key, where, n));
  for (size_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(JsonNumber((*a)[i], where + "." + key + "[" + std::to_string(i) + "]", -1e38, 1e38).status());
  }
  return Status::Ok();
}

Status CheckTree(const json& t, const std::string& where, int64_t index, int64_t num_features) {
  if (!t.is_object()) return InvalidArgument(where + ": expected an object");
  ASSIGN_OR_RETURN(const json* param, Member(t, "tree_param", where));
  const std::string pw = where + ".tree_param";
  ASSIGN_OR_RETURN(const int64_t n, IntParam(*param, "num_nodes", pw, 1, kMaxTreeNodes));
  ASSIGN_OR_RETURN(const int64_t deleted, IntParam(*param, "num_deleted", pw, 0, 0));
  (void)deleted;
  ASSIGN_OR_RETURN(const int64_t nf, IntParam(*param, "num_feature", pw, 1, kMaxModelFeatures));
  if (nf != num_features) {
    return InvalidArgument(pw + ".num_feature: " + std::to_string(nf) + ", the model has " +
                           std::to_string(num_features));
  }
  ASSIGN_OR_RETURN(const int64_t leaf, IntParam(*param, "size_leaf_vector", pw, 0, 1));
  (void)leaf;
  ASSIGN_OR_RETURN(const json* id, Member(t, "id", where));
  ASSIGN_OR_RETURN(const int64_t idv, JsonInt(*id, where + ".id", 0, kMaxModelTrees));
  if (idv != index) return InvalidArgument(where + ".id: " + std::to_string(idv) + ", expected " + std::to_string(index));

  const size_t un = static_cast<size_t>(n);
  std::vector<int64_t> left, right, parents, split_index, split_type, default_left;
  RETURN_IF_ERROR(IntArray(t, "left_children", where, un, -1, n - 1, &left));
  RETURN_IF_ERROR(IntArray(t, "right_children", where, un, -1, n - 1, &right));
  RETURN_IF_ERROR(IntArray(t, "parents", where, un, 0, kRootParent, &parents));
  RETURN_IF_ERROR(IntArray(t, "split_indices", where, un, 0, num_features - 1, &split_index));
  RETURN_IF_ERROR(IntArray(t, "split_type", where, un, 0, 0, &split_type));
  RETURN_IF_ERROR(IntArray(t, "default_left", where, un, 0, 1, &default_left));
  for (const char* key : {"split_conditions", "base_weights", "loss_changes", "sum_hessian"}) {
    RETURN_IF_ERROR(NumberArray(t, key, where, un));
  }
  for (const char* key : {"categories", "categories_nodes", "categories_segments", "categories_sizes"}) {
    const auto it = t.find(key);
    if (it != t.end() && !(it->is_array() && it->empty())) {
      return InvalidArgument(where + "." + key + ": categorical splits are not supported");
    }
  }
  // Links: the root has no parent; every other node is the child of exactly one node that
  // comes before it, and its parent entry names that node.
  if (parents[0] != kRootParent) return InvalidArgument(where + ".parents[0]: the root must have no parent");
  std::vector<int> child_of(un, -1);
  for (size_t i = 0; i < un; ++i) {
    const std::string at = where + " node " + std::to_string(i);
    if ((left[i] == -1) != (right[i] == -1)) return InvalidArgument(at + ": one child only");
    if (left[i] == -1) continue;
    for (const int64_t c : {left[i], right[i]}) {
      if (c <= static_cast<int64_t>(i)) return InvalidArgument(at + ": child " + std::to_string(c) + " is not after it");
      if (child_of[c] != -1) return InvalidArgument(at + ": node " + std::to_string(c) + " has two parents");
      child_of[c] = static_cast<int>(i);
      if (parents[c] != static_cast<int64_t>(i)) {
        return InvalidArgument(where + ".parents[" + std::to_string(c) + "]: " + std::to_string(parents[c]) +
                               ", but node " + std::to_string(i) + " links to it");
      }
    }
  }
  for (size_t i = 1; i < un; ++i) {
    if (child_of[i] == -1) return InvalidArgument(where + " node " + std::to_string(i) + ": not linked from the tree");
  }
  return Status::Ok();
}

}  // namespace

Status CheckXgboostModel(const json& j) {
  const std::string root = "model";
  if (!j.is_object()) return InvalidArgument("not an XGBoost JSON model (expected an object)");
  ASSIGN_OR_RETURN(const json* version, Member(j, "version", root));
  if (!version->is_array() || version->size() != 3) return InvalidArgument("version: expected [major, minor, patch]");
  for (const json& v : *version) RETURN_IF_ERROR(JsonInt(v, "version", 0, 1000).status());
  ASSIGN_OR_RETURN(const json* learner, Member(j, "learner", root));
  const std::string lw = "learner";
  ASSIGN_OR_RETURN(const json* lparam, Member(*learner, "learner_model_param", lw));
  const std::string pw = lw + ".learner_model_param";
  ASSIGN_OR_RETURN(const int64_t num_features, IntParam(*lparam, "num_feature", pw, 1, kMaxModelFeatures));
  ASSIGN_OR_RETURN(const std::string base_score, StringMember(*lparam, "base_score", pw));
  double bs = 0;
  if (!ParseDouble(base_score, &bs)) {
    return InvalidArgument(pw + ".base_score: expected a finite number, got \"" + SanitizeUtf8(base_score.substr(0, 40)) + "\"");
  }
  if (lparam->contains("num_class")) RETURN_IF_ERROR(IntParam(*lparam, "num_class", pw, 0, 0).status());
  if (lparam->contains("num_target")) RETURN_IF_ERROR(IntParam(*lparam, "num_target", pw, 1, 1).status());
  ASSIGN_OR_RETURN(const json* objective, Member(*learner, "objective", lw));
  ASSIGN_OR_RETURN(const std::string obj_name, StringMember(*objective, "name", lw + ".objective"));
  if (obj_name != "reg:squarederror") {
    return InvalidArgument(lw + ".objective.name: \"" + SanitizeUtf8(obj_name.substr(0, 40)) +
                           "\" is not supported (reg:squarederror only)");
  }
  for (const char* key : {"feature_names", "feature_types"}) {
    const auto it = learner->find(key);
    if (it == learner->end()) continue;
    if (!it->is_array() || (!it->empty() && it->size() != static_cast<size_t>(num_features))) {
      return InvalidArgument(lw + "." + key + ": expected none or " + std::to_string(num_features) + " names");
    }
    for (const json& s : *it) {
      if (!s.is_string()) return InvalidArgument(lw + "." + key + ": expected strings");
    }
  }
  if (learner->contains("attributes")) {
    const json& attrs = (*learner)["attributes"];
    if (!attrs.is_object()) return InvalidArgument(lw + ".attributes: expected an object");
    for (const auto& [k, v] : attrs.items()) {
      if (!v.is_string()) return InvalidArgument(lw + ".attributes." + SanitizeUtf8(k.substr(0, 40)) + ": expected a string");
    }
  }
  ASSIGN_OR_RETURN(const json* booster, Member(*learner, "gradient_booster", lw));
  const std::string bw = lw + ".gradient_booster";
  ASSIGN_OR_RETURN(const std::string booster_name, StringMember(*booster, "name", bw));
  if (booster_name != "gbtree") return InvalidArgument(bw + ".name: only gbtree boosters are supported");
  ASSIGN_OR_RETURN(const json* model, Member(*booster, "model", bw));
  const std::string mw = bw + ".model";
  ASSIGN_OR_RETURN(const json* gparam, Member(*model, "gbtree_model_param", mw));
  ASSIGN_OR_RETURN(const int64_t num_trees, IntParam(*gparam, "num_trees", mw + ".gbtree_model_param", 1, kMaxModelTrees));
  RETURN_IF_ERROR(IntParam(*gparam, "num_parallel_tree", mw + ".gbtree_model_param", 1, 1).status());
  ASSIGN_OR_RETURN(const json* trees, Member(*model, "trees", mw));
  if (!trees->is_array() || trees->size() != static_cast<size_t>(num_trees)) {
    return InvalidArgument(mw + ".trees: expected " + std::to_string(num_trees) + " trees (num_trees), got " +
                           JsonSnippet(*trees));
  }
  std::vector<int64_t> info;
  RETURN_IF_ERROR(IntArray(*model, "tree_info", mw, static_cast<size_t>(num_trees), 0, 0, &info));
  if (model->contains("iteration_indptr")) {
    const json& ptr = (*model)["iteration_indptr"];
    if (!ptr.is_array() || ptr.empty()) return InvalidArgument(mw + ".iteration_indptr: expected an array");
    int64_t prev = -1;
    for (size_t i = 0; i < ptr.size(); ++i) {
      ASSIGN_OR_RETURN(const int64_t v, JsonInt(ptr[i], mw + ".iteration_indptr[" + std::to_string(i) + "]", 0, num_trees));
      if (v < prev || (i == 0 && v != 0)) return InvalidArgument(mw + ".iteration_indptr: must rise from 0");
      prev = v;
    }
    if (prev != num_trees) return InvalidArgument(mw + ".iteration_indptr: must end at num_trees");
  }
  for (int64_t i = 0; i < num_trees; ++i) {
    RETURN_IF_ERROR(CheckTree((*trees)[static_cast<size_t>(i)], mw + ".trees[" + std::to_string(i) + "]", i, num_features));
  }
  return Status::Ok();
}

}  // namespace tediserve::predictor
