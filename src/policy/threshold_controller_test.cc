#include "policy/threshold_controller.h"

#include <array>
#include <vector>

#include <gtest/gtest.h>

namespace tediserve::policy {
namespace {

const std::array<double, 5> kTh = {0.9, 0.8, 0.7, 0.6, 0.5};

// P = 100, O = 256, B = 32: 8 blocks, a recompute step pushes 356 tokens. Predicted
// remaining steps per threshold: 128, 100, 80, 64, 32.
RequestState MakeRequest(RequestId id = 0) {
  RequestState r;
  r.spec.id = id;
  r.spec.arrival = 0;
  r.spec.prompt_len = 100;
  r.spec.output_len = 256;
  r.spec.slo = 10;
  r.deadline = 10;
  r.block_size = 32;
  r.num_blocks = 8;
  r.cache = true;
  r.predicted = {128, 100, 80, 64, 32};
  return r;
}

// wait 0.1 s, recompute step 0.04 s, cache step 0.01 s. With 8 recompute steps to go:
// est(k) = 0.1 + 8 * 0.04 + (S_k - 8) * 0.01 = 1.62, 1.34, 1.14, 0.98, 0.66.
const PlacementCost kCost{0.1, 0.04, 0.01};

TEST(EstimateRemainingSecondsTest, RecomputeThenCacheSteps) {
  const RequestState r = MakeRequest();
  EXPECT_NEAR(EstimateRemainingSeconds(r, 0, kCost), 1.62, 1e-12);
  EXPECT_NEAR(EstimateRemainingSeconds(r, 1, kCost), 1.34, 1e-12);
  EXPECT_NEAR(EstimateRemainingSeconds(r, 2, kCost), 1.14, 1e-12);
  EXPECT_NEAR(EstimateRemainingSeconds(r, 3, kCost), 0.98, 1e-12);
  EXPECT_NEAR(EstimateRemainingSeconds(r, 4, kCost), 0.66, 1e-12);
}

TEST(EstimateRemainingSecondsTest, MidBlockCountsOnlyBlocksNotStarted) {
  RequestState r = MakeRequest();
  r.block = 2;
  r.steps_in_block = 3;  // block 2 already had its recompute step: R = 8 - 2 - 1 = 5
  r.predicted[0] = 100;
  EXPECT_EQ(r.RemainingRecomputeSteps(), 5);
  EXPECT_NEAR(EstimateRemainingSeconds(r, 0, kCost), 0.1 + 5 * 0.04 + 95 * 0.01, 1e-12);
  // Fewer predicted steps than recompute steps left: no negative cache steps.
  r.predicted[4] = 3;
  EXPECT_NEAR(EstimateRemainingSeconds(r, 4, kCost), 0.1 + 5 * 0.04, 1e-12);
}

TEST(EstimateRemainingSecondsTest, WithoutCacheEveryStepRecomputes) {
  RequestState r = MakeRequest();
  r.cache = false;
  EXPECT_NEAR(EstimateRemainingSeconds(r, 3, kCost), 0.1 + 64 * 0.04, 1e-12);
  EXPECT_NEAR(EstimateRemainingSeconds(r, 0, kCost), 0.1 + 128 * 0.04, 1e-12);
}

TEST(SelectThresholdTest, PicksHighestFeasible) {
  RequestState r = MakeRequest();
  r.deadline = 11.2;
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, /*now=*/10.0, kCost), 2);  // budget 1.2: 1.14 fits
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.2, kCost), 3);          // budget 1.0: 0.98 fits
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 9.0, kCost), 0);           // budget 2.2: all fit
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 9.8, kCost), 1);           // budget 1.4
  // Exactly on the budget counts as fitting.
  r.deadline = EstimateRemainingSeconds(r, 1, kCost);
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 0.0, kCost), 1);
}

