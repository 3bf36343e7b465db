#include "policy/scheduler.h"

#include <algorithm>
#include <cmath>
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

using Launch = StepBatch;

// Adapters: each event must succeed; its step batches are appended to `out`.
void ArriveOn(Scheduler& s, const RequestSpec& spec, Seconds now, std::vector<Launch>* out) {
  Decisions d;
  Status st = s.OnArrival(spec, now, &d);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (auto& b : d.batches) out->push_back(std::move(b));
}
// The batch in flight on `inst` came back with these outcomes.
void StepDone(Scheduler& s, InstanceId inst, std::span<const StepOutcome> outcomes, Seconds now,
              std::vector<Launch>* out) {
  Decisions d;
  Status st = s.OnBatchDone(s.InFlightBatch(inst), outcomes, now, &d);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (auto& b : d.batches) out->push_back(std::move(b));
}
void StepDone(Scheduler& s, InstanceId inst, const std::vector<StepOutcome>& outcomes, Seconds now,
              std::vector<Launch>* out) {
  StepDone(s, inst, std::span<const StepOutcome>(outcomes), now, out);
}
void Tick(Scheduler& s, Seconds now, std::vector<Launch>* out) {
  Decisions d;
  ASSERT_TRUE(s.OnTick(now, &d).ok());
  for (auto& b : d.batches) out->push_back(std::move(b));
}

const Launch* LaunchOn(const std::vector<Launch>& out, InstanceId id) {
  for (const Launch& l : out) {
    if (l.instance == id) return &l;
  }
  return nullptr;
}

std::vector<RequestId> BatchIds(const Launch& l) {
  std::vector<RequestId> ids;
  for (const StepCommand& c : l.commands) ids.push_back(c.id);
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
    ArriveOn(*s_, spec, now < 0 ? spec.arrival : now, &out);
    return out;
  }
  std::vector<Launch> Done(InstanceId inst, std::vector<StepOutcome> outcomes, Seconds now) {
    std::vector<Launch> out;
    StepDone(*s_, inst, outcomes, now, &out);
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
  Make("tediserve-paper", 1);
  const std::vector<Launch> out = Arrive(Spec(0, 0));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].instance, 0);
  EXPECT_EQ(out[0].tokens, 356);
  ASSERT_EQ(out[0].commands.size(), 1u);
  EXPECT_EQ(out[0].commands[0].id, 0);
  EXPECT_TRUE(out[0].commands[0].recompute);
  EXPECT_DOUBLE_EQ(out[0].commands[0].threshold, 0.9);
  EXPECT_EQ(s_->live(), 1u);
  EXPECT_TRUE(s_->Find(0)->in_flight);
}

TEST_F(SchedulerTest, StepLevelSendsNewRequestToIdleInstance) {
  Make("tediserve-paper", 2);
  Arrive(Spec(0, 0));
  EXPECT_EQ(Where(0), 0);
  const std::vector<Launch> out = Arrive(Spec(1, 0.001));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].instance, 1);
  EXPECT_EQ(Where(1), 1);
}

TEST_F(SchedulerTest, StepLevelPicksEarliestCompletionAmongBusyInstances) {
  Make("tediserve-paper", 2);
  Arrive(Spec(0, 0));                      // instance 0: 356 tokens, busy until 0.0356
  Arrive(Spec(1, 0, 10, /*prompt=*/1000));  // instance 1: 1256 tokens, busy until 0.1256
  // Request 2 on 0 finishes its next step at 0.0356 + l(712) = 0.1068, on 1 at
  // 0.1256 + l(1612) = 0.2868.
  const std::vector<Launch> out = Arrive(Spec(2, 0));
  EXPECT_TRUE(out.empty());  // both busy
  EXPECT_EQ(Where(2), 0);
}

TEST_F(SchedulerTest, CachedRequestNeverMigratesMidBlock) {
  Make("tediserve-paper", 2);
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
  EXPECT_FALSE(out[0].commands[0].recompute);
  // Several more mid-block steps: still on 0.
  for (int i = 0; i < 3; ++i) {
    Done(0, {Outcome(0), Outcome(2)}, 0.1 + i * 0.01);
    EXPECT_EQ(Where(0), 0);
    EXPECT_EQ(Where(2), 0);
  }
  EXPECT_EQ(s_->stats().migrations, 0);
}

TEST_F(SchedulerTest, MigratesAtBlockBoundaryWhenStrictlyBetter) {
  Make("tediserve-paper", 2);
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
  EXPECT_TRUE(on1->commands[0].recompute);
  EXPECT_EQ(on1->tokens, 356);
  const Launch* on0 = LaunchOn(out, 0);
  ASSERT_NE(on0, nullptr);
  EXPECT_THAT(BatchIds(*on0), ::testing::ElementsAre(2));
}

TEST_F(SchedulerTest, BlockBoundaryStaysWhenNotStrictlyBetter) {
  Make("tediserve-paper", 2);
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
  Make("tediserve-paper", 1, [](PolicyOptions& o) { o.token_budget = 380; });
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
  Make("tediserve-paper", 1, [](PolicyOptions& o) { o.token_budget = 200; });
  std::vector<Launch> out = Arrive(Spec(0, 0));  // 356 > 200, but the instance is empty
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tokens, 356);
}

TEST_F(SchedulerTest, DoneRequestsLeave) {
  Make("tediserve-paper", 1);
  Arrive(Spec(0, 0));
  Arrive(Spec(1, 0));
  ASSERT_EQ(s_->live(), 2u);
  std::vector<Launch> out = Done(0, {Outcome(0, true, true)}, 0.0356);
  EXPECT_EQ(s_->live(), 1u);
  EXPECT_EQ(s_->Find(0), nullptr);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(1));
  const BatchId last = out[0].id;
  out = Done(0, {Outcome(1, true, true)}, 0.07);
  EXPECT_EQ(s_->live(), 0u);
  EXPECT_TRUE(out.empty());
  // A second result for a batch that came back is refused and changes nothing.
  Decisions d;
  const StepOutcome late[] = {Outcome(1)};
  const Status st = s_->OnBatchDone(last, late, 0.08, &d);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("not in flight"));
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(s_->live(), 0u);
}

