#include "engine/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tediserve::engine::vec {
namespace {

TEST(VectorMathTest, ExpIsAccurateOverTheFloatRange) {
  std::vector<float> x, y;
  for (float v = -87.0f; v <= 88.0f; v += 0.01f) x.push_back(v);
  y.resize(x.size());
  Exp(x.data(), y.data(), static_cast<int>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(y[i] - ref) / ref);
  }
  EXPECT_LT(worst, 2e-6);
}

TEST(VectorMathTest, ExpSaturatesInsteadOfOverflowing) {
  float x[3] = {-1000.0f, 0.0f, 1000.0f}, y[3];
  Exp(x, y, 3);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], 1.0f);
  EXPECT_TRUE(std::isfinite(y[2]));
}

TEST(VectorMathTest, SoftmaxSumsToOneAndKeepsOrder) {
  std::vector<float> r = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 20.0f, -100.0f};
  Softmax(r.data(), static_cast<int>(r.size()));
  double sum = 0;
  for (float v : r) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR(r[5], 1.0, 1e-6);
  EXPECT_EQ(r[6], 0.0f);  // exp(-120) underflows to exactly 0
  EXPECT_FLOAT_EQ(r[1], r[3]);
  EXPECT_GT(r[1], r[0]);
}

TEST(VectorMathTest, SiluMulAndRmsNormMatchScalarFormulas) {
  std::vector<float> g = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f}, u = {1.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  std::vector<float> g0 = g;
  SiluMul(g.data(), u.data(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(g[i], g0[i] / (1 + std::exp(-g0[i])) * u[i], 1e-6);
  std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f}, w = {1.0f, 0.5f, 2.0f, 1.5f}, y(4);
  RmsNorm(x.data(), w.data(), 4, 1e-5f, y.data());
  const double rms = std::sqrt((1 + 4 + 9 + 0.25) / 4.0 + 1e-5);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] / rms * w[i], 1e-6);
}

}  // namespace
}  // namespace tediserve::engine::vec
