#include "sim/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"

namespace tediserve::sim {
namespace {

using nlohmann::json;

const std::string kCalDir = std::string(TEDI_SOURCE_DIR) + "/data/calibrations/";

FitTargets LladaTargets() {
  FitTargets t;
  t.name = "llada-8b-gsm8k";
  t.block_size = 32;
  t.thresholds = {0.9, 0.8, 0.7, 0.6, 0.5};
  t.tokens_per_step = {3.02, 3.89, 4.77, 5.65, 6.58};
  t.accuracy = {0.785, 0.780, 0.770, 0.755, 0.735};
  t.steps_cv = 0.3;
  t.cv_output_len = 256;
  return t;
}

json ValidJson() {
  return json{{"name", "t"},
              {"block_size", 32},
              {"thresholds", {0.9, 0.7, 0.5}},
              {"tokens_per_step", {3.0, 4.8, 6.6}},
              {"accuracy", {0.8, 0.78, 0.7}},
              {"steps_cv", 0.3},
              {"cv_output_len", 256},
              {"params",
               {{"mu", 1.0}, {"sigma", 2.0}, {"sigma_request", 0.9}, {"sigma_block", 0.5}, {"delta", 0.3}, {"eta", 1.0}}},
              {"fit", {{"tokens_per_step", {3.0, 4.8, 6.6}}, {"steps_cv", 0.3}}},
              {"source", "test"}};
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(CalibrationTest, ShippedCalibrationsLoadAndInterpolate) {
  auto llada = LoadCalibration(kCalDir + "llada-8b-gsm8k.json");
  ASSERT_TRUE(llada.ok()) << llada.status().ToString();
  EXPECT_EQ(llada->block_size, 32);
  EXPECT_DOUBLE_EQ(llada->AccuracyAt(0.9), 0.785);
  EXPECT_DOUBLE_EQ(llada->AccuracyAt(0.75), 0.775);  // halfway between 0.8 and 0.7
  EXPECT_DOUBLE_EQ(llada->AccuracyAt(0.99), 0.785);  // clamped
  EXPECT_DOUBLE_EQ(llada->AccuracyAt(0.1), 0.735);
  EXPECT_NEAR(llada->TokensPerStepAt(0.85), (3.02 + 3.89) / 2, 1e-12);
  auto tiny = LoadCalibration(kCalDir + "tiny-llada.json");
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  EXPECT_EQ(tiny->block_size, 8);
  for (size_t i = 0; i < tiny->thresholds.size(); ++i)
    EXPECT_NEAR(tiny->fitted_tokens_per_step[i] / tiny->tokens_per_step[i], 1, 0.03);
}

TEST(CalibrationTest, LoadRejectsEachBadFieldNamingIt) {
  TempDir dir("cal");
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.File("c.json");
  Write(path, ValidJson().dump());
  ASSERT_TRUE(LoadCalibration(path).ok()) << LoadCalibration(path).status().ToString();

  struct Case {
    std::string field;  // must appear in the message
    std::function<void(json&)> mutate;
  };
  const std::vector<Case> cases = {
      {"name", [](json& j) { j.erase("name"); }},
      {"name", [](json& j) { j["name"] = 3; }},
      {"block_size", [](json& j) { j.erase("block_size"); }},
      {"block_size", [](json& j) { j["block_size"] = 0; }},
      {"block_size", [](json& j) { j["block_size"] = 2.5; }},
      {"thresholds", [](json& j) { j.erase("thresholds"); }},
      {"thresholds", [](json& j) { j["thresholds"] = {0.5, 0.7, 0.9}; }},  // ascending
      {"thresholds", [](json& j) { j["thresholds"] = {1.2, 0.7, 0.5}; }},
      {"thresholds", [](json& j) { j["thresholds"] = {0.9, 0.7, 0.0}; }},
      {"thresholds", [](json& j) { j["thresholds"] = {0.9, "x", 0.5}; }},
      {"tokens_per_step", [](json& j) { j["tokens_per_step"] = {3.0, 4.8}; }},
      {"tokens_per_step", [](json& j) { j["tokens_per_step"] = {3.0, 2.8, 6.6}; }},  // falls
      {"tokens_per_step", [](json& j) { j["tokens_per_step"] = {3.0, 4.8, 40.0}; }},  // > B
      {"tokens_per_step", [](json& j) { j["tokens_per_step"] = {0.5, 4.8, 6.6}; }},   // < 1
      {"accuracy", [](json& j) { j["accuracy"] = {0.8, 1.5, 0.7}; }},
      {"accuracy", [](json& j) { j["accuracy"] = {0.8, 0.7}; }},
      {"accuracy", [](json& j) { j.erase("accuracy"); }},
      {"steps_cv", [](json& j) { j["steps_cv"] = -0.1; }},
      {"steps_cv", [](json& j) { j.erase("steps_cv"); }},
      {"cv_output_len", [](json& j) { j["cv_output_len"] = 100; }},  // not a multiple of 32
      {"params", [](json& j) { j.erase("params"); }},
      {"params", [](json& j) { j["params"] = 1; }},
      {"sigma", [](json& j) { j["params"]["sigma"] = 0.0; }},
      {"delta", [](json& j) { j["params"]["delta"] = -1.0; }},
      {"eta", [](json& j) { j["params"].erase("eta"); }},
      {"bogus", [](json& j) { j["params"]["bogus"] = 1.0; }},
      {"fit", [](json& j) { j["fit"] = 2; }},
      {"tokens_per_step", [](json& j) { j["fit"]["tokens_per_step"] = {3.0}; }},
      {"source", [](json& j) { j["source"] = 5; }},
      {"extra", [](json& j) { j["extra"] = 1; }},
  };
  for (const Case& c : cases) {
    json j = ValidJson();
    c.mutate(j);
    Write(path, j.dump());
    auto r = LoadCalibration(path);
    ASSERT_FALSE(r.ok()) << "accepted a bad " << c.field << ": " << j.dump();
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  }
  Write(path, "{not json");
  EXPECT_EQ(LoadCalibration(path).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCalibration(dir.path().string()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCalibration(dir.File("missing.json")).status().code(), StatusCode::kNotFound);
}

TEST(CalibrationTest, SaveLoadRoundTrip) {
  TempDir dir("cal");
  auto a = LoadCalibration(kCalDir + "llada-8b-gsm8k.json");
  ASSERT_TRUE(a.ok());
  a->params.mu = 0.1 + 0.2;  // not exactly representable in short decimal
  const std::string path = dir.File("rt.json");
  ASSERT_TRUE(SaveCalibration(path, *a).ok());
  auto b = LoadCalibration(path);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->name, a->name);
  EXPECT_EQ(b->block_size, a->block_size);
  EXPECT_EQ(b->thresholds, a->thresholds);
  EXPECT_EQ(b->tokens_per_step, a->tokens_per_step);
  EXPECT_EQ(b->accuracy, a->accuracy);
  EXPECT_EQ(b->steps_cv, a->steps_cv);
  EXPECT_EQ(b->cv_output_len, a->cv_output_len);
  EXPECT_EQ(b->params.mu, a->params.mu);
  EXPECT_EQ(b->params.sigma, a->params.sigma);
  EXPECT_EQ(b->params.sigma_request, a->params.sigma_request);
  EXPECT_EQ(b->params.sigma_block, a->params.sigma_block);
  EXPECT_EQ(b->params.delta, a->params.delta);
  EXPECT_EQ(b->params.eta, a->params.eta);
  EXPECT_EQ(b->fitted_tokens_per_step, a->fitted_tokens_per_step);
  EXPECT_EQ(b->fitted_steps_cv, a->fitted_steps_cv);
  EXPECT_EQ(b->source, a->source);
  // An invalid calibration is not written.
  a->accuracy[0] = 2;
  const Status s = SaveCalibration(dir.File("bad.json"), *a);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("accuracy"), std::string::npos);
}

TEST(CalibrationTest, FitReproducesLladaTargetsAndTheShippedFile) {
  const FitTargets t = LladaTargets();
  auto cal = FitCalibration(t);
  ASSERT_TRUE(cal.ok()) << cal.status().ToString();
  for (size_t i = 0; i < t.thresholds.size(); ++i)
    EXPECT_NEAR(cal->fitted_tokens_per_step[i] / t.tokens_per_step[i], 1, 0.02) << t.thresholds[i];
  EXPECT_NEAR(cal->fitted_steps_cv, t.steps_cv, 0.02);
  // The shipped file is this fit; if the fit changes, regenerate it (data/calibrations/README.md).
  auto shipped = LoadCalibration(kCalDir + "llada-8b-gsm8k.json");
  ASSERT_TRUE(shipped.ok());
  EXPECT_NEAR(shipped->params.mu, cal->params.mu, 1e-9);
  EXPECT_NEAR(shipped->params.sigma, cal->params.sigma, 1e-9);
  EXPECT_NEAR(shipped->params.sigma_request, cal->params.sigma_request, 1e-9);
  EXPECT_NEAR(shipped->params.delta, cal->params.delta, 1e-9);
  EXPECT_NEAR(shipped->params.eta, cal->params.eta, 1e-9);
}

TEST(CalibrationTest, FitIsDeterministicAndRefusesBadTargets) {
  FitTargets t;
  t.name = "small";
  t.block_size = 4;
  t.thresholds = {0.9, 0.7, 0.5};
  t.tokens_per_step = {2.0, 2.6, 3.2};
  t.accuracy = {0.9, 0.85, 0.8};
  t.steps_cv = 0.25;
  t.cv_output_len = 16;
  auto a = FitCalibration(t);
  auto b = FitCalibration(t);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->params.mu, b->params.mu);
  EXPECT_EQ(a->params.eta, b->params.eta);
  EXPECT_EQ(a->fitted_tokens_per_step, b->fitted_tokens_per_step);
  for (size_t i = 0; i < t.thresholds.size(); ++i)
    EXPECT_NEAR(a->fitted_tokens_per_step[i] / t.tokens_per_step[i], 1, 0.03) << t.thresholds[i];
  EXPECT_NEAR(a->fitted_steps_cv, t.steps_cv, 0.03);

