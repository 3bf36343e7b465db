#include "policy/scheduler.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tediserve::policy {
namespace {

using ::testing::HasSubstr;

// l(n) = max(0.01, n * 1e-4) seconds at every TP degree used here (the two-point curve's
// tail keeps the same slope), so tau = 10000 tokens/s per instance at any batch >= 100.
LatencyProfile LinearProfile() {
  StatusOr<LatencyProfile> p = LatencyProfile::FromPoints(
      {{1, {{100, 0.01}, {1000, 0.1}}}, {2, {{100, 0.005}, {1000, 0.05}}}}, "linear");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

const std::vector<double> kTh = {0.9, 0.8, 0.7, 0.6, 0.5};
// O = 256 predicts 128, 102.4, 80, 64, 32 remaining steps at the start.
const std::vector<double> kTokensPerStep = {2.0, 2.5, 3.2, 4.0, 8.0};
const std::vector<double> kAccuracy = {0.80, 0.79, 0.77, 0.74, 0.60};

// P = 100, O = 256 (8 blocks of 32): a recompute step pushes 356 tokens.
RequestSpec Spec(RequestId id, Seconds arrival, Seconds slo = 10, int prompt = 100, int output = 256) {
  RequestSpec s;
  s.id = id;
  s.arrival = arrival;
  s.prompt_len = prompt;
  s.output_len = output;
  s.slo = slo;
  return s;
}

StepOutcome Outcome(RequestId id, bool block_done = false, bool request_done = false, int unmasked = 2) {
  StepOutcome o;
  o.id = id;
  o.unmasked = unmasked;
  o.block_done = block_done;
  o.request_done = request_done;
  return o;
}

const Launch* LaunchOn(const std::vector<Launch>& out, InstanceId id) {
  for (const Launch& l : out) {
    if (l.instance == id) return &l;
  }
  return nullptr;
}

std::vector<RequestId> BatchIds(const Launch& l) {
  std::vector<RequestId> ids;
  for (const StepCommand& c : l.batch) ids.push_back(c.id);
  return ids;
}

class SchedulerTest : public ::testing::Test {
 protected:
  // Builds a scheduler for the named preset over instances 0..n-1 (TP 1); `tweak` edits the
  // options first.
  void Make(const std::string& policy, int num_instances,
            const std::function<void(PolicyOptions&)>& tweak = nullptr) {
    StatusOr<PolicyOptions> o = PolicyOptions::Named(policy);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    o->tokens_per_step = kTokensPerStep;
    o->accuracy = kAccuracy;
    if (tweak) tweak(*o);
    std::vector<InstanceInfo> inst;
    for (int i = 0; i < num_instances; ++i) inst.push_back({i, 1});
    auto s = Scheduler::Create(*o, &profile_, &estimator_, inst);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    s_ = std::move(s).value();
  }

  std::vector<Launch> Arrive(const RequestSpec& spec, Seconds now = -1) {
    std::vector<Launch> out;
    s_->OnArrival(spec, now < 0 ? spec.arrival : now, &out);
    return out;
  }
  std::vector<Launch> Done(InstanceId inst, std::vector<StepOutcome> outcomes, Seconds now) {
    std::vector<Launch> out;
    s_->OnStepDone(inst, outcomes, now, &out);
    return out;
  }
  InstanceId Where(RequestId id) {
    const RequestState* r = s_->Find(id);
    return r == nullptr ? -2 : r->instance;
  }

  LatencyProfile profile_ = LinearProfile();
  OneShotEstimator estimator_{kTh, kTokensPerStep};
  std::unique_ptr<Scheduler> s_;
};

TEST_F(SchedulerTest, LaunchesAStepOnArrival) {
  Make("tediserve", 1);
  const std::vector<Launch> out = Arrive(Spec(0, 0));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].instance, 0);
  EXPECT_EQ(out[0].tokens, 356);
  ASSERT_EQ(out[0].batch.size(), 1u);
  EXPECT_EQ(out[0].batch[0].id, 0);
  EXPECT_TRUE(out[0].batch[0].recompute);
  EXPECT_DOUBLE_EQ(out[0].batch[0].threshold, 0.9);
  EXPECT_EQ(s_->live(), 1u);
  EXPECT_TRUE(s_->Find(0)->in_flight);
}

TEST_F(SchedulerTest, StepLevelSendsNewRequestToIdleInstance) {
  Make("tediserve", 2);
  Arrive(Spec(0, 0));
  EXPECT_EQ(Where(0), 0);
  const std::vector<Launch> out = Arrive(Spec(1, 0.001));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].instance, 1);
  EXPECT_EQ(Where(1), 1);
}

TEST_F(SchedulerTest, StepLevelPicksEarliestCompletionAmongBusyInstances) {
  Make("tediserve", 2);
  Arrive(Spec(0, 0));                      // instance 0: 356 tokens, busy until 0.0356
  Arrive(Spec(1, 0, 10, /*prompt=*/1000));  // instance 1: 1256 tokens, busy until 0.1256
  // Request 2 on 0 finishes its next step at 0.0356 + l(712) = 0.1068, on 1 at
  // 0.1256 + l(1612) = 0.2868.
  const std::vector<Launch> out = Arrive(Spec(2, 0));
  EXPECT_TRUE(out.empty());  // both busy
  EXPECT_EQ(Where(2), 0);
}

