#include "predictor/forest.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace tediserve::predictor {

StatusOr<Forest> Forest::FromXgboostJson(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("forest: not a JSON model");
  Forest f;
  try {
    const auto& learner = j.at("learner");
    const auto& param = learner.at("learner_model_param");
    f.base_score_ = std::strtof(param.at("base_score").get<std::string>().c_str(), nullptr);
    f.num_features_ = std::atoi(param.at("num_feature").get<std::string>().c_str());
    if (param.contains("num_class") && param.at("num_class").get<std::string>() != "0")
      return InvalidArgument("forest: multi-class models are not supported");
    const std::string objective = learner.at("objective").at("name").get<std::string>();
    if (objective != "reg:squarederror") return InvalidArgument("forest: objective " + objective + " is not supported");
    const auto& booster = learner.at("gradient_booster");
    if (booster.at("name").get<std::string>() != "gbtree") return InvalidArgument("forest: only gbtree boosters");
    for (const auto& t : booster.at("model").at("trees")) {
      const auto& left = t.at("left_children");
      const auto& right = t.at("right_children");
      const auto& idx = t.at("split_indices");
      const auto& cond = t.at("split_conditions");
      const size_t n = left.size();
      if (n == 0 || right.size() != n || idx.size() != n || cond.size() != n)
        return InvalidArgument("forest: tree arrays of different lengths");
      if (t.contains("split_type"))
        for (const auto& s : t.at("split_type"))
          if (s.get<int>() != 0) return InvalidArgument("forest: categorical splits are not supported");
      const int32_t base = static_cast<int32_t>(f.nodes_.size());
      f.roots_.push_back(base);
      for (size_t i = 0; i < n; ++i) {
        const int l = left[i].get<int>(), r = right[i].get<int>();
        Node node;
        node.value = cond[i].get<float>();
        if (l == -1) {
          node.feature = -1;
          node.left = node.right = -1;
        } else {
          node.feature = idx[i].get<int>();
          if (l <= static_cast<int>(i) || r <= static_cast<int>(i) || l >= static_cast<int>(n) || r >= static_cast<int>(n) ||
              node.feature < 0 || node.feature >= f.num_features_)
            return InvalidArgument("forest: bad node " + std::to_string(i));
          node.left = base + l;
          node.right = base + r;
        }
        f.nodes_.push_back(node);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("forest: malformed model: ") + e.what());
  }
  if (f.roots_.empty() || f.num_features_ <= 0) return InvalidArgument("forest: no trees");
  // Depth bound of PredictVarying's stack. Children come after parents (checked above), so
  // one pass in node order computes every node's depth.
  std::vector<int> depth(f.nodes_.size(), 0);
  for (int32_t root : f.roots_) depth[root] = 1;
  for (size_t i = 0; i < f.nodes_.size(); ++i) {
    const Node& nd = f.nodes_[i];
    if (nd.feature < 0) continue;
    depth[nd.left] = depth[nd.right] = depth[i] + 1;
    if (depth[i] + 1 > kMaxDepth) return InvalidArgument("forest: trees deeper than " + std::to_string(kMaxDepth));
  }
  return f;
}

float Forest::Predict(std::span<const float> row) const {
  float sum = base_score_;
  for (int32_t n : roots_) {
    while (nodes_[n].feature >= 0) n = row[nodes_[n].feature] < nodes_[n].value ? nodes_[n].left : nodes_[n].right;
    sum += nodes_[n].value;
  }
  return sum;
}

void Forest::PredictVarying(std::span<const float> row, int vary, std::span<const float> values,
                            std::span<float> out) const {
  const size_t nv = std::min<size_t>(values.size(), 32);
  for (size_t k = 0; k < nv; ++k) out[k] = base_score_;
  const uint32_t all = nv >= 32 ? 0xFFFFFFFFu : ((1u << nv) - 1);
  struct Item {
    int32_t node;
    uint32_t mask;
  };
  Item stack[kMaxDepth + 2];
  for (int32_t root : roots_) {
    int top = 0;
    stack[top++] = {root, all};
    while (top > 0) {
      Item it = stack[--top];
      // Walk down while the split does not depend on the varying column.
      while (nodes_[it.node].feature >= 0 && nodes_[it.node].feature != vary) {
        const Node& nd = nodes_[it.node];
        it.node = row[nd.feature] < nd.value ? nd.left : nd.right;
      }
      const Node& nd = nodes_[it.node];
      if (nd.feature < 0) {
        for (uint32_t m = it.mask; m != 0; m &= m - 1) out[__builtin_ctz(m)] += nd.value;
        continue;
      }
      uint32_t left = 0;
      for (uint32_t m = it.mask; m != 0; m &= m - 1) {
        const int k = __builtin_ctz(m);
        if (values[k] < nd.value) left |= 1u << k;
      }
      const uint32_t right = it.mask & ~left;
      if (left != 0) stack[top++] = {nd.left, left};
      if (right != 0) stack[top++] = {nd.right, right};
    }
  }
}

}  // namespace tediserve::predictor