  FitTargets bad = t;
  bad.tokens_per_step = {2.0, 1.5, 3.2};
  EXPECT_NE(FitCalibration(bad).status().message().find("tokens_per_step"), std::string::npos);
  bad = t;
  bad.thresholds = {0.9, 0.9, 0.5};
  EXPECT_NE(FitCalibration(bad).status().message().find("thresholds"), std::string::npos);
  bad = t;
  bad.sigma_block = -1;
  EXPECT_NE(FitCalibration(bad).status().message().find("sigma_block"), std::string::npos);
}

// Writes engine-format step records (src/engine/generate.cc StepResultJson) for requests
// run by the statistical model, and returns the true tokens per step per threshold.
struct LogTruth {
  std::vector<double> tokens_per_step;
  double steps_cv = 0;
};

LogTruth WriteStepLog(const std::string& path, const std::vector<double>& thresholds, int requests, int O, int B,
                      bool twice_first) {
  StatisticalDenoiserOptions o;
  o.params.mu = 1;
  o.params.sigma = 2;
  o.params.sigma_request = 0.8;
  o.params.delta = 0.3;
  o.params.eta = 1;
  std::ofstream out(path);
  LogTruth truth;
  std::vector<double> per_top;
  std::vector<double> runs = thresholds;
  if (twice_first) runs.push_back(thresholds[0]);  // like --cache both: ids reappear at one threshold
  for (size_t t = 0; t < runs.size(); ++t) {
    StatisticalDenoiser d(o);
    int64_t tokens = 0, steps = 0;
    for (int r = 0; r < requests; ++r) {
      policy::RequestSpec spec;
      spec.id = r;
      spec.output_len = O;
      d.Start(spec, B, static_cast<uint64_t>(r + 1000 * t));
    }
    std::vector<int> per(static_cast<size_t>(requests), 0), block(static_cast<size_t>(requests), 0),
        next_pos(static_cast<size_t>(requests), 0);
    bool any = true;
    while (any) {  // all requests in one batch per step, as eval does
      any = false;
      std::vector<DenoiseCommand> batch;
      for (int r = 0; r < requests; ++r)
        if (d.Active(r)) batch.push_back({r, runs[t]});
      if (batch.empty()) break;
      any = true;
      for (const auto& s : d.Step(batch)) {
        const size_t r = static_cast<size_t>(s.id);
        json un = json::array();
        for (int k = 0; k < s.unmasked; ++k) un.push_back({next_pos[r]++, 7});
        json j = {{"request", s.id},
                  {"kind", "recompute"},
                  {"block", block[r]},
                  {"threshold", static_cast<float>(runs[t])},
                  {"unmasked", un},
                  {"block_done", s.block_done},
                  {"done", s.request_done},
                  {"stats", json::object()}};
        out << j.dump() << "\n";
        tokens += s.unmasked;
        ++steps;
        ++per[r];
        if (s.block_done) ++block[r];
      }
    }
    if (t < thresholds.size()) truth.tokens_per_step.push_back(static_cast<double>(tokens) / steps);
    if (t == 0 || t == thresholds.size())
      for (int v : per) per_top.push_back(v);
  }
  double m = 0, v = 0;
  for (double x : per_top) m += x;
  m /= per_top.size();
  for (double x : per_top) v += (x - m) * (x - m);
  truth.steps_cv = std::sqrt(v / per_top.size()) / m;
  return truth;
}

TEST(CalibrationTest, TargetsFromStepLogsMeasureTheLog) {
  TempDir dir("logs");
  const std::string log = dir.File("steps.jsonl"), eval = dir.File("eval.json");
  const std::vector<double> ths = {0.9, 0.7, 0.5};
  const LogTruth truth = WriteStepLog(log, ths, 60, 64, 16, false);
  json e = {{"rows",
             {{{"cache", false}, {"threshold", 0.9}, {"accuracy", 0.1}},
              {{"cache", true}, {"threshold", 0.9}, {"accuracy", 0.95}},
              {{"cache", true}, {"threshold", 0.7}, {"accuracy", 0.9}},
              {{"cache", true}, {"threshold", 0.5}, {"accuracy", 0.8}}}}};
  Write(eval, e.dump());
  StepLogOptions opt;
  opt.name = "synthetic";
  opt.eval_json = eval;
  auto t = TargetsFromStepLogs({log}, opt);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->block_size, 16);
  EXPECT_EQ(t->cv_output_len, 64);
  ASSERT_EQ(t->thresholds.size(), 3u);
  for (size_t i = 0; i < ths.size(); ++i) {
    EXPECT_NEAR(t->thresholds[i], ths[i], 1e-9);
    EXPECT_NEAR(t->tokens_per_step[i], truth.tokens_per_step[i], 1e-12);
  }
  EXPECT_NEAR(t->steps_cv, truth.steps_cv, 1e-12);
  EXPECT_EQ(t->accuracy, (std::vector<double>{0.95, 0.9, 0.8}));  // the cache rows
  EXPECT_TRUE(FitCalibration(*t).ok());

