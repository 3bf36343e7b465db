#include "policy/latency_profile.h"

#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"

namespace tediserve::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Points = std::map<int, std::vector<std::pair<double, double>>>;

LatencyProfile MustFromPoints(Points points) {
  StatusOr<LatencyProfile> p = LatencyProfile::FromPoints(std::move(points), "test");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

TEST(LatencyProfileTest, InterpolatesLinearlyBetweenPoints) {
  const LatencyProfile p = MustFromPoints({{1, {{100, 0.010}, {200, 0.030}, {400, 0.050}}}});
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 100), 0.010);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 150), 0.020);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 200), 0.030);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 250), 0.035);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 300), 0.040);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 400), 0.050);
}

TEST(LatencyProfileTest, PointsNeedNotBeSorted) {
  const LatencyProfile p = MustFromPoints({{1, {{400, 0.050}, {100, 0.010}, {200, 0.030}}}});
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 150), 0.020);
  EXPECT_DOUBLE_EQ(p.MaxMeasuredTokens(1), 400);
}

TEST(LatencyProfileTest, BelowFirstPointIsTheFloor) {
  const LatencyProfile p = MustFromPoints({{1, {{100, 0.010}, {200, 0.030}}}});
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 1), 0.010);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 50), 0.010);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 0), 0.010);
}

TEST(LatencyProfileTest, TailExtendsAtTopQuarterSlope) {
  // 8 points: the top quarter is points 6..7 -> slope (0.090 - 0.080) / 100 = 1e-4 s/token.
  // The lower part of the curve is much flatter, so a whole-curve slope would differ.
  const LatencyProfile p = MustFromPoints({{1,
                                            {{100, 0.010},
                                             {200, 0.011},
                                             {300, 0.012},
                                             {400, 0.013},
                                             {500, 0.014},
                                             {600, 0.015},
                                             {700, 0.080},
                                             {800, 0.090}}}});
  EXPECT_NEAR(p.StepSeconds(1, 1000), 0.090 + 200 * 1e-4, 1e-12);
  EXPECT_NEAR(p.StepSeconds(1, 800), 0.090, 1e-12);
}

TEST(LatencyProfileTest, TailOfTwoPointCurveUsesBothPoints) {
  const LatencyProfile p = MustFromPoints({{2, {{100, 0.010}, {1000, 0.100}}}});
  EXPECT_NEAR(p.StepSeconds(2, 2000), 0.200, 1e-12);
}

TEST(LatencyProfileTest, FlatTailStillGrows) {
  // The top of the curve is flat (slope 0): extend at the mean cost per token instead, so
  // more tokens never cost the same as fewer beyond what was measured.
  const LatencyProfile p = MustFromPoints({{1, {{100, 0.010}, {200, 0.020}, {300, 0.020}}}});
  EXPECT_NEAR(p.StepSeconds(1, 600), 0.020 + 300 * (0.020 / 300), 1e-12);
  EXPECT_GT(p.StepSeconds(1, 301), p.StepSeconds(1, 300));
}

TEST(LatencyProfileTest, NoisyCurveBecomesMonotone) {
  // A dip at 200 tokens (noise) is lifted to the running maximum.
  const LatencyProfile p = MustFromPoints({{1, {{100, 0.020}, {200, 0.015}, {300, 0.030}}}});
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 200), 0.020);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 150), 0.020);
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 250), 0.025);
  double prev = 0;
  for (double n = 1; n <= 400; n += 7) {
    const double s = p.StepSeconds(1, n);
    EXPECT_GE(s, prev) << "at " << n << " tokens";
    prev = s;
  }
}

TEST(LatencyProfileTest, TpDegreesAreKeptApart) {
  const LatencyProfile p =
      MustFromPoints({{1, {{100, 0.010}, {200, 0.020}}}, {4, {{100, 0.005}, {200, 0.006}}}});
  EXPECT_THAT(p.TpDegrees(), ElementsAre(1, 4));
  EXPECT_TRUE(p.HasTp(4));
  EXPECT_FALSE(p.HasTp(2));
  EXPECT_DOUBLE_EQ(p.StepSeconds(1, 150), 0.015);
  EXPECT_DOUBLE_EQ(p.StepSeconds(4, 150), 0.0055);
  EXPECT_DOUBLE_EQ(p.TokensPerSecond(1, 200), 200 / 0.020);
}

