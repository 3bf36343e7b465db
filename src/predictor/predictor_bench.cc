// Cost of the step predictor's batched call: N requests x |C| thresholds in one model call
// (docs/design.md section 3.3; target <= 1 ms for 500 x 5), for a model file or, without
// one, a model trained here on random rows of the same shape.
//   build/src/predictor/predictor_bench [MODEL_FILE] [REQUESTS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "predictor/prediction_worker.h"
#include "predictor/step_predictor.h"

using namespace tediserve;

int main(int argc, char** argv) {
  const int n = argc > 2 ? std::atoi(argv[2]) : 500;
  if (n <= 0 || n > 100000) {
    std::fprintf(stderr, "predictor_bench: REQUESTS must be in 1..100000\n");
    return 2;
  }
  auto loaded = [&]() -> StatusOr<predictor::StepPredictor> {
    if (argc > 1) return predictor::StepPredictor::Load(argv[1]);
    const int nf = policy::NumFeatures(policy::FeatureSet::kFull);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(0, 1);
    std::vector<float> x(20000 * nf), y(20000);
    for (auto& v : x) v = u(rng);
    for (auto& v : y) v = u(rng);
    predictor::GbmParams p;
    p.rounds = 200;
    auto g = predictor::Gbm::Train(x, y, nf, p);
    if (!g.ok()) return g.status();
    return predictor::StepPredictor::FromGbm(std::move(*g), policy::FeatureSet::kFull);
  }();
  if (!loaded.ok()) {
    std::fprintf(stderr, "predictor_bench: %s\n", loaded.status().ToString().c_str());
    return 2;
  }
  predictor::StepPredictor& pred = *loaded;
  std::vector<policy::RequestState> rs(n);
  std::mt19937 rng(2);
  for (int i = 0; i < n; ++i) {
    auto& r = rs[i];
    r.spec.id = i;
    r.spec.prompt_len = 100 + static_cast<int>(rng() % 900);
    r.spec.output_len = 256;
    r.block_size = 32;
    r.num_blocks = 8;
    r.block = static_cast<int>(rng() % 8);
    r.steps = r.block * 10 + static_cast<int>(rng() % 5);
    r.unmasked = r.block * 32 + static_cast<int>(rng() % 20);
    r.unmasked_in_block = r.unmasked - r.block * 32;
    r.steps_in_block = static_cast<int>(rng() % 5);
    r.features.block = {32 - r.unmasked_in_block, 0.2f, 0.5f, 0.7f, 0.9f, 0.65f};
    r.features.output = {256 - r.unmasked, 0.1f, 0.4f, 0.6f, 0.8f, 0.55f};
    r.features.block_above = {3, 5, 8, 12, 16};
  }
  std::vector<const policy::RequestState*> ptrs;
  for (auto& r : rs) ptrs.push_back(&r);
  const std::vector<double> th = {0.9, 0.8, 0.7, 0.6, 0.5};
  std::vector<double> out(n * th.size());
  std::vector<double> us;
  for (int rep = 0; rep < 200; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = pred.Predict(ptrs, th, out);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "predictor_bench: %s\n", s.ToString().c_str());
      return 1;
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::vector<double> one;
  for (int rep = 0; rep < 2000; ++rep) {
    const policy::RequestState* p[] = {ptrs[rep % n]};
    std::vector<double> o1(th.size());
    const auto t0 = std::chrono::steady_clock::now();
    (void)pred.Predict(p, th, o1);
    one.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  // The same batch through the prediction thread: copy out, predict there, wait for it.
  std::vector<double> rt;
  {
    predictor::TrainedEstimator est(&pred, policy::OneShotEstimator(th, {3, 3.9, 4.8, 5.7, 6.6}), 4);
    predictor::PredictionWorker worker(&est, th);
    for (int rep = 0; rep < 200; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      const uint64_t ticket = worker.Submit(rs);
      const auto r = worker.Wait(ticket);
      rt.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      if (r.predicted.size() != out.size()) {
        std::fprintf(stderr, "predictor_bench: the worker returned %zu values\n", r.predicted.size());
        return 1;
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto p99 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() * 99 / 100];
  };
  const double m = median(us);
  std::printf("predictor_bench: %s, %d features\n", argc > 1 ? argv[1] : "random model (200 rounds, depth 6)",
              policy::NumFeatures(pred.feature_set()));
  std::printf("batch of %d requests x %zu thresholds (%zu rows): median %.1f us, p99 %.1f us, %.2f us/row   target <= 1000 us: %s\n",
              n, th.size(), out.size(), m, p99(us), m / out.size(), m <= 1000 ? "PASS" : "FAIL");
  std::printf("the same batch through the prediction thread (copy, predict, hand back): median %.1f us, p99 %.1f us\n",
              median(rt), p99(rt));
  std::printf("one request x %zu thresholds: median %.1f us, p99 %.1f us (the per-refresh cost inside the simulator)\n",
              th.size(), median(one), p99(one));
  return 0;
}
