#include "sim/step_collection.h"

#include <map>

#include <gtest/gtest.h>

#include "predictor/train.h"
#include "sim/calibration.h"
#include "sim/statistical_denoiser.h"

namespace tediserve::sim {
namespace {

std::vector<policy::RequestSpec> Specs(int n) {
  std::vector<policy::RequestSpec> v;
  for (int i = 0; i < n; ++i) v.push_back({i, 0, 100 + i, 256});
  return v;
}

class StepCollection : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cal = LoadCalibration(std::string(TEDI_SOURCE_DIR) + "/data/calibrations/llada-8b-gsm8k.json");
    ASSERT_TRUE(cal.ok()) << cal.status().ToString();
    cal_ = *cal;
  }
  Calibration cal_;
};

TEST_F(StepCollection, RowsCarryTheTrueRemainingSteps) {
  StatisticalDenoiser d(cal_, 5);
  const double th[] = {0.9, 0.5};
  CollectionOptions o;
  o.block_size = cal_.block_size;
  o.batch = 7;
  auto rows = CollectStepLog(d, Specs(20), th, o);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::map<policy::RequestId, std::vector<const predictor::StepLogRow*>> by;
  for (const auto& r : *rows) by[r.state.spec.id].push_back(&r);
  ASSERT_EQ(by.size(), 40u);
  std::map<double, double> steps;
  for (const auto& [id, rs] : by) {
    EXPECT_EQ(rs.front()->state.steps, 0);
    EXPECT_EQ(rs.front()->remaining, static_cast<int>(rs.size()));
    EXPECT_EQ(rs.back()->remaining, 1);
    for (size_t j = 1; j < rs.size(); ++j) {
      EXPECT_EQ(rs[j]->state.steps, rs[j - 1]->state.steps + 1);
      EXPECT_EQ(rs[j]->remaining, rs[j - 1]->remaining - 1);
      EXPECT_GE(rs[j]->state.unmasked, rs[j - 1]->state.unmasked + 1);
    }
    EXPECT_EQ(rs.front()->problem, id % 20);  // the same problem under both thresholds
    // The oracle agrees with the log at the start.
    steps[rs.front()->threshold] += rs.size();
  }
  EXPECT_LT(steps[0.5], 0.7 * steps[0.9]);
}

TEST_F(StepCollection, BadInput) {
  StatisticalDenoiser d(cal_, 5);
  const double th[] = {0.9};
  CollectionOptions o;
  auto expect_bad = [&](const StatusOr<std::vector<predictor::StepLogRow>>& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  expect_bad(CollectStepLog(d, {}, th, o), "no requests");
  o.id_stride = 3;
  expect_bad(CollectStepLog(d, Specs(5), th, o), "id stride below the request count");
  o = CollectionOptions();
  o.batch = 0;
  expect_bad(CollectStepLog(d, Specs(5), th, o), "block size and batch must be > 0");
  o = CollectionOptions();
  auto no_output = Specs(2);
  no_output[1].output_len = 0;
  expect_bad(CollectStepLog(d, no_output, th, o), "request 1 has no output");
}

// The whole training path on the simulator's LLaDA model: the confidence features must beat
// the one-shot estimate by a wide margin, progress features alone by less.
TEST_F(StepCollection, TrainedPredictorBeatsOneShot) {
  StatisticalDenoiser d(cal_, 11);
  CollectionOptions o;
  o.block_size = cal_.block_size;
  auto rows = CollectStepLog(d, Specs(60), cal_.thresholds, o);
  ASSERT_TRUE(rows.ok());
  predictor::TrainOptions t;
  t.gbm.rounds = 60;
  auto trained = predictor::TrainPredictors(*rows, t);
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  const auto& r = trained->report;
  EXPECT_GT(r.heldout_problems, 0);
  EXPECT_LT(r.mape_full, 0.8 * r.mape_oneshot) << predictor::FormatReport(r);
  EXPECT_LE(r.mape_full, r.mape_progress * 1.02) << predictor::FormatReport(r);
  EXPECT_GE(r.chosen_refresh_tokens, 1);
}

}  // namespace
}  // namespace tediserve::sim