TEST_F(SchedulerTest, CachedRequestNeverMigratesMidBlock) {
  Make("tediserve", 2);
  Arrive(Spec(0, 0));  // -> 0
  Arrive(Spec(1, 0));  // -> 1
  Arrive(Spec(2, 0));  // both busy, tie -> 0
  ASSERT_EQ(Where(0), 0);
  ASSERT_EQ(Where(1), 1);
  ASSERT_EQ(Where(2), 0);
  // Request 1 finishes: instance 1 is idle and empty.
  EXPECT_TRUE(Done(1, {Outcome(1, true, true)}, 0.0356).empty());
  // Request 0 is mid-block: instance 1 would run its step alone (l(32)) instead of with
  // request 2's recompute (l(388)), but its cache lives on 0.
  std::vector<Launch> out = Done(0, {Outcome(0)}, 0.0356);
  EXPECT_EQ(Where(0), 0);
  EXPECT_EQ(s_->Find(0)->migrations, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].instance, 0);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0, 2));
  EXPECT_EQ(out[0].tokens, 32 + 356);
  EXPECT_FALSE(out[0].batch[0].recompute);
  // Several more mid-block steps: still on 0.
  for (int i = 0; i < 3; ++i) {
    Done(0, {Outcome(0), Outcome(2)}, 0.1 + i * 0.01);
    EXPECT_EQ(Where(0), 0);
    EXPECT_EQ(Where(2), 0);
  }
  EXPECT_EQ(s_->stats().migrations, 0);
}

TEST_F(SchedulerTest, MigratesAtBlockBoundaryWhenStrictlyBetter) {
  Make("tediserve", 2);
  Arrive(Spec(0, 0));
  Arrive(Spec(1, 0));
  Arrive(Spec(2, 0));
  Done(1, {Outcome(1, true, true)}, 0.0356);
  Done(0, {Outcome(0)}, 0.0356);  // 0 and 2 now run together on 0
  // Request 0 finishes its block: its next step recomputes anyway. Staying costs l(356 + 32),
  // instance 1 runs it alone in l(356).
  std::vector<Launch> out = Done(0, {Outcome(0, /*block_done=*/true), Outcome(2)}, 0.08);
  EXPECT_EQ(Where(0), 1);
  EXPECT_EQ(Where(2), 0);  // mid-block
  EXPECT_EQ(s_->Find(0)->migrations, 1);
  EXPECT_EQ(s_->stats().migrations, 1);
  ASSERT_EQ(out.size(), 2u);
  const Launch* on1 = LaunchOn(out, 1);
  ASSERT_NE(on1, nullptr);
  EXPECT_THAT(BatchIds(*on1), ::testing::ElementsAre(0));
  EXPECT_TRUE(on1->batch[0].recompute);
  EXPECT_EQ(on1->tokens, 356);
  const Launch* on0 = LaunchOn(out, 0);
  ASSERT_NE(on0, nullptr);
  EXPECT_THAT(BatchIds(*on0), ::testing::ElementsAre(2));
}

TEST_F(SchedulerTest, BlockBoundaryStaysWhenNotStrictlyBetter) {
  Make("tediserve", 2);
  Arrive(Spec(0, 0));
  // Alone on 0 at a block boundary; instance 1 is idle too: equal, so no move.
  std::vector<Launch> out = Done(0, {Outcome(0, true)}, 0.0356);
  EXPECT_EQ(Where(0), 0);
  EXPECT_EQ(s_->stats().migrations, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].instance, 0);
}

class LeastLoadedTest : public SchedulerTest {
 protected:
  void Imbalance() {
    for (RequestId id = 0; id < 6; ++id) Arrive(Spec(id, 0));
    for (RequestId id = 0; id < 6; ++id) ASSERT_EQ(Where(id), id % 2) << id;
    Done(1, {Outcome(1, true, true)}, 0.0356);
    Done(1, {Outcome(3, true, true), Outcome(5, true, true)}, 0.1068);
    ASSERT_EQ(s_->live(), 3u);
  }
};

TEST_F(LeastLoadedTest, InfaasNeverMigrates) {
  Make("infaas", 2, [](PolicyOptions& o) { o.llumnix_margin_tokens = 100; });
  Imbalance();
  Done(0, {Outcome(0, true)}, 0.2);
  EXPECT_EQ(Where(0), 0);
  Done(0, {Outcome(0, true), Outcome(2, true), Outcome(4, true)}, 0.3);
  EXPECT_EQ(Where(0), 0);
  EXPECT_EQ(Where(2), 0);
  EXPECT_EQ(Where(4), 0);
  EXPECT_EQ(s_->stats().migrations, 0);
}

TEST_F(LeastLoadedTest, LlumnixMigratesAtBlockBoundaryAboveMargin) {
  Make("llumnix", 2, [](PolicyOptions& o) { o.llumnix_margin_tokens = 500; });
  Imbalance();
  // Mid-block: never.
  Done(0, {Outcome(0)}, 0.2);
  EXPECT_EQ(Where(0), 0);
  // At the boundary, imbalance 1068 > 500: request 0 moves; then 712 - 356 = 356 < 500,
  // so request 2 stays.
  std::vector<Launch> out = Done(0, {Outcome(0, true), Outcome(2, true), Outcome(4, true)}, 0.3);
  EXPECT_EQ(Where(0), 1);
  EXPECT_EQ(Where(2), 0);
  EXPECT_EQ(Where(4), 0);
  EXPECT_EQ(s_->stats().migrations, 1);
  ASSERT_NE(LaunchOn(out, 1), nullptr);
  EXPECT_THAT(BatchIds(*LaunchOn(out, 1)), ::testing::ElementsAre(0));
}

