#include "sim/plots.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/temp_dir.h"

namespace tediserve::sim {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The file exists and starts with the 8-byte PNG signature.
bool IsPng(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  return in.gcount() == 8 && std::string(sig, 8) == std::string("\x89PNG\r\n\x1a\n", 8);
}

// gnuplot is a Debian package the set-up installs; without it the plot tests are skipped
// (the missing-gnuplot test below still runs).
bool HaveGnuplot() { return std::system("gnuplot -e 'exit' >/dev/null 2>&1") == 0; }

const char* kTimeline =
    "t_s,arrival_rps,active,queued,mean_threshold,mean_cap,window_attainment,window_mean_latency_s\n"
    "0,0,0,0,nan,nan,nan,nan\n"
    "1,2.5,3,0,0.9,0.9,1,0.4\n"
    "2,5,8,2,0.75,0.8,0.95,0.7\n"
    "3,4,6,1,0.8,0.85,0.9,0.6\n";

const char* kSweep =
    "policy,x,attainment,mean_latency_s,p50_latency_s,p99_latency_s,quality\n"
    "tediserve,2,0.99,0.5,0.4,1.1,0.95\n"
    "tediserve,1,1.0,0.3,0.3,0.6,0.97\n"
    "tediserve,4,0.95,0.9,0.8,2.0,0.93\n"
    "\"fixed, 0.9\",1,1.0,0.4,0.35,0.8,0.97\n"
    "\"fixed, 0.9\",2,0.8,1.5,1.2,3.5,0.97\n"
    "\"fixed, 0.9\",4,0.3,4.0,3.5,9.0,0.97\n"
    "infaas,1,0.9,0.6,0.5,1.0,\n"
    "infaas,2,0.7,2.0,1.7,4.0,\n";

TEST(PlotsTest, TimelinePng) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot not installed";
  TempDir tmp;
  Write(tmp.File("timeline.csv"), kTimeline);
  // Quotes, backquotes and gnuplot's enhanced-text characters are drawn literally.
  Status s = PlotTimeline(tmp.path().string(), "run `a' \"b\" x_1^2 @m", {});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(IsPng(tmp.File("timeline.png")));
}

TEST(PlotsTest, SweepPngs) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot not installed";
  TempDir tmp;
  Write(tmp.File("sweep.csv"), kSweep);
  // A folder name with a quote and a space must reach gnuplot intact.
  const fs::path out_dir = tmp.path() / "it's out";
  fs::create_directory(out_dir);
  const std::string prefix = (out_dir / "rate").string();
  Status s = PlotSweep(tmp.File("sweep.csv"), "arrival rate (req/s)", prefix, "sweep");
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const char* suffix : {"_attainment.png", "_latency.png", "_quality.png"})
    EXPECT_TRUE(IsPng(prefix + suffix)) << suffix;
}

TEST(PlotsTest, AllMissingColumnStillPlots) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot not installed";
  TempDir tmp;
  Write(tmp.File("sweep.csv"),
        "policy,x,attainment,mean_latency_s,p50_latency_s,p99_latency_s,quality\n"
        "a,1,1,0.5,0.5,0.5,nan\n"
        "a,2,1,0.5,0.5,0.5,nan\n");
  ASSERT_TRUE(PlotSweep(tmp.File("sweep.csv"), "x", tmp.File("s"), "t").ok());
  EXPECT_TRUE(IsPng(tmp.File("s_quality.png")));
}

TEST(PlotsTest, MissingCsvIsNamed) {
  TempDir tmp;
  Status s = PlotTimeline(tmp.path().string(), "t");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(tmp.File("timeline.csv")), std::string::npos) << s.message();

  s = PlotSweep(tmp.File("nope.csv"), "x", tmp.File("p"), "t");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nope.csv"), std::string::npos) << s.message();
}

TEST(PlotsTest, MalformedCsvNamesLineAndColumn) {
  TempDir tmp;
  Write(tmp.File("timeline.csv"), "t_s,arrival_rps\n0,1\n");
  Status s = PlotTimeline(tmp.path().string(), "t");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing column 'active'"), std::string::npos) << s.message();

  Write(tmp.File("sweep.csv"),
        "policy,x,attainment,mean_latency_s,p50_latency_s,p99_latency_s,quality\n"
        "a,1,1,0.5,0.5,0.5,1\n"
        "a,2,fast,0.5,0.5,0.5,1\n");
  s = PlotSweep(tmp.File("sweep.csv"), "x", tmp.File("p"), "t");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sweep.csv:3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("attainment"), std::string::npos) << s.message();

  Write(tmp.File("short.csv"), "policy,x\na\n");
  s = PlotSweep(tmp.File("short.csv"), "x", tmp.File("p"), "t");
  EXPECT_NE(s.message().find("short.csv:2"), std::string::npos) << s.message();

  Write(tmp.File("sweep2.csv"), kSweep);
  s = PlotSweep(tmp.File("sweep2.csv"), "x", tmp.File("no/such/dir/p"), "t");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
}

TEST(PlotsTest, MissingGnuplotIsAClearError) {
  TempDir tmp;
  Write(tmp.File("timeline.csv"), kTimeline);
  PlotOptions o;
  o.gnuplot = tmp.File("no-gnuplot-here");
  Status s = PlotTimeline(tmp.path().string(), "t", o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("gnuplot"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(tmp.File("timeline.png")));
}

}  // namespace
}  // namespace tediserve::sim
