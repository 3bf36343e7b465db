#include "sim/statistical_denoiser.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/calibration.h"

namespace tediserve::sim {
namespace {

using policy::RequestSpec;
using policy::StepOutcome;

// Roughly the fitted LLaDA parameters; the tests below need no fit.
DenoiserParams Typical() {
  DenoiserParams p;
  p.mu = 1.0;
  p.sigma = 2.0;
  p.sigma_request = 0.8;
  p.sigma_block = 0.5;
  p.delta = 0.3;
  p.eta = 1.5;
  return p;
}

StatisticalDenoiser Make(const DenoiserParams& p, uint64_t run_seed = 1, bool engine_like = false) {
  StatisticalDenoiserOptions o;
  o.params = p;
  o.run_seed = run_seed;
  o.engine_like_output = engine_like;
  return StatisticalDenoiser(o);
}

void StartOne(StatisticalDenoiser& d, int64_t id, int output_len, int block, uint64_t seed) {
  RequestSpec s;
  s.id = id;
  s.output_len = output_len;
  d.Start(s, block, seed);
}

// Runs request `id` to the end at `threshold`; returns every outcome.
std::vector<StepOutcome> RunAll(StatisticalDenoiser& d, int64_t id, double threshold) {
  std::vector<StepOutcome> out;
  while (d.Active(id)) out.push_back(d.Step({{id, threshold}})[0]);
  return out;
}

int Steps(const DenoiserParams& p, uint64_t seed, double threshold, int output_len = 256, int block = 32) {
  StatisticalDenoiser d = Make(p);
  StartOne(d, 0, output_len, block, seed);
  return static_cast<int>(RunAll(d, 0, threshold).size());
}

TEST(StatisticalDenoiserTest, ShippedLladaCalibrationReproducesTokensPerStepAndSpread) {
  auto cal = LoadCalibration(std::string(TEDI_SOURCE_DIR) + "/data/calibrations/llada-8b-gsm8k.json");
  ASSERT_TRUE(cal.ok()) << cal.status().ToString();
  // A run seed the fit never used.
  const SimulatedStats s = SimulateFixedThresholds(cal->params, 32, 256, cal->thresholds, 2000, 12345);
  for (size_t i = 0; i < cal->thresholds.size(); ++i)
    EXPECT_NEAR(s.tokens_per_step[i] / cal->tokens_per_step[i], 1.0, 0.03) << "threshold " << cal->thresholds[i];
  EXPECT_NEAR(s.steps_cv[0], cal->steps_cv, 0.03);
  // The spread is what makes one-shot estimates (O / T_c) bad: some request is off by > 50%.
  double worst = 0;
  StatisticalDenoiser d = Make(cal->params, 12345);
  for (int r = 0; r < 2000; ++r) {
    StartOne(d, r, 256, 32, static_cast<uint64_t>(r));
    const double steps = static_cast<double>(RunAll(d, r, 0.9).size());
    worst = std::max(worst, std::abs(256 / cal->tokens_per_step[0] - steps) / steps);
  }
  EXPECT_GT(worst, 0.5);
  // The calibration constructor is the same model.
  StatisticalDenoiser from_cal(*cal, 12345);
  StartOne(from_cal, 0, 256, 32, 0);
  StatisticalDenoiser again = Make(cal->params, 12345);
  StartOne(again, 0, 256, 32, 0);
  const auto a = RunAll(from_cal, 0, 0.7), b = RunAll(again, 0, 0.7);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].unmasked, b[i].unmasked);
}

TEST(StatisticalDenoiserTest, FallbackUnmasksExactlyOneTokenWhenNothingClears) {
  DenoiserParams p;
  p.mu = -12;  // confidences ~1e-5: nothing ever clears 0.5 ...
  p.sigma = 0.5;
  StatisticalDenoiser d = Make(p);
  StartOne(d, 0, 64, 32, 3);
  const auto out = RunAll(d, 0, 0.5);
  ASSERT_EQ(out.size(), 64u);  // ... so one token per step
  for (const auto& o : out) {
    EXPECT_EQ(o.unmasked, 1);
    EXPECT_EQ(o.features.block_above[4], 0);
  }
  // Threshold 1 never clears either, whatever the parameters.
  EXPECT_EQ(Steps(Typical(), 9, 1.0, 96, 32), 96);
  // Every step makes progress and stays inside its block.
  StatisticalDenoiser t = Make(Typical());
  StartOne(t, 0, 256, 32, 4);
  int in_block = 0;
  for (const auto& o : RunAll(t, 0, 0.8)) {
    EXPECT_GE(o.unmasked, 1);
    in_block += o.unmasked;
    EXPECT_LE(in_block, 32);
    if (o.block_done) {
      EXPECT_EQ(in_block, 32);
      in_block = 0;
    }
  }
}