TEST_F(LeastLoadedTest, LlumnixStaysBelowMargin) {
  Make("llumnix", 2, [](PolicyOptions& o) { o.llumnix_margin_tokens = 1100; });
  Imbalance();
  Done(0, {Outcome(0, true)}, 0.2);
  EXPECT_EQ(Where(0), 0);
  EXPECT_EQ(s_->stats().migrations, 0);
}

TEST_F(SchedulerTest, InfaasSendsArrivalToLeastLoaded) {
  Make("infaas", 3);
  Arrive(Spec(0, 0, 10, /*prompt=*/900));  // 1156 tokens -> 0
  Arrive(Spec(1, 0));                       // -> 1
  Arrive(Spec(2, 0));                       // -> 2
  Arrive(Spec(3, 0));                       // loads 1156, 356, 356 -> 1
  EXPECT_EQ(Where(0), 0);
  EXPECT_EQ(Where(1), 1);
  EXPECT_EQ(Where(2), 2);
  EXPECT_EQ(Where(3), 1);
}

TEST_F(SchedulerTest, TokenBudgetCapsALaunch) {
  // INFaaS places regardless of the budget; the launch itself must respect it.
  Make("infaas", 1, [](PolicyOptions& o) { o.token_budget = 380; });
  Arrive(Spec(0, 0));
  EXPECT_TRUE(Arrive(Spec(1, 0)).empty());  // busy
  // Request 0's cache step (32) + request 1's recompute (356) = 388 > 380: 1 waits.
  std::vector<Launch> out = Done(0, {Outcome(0)}, 0.0356);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0));
  EXPECT_EQ(out[0].tokens, 32);
  EXPECT_FALSE(s_->Find(1)->in_flight);
  // Request 0 done: request 1 runs.
  out = Done(0, {Outcome(0, true, true)}, 0.05);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(1));
  EXPECT_EQ(out[0].tokens, 356);
}

TEST_F(SchedulerTest, StepLevelRequestWaitsUntilItFitsTheBudget) {
  Make("tediserve", 1, [](PolicyOptions& o) { o.token_budget = 380; });
  Arrive(Spec(0, 0));
  EXPECT_TRUE(Arrive(Spec(1, 0)).empty());
  EXPECT_EQ(Where(1), -1);
  EXPECT_EQ(s_->waiting(), 1u);
  std::vector<Launch> out = Done(0, {Outcome(0)}, 0.0356);  // 32 + 356 > 380
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0));
  EXPECT_EQ(s_->waiting(), 1u);
  out = Done(0, {Outcome(0, true, true)}, 0.05);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(1));
  EXPECT_EQ(s_->waiting(), 0u);
  EXPECT_EQ(Where(1), 0);
}

TEST_F(SchedulerTest, OversizedRequestRunsAloneOnEmptyInstance) {
  Make("tediserve", 1, [](PolicyOptions& o) { o.token_budget = 200; });
  std::vector<Launch> out = Arrive(Spec(0, 0));  // 356 > 200, but the instance is empty
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tokens, 356);
}

TEST_F(SchedulerTest, DoneRequestsLeave) {
  Make("tediserve", 1);
  Arrive(Spec(0, 0));
  Arrive(Spec(1, 0));
  ASSERT_EQ(s_->live(), 2u);
  std::vector<Launch> out = Done(0, {Outcome(0, true, true)}, 0.0356);
  EXPECT_EQ(s_->live(), 1u);
  EXPECT_EQ(s_->Find(0), nullptr);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(1));
  out = Done(0, {Outcome(1, true, true)}, 0.07);
  EXPECT_EQ(s_->live(), 0u);
  EXPECT_TRUE(out.empty());
  // A late outcome for a finished request is ignored.
  out = Done(0, {Outcome(1)}, 0.08);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s_->live(), 0u);
}

TEST_F(SchedulerTest, LastBlockDoneEndsTheRequest) {
  Make("tediserve", 1);
  Arrive(Spec(0, 0, 10, 100, /*output=*/64));  // 2 blocks
  Done(0, {Outcome(0, true)}, 0.1);
  ASSERT_NE(s_->Find(0), nullptr);
  EXPECT_EQ(s_->Find(0)->block, 1);
  std::vector<Launch> out = Done(0, {Outcome(0, true)}, 0.2);
  EXPECT_EQ(s_->Find(0), nullptr);
  EXPECT_TRUE(out.empty());
}

TEST_F(SchedulerTest, FixedPolicyUsesFixedThreshold) {
  Make("fixed", 1, [](PolicyOptions& o) { o.fixed_threshold = 0.7; });
  std::vector<Launch> out = Arrive(Spec(0, 0, /*slo=*/0.01));  // a tight SLO changes nothing
  ASSERT_EQ(out.size(), 1u);
  EXPECT_DOUBLE_EQ(out[0].batch[0].threshold, 0.7);
  out = Done(0, {Outcome(0)}, 0.05);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_DOUBLE_EQ(out[0].batch[0].threshold, 0.7);
  RequestSpec bounded = Spec(1, 0.06);
  bounded.min_threshold = 0.8;
  Arrive(bounded);
  EXPECT_DOUBLE_EQ(s_->Find(1)->threshold, 0.8);
}

