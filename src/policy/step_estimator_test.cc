#include "policy/step_estimator.h"

#include <array>
#include <vector>

#include <gtest/gtest.h>

namespace tediserve::policy {
namespace {

// O = 256 tokens in 8 blocks of 32.
RequestState MakeRequest() {
  RequestState r;
  r.spec.output_len = 256;
  r.spec.prompt_len = 100;
  r.block_size = 32;
  r.num_blocks = 8;
  return r;
}

const std::vector<double> kThresholds = {0.9, 0.8, 0.7, 0.6, 0.5};
const std::vector<double> kTokensPerStep = {2.0, 2.5, 3.2, 4.0, 8.0};

TEST(OneShotEstimatorTest, OutputOverTokensPerStepAtStart) {
  OneShotEstimator e(kThresholds, kTokensPerStep);
  const RequestState r = MakeRequest();
  std::array<double, 5> out{};
  e.Predict(r, kThresholds, out);
  EXPECT_DOUBLE_EQ(out[0], 128);   // 256 / 2
  EXPECT_DOUBLE_EQ(out[1], 102.4); // 256 / 2.5
  EXPECT_DOUBLE_EQ(out[2], 80);    // 256 / 3.2
  EXPECT_DOUBLE_EQ(out[3], 64);
  EXPECT_DOUBLE_EQ(out[4], 32);
  EXPECT_EQ(e.refresh_tokens(), 0);
  EXPECT_STREQ(e.name(), "oneshot");
}

TEST(OneShotEstimatorTest, SubtractsStepsDone) {
  OneShotEstimator e(kThresholds, kTokensPerStep);
  RequestState r = MakeRequest();
  r.steps = 20;
  r.block = 2;
  std::array<double, 5> out{};
  e.Predict(r, kThresholds, out);
  EXPECT_DOUBLE_EQ(out[0], 108);
  EXPECT_DOUBLE_EQ(out[3], 44);
  EXPECT_DOUBLE_EQ(out[4], 12);
}

TEST(OneShotEstimatorTest, FlooredAtOneStepPerRemainingBlock) {
  OneShotEstimator e(kThresholds, kTokensPerStep);
  RequestState r = MakeRequest();
  r.steps = 30;  // at 0.5 the one-shot total is 32 steps: 2 left, but 5 blocks remain
  r.block = 3;
  std::array<double, 5> out{};
  e.Predict(r, kThresholds, out);
  EXPECT_DOUBLE_EQ(out[4], 5);
  EXPECT_DOUBLE_EQ(out[3], 34);
  r.steps = 200;  // more steps than any estimate: every threshold floors at 5
  e.Predict(r, kThresholds, out);
  for (double v : out) EXPECT_DOUBLE_EQ(v, 5);
}

TEST(OneShotEstimatorTest, InterpolatesStepsPerTokenBetweenThresholds) {
  OneShotEstimator e(kThresholds, kTokensPerStep);
  // Halfway between 0.9 (0.5 steps/token) and 0.8 (0.4 steps/token): 0.45 steps/token.
  EXPECT_NEAR(e.TokensPerStep(0.85), 1 / 0.45, 1e-12);
  // A quarter of the way from 0.6 (0.25) to 0.5 (0.125): 0.21875 steps/token.
  EXPECT_NEAR(e.TokensPerStep(0.575), 1 / 0.21875, 1e-12);
  EXPECT_NEAR(e.TokensPerStep(0.7), 3.2, 1e-12);
  // Clamped at both ends.
  EXPECT_DOUBLE_EQ(e.TokensPerStep(0.95), 2.0);
  EXPECT_DOUBLE_EQ(e.TokensPerStep(0.3), 8.0);

  const RequestState r = MakeRequest();
  const std::array<double, 2> th = {0.85, 0.575};
  std::array<double, 2> out{};
  e.Predict(r, th, out);
  EXPECT_NEAR(out[0], 256 * 0.45, 1e-9);
  EXPECT_NEAR(out[1], 256 * 0.21875, 1e-9);
}

TEST(OracleEstimatorTest, AsksTheTruth) {
  OracleEstimator e([](RequestId id, double c) { return static_cast<int>(id * 100 + c * 10); }, 4);
  RequestState r = MakeRequest();
  r.spec.id = 3;
  std::array<double, 2> out{};
  const std::array<double, 2> th = {0.9, 0.5};
  e.Predict(r, th, out);
  EXPECT_DOUBLE_EQ(out[0], 309);
  EXPECT_DOUBLE_EQ(out[1], 305);
  EXPECT_EQ(e.refresh_tokens(), 4);
}

}  // namespace
}  // namespace tediserve::policy