TEST(StatisticalDenoiserTest, LowerThresholdNeverNeedsMoreSteps) {
  const std::vector<double> cs = {1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.2, 0.05};
  int strictly_fewer = 0;
  for (uint64_t seed = 0; seed < 150; ++seed) {
    int prev = Steps(Typical(), seed, cs[0]);
    for (size_t i = 1; i < cs.size(); ++i) {
      const int s = Steps(Typical(), seed, cs[i]);
      EXPECT_LE(s, prev) << "seed " << seed << " threshold " << cs[i];
      strictly_fewer += s < prev;
      prev = s;
    }
  }
  EXPECT_GT(strictly_fewer, 500);  // and the knob does something
}

TEST(StatisticalDenoiserTest, OracleEqualsStepsTakenAndLeavesStateAlone) {
  const std::vector<double> cs = {0.95, 0.9, 0.7, 0.5, 0.3};
  const std::vector<double> warmup = {0.9, 0.5, 0.8, 0.6, 0.7};
  for (uint64_t seed = 0; seed < 12; ++seed)
    for (int prefix : {0, 1, 3, 7, 15, 30}) {
      for (double c : cs) {
        // Replay: the same prefix of mixed thresholds, then c to the end.
        StatisticalDenoiser d = Make(Typical(), 7);
        StatisticalDenoiser twin = Make(Typical(), 7);  // never asked: the reference state
        StartOne(d, 2, 160, 32, seed);
        StartOne(twin, 2, 160, 32, seed);
        for (int k = 0; k < prefix && d.Active(2); ++k) {
          const double th = warmup[static_cast<size_t>(k) % warmup.size()];
          d.Step({{2, th}});
          twin.Step({{2, th}});
        }
        if (!d.Active(2)) continue;
        const int predicted = d.RemainingSteps(2, c);
        for (double other : cs) d.RemainingSteps(2, other);  // fills the cache for the others
        EXPECT_EQ(d.RemainingSteps(2, c), predicted);         // served from the cache
        int taken = 0;
        while (d.Active(2)) {
          const StepOutcome a = d.Step({{2, c}})[0];
          const StepOutcome b = twin.Step({{2, c}})[0];
          ASSERT_EQ(a.unmasked, b.unmasked) << "the oracle changed the state";
          ASSERT_EQ(a.features.block.q1, b.features.block.q1);
          ++taken;
          // Still exact mid-way, now for the cached threshold.
          if (d.Active(2)) {
            EXPECT_EQ(d.RemainingSteps(2, c), predicted - taken);
          }
        }
        EXPECT_EQ(taken, predicted) << "seed " << seed << " prefix " << prefix << " c " << c;
        EXPECT_EQ(d.RemainingSteps(2, c), 0);
      }
    }
}

TEST(StatisticalDenoiserTest, SameSeedSameOutcomesWhateverElseRuns) {
  auto trace = [](uint64_t run_seed, bool crowd) {
    StatisticalDenoiser d = Make(Typical(), run_seed);
    StartOne(d, 0, 128, 32, 42);
    std::vector<DenoiseCommand> batch = {{0, 0.8}};
    if (crowd)
      for (int64_t id = 1; id < 6; ++id) {
        StartOne(d, id, 256, 32, static_cast<uint64_t>(id));
        batch.push_back({id, 0.6});
      }
    std::vector<std::pair<int, float>> t;
    while (d.Active(0)) {
      const auto out = d.Step(batch);
      t.emplace_back(out[0].unmasked, out[0].features.output.median);
      std::erase_if(batch, [&](const DenoiseCommand& c) { return c.id != 0 && !d.Active(c.id); });
    }
    return t;
  };
  EXPECT_EQ(trace(1, false), trace(1, false));
  EXPECT_EQ(trace(1, false), trace(1, true));  // other requests do not shift the draws
  EXPECT_NE(trace(1, false), trace(2, false));
  // Same request seed, different ids: identical behaviour.
  StatisticalDenoiser d = Make(Typical());
  StartOne(d, 0, 256, 32, 5);
  StartOne(d, 1, 256, 32, 5);
  while (d.Active(0)) {
    const auto out = d.Step({{0, 0.7}, {1, 0.7}});
    ASSERT_EQ(out[0].unmasked, out[1].unmasked);
  }
  EXPECT_FALSE(d.Active(1));
}