TEST_F(SchedulerTest, SloAwareLowersThresholdForTightDeadline) {
  // Alone on an idle instance: recompute l(356) = 0.0356 s, cache l(32) = 0.01 s, 8 blocks.
  // est(0.9) = 8 x 0.0356 + 120 x 0.01 = 1.4848, est(0.8) = 1.2288, est(0.7) = 1.0048,
  // est(0.6) = 0.8448, est(0.5) = 0.5248.
  for (const char* policy : {"slo-aware", "tediserve"}) {
    SCOPED_TRACE(policy);
    Make(policy, 2);
    std::vector<Launch> out = Arrive(Spec(0, 0, /*slo=*/10));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_DOUBLE_EQ(out[0].batch[0].threshold, 0.9);
    out = Arrive(Spec(1, 0, /*slo=*/1.0));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_DOUBLE_EQ(out[0].batch[0].threshold, 0.6);
    out = Arrive(Spec(2, 0, /*slo=*/0.1));  // hopeless: the lowest
    EXPECT_DOUBLE_EQ(s_->Find(2)->threshold, 0.5);
  }
}

// Predicts steps per remaining block: 16, 12.8, 10, 8, 4 (the one-shot totals for O = 256
// at the start, but it sees progress).
class PerBlockEstimator : public StepEstimator {
 public:
  void Predict(const RequestState& r, std::span<const double>, std::span<double> out) override {
    const double per_block[] = {16, 12.8, 10, 8, 4};
    for (size_t k = 0; k < out.size(); ++k) out[k] = per_block[k] * (r.num_blocks - r.block);
  }
  int refresh_tokens() const override { return 0; }
  const char* name() const override { return "per-block"; }
};

TEST(SchedulerSloTest, SloAwareRaisesThresholdAgainWhenSlackGrows) {
  const LatencyProfile profile = LinearProfile();
  PerBlockEstimator estimator;
  auto made = Scheduler::Create(*PolicyOptions::Named("slo-aware"), &profile, &estimator, {{0, 1}});
  ASSERT_TRUE(made.ok());
  Scheduler& s = **made;
  std::vector<Launch> out;
  s.OnArrival(Spec(0, 0, /*slo=*/1.0), 0, &out);
  EXPECT_DOUBLE_EQ(s.Find(0)->threshold, 0.6);  // as with the one-shot numbers
  // 7 blocks done in 0.07 s: one block left, 16 steps at 0.9 = 0.0356 + 15 x 0.01 s fits the
  // remaining 0.93 s.
  for (int b = 0; b < 7; ++b) {
    const StepOutcome o = Outcome(0, true);
    s.OnStepDone(0, std::span<const StepOutcome>(&o, 1), 0.01 * (b + 1), &out);
  }
  EXPECT_EQ(s.Find(0)->block, 7);
  EXPECT_DOUBLE_EQ(s.Find(0)->predicted[0], 16);
  EXPECT_DOUBLE_EQ(s.Find(0)->threshold, 0.9);
}

// Counts batched calls: a step that finishes blocks of several requests refreshes them all
// in one call.
class CountingEstimator : public PerBlockEstimator {
 public:
  void PredictBatch(std::span<const RequestState* const> rs, std::span<const double> th,
                    std::span<double> out) override {
    ++calls;
    sizes.push_back(rs.size());
    StepEstimator::PredictBatch(rs, th, out);
  }
  int calls = 0;
  std::vector<size_t> sizes;
};

TEST(SchedulerSloTest, OneBatchedPredictionPerStep) {
  const LatencyProfile profile = LinearProfile();
  CountingEstimator estimator;
  auto made = Scheduler::Create(*PolicyOptions::Named("tediserve"), &profile, &estimator, {{0, 1}});
  ASSERT_TRUE(made.ok());
  Scheduler& s = **made;
  std::vector<Launch> out;
  for (RequestId id = 0; id < 3; ++id) s.OnArrival(Spec(id, 0, /*slo=*/10), 0, &out);
  const int before = estimator.calls;
  const StepOutcome o[] = {Outcome(0, true), Outcome(1, true), Outcome(2, false)};
  s.OnStepDone(0, o, 0.01, &out);
  EXPECT_EQ(estimator.calls, before + 1);
  EXPECT_EQ(estimator.sizes.back(), 2u);  // requests 0 and 1 finished a block; 2 did not
  EXPECT_DOUBLE_EQ(s.Find(0)->predicted[0], 16 * 7);
}