TEST(SelectThresholdTest, StepsFactorScalesThePredictedSteps) {
  // With 1.25x the predicted steps: est = 0.42 + (1.25 S_k - 8) * 0.01 = 1.94, 1.59, 1.34,
  // 1.14, 0.74; a budget of 1.2 takes 0.7 at the mean and 0.6 with the factor.
  RequestState r = MakeRequest();
  r.deadline = 11.2;
  EXPECT_NEAR(EstimateRemainingSeconds(r, 2, kCost, 1.25), 1.34, 1e-12);
  EXPECT_NEAR(EstimateRemainingSeconds(r, 4, kCost, 1.25), 0.74, 1e-12);
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, /*now=*/10.0, kCost), 2);
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, /*now=*/10.0, kCost, 1.25), 3);
}

TEST(SelectThresholdTest, LowestAllowedWhenNothingFits) {
  RequestState r = MakeRequest();
  r.deadline = 10.5;
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost), 4);  // 0.66 > 0.5
  r.deadline = 5;  // already late
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost), 4);
  r.spec.min_threshold = 0.7;  // the lowest *allowed* is 0.7
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost), 2);
}

TEST(SelectThresholdTest, WithAccuracyALateRequestTakesTheMostAccuracyPerWork) {
  // Loads 6688, 5792, 5152, 4640, 3616 (RequestLoadTokensTest). Accuracy per token:
  // 0.80/6688 = 1.196e-4, 0.79/5792 = 1.364e-4, 0.78/5152 = 1.514e-4, 0.75/4640 = 1.616e-4,
  // 0.55/3616 = 1.521e-4: the best is 0.6 (6.2% over 0.5), where Algorithm 1 takes 0.5.
  const std::array<double, 5> acc = {0.80, 0.79, 0.78, 0.75, 0.55};
  RequestState r = MakeRequest();
  r.deadline = 10.5;  // nothing fits
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost), 4);
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, acc), 3);
  // A 10% margin over the lowest is more than 0.6 offers: 0.5 stays.
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, acc, 0.1), 4);
  // Accuracy falling steeply (the bundled multi-block model's shape): 0.9 gives
  // 0.93/6688 = 1.39e-4 against 0.335/3616 = 0.93e-4 at 0.5, and wins with the margin.
  const std::array<double, 5> steep = {0.93, 0.74, 0.57, 0.45, 0.335};
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, steep, 0.1), 0);
  // Within the allowed range only: under a cap of 0.7 the best is 0.6 again.
  EXPECT_EQ(SelectThreshold(r, kTh, 0.7, 10.0, kCost, 1.0, acc), 3);
  EXPECT_EQ(SelectThreshold(r, kTh, 0.7, 10.0, kCost, 1.0, steep, 0.1), 2);
  r.spec.max_threshold = 0.5;
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, steep, 0.1), 4);
  r.spec.max_threshold = 1;
  // Flat accuracy: the cheapest wins; equal value everywhere: the lowest stays (a higher one
  // must give more).
  const std::array<double, 5> flat = {0.7, 0.7, 0.7, 0.7, 0.7};
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, flat), 4);
  const std::array<double, 5> proportional = {6688, 5792, 5152, 4640, 3616};
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, proportional), 4);
  // A request that fits from 0.7 down: rescued at 0.7 where the accuracy per work rises as
  // the threshold falls (acc: 1.514e-4 at 0.7 >= 1.196e-4 at 0.9) or without accuracy; kept at
  // 0.9 where it falls (steep: 0.57/5152 = 1.11e-4 < 1.39e-4 at 0.9: the 36 points it would
  // cost are more than the 23% of the work it saves is worth).
  r.deadline = 11.2;
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost), 2);
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, acc), 2);
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, steep, 0.1), 0);
  // Measured from the highest allowed threshold: under a cap of 0.7, 0.7 itself fits.
  EXPECT_EQ(SelectThreshold(r, kTh, 0.7, 10.0, kCost, 1.0, steep, 0.1), 2);
  // Accuracy per work rising to 0.8 only: the rescue may go there, not below.
  const std::array<double, 5> knee = {0.80, 0.79, 0.60, 0.50, 0.40};
  r.deadline = 11.5;  // 0.8 fits as well (1.34 s), 0.9 does not (1.62 s)
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, knee), 1);
  // An accuracy list of the wrong size is ignored.
  r.deadline = 10.5;
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 10.0, kCost, 1.0, std::array<double, 2>{1, 1}), 4);
}