  // Explicit accuracy instead; wrong count refused.
  opt.eval_json.clear();
  opt.accuracy = {0.5, 0.4};
  EXPECT_NE(TargetsFromStepLogs({log}, opt).status().message().find("accuracy"), std::string::npos);
  opt.accuracy = {0.5, 0.4, 0.3};
  ASSERT_TRUE(TargetsFromStepLogs({log}, opt).ok());

  // A request id that reappears after "done" is a new request (eval reuses ids per row).
  const std::string log2 = dir.File("steps2.jsonl");
  const LogTruth truth2 = WriteStepLog(log2, ths, 30, 64, 16, true);
  auto t2 = TargetsFromStepLogs({log2}, opt);
  ASSERT_TRUE(t2.ok()) << t2.status().ToString();
  EXPECT_EQ(t2->thresholds.size(), 3u);
  EXPECT_NE(t2->source.find("120 finished requests"), std::string::npos) << t2->source;  // 4 runs x 30
  // The provenance names the log by its file name, not where it lay on this machine.
  EXPECT_NE(t2->source.find("step logs steps2.jsonl ("), std::string::npos) << t2->source;
  EXPECT_EQ(t2->source.find(dir.File("")), std::string::npos) << t2->source;
  EXPECT_NEAR(t2->steps_cv, truth2.steps_cv, 1e-12);  // both runs at 0.9 count
}