TEST(SchedulerSloTest, AsyncPredictionsGoOutAndComeBackWithStepsCountedOff) {
  const LatencyProfile profile = LinearProfile();
  CountingEstimator estimator;
  PolicyOptions o = *PolicyOptions::Named("tediserve");
  o.async_predictions = true;
  auto made = Scheduler::Create(o, &profile, &estimator, {{0, 1}});
  ASSERT_TRUE(made.ok());
  Scheduler& s = **made;
  std::vector<Launch> out;
  for (RequestId id = 0; id < 2; ++id) s.OnArrival(Spec(id, 0, /*slo=*/10), 0, &out);
  const int before = estimator.calls;
  const StepOutcome o1[] = {Outcome(0, true), Outcome(1, true)};
  s.OnStepDone(0, o1, 0.01, &out);
  EXPECT_EQ(estimator.calls, before);  // nothing predicted on the scheduling thread
  std::vector<RequestState> due = s.TakePredictionRequests();
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].block, 1);
  EXPECT_TRUE(s.TakePredictionRequests().empty());  // taken once
  EXPECT_TRUE(s.Find(0)->prediction_pending);
  // Meanwhile request 0 runs one more step; the answer (as of the snapshot) is 50 steps.
  const StepOutcome o2[] = {Outcome(0, false)};
  s.OnStepDone(0, o2, 0.02, &out);
  std::vector<double> pred(2 * o.thresholds.size(), 50.0);
  const RequestId ids[] = {0, 1};
  s.OnPredictions(ids, pred, 0.021);
  EXPECT_DOUBLE_EQ(s.Find(0)->predicted[0], 49);
  EXPECT_DOUBLE_EQ(s.Find(1)->predicted[0], 50);
  EXPECT_FALSE(s.Find(0)->prediction_pending);
  // Results for requests that left are ignored.
  const RequestId gone[] = {77};
  s.OnPredictions(gone, std::vector<double>(o.thresholds.size(), 3.0), 0.03);
  EXPECT_EQ(s.Find(77), nullptr);
}

TEST_F(SchedulerTest, CapsLowerUnderOverload) {
  for (const char* policy : {"caps-only", "tediserve"}) {
    SCOPED_TRACE(policy);
    // One instance: W = 2 s x 10000 tokens/s = 20000 tokens; ten requests need 36160 tokens
    // even at 0.5.
    Make(policy, 1);
    for (RequestId id = 0; id < 10; ++id) Arrive(Spec(id, 0, /*slo=*/2));
    std::vector<Launch> out;
    s_->OnTick(1.0, &out);  // past the debounce
    EXPECT_GE(s_->stats().load_control_runs, 2);
    EXPECT_LT(s_->MeanCap(), 0.9);
    EXPECT_DOUBLE_EQ(s_->MeanCap(), 0.5);
    // The next step of request 0 runs within its cap.
    out = Done(0, {Outcome(0)}, 1.01);
    ASSERT_EQ(out.size(), 1u);
    for (const StepCommand& c : out[0].batch) {
      if (c.id == 0) {
        EXPECT_DOUBLE_EQ(c.threshold, 0.5);
      }
    }
  }
}

TEST_F(SchedulerTest, CapsStayTopUnderLightLoad) {
  for (const char* policy : {"caps-only", "tediserve"}) {
    SCOPED_TRACE(policy);
    Make(policy, 1);
    Arrive(Spec(0, 0, /*slo=*/2));  // 6688 tokens <= 20000
    std::vector<Launch> out;
    s_->OnTick(1.0, &out);
    EXPECT_DOUBLE_EQ(s_->MeanCap(), 0.9);
    EXPECT_DOUBLE_EQ(s_->Find(0)->threshold, 0.9);
  }
}

TEST_F(SchedulerTest, CapsOnlyRunsAtTheCapNotTheSlo) {
  // W from a fixed 10 s window (the default, the mean live SLO, would shrink W to 1000).
  Make("caps-only", 1, [](PolicyOptions& o) {
    o.load_control_debounce = 0;
    o.capacity_slo = 10;
  });
  std::vector<Launch> out = Arrive(Spec(0, 0, /*slo=*/0.1));  // hopeless SLO, light load
  ASSERT_EQ(out.size(), 1u);
  EXPECT_DOUBLE_EQ(out[0].batch[0].threshold, 0.9);
}

TEST_F(SchedulerTest, LoadControlOrderPutsPriorityFirst) {
  // W = 1.7 s x 10000 = 17000 tokens. Walk order: 2 (priority 5), 0, 1. Request 2 gets
  // 0.9 (6688 + 2 x 3616 fits), request 0 gets 0.9 (6688 + 6688 + 3616 = 16992 fits),
  // request 1 what is left: 17000 - 13376 = 3624 -> 0.5.
  Make("caps-only", 1, [](PolicyOptions& o) {
    o.capacity_slo = 1.7;
    o.capacity_concurrency = 0;  // tau_d at full token-budget batches
  });
  Arrive(Spec(0, 0.000));
  Arrive(Spec(1, 0.001));
  RequestSpec vip = Spec(2, 0.002);
  vip.priority = 5;
  Arrive(vip);
  s_->RunLoadControl(0.01);
  EXPECT_DOUBLE_EQ(s_->Find(2)->cap, 0.9);
  EXPECT_DOUBLE_EQ(s_->Find(0)->cap, 0.9);
  EXPECT_DOUBLE_EQ(s_->Find(1)->cap, 0.5);
  EXPECT_NEAR(s_->CapacityTokens(1.7), 17000, 1e-6);
}

