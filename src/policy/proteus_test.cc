#include "policy/proteus.h"

#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace tediserve::policy {
namespace {

// P = 100, O = 256, B = 32, 8 blocks: steps at 0.9 .. 0.5 are 128, 100, 80, 64, 32, so a
// request's work is 8 x 356 + (steps - 8) x 32 = 6688, 5792, 5152, 4640, 3616 tokens.
ProteusMix::Options MakeOptions(std::vector<double> accuracy, bool most_correct) {
  ProteusMix::Options o;
  o.thresholds = {0.9, 0.8, 0.7, 0.6, 0.5};
  o.tokens_per_step = {2, 2.56, 3.2, 4, 8};
  o.accuracy = std::move(accuracy);
  o.period = 10;
  o.headroom = 1.0;
  o.smoothing = 1.0;
  o.most_correct = most_correct;
  return o;
}

RequestSpec Spec(RequestId id) {
  RequestSpec s;
  s.id = id;
  s.prompt_len = 100;
  s.output_len = 256;
  return s;
}

// Two arrivals per second for one period, then the period closes at `capacity` tokens/s.
std::vector<double> MixAfterOnePeriod(ProteusMix& p, double capacity) {
  for (RequestId id = 0; id < 20; ++id) p.OnArrival(Spec(id), 8, 0, 1);
  p.AdvanceTo(10.0, capacity);
  return p.mix();
}

const std::vector<double> kConcave = {0.80, 0.79, 0.78, 0.75, 0.55};

// With headroom_slo_ratio r the headroom is 1 + r x period / the arrivals' mean SLO: the
// same capacity (10600 tokens/s, 2 requests/s) plans 0.7-0.6 for 10-s SLOs (headroom 1.05,
// budget 10095 < 0.7's 10304) and 0.8-0.7 for 50-s SLOs (headroom 1.01, budget 10495).
TEST(ProteusMixTest, HeadroomShrinksAsTheSlosGrowAgainstThePeriod) {
  for (double slo : {10.0, 50.0}) {
    ProteusMix::Options o = MakeOptions(kConcave, false);
    o.headroom = 1.5;  // the most the ratio may reserve: above both
    o.headroom_slo_ratio = 0.05;
    ProteusMix p(o);
    for (RequestId id = 0; id < 20; ++id) {
      RequestSpec s = Spec(id);
      s.slo = slo;
      p.OnArrival(s, 8, 0, 1);
    }
    p.AdvanceTo(10.0, 10600);
    const double target = 10600 / (1 + 0.05 * 10 / slo) / 2;
    if (slo == 10.0) {
      EXPECT_NEAR(p.mix()[2], (target - 4640) / 512, 1e-9);
      EXPECT_NEAR(p.mix()[3], 1 - (target - 4640) / 512, 1e-9);
    } else {
      EXPECT_NEAR(p.mix()[1], (target - 5152) / 640, 1e-9);
      EXPECT_NEAR(p.mix()[2], 1 - (target - 5152) / 640, 1e-9);
      EXPECT_EQ(p.mix()[3], 0.0);
    }
  }
}

TEST(ProteusMixTest, PairMixHitsTheBudget) {
  // Budget 10000 tokens/s for 2 requests/s: 5000 per request, between 0.7 (5152) and
  // 0.6 (4640): 0.7's share is (5000 - 4640) / 512, worth 0.771 correct answers per request.
  // most_correct keeps that mix: 0.7 alone would serve 97% of the demand in time at 0.78
  // (0.757).
  for (bool most_correct : {false, true}) {
    ProteusMix p(MakeOptions(kConcave, most_correct));
    const std::vector<double> mix = MixAfterOnePeriod(p, 10000);
    EXPECT_NEAR(mix[2], 360.0 / 512, 1e-9) << most_correct;
    EXPECT_NEAR(mix[3], 1 - 360.0 / 512, 1e-9) << most_correct;
    EXPECT_NEAR(std::accumulate(mix.begin(), mix.end(), 0.0), 1.0, 1e-12);
  }
}

TEST(ProteusMixTest, ASingleCandidateBeatsAMixThatCostsMuchAccuracy) {
  // Budget 11800 tokens/s: 5900 per request. With accuracy 0.93 / 0.60 / 0.45 / 0.40 / 0.10
  // the best mix at the budget is 61.5% at 0.9 and 38.5% at 0.6 ((5900 - 4640) / 2048), worth
  // 0.726 correct answers per request; 0.9 alone serves 5900 / 6688 = 88.2% of the demand in
  // time at 0.93: 0.820, 13% more, over the 10% margin.
  const std::vector<double> steep = {0.93, 0.60, 0.45, 0.40, 0.10};
  ProteusMix plain(MakeOptions(steep, false));
  std::vector<double> mix = MixAfterOnePeriod(plain, 11800);
  EXPECT_NEAR(mix[0], 1260.0 / 2048, 1e-9);
  EXPECT_NEAR(mix[3], 1 - 1260.0 / 2048, 1e-9);
  ProteusMix correct(MakeOptions(steep, true));
  mix = MixAfterOnePeriod(correct, 11800);
  EXPECT_DOUBLE_EQ(mix[0], 1.0);
  // 0.74 / 0.57 / 0.45 / 0.335 below 0.9: the mix of 0.9 and 0.5 is worth 0.777, 0.9 alone
  // only 5.5% more: the mix stays.
  ProteusMix gentle(MakeOptions({0.93, 0.74, 0.57, 0.45, 0.335}, true));
  mix = MixAfterOnePeriod(gentle, 11800);
  EXPECT_NEAR(mix[0], 2284.0 / 3072, 1e-9);
  EXPECT_NEAR(mix[4], 1 - 2284.0 / 3072, 1e-9);
}

TEST(ProteusMixTest, OverloadBeyondTheLowestTakesTheMostAccuracyPerWork) {
  // Budget 5000 tokens/s for 2 requests/s needs 7232 even at 0.5. Accuracy per token of
  // work: 0.80/6688, 0.79/5792, 0.78/5152, 0.75/4640 = 1.616e-4 (best), 0.55/3616 =
  // 1.521e-4. Plain Proteus drops to the lowest; most_correct without a margin plans 0.6.
  ProteusMix plain(MakeOptions(kConcave, false));
  EXPECT_DOUBLE_EQ(MixAfterOnePeriod(plain, 5000)[4], 1.0);
  ProteusMix::Options o = MakeOptions(kConcave, true);
  o.most_correct_margin = 0;
  ProteusMix correct(o);
  const std::vector<double> mix = MixAfterOnePeriod(correct, 5000);
  EXPECT_DOUBLE_EQ(mix[3], 1.0);
  EXPECT_DOUBLE_EQ(std::accumulate(mix.begin(), mix.end(), 0.0), 1.0);
  // The load drops: the next period plans the top again.
  for (RequestId id = 0; id < 5; ++id) correct.OnArrival(Spec(id), 8, 0, 1);
  correct.AdvanceTo(20.0, 5000);
  EXPECT_DOUBLE_EQ(correct.mix()[0], 1.0);
}

TEST(ProteusMixTest, OverloadNeedsTheMarginToLeaveTheLowest) {
  // 0.6 promises 6.2% more correct answers in time than 0.5: under the default 10% margin
  // the plan stays at 0.5. With accuracy falling steeply (0.93 at 0.9, 0.335 at 0.5, as on
  // the bundled multi-block model) 0.9 promises 1.39e-4 / 0.926e-4 = 1.50x: it is planned.
  ProteusMix concave(MakeOptions(kConcave, true));
  EXPECT_DOUBLE_EQ(MixAfterOnePeriod(concave, 5000)[4], 1.0);
  ProteusMix steep(MakeOptions({0.93, 0.74, 0.57, 0.45, 0.335}, true));
  EXPECT_DOUBLE_EQ(MixAfterOnePeriod(steep, 5000)[0], 1.0);
}

TEST(ProteusMixTest, OverloadWithFlatAccuracyStaysAtTheLowest) {
  // Equal accuracy everywhere: the cheapest candidate serves the most correct answers.
  ProteusMix p(MakeOptions({0.8, 0.8, 0.8, 0.8, 0.8}, true));
  EXPECT_DOUBLE_EQ(MixAfterOnePeriod(p, 5000)[4], 1.0);
}

TEST(ProteusMixTest, LightLoadKeepsTheTop) {
  ProteusMix p(MakeOptions(kConcave, true));
  EXPECT_DOUBLE_EQ(MixAfterOnePeriod(p, 20000)[0], 1.0);  // 2 x 6688 <= 20000
}

// Closes one 10-s period with `count` arrivals.
void Period(ProteusMix& p, int count, Seconds end) {
  for (int i = 0; i < count; ++i) p.OnArrival(Spec(i), 8, 0, 1);
  p.AdvanceTo(end, 1e9);
}

TEST(ProteusMixTest, RateEstimateSmoothsExponentiallyByDefault) {
  ProteusMix::Options o = MakeOptions(kConcave, false);
  o.smoothing = 0.5;
  ProteusMix p(o);
  EXPECT_DOUBLE_EQ(p.rate(), -1);
  Period(p, 20, 10);
  EXPECT_DOUBLE_EQ(p.rate(), 2.0);
  Period(p, 22, 20);
  EXPECT_DOUBLE_EQ(p.rate(), 2.1);
  Period(p, 18, 30);
  EXPECT_DOUBLE_EQ(p.rate(), 1.95);
}

TEST(ProteusMixTest, ChangeAwareRateAveragesASteadyLoadAndFollowsAJump) {
  // Poisson sd of a 10-s period's rate at 2/s: sqrt(2 / 10) = 0.447; z = 2 allows 0.894.
  ProteusMix::Options o = MakeOptions(kConcave, false);
  o.smoothing = 0.5;
  o.change_z = 2;
  o.window = 3;
  ProteusMix p(o);
  Period(p, 20, 10);
  EXPECT_DOUBLE_EQ(p.rate(), 2.0);
  Period(p, 22, 20);  // running mean of 2
  EXPECT_NEAR(p.rate(), 2.1, 1e-12);
  Period(p, 18, 30);  // of 3
  EXPECT_NEAR(p.rate(), 2.0, 1e-12);
  Period(p, 21, 40);  // the window caps it at 3: 2.0 + 0.1 / 3
  EXPECT_NEAR(p.rate(), 2.0 + 0.1 / 3, 1e-12);
  // 4/s is 4.4 sd away: a change, smoothed with weight 0.5.
  Period(p, 40, 50);
  const double after_jump = 0.5 * 4.0 + 0.5 * (2.0 + 0.1 / 3);
  EXPECT_NEAR(p.rate(), after_jump, 1e-12);
  // The next period in the new regime weighs 1/3.
  Period(p, 40, 60);
  EXPECT_NEAR(p.rate(), after_jump + (4.0 - after_jump) / 3, 1e-12);
}

// Twenty arrivals with 10-s SLOs in the first period; returns the plan after it closes with
// the given capacity, measured step time and late share.
std::vector<double> CappedMix(double fraction, double capacity, double step_seconds, double target = 0,
                              double late_fraction = 1) {
  ProteusMix::Options o = MakeOptions(kConcave, false);
  o.latency_fraction = fraction;
  o.latency_miss_target = target;
  ProteusMix p(o);
  for (RequestId id = 0; id < 20; ++id) {
    RequestSpec s = Spec(id);
    s.slo = 10;
    p.OnArrival(s, 8, 0, 1);
  }
  p.AdvanceTo(10.0, capacity, step_seconds, late_fraction);
  return p.mix();
}

// The latency cap: passes at 0.9 .. 0.5 are 128, 100, 80, 64, 32 per request. With 10-s SLOs
// and a fraction of 0.5 the limit is 5 s: at 50-ms steps at most 100 passes on average, so
// 0.9's share moves to 0.8 (100 exactly), whatever the capacity allows; at 60-ms steps (83.3
// passes) 0.8's share moves on to 0.7 until the mean fits: 1/6 at 0.8, 5/6 at 0.7. Without a
// measured step nothing changes; where even the lowest is over the limit the plan is the lowest.
TEST(ProteusMixTest, LatencyCapHoldsTheMixsMeanPassesWithinTheSlo) {
  const double any = 1e9;  // capacity for anything: the plan alone is all 0.9
  EXPECT_EQ(CappedMix(0, any, 0.05), (std::vector<double>{1, 0, 0, 0, 0}));    // off
  EXPECT_EQ(CappedMix(0.5, any, 0), (std::vector<double>{1, 0, 0, 0, 0}));     // no step measured
  EXPECT_EQ(CappedMix(0.5, any, 0.05), (std::vector<double>{0, 1, 0, 0, 0}));  // 0.9 out, 0.8 fits
  const std::vector<double> at60 = CappedMix(0.5, any, 0.06);
  ASSERT_EQ(at60.size(), 5u);
  EXPECT_EQ(at60[0], 0);
  EXPECT_NEAR(at60[1], 1.0 / 6, 1e-9);
  EXPECT_NEAR(at60[2], 5.0 / 6, 1e-9);
  EXPECT_EQ(at60[3] + at60[4], 0);
  EXPECT_EQ(CappedMix(0.5, any, 0.2), (std::vector<double>{0, 0, 0, 0, 1}));  // none fits: the lowest
  // A mix the capacity calls for whose mean already fits stays as it is: 0.7-0.6.
  const std::vector<double> mix = CappedMix(0.5, 10000, 0.05);
  EXPECT_EQ(mix[0], 0);
  EXPECT_EQ(mix[1], 0);
  EXPECT_NEAR(mix[2] + mix[3], 1, 1e-12);
  EXPECT_GT(mix[2], 0);
}

// With a miss target the cap binds only after a period in which at least that share of the
// finished requests missed their SLO.
TEST(ProteusMixTest, LatencyCapWithAMissTargetBindsOnlyAfterMisses) {
  const auto run = [](double target, double late_fraction) { return CappedMix(0.5, 1e9, 0.05, target, late_fraction); };
  EXPECT_EQ(run(0, 0), (std::vector<double>{0, 1, 0, 0, 0}));        // no target: always
  EXPECT_EQ(run(0.05, 0.01), (std::vector<double>{1, 0, 0, 0, 0}));  // few misses: the plan
  EXPECT_EQ(run(0.05, 0.05), (std::vector<double>{0, 1, 0, 0, 0}));  // at the target: capped
  EXPECT_EQ(run(0.05, 0.5), (std::vector<double>{0, 1, 0, 0, 0}));
}

}  // namespace
}  // namespace tediserve::policy
