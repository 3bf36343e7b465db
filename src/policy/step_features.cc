#include "policy/step_features.h"

#include <algorithm>
#include <cassert>

namespace tediserve::policy {

const char* FeatureSetName(FeatureSet set) { return set == FeatureSet::kFull ? "full" : "progress"; }

bool ParseFeatureSet(const std::string& name, FeatureSet* out) {
  if (name == "full") *out = FeatureSet::kFull;
  else if (name == "progress") *out = FeatureSet::kProgress;
  else return false;
  return true;
}

namespace {

std::vector<std::string> Progress() {
  return {"output_len", "prompt_len", "block_size", "threshold", "steps_frac", "unmasked_frac",
          "block_frac", "block_unmasked_frac", "steps_in_block"};
}

std::vector<std::string> Full() {
  std::vector<std::string> v = Progress();
  for (const char* part : {"block", "output"}) {
    for (const char* s : {"masked_frac", "min", "q1", "median", "q3", "mean"})
      v.push_back(std::string(part) + "_" + s);
  }
  for (double c : kDefaultThresholds) {
    v.push_back("block_above_" + std::to_string(static_cast<int>(c * 100 + 0.5)));
  }
  return v;
}

float Frac(double a, double b) { return b > 0 ? static_cast<float>(a / b) : 0.0f; }

}  // namespace

const std::vector<std::string>& FeatureNames(FeatureSet set) {
  static const std::vector<std::string> progress = Progress(), full = Full();
  return set == FeatureSet::kFull ? full : progress;
}

void StepFeatures(const RequestState& r, double threshold, FeatureSet set, std::span<float> out) {
  assert(static_cast<int>(out.size()) == NumFeatures(set));
  const int o = r.spec.output_len;
  const int b = r.block_size;
  size_t i = 0;
  out[i++] = static_cast<float>(o);
  out[i++] = static_cast<float>(r.spec.prompt_len);
  out[i++] = static_cast<float>(b);
  out[i++] = static_cast<float>(threshold);
  out[i++] = Frac(r.steps, o);
  out[i++] = Frac(r.unmasked, o);
  out[i++] = Frac(r.block, r.num_blocks);
  out[i++] = Frac(r.unmasked_in_block, b);
  out[i++] = static_cast<float>(r.steps_in_block);
  if (set == FeatureSet::kProgress) return;
  const ConfidenceFeatures& f = r.features;
  auto summary = [&](const ConfidenceSummary& s, int of) {
    out[i++] = Frac(s.count, of);
    for (float v : {s.min, s.q1, s.median, s.q3, s.mean}) out[i++] = s.count > 0 ? v : 0.0f;
  };
  summary(f.block, b);
  summary(f.output, o);
  for (int above : f.block_above) out[i++] = Frac(above, std::max(1, f.block.count));
  assert(i == out.size());
}

}  // namespace tediserve::policy