TEST_F(SchedulerTest, CapacityFromTheBlockPatternOfTheMeanRequest) {
  // tau_1 for 2 requests side by side doing the block pattern of the mean sequence (356):
  // one recompute step of 712 tokens (0.0712 s on the linear profile), then B / T_0.9 - 1
  // cache steps of 64 tokens (the 0.01 s floor each).
  Make("tediserve", 2, [](PolicyOptions& o) { o.capacity_concurrency = 2; });
  Arrive(Spec(0, 0.0));
  const double cache_steps = 32 / kTokensPerStep[0] - 1;
  const double tau = 2 * (356 + cache_steps * 32) / (0.0712 + cache_steps * 0.01);
  EXPECT_NEAR(s_->CapacityTokensPerSecond(1), tau, 1e-6 * tau);
  EXPECT_NEAR(s_->CapacityTokens(3.0), 3.0 * 2 * tau, 1e-6 * tau);  // two TP1 instances
  // Side by side beats alone: the per-step floor is shared.
  Make("tediserve", 2, [](PolicyOptions& o) { o.capacity_concurrency = 1; });
  Arrive(Spec(0, 0.0));
  EXPECT_LT(s_->CapacityTokensPerSecond(1), tau);
}

TEST_F(SchedulerTest, ProteusMovesToLowerThresholdsUnderOverload) {
  // Capacity 10000 tokens/s, budget 10000 / 1.05. Work per request at 0.9 .. 0.5 (8 blocks x
  // 356 + cache steps x 32): 6688, 5868.8, 5152, 4640, 3616 tokens. Two arrivals per second
  // need 13376 tokens/s at 0.9: over capacity. Target work 4761.9 per request lies between
  // 0.7 and 0.6; the best pair by accuracy is (0.7, 0.6) with 0.7's share
  // (4761.9 - 4640) / 512 = 0.2381.
  Make("proteus", 1);
  EXPECT_DOUBLE_EQ(s_->proteus_mix()[0], 1.0);
  for (RequestId id = 0; id < 20; ++id) Arrive(Spec(id, id * 0.5));
  std::vector<Launch> out;
  s_->OnTick(10.0, &out);
  const std::vector<double>& mix = s_->proteus_mix();
  ASSERT_EQ(mix.size(), 5u);
  EXPECT_LT(mix[0], 1.0);
  EXPECT_DOUBLE_EQ(mix[0], 0);
  EXPECT_DOUBLE_EQ(mix[1], 0);
  EXPECT_NEAR(mix[2], (10000 / 1.05 / 2 - 4640) / 512, 1e-9);
  EXPECT_NEAR(mix[3], 1 - (10000 / 1.05 / 2 - 4640) / 512, 1e-9);
  EXPECT_DOUBLE_EQ(mix[4], 0);
  EXPECT_NEAR(std::accumulate(mix.begin(), mix.end(), 0.0), 1.0, 1e-12);
  // The next arrivals draw from the mix and keep their threshold.
  for (RequestId id = 20; id < 40; ++id) {
    Arrive(Spec(id, 10 + (id - 20) * 0.01));
    const double c = s_->Find(id)->threshold;
    EXPECT_TRUE(c == 0.7 || c == 0.6) << c;
  }
}

TEST_F(SchedulerTest, ProteusKeepsTopThresholdUnderLightLoad) {
  Make("proteus", 1);
  for (RequestId id = 0; id < 5; ++id) Arrive(Spec(id, id * 2.0));  // 0.5/s x 6688 < 9524
  std::vector<Launch> out;
  s_->OnTick(10.0, &out);
  EXPECT_DOUBLE_EQ(s_->proteus_mix()[0], 1.0);
  Arrive(Spec(5, 10.5));
  EXPECT_DOUBLE_EQ(s_->Find(5)->threshold, 0.9);
}

TEST_F(SchedulerTest, ProteusRequestKeepsItsThreshold) {
  Make("proteus", 1);
  for (RequestId id = 0; id < 20; ++id) Arrive(Spec(id, id * 0.5));
  std::vector<Launch> out;
  s_->OnTick(10.0, &out);
  Arrive(Spec(20, 10.1));
  const double drawn = s_->Find(20)->threshold;
  // Drive request 20 through steps; its commands all carry the drawn threshold.
  // (It shares instance 0 with everyone; step through the whole batch each time.)
  Seconds now = 10.2;
  for (int i = 0; i < 5; ++i) {
    std::vector<StepOutcome> outcomes;
    for (RequestId id = 0; id <= 20; ++id) {
      if (s_->Find(id) != nullptr && s_->Find(id)->in_flight) outcomes.push_back(Outcome(id));
    }
    out = Done(0, outcomes, now += 0.5);
    for (const Launch& l : out) {
      for (const StepCommand& c : l.batch) {
        if (c.id == 20) {
          EXPECT_DOUBLE_EQ(c.threshold, drawn);
        }
      }
    }
  }
  EXPECT_DOUBLE_EQ(s_->Find(20)->threshold, drawn);
}

// A tiny event loop: arrivals, instances that finish a launch after l(tokens), and outcomes
// that unmask 2 / 4 / 8 tokens a step by threshold. Records every launch.
struct RunLog {
  std::vector<std::tuple<Seconds, InstanceId, int, std::vector<std::tuple<RequestId, double, bool>>>> launches;
  size_t live_at_end = 0;
  int64_t migrations = 0;
};