TEST_F(SchedulerTest, LastBlockDoneEndsTheRequest) {
  Make("tediserve-paper", 1);
  Arrive(Spec(0, 0, 10, 100, /*output=*/64));  // 2 blocks
  Done(0, {Outcome(0, true)}, 0.1);
  ASSERT_NE(s_->Find(0), nullptr);
  EXPECT_EQ(s_->Find(0)->block, 1);
  std::vector<Launch> out = Done(0, {Outcome(0, true)}, 0.2);
  EXPECT_EQ(s_->Find(0), nullptr);
  EXPECT_TRUE(out.empty());
}

TEST_F(SchedulerTest, ABatchOfSeveralStepsComesBackAsOneResult) {
  Make("fixed", 1, [](PolicyOptions& o) { o.batch_steps = 3; });
  // P = 100, O = 64 (2 blocks of 32): a recompute step pushes 164 tokens, a cache step 32.
  std::vector<Launch> out = Arrive(Spec(0, 0, 10, 100, 64));
  Arrive(Spec(1, 0, 10, 100, 64));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].steps, 3);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0));
  // The first step's 164 tokens, then two predicted cache steps of 32 (0.01 s each at least).
  EXPECT_NEAR(out[0].expected_seconds, 0.0164 + 0.01 + 0.01, 1e-9);
  const BatchId first = out[0].id;

  // Bad results change nothing: more steps than the batch has, a step after the request
  // finished, a request not in the batch.
  auto refused = [&](std::vector<StepOutcome> o, const std::string& what) {
    Decisions d;
    const Status st = s_->OnBatchDone(first, o, 0.1, &d);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(st.message(), HasSubstr(what));
    EXPECT_TRUE(d.empty());
  };
  refused({Outcome(0), Outcome(0), Outcome(0), Outcome(0)}, "more than the batch's 3 steps");
  refused({Outcome(0, true, true), Outcome(0)}, "after it finished");
  refused({Outcome(0), Outcome(1)}, "not in the batch");
  EXPECT_EQ(s_->Find(0)->steps, 0);

  // Three steps: the block ends at the second, the third starts the next block (a recompute).
  const std::vector<StepOutcome> ran = {Outcome(0), Outcome(0, true), Outcome(0)};
  const Scheduler::RanWork w = s_->Ran(first, ran);
  EXPECT_EQ(w.steps, 3);
  EXPECT_EQ(w.tokens, 164 + 32 + 164);
  EXPECT_NEAR(w.profile_seconds, 0.0164 + 0.01 + 0.0164, 1e-9);
  out = Done(0, ran, 0.05);
  EXPECT_EQ(s_->LastBatchDone().tokens, w.tokens);
  const RequestState* r = s_->Find(0);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->steps, 3);
  EXPECT_EQ(r->block, 1);
  EXPECT_EQ(r->steps_in_block, 1);
  // The next batch holds both (the second waited for the instance), three steps again.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(r->batch, out[0].id);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0, 1));
  EXPECT_EQ(out[0].steps, 3);
  // A request that finishes within the batch stops; the other runs every step.
  out = Done(0, {Outcome(0), Outcome(1), Outcome(0, true, true), Outcome(1), Outcome(1)}, 0.1);
  EXPECT_EQ(s_->Find(0), nullptr);
  ASSERT_NE(s_->Find(1), nullptr);
  EXPECT_EQ(s_->Find(1)->steps, 3);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(1));
}

TEST_F(SchedulerTest, FixedPolicyUsesFixedThreshold) {
  Make("fixed", 1, [](PolicyOptions& o) { o.fixed_threshold = 0.7; });
  std::vector<Launch> out = Arrive(Spec(0, 0, /*slo=*/0.01));  // a tight SLO changes nothing
  ASSERT_EQ(out.size(), 1u);
  EXPECT_DOUBLE_EQ(out[0].commands[0].threshold, 0.7);
  out = Done(0, {Outcome(0)}, 0.05);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_DOUBLE_EQ(out[0].commands[0].threshold, 0.7);
  RequestSpec bounded = Spec(1, 0.06);
  bounded.min_threshold = 0.8;
  Arrive(bounded);
  EXPECT_DOUBLE_EQ(s_->Find(1)->threshold, 0.8);
}