TEST(SelectThresholdTest, RespectsTheCap) {
  RequestState r = MakeRequest();
  r.deadline = 100;  // everything fits
  EXPECT_EQ(SelectThreshold(r, kTh, 0.9, 0, kCost), 0);
  EXPECT_EQ(SelectThreshold(r, kTh, 0.7, 0, kCost), 2);
  EXPECT_EQ(SelectThreshold(r, kTh, 0.75, 0, kCost), 2);  // between candidates: the one below
  EXPECT_EQ(SelectThreshold(r, kTh, 0.5, 0, kCost), 4);
}

TEST(SelectThresholdTest, RespectsRequestBounds) {
  RequestState r = MakeRequest();
  r.deadline = 100;
  r.spec.max_threshold = 0.8;
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 0, kCost), 1);
  r.spec.max_threshold = 1;
  r.spec.min_threshold = 0.8;
  r.deadline = 0.1;  // nothing fits: lowest allowed is 0.8
  EXPECT_EQ(SelectThreshold(r, kTh, 1.0, 0, kCost), 1);
}

TEST(AllowedRangeTest, CapAndBounds) {
  RequestState r = MakeRequest();
  EXPECT_EQ(AllowedRange(r, kTh, 1.0), std::make_pair(0, 4));
  EXPECT_EQ(AllowedRange(r, kTh, 0.6), std::make_pair(3, 4));
  r.spec.min_threshold = 0.6;
  r.spec.max_threshold = 0.8;
  EXPECT_EQ(AllowedRange(r, kTh, 1.0), std::make_pair(1, 3));
  EXPECT_EQ(AllowedRange(r, kTh, 0.7), std::make_pair(2, 3));
  // The request's own floor wins over a lower cap.
  r.spec.min_threshold = 0.8;
  r.spec.max_threshold = 1;
  EXPECT_EQ(AllowedRange(r, kTh, 0.5), std::make_pair(1, 1));
  // Bounds between candidates exclude all of them: the nearest candidate.
  r.spec.min_threshold = 0.85;
  r.spec.max_threshold = 0.88;
  EXPECT_EQ(AllowedRange(r, kTh, 1.0), std::make_pair(0, 0));
  r.spec.min_threshold = 0.51;
  r.spec.max_threshold = 0.53;
  EXPECT_EQ(AllowedRange(r, kTh, 1.0), std::make_pair(4, 4));
}

TEST(RequestLoadTokensTest, HandComputed) {
  RequestState r = MakeRequest();
  // 8 recompute steps of 356 tokens + (S - 8) cache steps of 32.
  EXPECT_DOUBLE_EQ(RequestLoadTokens(r, 0), 8 * 356 + 120 * 32);  // 6688
  EXPECT_DOUBLE_EQ(RequestLoadTokens(r, 1), 8 * 356 + 92 * 32);   // 5792
  EXPECT_DOUBLE_EQ(RequestLoadTokens(r, 2), 8 * 356 + 72 * 32);   // 5152
  EXPECT_DOUBLE_EQ(RequestLoadTokens(r, 3), 8 * 356 + 56 * 32);   // 4640
  EXPECT_DOUBLE_EQ(RequestLoadTokens(r, 4), 8 * 356 + 24 * 32);   // 3616
  r.block = 2;
  r.steps_in_block = 3;
  EXPECT_DOUBLE_EQ(RequestLoadTokens(r, 1), 5 * 356 + 95 * 32);
  r.cache = false;
  EXPECT_DOUBLE_EQ(RequestLoadTokens(r, 3), 64 * 356);
}

class ComputeCapsTest : public ::testing::Test {
 protected:
  void Run(double capacity) {
    std::array<RequestState*, 3> ordered = {&a_, &b_, &c_};
    ComputeCaps(ordered, kTh, capacity);
  }
  RequestState a_ = MakeRequest(0), b_ = MakeRequest(1), c_ = MakeRequest(2);
};