RunLog RunToCompletion(const std::string& policy, int num_requests, int num_instances, uint64_t seed,
                       int token_budget = 8192) {
  RunLog log;
  const LatencyProfile profile = LinearProfile();
  OneShotEstimator estimator(kTh, kTokensPerStep);
  StatusOr<PolicyOptions> o = PolicyOptions::Named(policy);
  EXPECT_TRUE(o.ok());
  o->tokens_per_step = kTokensPerStep;
  o->accuracy = kAccuracy;
  o->seed = seed;
  o->token_budget = token_budget;
  std::vector<InstanceInfo> inst;
  for (int i = 0; i < num_instances; ++i) inst.push_back({i, i % 2 == 0 ? 1 : 2});
  auto made = Scheduler::Create(*o, &profile, &estimator, inst);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  Scheduler& s = **made;

  std::vector<RequestSpec> arrivals;
  for (int i = 0; i < num_requests; ++i) {
    // Deterministic variety: prompts 50..450, outputs 32..256, SLOs 1..8 s.
    arrivals.push_back(Spec(i, i * 0.03, 1.0 + (i * 7) % 8, 50 + (i * 37) % 400, 32 * (1 + (i * 5) % 8)));
  }
  std::map<std::pair<Seconds, InstanceId>, Launch> running;  // by finish time
  auto take = [&](std::vector<Launch>& out, Seconds now) {
    for (Launch& l : out) {
      std::vector<std::tuple<RequestId, double, bool>> cmds;
      for (const StepCommand& c : l.batch) cmds.emplace_back(c.id, c.threshold, c.recompute);
      log.launches.emplace_back(now, l.instance, l.tokens, cmds);
      const int tp = l.instance % 2 == 0 ? 1 : 2;
      for (const auto& [key, busy] : running) {
        EXPECT_NE(key.second, l.instance) << "launch on a busy instance at " << now;
      }
      running[{now + profile.StepSeconds(tp, l.tokens), l.instance}] = std::move(l);
    }
    out.clear();
  };
  size_t next = 0;
  Seconds next_tick = 1.0;
  std::vector<Launch> out;
  for (int guard = 0; guard < 1000000; ++guard) {
    const Seconds t_arr = next < arrivals.size() ? arrivals[next].arrival : 1e300;
    const Seconds t_done = running.empty() ? 1e300 : running.begin()->first.first;
    if (t_arr == 1e300 && t_done == 1e300) break;
    if (next_tick <= std::min(t_arr, t_done)) {
      s.OnTick(next_tick, &out);
      take(out, next_tick);
      next_tick += 1.0;
      continue;
    }
    if (t_arr <= t_done) {
      s.OnArrival(arrivals[next], t_arr, &out);
      ++next;
      take(out, t_arr);
      continue;
    }
    auto it = running.begin();
    const Seconds now = it->first.first;
    const Launch l = std::move(it->second);
    running.erase(it);
    std::vector<StepOutcome> outcomes;
    for (const StepCommand& c : l.batch) {
      const RequestState* r = s.Find(c.id);
      EXPECT_NE(r, nullptr);
      if (r == nullptr) continue;
      const int per_step = c.threshold >= 0.85 ? 2 : c.threshold >= 0.65 ? 4 : 8;
      const int left = r->block_size - r->unmasked_in_block;
      const int k = std::min(per_step, left);
      const bool block_done = k == left;
      outcomes.push_back(Outcome(c.id, block_done, block_done && r->block + 1 == r->num_blocks, k));
    }
    s.OnStepDone(l.instance, outcomes, now, &out);
    take(out, now);
  }
  log.live_at_end = s.live();
  log.migrations = s.stats().migrations;
  return log;
}

TEST(SchedulerRunTest, SameInputsGiveSameLaunches) {
  for (const std::string& policy : PolicyOptions::Names()) {
    SCOPED_TRACE(policy);
    const RunLog a = RunToCompletion(policy, 60, 3, 7);
    const RunLog b = RunToCompletion(policy, 60, 3, 7);
    ASSERT_FALSE(a.launches.empty());
    EXPECT_EQ(a.launches, b.launches);
    EXPECT_EQ(a.live_at_end, 0u);  // everyone finished
  }
}

TEST(SchedulerRunTest, InvariantsOverAWholeRun) {
  for (const std::string& policy : PolicyOptions::Names()) {
    SCOPED_TRACE(policy);
    const int budget = 1024;
    const RunLog log = RunToCompletion(policy, 200, 4, 3, budget);
    EXPECT_EQ(log.live_at_end, 0u);
    std::map<RequestId, InstanceId> where;
    std::map<RequestId, double> proteus_threshold;
    std::map<RequestId, bool> in_flight;
    int64_t moves = 0;
    for (const auto& [now, instance, tokens, cmds] : log.launches) {
      if (cmds.size() > 1) {
        EXPECT_LE(tokens, budget);
      }
      for (const auto& [id, threshold, recompute] : cmds) {
        auto it = where.find(id);
        if (it != where.end() && it->second != instance) {
          ++moves;
          // A cached request moves only at a recompute step (block boundary).
          EXPECT_TRUE(recompute) << "request " << id << " moved mid-block at " << now;
          EXPECT_NE(policy, "infaas");
          EXPECT_NE(policy, "proteus");
        }
        where[id] = instance;
        if (policy == "proteus") {
          auto [p, inserted] = proteus_threshold.emplace(id, threshold);
          if (!inserted) {
            EXPECT_DOUBLE_EQ(p->second, threshold) << "request " << id;
          }
        }
        EXPECT_TRUE(threshold == 0.9 || threshold == 0.8 || threshold == 0.7 || threshold == 0.6 ||
                    threshold == 0.5)
            << threshold;
      }
    }
    EXPECT_EQ(moves, log.migrations);
  }
}