TEST_F(SchedulerTest, SloAwareLowersThresholdForTightDeadline) {
  // Alone on an idle instance: recompute l(356) = 0.0356 s, cache l(32) = 0.01 s, 8 blocks.
  // est(0.9) = 8 x 0.0356 + 120 x 0.01 = 1.4848, est(0.8) = 1.2288, est(0.7) = 1.0048,
  // est(0.6) = 0.8448, est(0.5) = 0.5248.
  for (const char* policy : {"slo-aware", "tediserve-paper"}) {
    SCOPED_TRACE(policy);
    Make(policy, 2);
    std::vector<Launch> out = Arrive(Spec(0, 0, /*slo=*/10));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_DOUBLE_EQ(out[0].commands[0].threshold, 0.9);
    out = Arrive(Spec(1, 0, /*slo=*/1.0));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_DOUBLE_EQ(out[0].commands[0].threshold, 0.6);
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
  ArriveOn(s, Spec(0, 0, /*slo=*/1.0), 0, &out);
  EXPECT_DOUBLE_EQ(s.Find(0)->threshold, 0.6);  // as with the one-shot numbers
  // 7 blocks done in 0.07 s: one block left, 16 steps at 0.9 = 0.0356 + 15 x 0.01 s fits the
  // remaining 0.93 s.
  for (int b = 0; b < 7; ++b) {
    const StepOutcome o = Outcome(0, true);
    StepDone(s, 0, std::span<const StepOutcome>(&o, 1), 0.01 * (b + 1), &out);
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
  auto made = Scheduler::Create(*PolicyOptions::Named("tediserve-paper"), &profile, &estimator, {{0, 1}});
  ASSERT_TRUE(made.ok());
  Scheduler& s = **made;
  std::vector<Launch> out;
  for (RequestId id = 0; id < 3; ++id) ArriveOn(s, Spec(id, 0, /*slo=*/10), 0, &out);
  // Request 0 ran alone; the next batch holds all three.
  StepDone(s, 0, {Outcome(0, false)}, 0.005, &out);
  const int before = estimator.calls;
  const StepOutcome o[] = {Outcome(0, true), Outcome(1, true), Outcome(2, false)};
  StepDone(s, 0, o, 0.01, &out);
  EXPECT_EQ(estimator.calls, before + 1);
  EXPECT_EQ(estimator.sizes.back(), 2u);  // requests 0 and 1 finished a block; 2 did not
  EXPECT_DOUBLE_EQ(s.Find(0)->predicted[0], 16 * 7);
}

TEST(SchedulerSloTest, AsyncPredictionsGoOutAndComeBackWithStepsCountedOff) {
  const LatencyProfile profile = LinearProfile();
  CountingEstimator estimator;
  PolicyOptions o = *PolicyOptions::Named("tediserve-paper");
  o.async_predictions = true;
  auto made = Scheduler::Create(o, &profile, &estimator, {{0, 1}});
  ASSERT_TRUE(made.ok());
  Scheduler& s = **made;
  std::vector<Launch> out;
  for (RequestId id = 0; id < 2; ++id) ArriveOn(s, Spec(id, 0, /*slo=*/10), 0, &out);
  StepDone(s, 0, {Outcome(0, false)}, 0.005, &out);  // request 0 ran alone; then both
  const int before = estimator.calls;
  const StepOutcome o1[] = {Outcome(0, true), Outcome(1, true)};
  StepDone(s, 0, o1, 0.01, &out);
  EXPECT_EQ(estimator.calls, before);  // nothing predicted on the scheduling thread
  std::vector<RequestState> due = s.TakePredictionRequests();
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].block, 1);
  EXPECT_TRUE(s.TakePredictionRequests().empty());  // taken once
  EXPECT_TRUE(s.Find(0)->prediction_pending);
  // Meanwhile both run one more step; the answer (as of the snapshot) is 50 steps.
  const StepOutcome o2[] = {Outcome(0, false), Outcome(1, false)};
  StepDone(s, 0, o2, 0.02, &out);
  std::vector<double> pred(2 * o.thresholds.size(), 50.0);
  const RequestId ids[] = {0, 1};
  Decisions d;
  ASSERT_TRUE(s.OnPredictions(ids, pred, 0.021, &d).ok());
  EXPECT_DOUBLE_EQ(s.Find(0)->predicted[0], 49);
  EXPECT_DOUBLE_EQ(s.Find(1)->predicted[0], 49);
  EXPECT_FALSE(s.Find(0)->prediction_pending);
  // Results for requests that left are ignored.
  const RequestId gone[] = {77};
  ASSERT_TRUE(s.OnPredictions(gone, std::vector<double>(o.thresholds.size(), 3.0), 0.03, &d).ok());
  // A result of the wrong size is refused.
  EXPECT_EQ(s.OnPredictions(ids, std::vector<double>(3, 1.0), 0.04, &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Find(77), nullptr);
}

TEST_F(SchedulerTest, CapsLowerUnderOverload) {
  for (const char* policy : {"caps-only", "tediserve-paper"}) {
    SCOPED_TRACE(policy);
    // One instance: W = 2 s x 10000 tokens/s = 20000 tokens; ten requests need 36160 tokens
    // even at 0.5.
    Make(policy, 1);
    for (RequestId id = 0; id < 10; ++id) Arrive(Spec(id, 0, /*slo=*/2));
    std::vector<Launch> out;
    Tick(*s_, 1.0, &out);  // past the debounce
    EXPECT_GE(s_->stats().load_control_runs, 2);
    EXPECT_LT(s_->MeanCap(), 0.9);
    EXPECT_DOUBLE_EQ(s_->MeanCap(), 0.5);
    // The next step of request 0 runs within its cap.
    out = Done(0, {Outcome(0)}, 1.01);
    ASSERT_EQ(out.size(), 1u);
    for (const StepCommand& c : out[0].commands) {
      if (c.id == 0) {
        EXPECT_DOUBLE_EQ(c.threshold, 0.5);
      }
    }
  }
}

TEST_F(SchedulerTest, CapsStayTopUnderLightLoad) {
  for (const char* policy : {"caps-only", "tediserve-paper"}) {
    SCOPED_TRACE(policy);
    Make(policy, 1);
    Arrive(Spec(0, 0, /*slo=*/2));  // 6688 tokens <= 20000
    std::vector<Launch> out;
    Tick(*s_, 1.0, &out);
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
  EXPECT_DOUBLE_EQ(out[0].commands[0].threshold, 0.9);
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
  Make("tediserve-paper", 2, [](PolicyOptions& o) { o.capacity_concurrency = 2; });
  Arrive(Spec(0, 0.0));
  const double cache_steps = 32 / kTokensPerStep[0] - 1;
  const double tau = 2 * (356 + cache_steps * 32) / (0.0712 + cache_steps * 0.01);
  EXPECT_NEAR(s_->CapacityTokensPerSecond(1), tau, 1e-6 * tau);
  EXPECT_NEAR(s_->CapacityTokens(3.0), 3.0 * 2 * tau, 1e-6 * tau);  // two TP1 instances
  // Side by side beats alone: the per-step floor is shared.
  Make("tediserve-paper", 2, [](PolicyOptions& o) { o.capacity_concurrency = 1; });
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
  Tick(*s_, 10.0, &out);
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
  Tick(*s_, 10.0, &out);
  EXPECT_DOUBLE_EQ(s_->proteus_mix()[0], 1.0);
  Arrive(Spec(5, 10.5));
  EXPECT_DOUBLE_EQ(s_->Find(5)->threshold, 0.9);
}

TEST_F(SchedulerTest, ProteusRequestKeepsItsThreshold) {
  Make("proteus", 1);
  for (RequestId id = 0; id < 20; ++id) Arrive(Spec(id, id * 0.5));
  std::vector<Launch> out;
  Tick(*s_, 10.0, &out);
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
      for (const StepCommand& c : l.commands) {
        if (c.id == 20) {
          EXPECT_DOUBLE_EQ(c.threshold, drawn);
        }
      }
    }
  }
  EXPECT_DOUBLE_EQ(s_->Find(20)->threshold, drawn);
}

