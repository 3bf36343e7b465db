#include "serve/metrics.h"

#include <gtest/gtest.h>

namespace tediserve::serve {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndCumulativeHistograms) {
  Metrics m;
  m.Counter("tediserve_x_total", "X.");
  m.Gauge("tediserve_g", "G.");
  m.Histogram("tediserve_h_seconds", "H.", {0.1, 1});
  m.Add("tediserve_x_total", 2, {{"outcome", "completed"}});
  m.Add("tediserve_x_total", 1, {{"outcome", "completed"}});
  m.Set("tediserve_g", 7);
  m.Observe("tediserve_h_seconds", 0.05);
  m.Observe("tediserve_h_seconds", 0.5);
  m.Observe("tediserve_h_seconds", 5);
  const std::string t = m.Render();
  EXPECT_NE(t.find("# TYPE tediserve_x_total counter"), std::string::npos);
  EXPECT_NE(t.find("tediserve_x_total{outcome=\"completed\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tediserve_g 7\n"), std::string::npos);
  EXPECT_NE(t.find("tediserve_h_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tediserve_h_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("tediserve_h_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("tediserve_h_seconds_count 3\n"), std::string::npos);
  EXPECT_DOUBLE_EQ(m.Value("tediserve_x_total", {{"outcome", "completed"}}), 3);
}

TEST(MetricsTest, EscapesLabelValues) {
  Metrics m;
  m.Gauge("tediserve_g", "G.");
  m.Set("tediserve_g", 1, {{"k", "a\"b\\c\nd"}});
  EXPECT_NE(m.Render().find("tediserve_g{k=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos) << m.Render();
}

TEST(MetricsTest, UndeclaredFamilyIsAProgrammingError) {
  Metrics m;
  EXPECT_THROW(m.Add("tediserve_nope_total", 1), std::logic_error);
}

}  // namespace
}  // namespace tediserve::serve