TEST(LatencyProfileTest, FromPointsRejectsBadPoints) {
  auto expect_bad = [](Points pts, const std::string& what) {
    StatusOr<LatencyProfile> p = LatencyProfile::FromPoints(std::move(pts), "src.csv");
    ASSERT_FALSE(p.ok()) << what;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr("src.csv"));
    EXPECT_THAT(p.status().message(), HasSubstr(what));
  };
  expect_bad({}, "no TP degree");
  expect_bad({{1, {{100, 0.01}}}}, "at least 2 points");
  expect_bad({{1, {}}}, "at least 2 points");
  expect_bad({{0, {{100, 0.01}, {200, 0.02}}}}, "TP degree must be > 0");
  expect_bad({{1, {{100, 0.01}, {200, 0.0}}}}, "must be > 0");
  expect_bad({{1, {{100, 0.01}, {-5, 0.02}}}}, "must be > 0");
  expect_bad({{1, {{100, 0.01}, {100, 0.02}}}}, "token count 100 appears twice");
}

class LatencyProfileFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }

  // Loads `text` as a CSV and expects InvalidArgument naming the file and `what`.
  void ExpectCsvError(const std::string& text, const std::string& what) {
    const std::string path = Write("bad.csv", text);
    StatusOr<LatencyProfile> p = LatencyProfile::LoadCsv(path);
    ASSERT_FALSE(p.ok()) << "accepted: " << text;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().ToString();
    EXPECT_THAT(p.status().message(), HasSubstr(path));
    EXPECT_THAT(p.status().message(), HasSubstr(what));
  }

  TempDir dir_{"tedi_latency_profile_test"};
};

TEST_F(LatencyProfileFileTest, ParsesCsvInMilliseconds) {
  const std::string path = Write("p.csv",
                                 "num_batched_tokens,tp1_ms,tp2_ms\r\n"
                                 "100, 10.0, 6.0\r\n"
                                 "\n"
                                 "200,30.0,8.0\n");
  StatusOr<LatencyProfile> p = LatencyProfile::LoadCsv(path);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_THAT(p->TpDegrees(), ElementsAre(1, 2));
  EXPECT_DOUBLE_EQ(p->StepSeconds(1, 100), 0.010);
  EXPECT_DOUBLE_EQ(p->StepSeconds(1, 150), 0.020);
  EXPECT_DOUBLE_EQ(p->StepSeconds(2, 200), 0.008);
  EXPECT_EQ(p->source(), path);
}

TEST_F(LatencyProfileFileTest, CsvErrorsNameFileLineAndProblem) {
  ExpectCsvError("", "empty");
  ExpectCsvError("tokens,tp1_ms\n100,1\n200,2\n", "header must be num_batched_tokens");
  ExpectCsvError("num_batched_tokens\n100\n200\n", "header must be num_batched_tokens");
  ExpectCsvError("num_batched_tokens,tp1\n100,1\n200,2\n", "column 'tp1' is not tpN_ms");
  ExpectCsvError("num_batched_tokens,gpu1_ms\n100,1\n200,2\n", "is not tpN_ms");
  ExpectCsvError("num_batched_tokens,tp0_ms\n100,1\n200,2\n", "is not tpN_ms");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n200,2,3\n", ":3: expected 2 fields, got 3");
  ExpectCsvError("num_batched_tokens,tp1_ms,tp2_ms\n100,1\n", ":2: expected 3 fields, got 2");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\nabc,2\n", ":3: column num_batched_tokens: not a finite number: \"abc\"");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n200,2ms\n", ":3: column tp1_ms: not a finite number: \"2ms\"");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n200,nan\n", ":3: column tp1_ms: not a finite number: \"nan\"");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n200,0\n", ":3: tp1_ms must be in (0, 3.6e+06] ms, got 0");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n200,-4\n", ":3: tp1_ms must be in (0, 3.6e+06] ms, got -4");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n200,1e300\n", ":3: tp1_ms must be in (0, 3.6e+06] ms, got 1e+300");
  ExpectCsvError("num_batched_tokens,tp99999_ms\n100,1\n200,2\n", "is not tpN_ms");
  ExpectCsvError("num_batched_tokens,tp1_ms\n0,1\n200,2\n", ":2: num_batched_tokens must be in (0, 1e+07], got 0");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n100,2\n", "token count 100 appears twice");
  ExpectCsvError("num_batched_tokens,tp1_ms\n100,1\n", "at least 2 points");
  // A header and no rows has fewer than 2 points too.
  ExpectCsvError("num_batched_tokens,tp1_ms\n", "at least 2 points");
}