TEST_F(SchedulerTest, PlannedRequestsRunAtTheirPlanWhileTheyHaveSlack) {
  // The overload of ProteusMovesToLowerThresholdsUnderOverload: the plan mixes 0.7 and 0.6.
  // With a loose SLO Algorithm 1 would pick 0.9; the plan caps it.
  Make("tediserve", 1);
  for (RequestId id = 0; id < 20; ++id) Arrive(Spec(id, id * 0.5, /*slo=*/1000));
  EXPECT_DOUBLE_EQ(s_->Find(0)->cap, 0.9);  // the first period's plan: the top threshold
  EXPECT_DOUBLE_EQ(s_->Find(0)->threshold, 0.9);
  std::vector<Launch> out;
  Tick(*s_, 10.0, &out);
  int at_07 = 0, at_06 = 0;
  for (RequestId id = 20; id < 60; ++id) {
    Arrive(Spec(id, 10 + (id - 20) * 0.01, /*slo=*/1000));
    const RequestState* r = s_->Find(id);
    EXPECT_TRUE(r->cap == 0.7 || r->cap == 0.6) << r->cap;
    at_07 += r->cap == 0.7;
    at_06 += r->cap == 0.6;
  }
  EXPECT_GT(at_06, 0);
  // With 1000-s SLOs the SLO-relative headroom is 1.0003 (1.05 with Proteus' constant, which
  // planned 0.24 / 0.76): most of the mix is at 0.7.
  EXPECT_GT(at_07, at_06);
  // Every step the planned requests get runs at their plan.
  Seconds now = 10.5;
  int checked = 0;
  for (int i = 0; i < 8; ++i) {
    std::vector<StepOutcome> outcomes;
    for (RequestId id = 0; id < 60; ++id) {
      if (s_->Find(id) != nullptr && s_->Find(id)->in_flight) outcomes.push_back(Outcome(id));
    }
    out = Done(0, outcomes, now += 0.5);
    for (const Launch& l : out) {
      for (const StepCommand& c : l.commands) {
        if (c.id < 20) continue;
        EXPECT_DOUBLE_EQ(c.threshold, s_->Find(c.id)->cap) << c.id;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 40);
}

// The plan's latency cap (tediserve: plan_latency_z 2, plan_latency_miss_target 0.05): ten
// requests at light load (the token plan is all 0.9) run in 0.1-s steps, so 0.9's 128 passes
// take 12.8 s against 5-s SLOs. When they finish after their deadlines, the next period's plan
// is capped to what fits (at most 50 passes: 0.6 and 0.5 only); when the same requests finish
// in time (the engine unmasked faster than the offline estimate), the plan keeps 0.9.
TEST_F(SchedulerTest, PlanLatencyCapBindsOnlyAfterAPeriodOfMisses) {
  auto next_cap = [&](Seconds finish_at) {
    Make("tediserve", 1);
    for (RequestId id = 0; id < 10; ++id) Arrive(Spec(id, 0.0, /*slo=*/5));
    Seconds now = 0;
    for (int step = 0; step < 200; ++step) {
      std::vector<StepOutcome> outcomes;
      now += 0.1;
      for (RequestId id = 0; id < 10; ++id) {
        const RequestState* r = s_->Find(id);
        if (r != nullptr && r->in_flight) outcomes.push_back(Outcome(id, false, now >= finish_at));
      }
      if (outcomes.empty()) break;
      Done(0, outcomes, now);
    }
    for (RequestId id = 0; id < 10; ++id) EXPECT_EQ(s_->Find(id), nullptr) << "still live: " << id;
    std::vector<Launch> out;
    Tick(*s_, 10.0, &out);
    Arrive(Spec(10, 10.1, /*slo=*/5));
    return s_->Find(10)->cap;
  };
  EXPECT_LE(next_cap(/*finish_at=*/6.0), 0.6);  // all late
  EXPECT_DOUBLE_EQ(next_cap(/*finish_at=*/3.0), 0.9);  // all in time
}

TEST_F(SchedulerTest, PriorityRequestsKeepTheTopThresholdAndTheOthersPayForIt) {
  // The overload of PlannedRequestsRunAtTheirPlanWhileTheyHaveSlack, with every fourth
  // request a priority one: those are planned at 0.9, and the others' mix moves lower than
  // without priorities, since the priority work is reserved first.
  auto second_period_caps = [&](bool with_priority) {
    Make("tediserve", 1);
    for (RequestId id = 0; id < 20; ++id) {
      RequestSpec s = Spec(id, id * 0.5, /*slo=*/1000);
      s.priority = with_priority && id % 4 == 0;
      Arrive(s);
    }
    std::vector<Launch> out;
    Tick(*s_, 10.0, &out);
    std::vector<double> normal;
    for (RequestId id = 20; id < 60; ++id) {
      RequestSpec s = Spec(id, 10 + (id - 20) * 0.01, /*slo=*/1000);
      s.priority = with_priority && id % 4 == 0;
      Arrive(s);
      if (s.priority) {
        EXPECT_DOUBLE_EQ(s_->Find(id)->cap, 0.9) << id;
      } else {
        normal.push_back(s_->Find(id)->cap);
      }
    }
    double sum = 0;
    for (double c : normal) sum += c;
    return sum / normal.size();
  };
  const double plain = second_period_caps(false);
  const double with_priority = second_period_caps(true);
  EXPECT_LT(with_priority, plain - 0.02);
  // Proteus itself ignores priorities.
  Make("proteus", 1);
  RequestSpec s = Spec(0, 0.0, /*slo=*/1000);
  s.priority = 1;
  Arrive(s);
  EXPECT_DOUBLE_EQ(s_->Find(0)->threshold, 0.9);  // the first period's mix is all 0.9 anyway
}

TEST_F(SchedulerTest, PlannedRequestAtRiskGoesBelowItsPlan) {
  // Light load plans 0.9; a request whose SLO 0.9 cannot meet gets Algorithm 1's choice,
  // the same as the SLO-aware policy's for the same request and cluster.
  Make("slo-aware", 1);
  Arrive(Spec(0, 0.0, /*slo=*/1.0));
  const double rescue = s_->Find(0)->threshold;
  ASSERT_LT(rescue, 0.9);
  Make("tediserve", 1);
  Arrive(Spec(0, 0.0, /*slo=*/1.0));
  EXPECT_DOUBLE_EQ(s_->Find(0)->cap, 0.9);
  EXPECT_DOUBLE_EQ(s_->Find(0)->threshold, rescue);
}

TEST_F(SchedulerTest, PriorityRescueAssumesARequestOneSigmaSlower) {
  // Alone on an idle instance, 0.9 needs 8 x 0.0356 + 120 x 0.01 = 1.48 s, and 1.87 s with
  // 1.3x the steps; 0.8 with 1.3x needs 1.54 s. Under an SLO of 1.6 s tediserve lowers a
  // priority request to 0.8 when steps_cv is 0.3 (and only then); normal requests and the
  // paper's policy use the mean estimate and stay at 0.9.
  struct Case {
    std::string policy;
    double steps_cv;
    int priority;
    double want;
  };
  for (const Case& c : {Case{"tediserve", 0.3, 1, 0.8}, Case{"tediserve", 0.3, 0, 0.9},
                        Case{"tediserve", 0.0, 1, 0.9}, Case{"tediserve-paper", 0.3, 1, 0.9}}) {
    Make(c.policy, 1, [&](PolicyOptions& o) { o.steps_cv = c.steps_cv; });
    RequestSpec spec = Spec(0, 0.0, /*slo=*/1.6);
    spec.priority = c.priority;
    Arrive(spec);
    EXPECT_DOUBLE_EQ(s_->Find(0)->threshold, c.want) << c.policy << " cv " << c.steps_cv << " priority " << c.priority;
  }
}

TEST_F(SchedulerTest, WaitingRequestsGoByDeadlineAndLateOnesLast) {
  // One instance whose budget holds one request: 1 (lost by t = 2), 2 (deadline 100) and
  // 3 (deadline 50) wait behind 0. tediserve places 3, then 2, then the late 1; the paper's
  // policy goes by arrival.
  for (const std::string policy : {"tediserve", "tediserve-paper"}) {
    Make(policy, 1, [](PolicyOptions& o) { o.token_budget = 380; });
    Arrive(Spec(0, 0.0, /*slo=*/100));
    Arrive(Spec(1, 0.0, /*slo=*/1.0));
    Arrive(Spec(2, 0.01, /*slo=*/100));
    Arrive(Spec(3, 0.02, /*slo=*/50));
    ASSERT_EQ(s_->waiting(), 3u) << policy;
    std::vector<RequestId> order;
    RequestId running = 0;
    Seconds now = 2.0;
    for (int i = 0; i < 3; ++i) {
      const std::vector<Launch> out = Done(0, {Outcome(running, true, true)}, now += 0.1);
      ASSERT_EQ(out.size(), 1u);
      ASSERT_EQ(out[0].commands.size(), 1u);
      running = out[0].commands[0].id;
      order.push_back(running);
    }
    if (policy == "tediserve") {
      EXPECT_THAT(order, ::testing::ElementsAre(3, 2, 1));
    } else {
      EXPECT_THAT(order, ::testing::ElementsAre(1, 2, 3));
    }
  }
}

TEST_F(SchedulerTest, LateRequestLeavesItsInstanceAtABlockBoundaryForAnOnTimeOne) {
  // 0 (SLO 1 s) runs alone; 1 (SLO 100 s) waits for the budget. At 0's block boundary after
  // its deadline, tediserve sends 0 back to wait and runs 1; the paper's policy keeps 0.
  for (const std::string policy : {"tediserve", "tediserve-paper"}) {
    Make(policy, 1, [](PolicyOptions& o) { o.token_budget = 380; });
    Arrive(Spec(0, 0.0, /*slo=*/1.0));
    Arrive(Spec(1, 0.0, /*slo=*/100));
    ASSERT_EQ(Where(1), -1) << policy;
    const std::vector<Launch> out = Done(0, {Outcome(0, /*block_done=*/true)}, 2.0);
    ASSERT_EQ(out.size(), 1u);
    if (policy == "tediserve") {
      EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(1));
      EXPECT_EQ(Where(0), -1);
      EXPECT_EQ(s_->waiting(), 1u);
    } else {
      EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0));
      EXPECT_EQ(Where(1), -1);
    }
  }
}