TEST(StatisticalDenoiserTest, FeaturesAreConsistentWithTheStep) {
  for (bool engine_like : {false, true}) {
    StatisticalDenoiser d = Make(Typical(), 3, engine_like);
    const int O = 200, B = 32;  // last block is 8 tokens
    StartOne(d, 0, O, B, 11);
    int done = 0, in_block = 0, block_steps = 0, block_start = 0;
    const std::vector<double> ths = {0.9, 0.8, 0.7, 0.6, 0.5};
    for (size_t step = 0; d.Active(0); ++step) {
      const size_t k = step % ths.size();
      const StepOutcome o = d.Step({{0, ths[k]}})[0];
      const auto& f = o.features;
      const int block_len = std::min(B, O - block_start);
      EXPECT_EQ(f.block.count, block_len - in_block);
      for (const auto* s : {&f.block, &f.output}) {
        EXPECT_GE(s->min, 0.0f);
        EXPECT_LE(s->min, s->q1);
        EXPECT_LE(s->q1, s->median);
        EXPECT_LE(s->median, s->q3);
        EXPECT_LE(s->q3, 1.0f);
        EXPECT_GE(s->mean, s->min);
        EXPECT_LE(s->mean, 1.0f);
      }
      for (size_t j = 0; j < f.block_above.size(); ++j) {
        EXPECT_LE(f.block_above[j], f.block.count);
        if (j > 0) {
          EXPECT_GE(f.block_above[j], f.block_above[j - 1]);  // lower threshold, more clear it
        }
      }
      // A step at a candidate threshold unmasks exactly what block_above said (or the fallback one).
      EXPECT_EQ(o.unmasked, std::max(1, f.block_above[k]));
      const bool whole_output = !engine_like || block_steps == 0;
      EXPECT_EQ(f.output.count, whole_output ? O - done : f.block.count);
      if (block_start + B >= O || !whole_output) {
        EXPECT_EQ(f.output.median, f.block.median);  // nothing after this block / engine-like cache step
      }
      done += o.unmasked;
      in_block += o.unmasked;
      ++block_steps;
      if (o.block_done) {
        block_start += block_len;
        in_block = block_steps = 0;
      }
      EXPECT_EQ(o.request_done, done == O);
    }
    EXPECT_EQ(done, O);
  }
}

TEST(StatisticalDenoiserTest, OutputFeaturesTrackTheRequestsDifficulty) {
  // A request whose tokens are more confident shows it in its first output summary (the
  // signal the step predictor needs to beat the one-shot estimate).
  DenoiserParams p = Typical();
  p.sigma_request = 1.5;
  StatisticalDenoiser d = Make(p);
  std::vector<std::pair<float, int>> v;
  for (int r = 0; r < 400; ++r) {
    StartOne(d, r, 256, 32, static_cast<uint64_t>(r));
    const float mean = d.Step({{r, 0.9}})[0].features.output.mean;
    v.emplace_back(mean, 1 + static_cast<int>(RunAll(d, r, 0.9).size()));
  }
  std::sort(v.begin(), v.end());
  double low = 0, high = 0;  // mean steps of the least / most confident quarter
  for (int i = 0; i < 100; ++i) low += v[static_cast<size_t>(i)].second, high += v[v.size() - 1 - i].second;
  EXPECT_GT(low, 1.3 * high);
}

TEST(StatisticalDenoiserTest, EdgeCases) {
  StatisticalDenoiser d = Make(Typical());
  // Unknown, negative and finished ids report done and unmask nothing.
  const StepOutcome u = d.Step({{77, 0.9}})[0];
  EXPECT_EQ(u.unmasked, 0);
  EXPECT_TRUE(u.request_done);
  RequestSpec neg;
  neg.id = -1;
  neg.output_len = 32;
  d.Start(neg, 32, 1);
  EXPECT_FALSE(d.Active(-1));
  EXPECT_EQ(d.RemainingSteps(-1, 0.9), 0);
  StartOne(d, 0, 0, 32, 1);  // empty output: done at once
  EXPECT_FALSE(d.Active(0));
  StartOne(d, 1, 40, 32, 1);
  EXPECT_EQ(d.RemainingSteps(1, 1.0), 40);
  RunAll(d, 1, 0.0);  // threshold 0: everything clears, one step per block
  EXPECT_EQ(d.StepsTaken(1), 2);
  d.Finish(1);
  EXPECT_FALSE(d.Active(1));
  EXPECT_EQ(d.StepsTaken(1), 0);
  // Bad parameters are refused with the field named.
  StatisticalDenoiserOptions o;
  o.params.sigma = 0;
  auto bad = StatisticalDenoiser::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sigma"), std::string::npos);
  o.params.sigma = 1;
  o.params.eta = -1;
  bad = StatisticalDenoiser::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eta"), std::string::npos);
}

TEST(StatisticalDenoiserTest, NormalsAreStandard) {
  std::vector<float> v(200000);
  StandardNormals(99, v);
  double m = 0, s2 = 0;
  for (float x : v) m += x;
  m /= v.size();
  for (float x : v) s2 += (x - m) * (x - m);
  EXPECT_NEAR(m, 0, 0.01);
  EXPECT_NEAR(std::sqrt(s2 / v.size()), 1, 0.01);
  // Counter-based: a prefix of a longer draw is the shorter draw.
  std::vector<float> w(7);
  StandardNormals(99, w);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(w[i], v[i]);
}

}  // namespace
}  // namespace tediserve::sim
