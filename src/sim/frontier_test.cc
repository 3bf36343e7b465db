#include "sim/frontier.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace tediserve::sim {
namespace {

TEST(FrontierTest, PointsOnTheFrontierHaveNoGaps) {
  // A trade-off: more attainment for less quality, nobody better at both.
  const auto v = JudgeFrontier({{"a", 0.99, 0.70}, {"b", 0.90, 0.75}, {"c", 0.50, 0.78}});
  ASSERT_EQ(v.size(), 3u);
  for (const auto& x : v) {
    EXPECT_FALSE(x.dominated) << x.policy;
    EXPECT_EQ(x.attainment_gap, 0) << x.policy;
    EXPECT_EQ(x.quality_gap, 0) << x.policy;
  }
}

TEST(FrontierTest, DominatedPointNamesItsDominatorAndBothGaps) {
  // "ours" loses 18.8 points of attainment to a static threshold of higher quality, and
  // 0.002 quality to a run of equal attainment.
  const auto v = JudgeFrontier({{"ours", 0.806, 0.7692}, {"fixed-0.7", 0.994, 0.7700}, {"proteus", 0.806, 0.7712},
                                {"fixed-0.5", 1.0, 0.7350}});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_TRUE(v[0].dominated);
  EXPECT_EQ(v[0].dominated_by, "fixed-0.7");
  EXPECT_NEAR(v[0].attainment_gap, 0.188, 1e-12);
  EXPECT_EQ(v[0].attainment_gap_by, "fixed-0.7");
  // Quality gap at >= attainment: proteus (+0.002) and fixed-0.7 (+0.0008): the larger.
  EXPECT_NEAR(v[0].quality_gap, 0.002, 1e-12);
  EXPECT_EQ(v[0].quality_gap_by, "proteus");
  EXPECT_FALSE(v[1].dominated);
  EXPECT_FALSE(v[3].dominated);
  // proteus: fixed-0.7 has more attainment but less quality, so nothing dominates it.
  EXPECT_FALSE(v[2].dominated);
  EXPECT_NEAR(v[2].attainment_gap, 0, 1e-12);
  EXPECT_NEAR(v[2].quality_gap, 0, 1e-12);
}

TEST(FrontierTest, EqualPointsDoNotDominateEachOther) {
  const auto v = JudgeFrontier({{"a", 0.9, 0.77}, {"b", 0.9, 0.77}});
  EXPECT_FALSE(v[0].dominated);
  EXPECT_FALSE(v[1].dominated);
  EXPECT_EQ(v[0].attainment_gap, 0);
}

TEST(FrontierTest, NonFinitePointsAreIgnored) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto v = JudgeFrontier({{"a", 0.5, 0.7}, {"broken", nan, 0.9}});
  EXPECT_FALSE(v[0].dominated);
  EXPECT_FALSE(v[1].dominated);
  EXPECT_EQ(v[1].quality_gap, 0);
}

}  // namespace
}  // namespace tediserve::sim