TEST_F(SchedulerTest, LateResidentsRideOnlyOnWhatOnTimeOnesCanAfford) {
  // 0 (SLO 1 s) and 1 share one instance. After 0's deadline, its recompute step (356 tokens)
  // would double the step of 1 (l(356) = 35.6 ms, l(712) = 71.2 ms on this linear profile).
  // 1 at 0.9 has 128 steps to go at t = 2: with an SLO of 10 s it can afford
  // 8 s / 128 = 62.5 ms a step, so tediserve runs it alone and 0 again once 1 is done; with
  // 100 s (0.77 s a step) 0 rides along, as in the paper's policy whatever the slack.
  struct Case {
    std::string policy;
    double slo;
    bool together;
  };
  for (const Case& c : {Case{"tediserve", 10, false}, Case{"tediserve", 100, true}, Case{"tediserve-paper", 10, true}}) {
    Make(c.policy, 1);
    Arrive(Spec(0, 0.0, /*slo=*/1.0));
    Arrive(Spec(1, 0.01, c.slo));
    ASSERT_EQ(Where(1), 0) << c.policy;
    std::vector<Launch> out = Done(0, {Outcome(0, /*block_done=*/true)}, 2.0);
    ASSERT_EQ(out.size(), 1u);
    if (c.together) {
      EXPECT_THAT(BatchIds(out[0]), ::testing::UnorderedElementsAre(0, 1)) << c.policy << " SLO " << c.slo;
      continue;
    }
    EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(1));
    EXPECT_EQ(Where(0), 0);  // still resident: nothing waits for its place
    out = Done(0, {Outcome(1, true, true)}, 2.1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0));
  }
}

TEST_F(SchedulerTest, ABatchHoldsOnlyRequestsThatCanKeepItsPace) {
  // Three requests (held at 0.9: 128 steps predicted, each recompute step 356 tokens) with
  // an SLO of 11.5 s: a pace of about 89 ms a step. Once 0's first block is done, all three
  // push a recompute step: two together take 71.2 ms, three 106.8 ms. tediserve batches 0
  // and 1 (2 waits: with it no one would keep the pace); the paper's policy batches all three.
  for (const std::string policy : {"tediserve", "tediserve-paper"}) {
    Make(policy, 1);
    for (RequestId id = 0; id < 3; ++id) {
      RequestSpec spec = Spec(id, 0.001 * id, /*slo=*/11.5);
      spec.min_threshold = spec.max_threshold = 0.9;
      Arrive(spec);
    }
    ASSERT_EQ(Where(2), 0) << policy;
    const std::vector<Launch> out = Done(0, {Outcome(0, /*block_done=*/true)}, 0.04);
    ASSERT_EQ(out.size(), 1u);
    if (policy == "tediserve") {
      EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0, 1));
      EXPECT_EQ(Where(2), 0);  // still resident, not late: it joins when the pace allows
      EXPECT_FALSE(s_->Find(2)->late);
    } else {
      EXPECT_THAT(BatchIds(out[0]), ::testing::ElementsAre(0, 1, 2));
    }
  }
}