// Overloads a Proteus scheduler for one period (mix 0.2381 x 0.7 + 0.7619 x 0.6, see
// above), then returns the thresholds drawn by `n` arrivals in the next period.
std::vector<double> ProteusDraws(uint64_t seed, int n) {
  const LatencyProfile profile = LinearProfile();
  OneShotEstimator estimator(kTh, kTokensPerStep);
  PolicyOptions o = *PolicyOptions::Named("proteus");
  o.tokens_per_step = kTokensPerStep;
  o.accuracy = kAccuracy;
  o.seed = seed;
  auto made = Scheduler::Create(o, &profile, &estimator, {{0, 1}});
  EXPECT_TRUE(made.ok());
  Scheduler& s = **made;
  std::vector<Launch> out;
  for (RequestId id = 0; id < 20; ++id) s.OnArrival(Spec(id, id * 0.5), id * 0.5, &out);
  std::vector<double> drawn;
  for (RequestId id = 20; id < 20 + n; ++id) {
    const Seconds t = 10 + (id - 20) * (9.0 / n);
    s.OnArrival(Spec(id, t), t, &out);
    drawn.push_back(s.Find(id)->threshold);
  }
  return drawn;
}

TEST(SchedulerRunTest, ProteusDrawsFollowTheMixAndTheSeed) {
  const std::vector<double> a = ProteusDraws(1, 2000);
  EXPECT_EQ(a, ProteusDraws(1, 2000));
  EXPECT_NE(a, ProteusDraws(2, 2000));
  const double share_07 = std::count(a.begin(), a.end(), 0.7) / 2000.0;
  const double share_06 = std::count(a.begin(), a.end(), 0.6) / 2000.0;
  EXPECT_NEAR(share_07, 0.2381, 0.04);  // ~4 standard deviations
  EXPECT_NEAR(share_06 + share_07, 1.0, 1e-12);
}

class SchedulerCreateTest : public ::testing::Test {
 protected:
  Status CreateWith(const std::function<void(PolicyOptions&)>& tweak,
                    std::vector<InstanceInfo> instances = {{0, 1}}) {
    PolicyOptions o;
    if (tweak) tweak(o);
    auto s = Scheduler::Create(o, &profile_, &estimator_, std::move(instances));
    return s.ok() ? Status::Ok() : s.status();
  }
  LatencyProfile profile_ = LinearProfile();
  OneShotEstimator estimator_{kTh, kTokensPerStep};
};

TEST_F(SchedulerCreateTest, AcceptsDefaults) { EXPECT_TRUE(CreateWith(nullptr).ok()); }

TEST_F(SchedulerCreateTest, RejectsBadOptions) {
  auto expect_bad = [](const Status& s, const std::string& what) {
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(what));
  };
  expect_bad(CreateWith([](PolicyOptions& o) { o.thresholds.clear(); }), "thresholds");
  expect_bad(CreateWith([](PolicyOptions& o) { o.thresholds = {0.5, 0.9}; }), "descending");
  expect_bad(CreateWith([](PolicyOptions& o) { o.thresholds = {0.9, 0.9}; }), "descending");
  expect_bad(CreateWith([](PolicyOptions& o) { o.thresholds = {1.5, 0.9}; }), "(0, 1]");
  expect_bad(CreateWith([](PolicyOptions& o) { o.thresholds.assign(9, 0.5); }), "1 to 8");
  expect_bad(CreateWith([](PolicyOptions& o) { o.fixed_threshold = 0; }), "fixed_threshold");
  expect_bad(CreateWith([](PolicyOptions& o) { o.block_size = 0; }), "block_size");
  expect_bad(CreateWith([](PolicyOptions& o) { o.token_budget = 0; }), "token_budget");
  expect_bad(CreateWith([](PolicyOptions& o) { o.threshold = ThresholdKind::kProteus; }),
             "tokens_per_step and accuracy");
  expect_bad(CreateWith(nullptr, {{0, 4}}), "TP degree 4 is not in the latency profile linear");
  expect_bad(CreateWith(nullptr, {{0, 1}, {3, 2}, {0, 1}}), "instance id 0 appears twice");
  expect_bad(CreateWith(nullptr, {}), "no instances");

  PolicyOptions o;
  auto no_profile = Scheduler::Create(o, nullptr, &estimator_, {{0, 1}});
  EXPECT_FALSE(no_profile.ok());
}

TEST(PolicyOptionsTest, NamedPresets) {
  for (const std::string& n : PolicyOptions::Names()) {
    StatusOr<PolicyOptions> o = PolicyOptions::Named(n);
    ASSERT_TRUE(o.ok()) << n;
    EXPECT_EQ(o->name, n);
  }
  EXPECT_EQ(PolicyOptions::Named("infaas")->dispatch, DispatchKind::kLeastLoaded);
  EXPECT_EQ(PolicyOptions::Named("llumnix")->dispatch, DispatchKind::kLeastLoadedMigrate);
  EXPECT_EQ(PolicyOptions::Named("proteus")->threshold, ThresholdKind::kProteus);
  EXPECT_EQ(PolicyOptions::Named("tediserve")->threshold, ThresholdKind::kSloAwareWithCaps);
  EXPECT_EQ(PolicyOptions::Named("caps-only")->threshold, ThresholdKind::kCapsOnly);
  StatusOr<PolicyOptions> bad = PolicyOptions::Named("fastest");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown policy \"fastest\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("tediserve"));
}

}  // namespace
}  // namespace tediserve::policy