TEST(CalibrationTest, TargetsFromStepLogsRepairsAndRejects) {
  TempDir dir("logs");
  const std::string log = dir.File("s.jsonl");
  // Two one-block requests per threshold; T falls from 0.9 (4 tokens/step) to 0.5 (2).
  auto line = [](int id, double th, std::vector<int> pos, bool done) {
    json un = json::array();
    for (int p : pos) un.push_back({p, 5});
    return json{{"request", id}, {"threshold", th}, {"block", 0}, {"unmasked", un}, {"done", done}}.dump() + "\n";
  };
  Write(log, line(0, 0.9, {0, 1, 2, 3}, true) + line(1, 0.9, {0, 1}, false) + line(1, 0.9, {2, 3}, true) +
                 line(0, 0.5, {0, 1}, false) + line(0, 0.5, {2, 3}, true));
  StepLogOptions opt;
  opt.accuracy = {0.9, 0.8};
  auto t = TargetsFromStepLogs({log}, opt);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->block_size, 4);  // single block: the output length
  // 0.9: 8 tokens / 3 steps; 0.5: 4 / 2 -> pooled to 12 / 5.
  EXPECT_NEAR(t->tokens_per_step[0], 12.0 / 5, 1e-12);
  EXPECT_NEAR(t->tokens_per_step[1], 12.0 / 5, 1e-12);
  EXPECT_NE(t->source.find("pool-adjacent-violators"), std::string::npos);
  EXPECT_NEAR(t->steps_cv, 0.5 / 1.5, 1e-12);  // steps 1 and 2

  Write(log, json{{"req", 0}, {"threshold", 0.9}, {"block", 0}, {"unmasked", json::array()}, {"done", true}}.dump());
  const Status s = TargetsFromStepLogs({log}, opt).status();
  EXPECT_NE(s.message().find("request"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(log + ":1"), std::string::npos) << s.message();
  Write(log, "not json\n");
  EXPECT_EQ(TargetsFromStepLogs({log}, opt).status().code(), StatusCode::kInvalidArgument);
  // A position far past any output, and a block size no calibration can hold: errors, not
  // allocations.
  Write(log, R"({"request": 0, "threshold": 0.9, "block": 0, "unmasked": [[2147483647, 5]], "done": true})" "\n");
  EXPECT_NE(TargetsFromStepLogs({log}, opt).status().message().find("position"), std::string::npos);
  Write(log, R"({"request": 0, "threshold": 0.9, "block": 0, "unmasked": [[3, 5]], "done": true})" "\n");
  StepLogOptions huge = opt;
  huge.block_size = 1000000;
  EXPECT_NE(TargetsFromStepLogs({log}, huge).status().message().find("a calibration allows blocks of at most"),
            std::string::npos);
  EXPECT_EQ(TargetsFromStepLogs({dir.File("none.jsonl")}, opt).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(TargetsFromStepLogs({}, opt).ok());
}

}  // namespace
}  // namespace tediserve::sim
