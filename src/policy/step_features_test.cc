#include "policy/step_features.h"

#include <gtest/gtest.h>

namespace tediserve::policy {
namespace {

RequestState Started(int prompt, int output, int block) {
  RequestState r;
  r.spec.prompt_len = prompt;
  r.spec.output_len = output;
  r.block_size = block;
  r.num_blocks = output / block;
  return r;
}

TEST(StepFeaturesTest, NamesMatchSizes) {
  EXPECT_EQ(NumFeatures(FeatureSet::kProgress), 9);
  EXPECT_EQ(NumFeatures(FeatureSet::kFull), 9 + 12 + 5);
  EXPECT_EQ(FeatureNames(FeatureSet::kFull)[21], "block_above_90");
  EXPECT_EQ(FeatureNames(FeatureSet::kFull)[25], "block_above_50");
  FeatureSet s;
  EXPECT_TRUE(ParseFeatureSet("progress", &s));
  EXPECT_EQ(s, FeatureSet::kProgress);
  EXPECT_FALSE(ParseFeatureSet("confidence", &s));
}

TEST(StepFeaturesTest, HandComputedRowAfterTwoSteps) {
  RequestState r = Started(100, 64, 32);
  // Step 1 unmasks 10 of block 0, step 2 the other 22: block 0 done.
  StepOutcome a;
  a.unmasked = 10;
  EXPECT_FALSE(r.Apply(a));
  StepOutcome b;
  b.unmasked = 22;
  b.block_done = true;
  b.features.block = {22, 0.5f, 0.6f, 0.7f, 0.8f, 0.65f};
  b.features.output = {54, 0.1f, 0.2f, 0.3f, 0.4f, 0.25f};
  b.features.block_above = {11, 11, 22, 22, 22};
  EXPECT_FALSE(r.Apply(b));
  EXPECT_EQ(r.block, 1);
  EXPECT_EQ(r.steps_in_block, 0);

  std::vector<float> f(NumFeatures(FeatureSet::kFull));
  StepFeatures(r, 0.7, FeatureSet::kFull, f);
  const std::vector<float> want = {64, 100, 32, 0.7f, 2.0f / 64, 32.0f / 64, 0.5f, 0, 0,
                                   22.0f / 32, 0.5f, 0.6f, 0.7f, 0.8f, 0.65f,
                                   54.0f / 64, 0.1f, 0.2f, 0.3f, 0.4f, 0.25f,
                                   0.5f, 0.5f, 1, 1, 1};
  ASSERT_EQ(f.size(), want.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_FLOAT_EQ(f[i], want[i]) << FeatureNames(FeatureSet::kFull)[i];

  std::vector<float> p(NumFeatures(FeatureSet::kProgress));
  StepFeatures(r, 0.5, FeatureSet::kProgress, p);
  EXPECT_FLOAT_EQ(p[3], 0.5f);
  EXPECT_FLOAT_EQ(p[5], 0.5f);
}

TEST(StepFeaturesTest, BeforeTheFirstStepConfidenceIsZero) {
  RequestState r = Started(10, 32, 32);
  std::vector<float> f(NumFeatures(FeatureSet::kFull));
  StepFeatures(r, 0.9, FeatureSet::kFull, f);
  for (size_t i = 4; i < f.size(); ++i) EXPECT_EQ(f[i], 0.0f) << FeatureNames(FeatureSet::kFull)[i];
}

TEST(StepFeaturesTest, ApplyFinishesOnRequestDoneOrLastBlock) {
  RequestState r = Started(10, 8, 4);
  StepOutcome done_block;
  done_block.unmasked = 4;
  done_block.block_done = true;
  EXPECT_FALSE(r.Apply(done_block));
  EXPECT_TRUE(r.Apply(done_block));
  EXPECT_TRUE(r.done);
  RequestState early = Started(10, 8, 4);
  StepOutcome stop;
  stop.unmasked = 1;
  stop.request_done = true;
  EXPECT_TRUE(early.Apply(stop));
}

}  // namespace
}  // namespace tediserve::policy