TEST_F(SchedulerTest, StepTimesFollowWhatTheInstanceMeasures) {
  // Every step of request 0 (SLO 1000 s) takes twice the profile's time. tediserve's running
  // mean moves toward 2 (weight 0.05: 1 - 0.95^40 = 87% of the way after 40 steps) and prices
  // the next step so; the paper's policy keeps the profile. A step that takes the profile's
  // time exactly leaves the scale at 1.
  for (const std::string policy : {"tediserve", "tediserve-paper"}) {
    Make(policy, 2);
    std::vector<Launch> out = Arrive(Spec(0, 0.0, /*slo=*/1000));
    ASSERT_EQ(out.size(), 1u);
    Seconds now = 0;
    for (int i = 0; i < 40; ++i) {
      now += 2 * out[0].expected_seconds;
      out = Done(out[0].instance, {Outcome(0)}, now);
      ASSERT_EQ(out.size(), 1u);
    }
    const double scale = s_->StepScale(out[0].instance);
    if (policy == "tediserve") {
      EXPECT_NEAR(scale, 2 - std::pow(0.95, 40), 1e-9);
    } else {
      EXPECT_EQ(scale, 1.0);
    }
    EXPECT_EQ(s_->StepScale(1 - out[0].instance), 1.0);  // the other instance ran nothing
    EXPECT_EQ(s_->StepScale(99), 1.0);
  }
  Make("tediserve", 1);
  std::vector<Launch> out = Arrive(Spec(0, 0.0, /*slo=*/1000));
  out = Done(0, {Outcome(0)}, out[0].expected_seconds);
  EXPECT_EQ(s_->StepScale(0), 1.0);
  // A machine 6 x slower than the profile: one step counts at most 4 x, or twice the scale
  // once that is more, so a stalled step cannot throw the scale far but a slow machine is
  // followed all the way.
  Seconds now = 1;
  for (int i = 0; i < 200; ++i) {
    now += 6 * out[0].expected_seconds;
    out = Done(0, {Outcome(0)}, now);
    ASSERT_EQ(out.size(), 1u);
  }
  EXPECT_NEAR(s_->StepScale(0), 6.0, 0.01);
  now += 1000;  // a step stalled for 1000 s
  out = Done(0, {Outcome(0)}, now);
  EXPECT_NEAR(s_->StepScale(0), 6.0 + 0.05 * (12.0 - 6.0), 0.01);
}

// A tiny event loop: arrivals, instances that finish a launch after l(tokens), and outcomes
// that unmask 2 / 4 / 8 tokens a step by threshold. Records every launch.
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
  for (RequestId id = 0; id < 20; ++id) ArriveOn(s, Spec(id, id * 0.5), id * 0.5, &out);
  std::vector<double> drawn;
  for (RequestId id = 20; id < 20 + n; ++id) {
    const Seconds t = 10 + (id - 20) * (9.0 / n);
    ArriveOn(s, Spec(id, t), t, &out);
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
  expect_bad(CreateWith(nullptr, {{0, 4}}), "TP degree 4 of instance 0 is not in the latency profile linear");
  expect_bad(CreateWith([](PolicyOptions& o) { o.max_step_failures = 0; }), "max_step_failures");
  expect_bad(CreateWith([](PolicyOptions& o) { o.batch_steps = 0; }), "batch_steps");
  expect_bad(CreateWith([](PolicyOptions& o) { o.batch_steps = kMaxBatchSteps + 1; }), "batch_steps");
  expect_bad(CreateWith([](PolicyOptions& o) { o.proteus_change_z = -1; }), "proteus_change_z");
  expect_bad(CreateWith([](PolicyOptions& o) { o.proteus_window = 0; }), "proteus_window");
  expect_bad(CreateWith([](PolicyOptions& o) { o.plan_latency_z = -1; }), "plan_latency_z");
  expect_bad(CreateWith([](PolicyOptions& o) { o.plan_latency_z = std::nan(""); }), "plan_latency_z");
  expect_bad(CreateWith([](PolicyOptions& o) { o.plan_latency_miss_target = 1.5; }), "plan_latency_miss_target");
  expect_bad(CreateWith([](PolicyOptions& o) { o.plan_latency_miss_target = std::nan(""); }),
             "plan_latency_miss_target");
  expect_bad(CreateWith([](PolicyOptions& o) { o.proteus_headroom_slo_ratio = -0.1; }), "proteus_headroom_slo_ratio");
  expect_bad(CreateWith([](PolicyOptions& o) { o.proteus_headroom_slo_ratio = std::nan(""); }), "proteus_headroom_slo_ratio");
  expect_bad(CreateWith([](PolicyOptions& o) { o.value_margin = -0.5; }), "value_margin");
  const Status twice = CreateWith(nullptr, {{0, 1}, {3, 2}, {0, 1}});
  EXPECT_EQ(twice.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(twice.message(), HasSubstr("instance id 0 is already in the cluster"));
  // A cluster may start empty (a runtime whose workers have not joined yet).
  EXPECT_TRUE(CreateWith(nullptr, {}).ok());

  PolicyOptions o;
  auto no_profile = Scheduler::Create(o, nullptr, &estimator_, {{0, 1}});
  EXPECT_FALSE(no_profile.ok());
}

// ---- Cluster events: instances joining, draining, failing; lost batches; cancellation. ----

class ClusterEventTest : public SchedulerTest {
 protected:
  // Runs the in-flight batch of `inst` to completion: every request unmasks 2 tokens.
  Decisions Complete(InstanceId inst, Seconds now) {
    Decisions d;
    std::vector<StepOutcome> outcomes;
    const BatchId b = s_->InFlightBatch(inst);
    for (const RequestId id : s_->LiveIds()) {
      const RequestState* r = s_->Find(id);
      if (r->batch == b && r->in_flight) outcomes.push_back(Outcome(id));
    }
    const Status st = s_->OnBatchDone(b, outcomes, now, &d);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return d;
  }
};

TEST_F(ClusterEventTest, BadEventsAreErrorsAndChangeNothing) {
  Make("tediserve-paper", 2);
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  ASSERT_EQ(d.batches.size(), 1u);
  const BatchId b = d.batches[0].id;
  d.clear();
  auto expect = [&](const Status& st, StatusCode code, const std::string& what) {
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr(what));
    EXPECT_TRUE(d.empty());
  };
  expect(s_->OnArrival(Spec(0, 0.1), 0.1, &d), StatusCode::kAlreadyExists, "already live");
  expect(s_->OnArrival(Spec(1, 0.1, /*slo=*/0), 0.1, &d), StatusCode::kInvalidArgument, "slo");
  expect(s_->OnArrival(Spec(1, 0.1, 10, 100, 0), 0.1, &d), StatusCode::kInvalidArgument, "lengths");
  expect(s_->OnArrival(Spec(1, 0.1, 10, 100, 33), 0.1, &d), StatusCode::kInvalidArgument, "multiple of the block size");
  expect(s_->OnInstanceDraining(9, 0.1, &d), StatusCode::kNotFound, "instance 9");
  expect(s_->OnInstanceRemoved(9, 0.1, &d), StatusCode::kNotFound, "instance 9");
  expect(s_->OnInstanceAdded({1, 1}, 0.1, &d), StatusCode::kAlreadyExists, "instance id 1");
  expect(s_->OnInstanceAdded({5, 8}, 0.1, &d), StatusCode::kInvalidArgument, "TP degree 8");
  expect(s_->OnCancel(42, 0.1, &d), StatusCode::kNotFound, "request 42");
  expect(s_->OnBatchDone(b + 100, {}, 0.1, &d), StatusCode::kInvalidArgument, "never launched");
  expect(s_->OnBatchFailed(b + 100, 0.1, &d), StatusCode::kInvalidArgument, "never launched");
  const StepOutcome stranger[] = {Outcome(0), Outcome(7)};
  expect(s_->OnBatchDone(b, stranger, 0.1, &d), StatusCode::kInvalidArgument, "request 7 is not in the batch");
  const StepOutcome twice[] = {Outcome(0), Outcome(0)};
  expect(s_->OnBatchDone(b, twice, 0.1, &d), StatusCode::kInvalidArgument, "reported twice");
  expect(s_->OnBatchDone(b, {}, 0.1, &d), StatusCode::kInvalidArgument, "covers 0 of its 1");
  const StepOutcome negative[] = {Outcome(0, false, false, -1)};
  expect(s_->OnBatchDone(b, negative, 0.1, &d), StatusCode::kInvalidArgument, "negative");
  // None of that touched the request or its batch: the real result is still taken.
  EXPECT_EQ(s_->Find(0)->steps, 0);
  EXPECT_EQ(s_->InFlightBatch(0), b);
  const StepOutcome ok[] = {Outcome(0)};
  EXPECT_TRUE(s_->OnBatchDone(b, ok, 0.1, &d).ok());
  EXPECT_EQ(s_->Find(0)->steps, 1);
}

