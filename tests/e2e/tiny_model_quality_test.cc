// End-to-end quality of the bundled tiny model on its held-out set: the speed/quality
// trade-off of the confidence threshold is real, and the approximate KV cache keeps answers.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/eval_core.h"
#include "cli/model_setup.h"

namespace tediserve::cli {
namespace {

class TinyModelQuality : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada";
    auto b = LoadBundle(dir);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    bundle_ = new ModelBundle(std::move(b).value());
    auto p = engine::ReadTaskFile(dir + "/heldout.jsonl", *bundle_->tokenizer);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    problems_ = new std::vector<EvalProblem>(std::move(p).value());
    auto e = engine::DiffusionEngine::Create(bundle_->model, 1);
    ASSERT_TRUE(e.ok());
    engine_ = e->release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete problems_;
    delete bundle_;
  }
  static EvalRow Run(double threshold, bool cache) {
    engine::DecodeOptions o;
    o.gen_length = bundle_->default_gen_length;
    o.block_size = bundle_->default_block_size;
    o.use_cache = cache;
    o.eos_early_stop = true;  // the text ends at the first EOS: later blocks cannot change it
    auto row = RunEvalRow(*engine_, *bundle_->tokenizer, *problems_, o, threshold, 32);
    EXPECT_TRUE(row.ok()) << row.status().ToString();
    return row.ok() ? std::move(row).value() : EvalRow{};
  }
  static ModelBundle* bundle_;
  static std::vector<EvalProblem>* problems_;
  static engine::DiffusionEngine* engine_;
};
ModelBundle* TinyModelQuality::bundle_ = nullptr;
std::vector<EvalProblem>* TinyModelQuality::problems_ = nullptr;
engine::DiffusionEngine* TinyModelQuality::engine_ = nullptr;

TEST_F(TinyModelQuality, ThresholdTradesStepsForAccuracy) {
  ASSERT_GE(problems_->size(), 200u);
  const EvalRow high = Run(0.9, true), low = Run(0.5, true);
  std::printf("threshold 0.9: accuracy %.3f, %.2f steps; 0.5: accuracy %.3f, %.2f steps (%.1f%% fewer)\n",
              high.accuracy, high.mean_steps, low.accuracy, low.mean_steps,
              100.0 * (1 - low.mean_steps / high.mean_steps));
  EXPECT_GE(high.accuracy, 0.90);
  // At least 30% fewer steps (measured: 1.68 -> 1.03, -39%), and it costs accuracy
  // (0.948 -> 0.915).
  EXPECT_LE(low.mean_steps, 0.70 * high.mean_steps);
  EXPECT_LT(low.accuracy, high.accuracy - 0.005);
}

TEST_F(TinyModelQuality, CacheKeepsTheAnswers) {
  std::vector<EvalRow> rows = {Run(0.9, false), Run(0.9, true)};
  FillAgreement(&rows);
  std::printf("threshold 0.9: same answer with and without cache on %.1f%% of problems\n",
              100.0 * rows[1].agree_with_nocache);
  EXPECT_GE(rows[1].agree_with_nocache, 0.97);
}

}  // namespace
}  // namespace tediserve::cli