TEST_F(LatencyProfileFileTest, MissingCsvIsNotFound) {
  const std::string path = dir_.File("nope.csv");
  StatusOr<LatencyProfile> p = LatencyProfile::LoadCsv(path);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr(path));
}

TEST_F(LatencyProfileFileTest, ParsesJsonInSecondsPerTp) {
  const std::string a = Write("tp1.json", R"({"100": 0.010, "200": 0.030, "400": 0.050})");
  const std::string b = Write("tp4.json", R"({"200": 0.004, "100": 0.002})");
  StatusOr<LatencyProfile> p = LatencyProfile::LoadJson({{1, a}, {4, b}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_THAT(p->TpDegrees(), ElementsAre(1, 4));
  EXPECT_DOUBLE_EQ(p->StepSeconds(1, 300), 0.040);
  EXPECT_DOUBLE_EQ(p->StepSeconds(4, 150), 0.003);
  EXPECT_THAT(p->source(), HasSubstr(a));
  EXPECT_THAT(p->source(), HasSubstr(b));
}

TEST_F(LatencyProfileFileTest, JsonErrors) {
  const std::string good = Write("good.json", R"({"100": 0.01, "200": 0.02})");
  auto expect_bad = [&](const std::string& text, StatusCode code, const std::string& what) {
    const std::string path = Write("bad.json", text);
    StatusOr<LatencyProfile> p = LatencyProfile::LoadJson({{1, good}, {2, path}});
    ASSERT_FALSE(p.ok()) << "accepted: " << text;
    EXPECT_EQ(p.status().code(), code) << p.status().ToString();
    EXPECT_THAT(p.status().message(), HasSubstr(path));
    EXPECT_THAT(p.status().message(), HasSubstr(what));
  };
  expect_bad("{\"100\": 0.01,", StatusCode::kInvalidArgument, "not valid JSON");
  expect_bad("[1, 2]", StatusCode::kInvalidArgument, "not a JSON object");
  expect_bad(R"({"100": 0.01, "abc": 0.02})", StatusCode::kInvalidArgument, "key \"abc\" is not a token count");
  expect_bad(R"({"100": 0.01, "200": "fast"})", StatusCode::kInvalidArgument, "\"200\": expected a number");
  expect_bad(R"({"100": 0.01, "200": -1})", StatusCode::kInvalidArgument, "must be > 0");
  expect_bad(R"({"1": 0.001, "100000": 1e300})", StatusCode::kInvalidArgument, "a step at most 3600 s");
  expect_bad(std::string(100, '[') + std::string(100, ']'), StatusCode::kInvalidArgument, "nested deeper");
  expect_bad(R"({"100": 0.01, "1e2": 0.02})", StatusCode::kInvalidArgument, "appears twice");
  expect_bad(R"({"100": 0.01})", StatusCode::kInvalidArgument, "TP 2 needs at least 2 points");
  // An empty object must not silently drop its TP degree from the profile.
  expect_bad("{}", StatusCode::kInvalidArgument, "TP 2 needs at least 2 points");

  StatusOr<LatencyProfile> missing = LatencyProfile::LoadJson({{1, dir_.File("nope.json")}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.json"));
}

}  // namespace
}  // namespace tediserve::policy