TEST_F(ClusterEventTest, ResultOfALostBatchIsRefused) {
  Make("tediserve-paper", 2);
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  const BatchId b = d.batches.at(0).id;
  const InstanceId where = d.batches[0].instance;
  d.clear();
  ASSERT_TRUE(s_->OnInstanceRemoved(where, 0.01, &d).ok());  // the worker died mid-step
  const StepOutcome late[] = {Outcome(0)};
  Decisions d2;
  const Status st = s_->OnBatchDone(b, late, 0.02, &d2);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("lost with its instance"));
  EXPECT_EQ(s_->Find(0)->steps, 0);  // the lost step did not count
  EXPECT_EQ(s_->Find(0)->failures, 1);
}

TEST_F(ClusterEventTest, RequestWhoseInstanceFailedMidBlockRecomputesNext) {
  Make("tediserve-paper", 2);
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  const InstanceId first = d.batches.at(0).instance;
  d = Complete(first, 0.04);  // one step into block 0: next is a cache step on `first`
  ASSERT_EQ(d.batches.size(), 1u);
  EXPECT_FALSE(d.batches[0].commands[0].recompute);
  EXPECT_EQ(s_->Find(0)->steps_in_block, 1);
  d.clear();
  ASSERT_TRUE(s_->OnInstanceRemoved(first, 0.05, &d).ok());
  // Its cache died with the instance: the next step, elsewhere, pushes the whole sequence.
  ASSERT_EQ(d.batches.size(), 1u);
  EXPECT_NE(d.batches[0].instance, first);
  ASSERT_EQ(d.batches[0].commands.size(), 1u);
  EXPECT_TRUE(d.batches[0].commands[0].recompute);
  EXPECT_EQ(d.batches[0].tokens, 356);
  EXPECT_EQ(s_->Find(0)->steps_in_block, 1);  // progress is kept
  const InstanceId second = d.batches[0].instance;
  d = Complete(second, 0.09);
  ASSERT_EQ(d.batches.size(), 1u);
  EXPECT_FALSE(d.batches[0].commands[0].recompute);  // the cache is back
}