TEST_F(ComputeCapsTest, EnoughCapacityAllGetTheTop) {
  Run(3 * 6688);
  EXPECT_DOUBLE_EQ(a_.cap, 0.9);
  EXPECT_DOUBLE_EQ(b_.cap, 0.9);
  EXPECT_DOUBLE_EQ(c_.cap, 0.9);
}

TEST_F(ComputeCapsTest, TooLittleCapacityAllGetTheLowest) {
  Run(3 * 3616 - 1);
  EXPECT_DOUBLE_EQ(a_.cap, 0.5);
  EXPECT_DOUBLE_EQ(b_.cap, 0.5);
  EXPECT_DOUBLE_EQ(c_.cap, 0.5);
  a_.cap = b_.cap = c_.cap = 1;
  Run(3 * 3616);  // exactly all at the lowest
  EXPECT_DOUBLE_EQ(a_.cap, 0.5);
  EXPECT_DOUBLE_EQ(c_.cap, 0.5);
}

TEST_F(ComputeCapsTest, NewestIsLoweredFirst) {
  Run(6688 + 6688 + 3616);
  EXPECT_DOUBLE_EQ(a_.cap, 0.9);
  EXPECT_DOUBLE_EQ(b_.cap, 0.9);
  EXPECT_DOUBLE_EQ(c_.cap, 0.5);
  Run(6688 + 6688 + 4640);
  EXPECT_DOUBLE_EQ(c_.cap, 0.6);
  // A: 6688 + 2 x 3616 fits; B: 6688 + L_B + 3616 <= 16096 -> 5792 (0.8); C: 0.5.
  Run(6688 + 5792 + 3616);
  EXPECT_DOUBLE_EQ(a_.cap, 0.9);
  EXPECT_DOUBLE_EQ(b_.cap, 0.8);
  EXPECT_DOUBLE_EQ(c_.cap, 0.5);
}

TEST_F(ComputeCapsTest, FirstInOrderKeepsTheWiderRange) {
  // C stands for a high-priority request: the caller puts it first.
  std::array<RequestState*, 3> ordered = {&c_, &a_, &b_};
  ComputeCaps(ordered, kTh, 6688 + 5152 + 3616);
  EXPECT_DOUBLE_EQ(c_.cap, 0.9);
  EXPECT_DOUBLE_EQ(a_.cap, 0.7);
  EXPECT_DOUBLE_EQ(b_.cap, 0.5);
}

TEST_F(ComputeCapsTest, LoadDependsOnProgress) {
  // A far along (block 7 of 8, 4 steps to go at every threshold) leaves room for the others.
  a_.block = 7;
  a_.steps_in_block = 1;
  a_.predicted = {4, 4, 4, 4, 4};  // L = 0 recompute + 4 cache steps = 128 tokens
  Run(128 + 6688 + 6688);
  EXPECT_DOUBLE_EQ(a_.cap, 0.9);
  EXPECT_DOUBLE_EQ(b_.cap, 0.9);
  EXPECT_DOUBLE_EQ(c_.cap, 0.9);
}

TEST(ComputeCapsEmptyTest, NoRequestsLeavesOthersAlone) {
  // An empty pass touches nothing; a following pass over one request still sets its cap.
  std::vector<RequestState*> none;
  ComputeCaps(none, kTh, 100);
  RequestState r;
  r.spec.prompt_len = 100;
  r.spec.output_len = 64;
  r.block_size = 32;
  r.num_blocks = 2;
  r.cap = 0.123;
  for (size_t k = 0; k < kTh.size(); ++k) r.predicted[k] = 4;
  std::vector<RequestState*> one{&r};
  ComputeCaps(one, kTh, 1e9);
  EXPECT_DOUBLE_EQ(r.cap, kTh.front());  // ample capacity: the top threshold
  ComputeCaps(one, kTh, 0);
  EXPECT_DOUBLE_EQ(r.cap, kTh.back());   // none: the lowest
}

}  // namespace
}  // namespace tediserve::policy