TEST_F(ClusterEventTest, FailedBatchKeepsPlaceButRecomputes) {
  Make("tediserve-paper", 1);
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  d = Complete(0, 0.04);
  const BatchId b = d.batches.at(0).id;
  d.clear();
  ASSERT_TRUE(s_->OnBatchFailed(b, 0.05, &d).ok());
  ASSERT_EQ(d.batches.size(), 1u);
  EXPECT_TRUE(d.batches[0].commands[0].recompute);
  EXPECT_EQ(s_->stats().lost_steps, 1);
  // A result for the failed batch is refused.
  const StepOutcome late[] = {Outcome(0)};
  EXPECT_EQ(s_->OnBatchDone(b, late, 0.06, &d).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ClusterEventTest, TooManyFailuresAbortTheRequestWithAReason) {
  Make("tediserve-paper", 1, [](PolicyOptions& o) { o.max_step_failures = 2; });
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  ASSERT_TRUE(s_->OnBatchFailed(d.batches.at(0).id, 0.01, &d).ok());
  EXPECT_TRUE(d.ended.empty());
  ASSERT_TRUE(s_->OnBatchFailed(d.batches.at(1).id, 0.02, &d).ok());
  ASSERT_EQ(d.ended.size(), 1u);
  EXPECT_EQ(d.ended[0].id, 0);
  EXPECT_EQ(d.ended[0].kind, EndKind::kAborted);
  EXPECT_THAT(d.ended[0].reason, HasSubstr("lost 2 times"));
  EXPECT_EQ(s_->live(), 0u);
}

TEST_F(ClusterEventTest, DrainingInstanceTakesNoNewWorkAndReportsIdleOnce) {
  Make("tediserve-paper", 2);
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  const InstanceId busy = d.batches.at(0).instance;
  const InstanceId other = 1 - busy;
  d.clear();
  ASSERT_TRUE(s_->OnInstanceDraining(busy, 0.01, &d).ok());
  EXPECT_TRUE(d.drained.empty());  // still running a step
  // A newcomer goes to the other instance even though the draining one would be faster.
  ASSERT_TRUE(s_->OnArrival(Spec(1, 0.01), 0.01, &d).ok());
  EXPECT_EQ(Where(1), other);
  // Request 0 is mid-block: it stays on the draining instance until its block ends.
  d = Complete(busy, 0.04);
  EXPECT_EQ(Where(0), busy);
  EXPECT_TRUE(d.drained.empty());
  // The block ends: request 0 leaves, and the instance is reported drained, once.
  std::vector<StepOutcome> done{Outcome(0, /*block_done=*/true, false, 30)};
  d.clear();
  ASSERT_TRUE(s_->OnBatchDone(s_->InFlightBatch(busy), done, 0.08, &d).ok());
  EXPECT_EQ(Where(0), other);
  ASSERT_EQ(d.drained.size(), 1u);
  EXPECT_EQ(d.drained[0], busy);
  d.clear();
  ASSERT_TRUE(s_->OnTick(0.09, &d).ok());
  EXPECT_TRUE(d.drained.empty());
  // Stopped and added back, it takes work again.
  ASSERT_TRUE(s_->OnInstanceRemoved(busy, 0.1, &d).ok());
  ASSERT_TRUE(s_->OnInstanceAdded({busy, 1}, 0.2, &d).ok());
  EXPECT_EQ(s_->accepting_instances(), 2u);
}

TEST_F(ClusterEventTest, RequestsWaitWhenNoInstanceAcceptsAndRunWhenOneJoins) {
  for (const std::string policy : {"tediserve-paper", "infaas"}) {
    SCOPED_TRACE(policy);
    Make(policy, 1);
    Decisions d;
    ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
    ASSERT_TRUE(s_->OnInstanceRemoved(0, 0.01, &d).ok());
    d.clear();
    ASSERT_TRUE(s_->OnArrival(Spec(1, 0.02), 0.02, &d).ok());
    EXPECT_TRUE(d.batches.empty());
    EXPECT_EQ(s_->waiting(), 2u);
    ASSERT_TRUE(s_->OnInstanceAdded({3, 1}, 0.5, &d).ok());
    ASSERT_EQ(d.batches.size(), 1u);
    EXPECT_EQ(d.batches[0].instance, 3);
    EXPECT_EQ(s_->waiting(), 0u);
  }
}

TEST_F(ClusterEventTest, CancelledRequestLeavesAndItsBatchMayOmitIt) {
  Make("tediserve-paper", 1);
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  ASSERT_TRUE(s_->OnArrival(Spec(1, 0), 0, &d).ok());
  d = Complete(0, 0.04);  // now 0 and 1 run together
  const BatchId b = d.batches.at(0).id;
  ASSERT_EQ(d.batches[0].commands.size(), 2u);
  d.clear();
  ASSERT_TRUE(s_->OnCancel(1, 0.05, &d).ok());
  ASSERT_EQ(d.ended.size(), 1u);
  EXPECT_EQ(d.ended[0].kind, EndKind::kCancelled);
  EXPECT_EQ(d.ended[0].code, StatusCode::kCancelled);
  EXPECT_EQ(s_->Find(1), nullptr);
  EXPECT_EQ(s_->OnCancel(1, 0.05, &d).code(), StatusCode::kNotFound);
  d.clear();
  const StepOutcome only0[] = {Outcome(0)};
  ASSERT_TRUE(s_->OnBatchDone(b, only0, 0.08, &d).ok());
  ASSERT_EQ(d.batches.size(), 1u);
  EXPECT_THAT(BatchIds(d.batches[0]), ::testing::ElementsAre(0));
}

TEST_F(ClusterEventTest, AdmissionLimitRejectsWithResourceExhausted) {
  Make("tediserve-paper", 1, [](PolicyOptions& o) { o.max_live_requests = 1; });
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0), 0, &d).ok());
  ASSERT_TRUE(s_->OnArrival(Spec(1, 0), 0, &d).ok());
  ASSERT_EQ(d.ended.size(), 1u);
  EXPECT_EQ(d.ended[0].id, 1);
  EXPECT_EQ(d.ended[0].kind, EndKind::kRejected);
  EXPECT_EQ(d.ended[0].code, StatusCode::kResourceExhausted);
  EXPECT_EQ(s_->live(), 1u);
}

TEST_F(ClusterEventTest, NextWakeupIsTheDebouncedLoadControlOrTheProteusPeriod) {
  Make("fixed", 1);
  EXPECT_EQ(s_->NextWakeup(), kNever);
  Make("tediserve-paper", 1);
  Decisions d;
  ASSERT_TRUE(s_->OnArrival(Spec(0, 0.2), 0.2, &d).ok());  // load control runs now
  EXPECT_EQ(s_->NextWakeup(), kNever);
  ASSERT_TRUE(s_->OnArrival(Spec(1, 0.5), 0.5, &d).ok());  // held by the 1 s debounce
  EXPECT_DOUBLE_EQ(s_->NextWakeup(), 1.2);
  ASSERT_TRUE(s_->OnTick(1.2, &d).ok());
  EXPECT_EQ(s_->NextWakeup(), kNever);
  Make("proteus", 1);
  EXPECT_DOUBLE_EQ(s_->NextWakeup(), 10.0);
}

TEST_F(SchedulerTest, ProteusDrawRespectsCleanedBounds) {
  // Bounds given the wrong way round are cleaned to [0.9, 0.9]; every draw must honour them
  // (the raw bounds would have clamped to 0.5).
  Make("proteus", 1);
  for (RequestId id = 0; id < 60; ++id) {
    RequestSpec spec = Spec(id, id * 0.01);
    spec.min_threshold = 0.9;
    spec.max_threshold = 0.5;
    Arrive(spec);
    EXPECT_DOUBLE_EQ(s_->Find(id)->threshold, 0.9) << id;
  }
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
  EXPECT_EQ(PolicyOptions::Named("tediserve")->threshold, ThresholdKind::kPlannedRescue);
  EXPECT_EQ(PolicyOptions::Named("tediserve")->dispatch, DispatchKind::kStepLevel);
  EXPECT_TRUE(PolicyOptions::Named("tediserve")->defer_late);
  EXPECT_FALSE(PolicyOptions::Named("tediserve-paper")->defer_late);
  EXPECT_EQ(PolicyOptions::Named("tediserve-paper")->threshold, ThresholdKind::kSloAwareWithCaps);
  EXPECT_EQ(PolicyOptions::Named("caps-only")->threshold, ThresholdKind::kCapsOnly);
  StatusOr<PolicyOptions> bad = PolicyOptions::Named("fastest");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown policy \"fastest\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("tediserve-paper"));
}

}  // namespace
}  // namespace tediserve::policy
