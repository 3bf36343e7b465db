#include "sim/engine_denoiser.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/temp_dir.h"
#include "engine/generate.h"

namespace tediserve::sim {
namespace {

const std::string kModel = std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada";
constexpr int kGen = 8, kBlock = 4;

policy::RequestSpec Spec(policy::RequestId id, int output_len = kGen) {
  policy::RequestSpec s;
  s.id = id;
  s.output_len = output_len;
  s.slo = 1;
  return s;
}

class EngineDenoiserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = EngineDenoiser::Create(kModel);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    d_ = std::move(d).value();
  }
  // Steps every listed request (each at its threshold) in one mixed batch until all are done;
  // returns the outcomes per id.
  std::map<policy::RequestId, std::vector<policy::StepOutcome>> RunAll(
      const std::map<policy::RequestId, double>& thresholds) {
    std::map<policy::RequestId, std::vector<policy::StepOutcome>> out;
    std::set<policy::RequestId> active;
    for (const auto& [id, c] : thresholds) active.insert(id);
    for (int guard = 0; !active.empty() && guard < 100; ++guard) {
      std::vector<DenoiseCommand> batch;
      for (auto id : active) batch.push_back({id, thresholds.at(id)});
      auto res = d_->Step(batch);
      EXPECT_TRUE(d_->status().ok()) << d_->status().ToString();
      EXPECT_EQ(res.size(), batch.size());
      for (size_t i = 0; i < res.size(); ++i) {
        EXPECT_EQ(res[i].id, batch[i].id);  // batch order
        out[res[i].id].push_back(res[i]);
        if (res[i].request_done) active.erase(res[i].id);
      }
    }
    EXPECT_TRUE(active.empty());
    return out;
  }
  std::unique_ptr<EngineDenoiser> d_;
};

void ExpectSummarySane(const policy::ConfidenceSummary& s) {
  if (s.count == 0) return;
  EXPECT_GT(s.min, 0.0f);
  EXPECT_LE(s.min, s.q1);
  EXPECT_LE(s.q1, s.median);
  EXPECT_LE(s.median, s.q3);
  EXPECT_LE(s.q3, 1.0f + 1e-6f);
  EXPECT_GE(s.mean, s.min);
  EXPECT_LE(s.mean, 1.0f + 1e-6f);
}

TEST_F(EngineDenoiserTest, UsesTheModelDefaultsAndPicksProblemsById) {
  EXPECT_EQ(d_->default_block_size(), 8);  // config.json; the tests below decode in blocks of 4
  EXPECT_EQ(d_->default_output_len(), kGen);
  ASSERT_GT(d_->num_problems(), 3);
  d_->Start(Spec(3), kBlock, 0);
  d_->Start(Spec(d_->num_problems() + 3), kBlock, 0);
  ASSERT_TRUE(d_->status().ok()) << d_->status().ToString();
  ASSERT_NE(d_->ProblemOf(3), nullptr);
  EXPECT_EQ(d_->ProblemOf(3), d_->ProblemOf(d_->num_problems() + 3));
  EXPECT_EQ(d_->PromptLength(3), static_cast<int>(d_->ProblemOf(3)->ids.size()));
  // First step: a recompute step over prompt + output.
  EXPECT_EQ(d_->NextStepTokens(3), d_->PromptLength(3) + kGen);
  EXPECT_FALSE(d_->Correct(3).has_value());  // not done yet
  EXPECT_EQ(d_->NextStepTokens(99), -1);
  EXPECT_EQ(d_->RemainingSteps(99, 0.9), -1);
}

TEST_F(EngineDenoiserTest, MixedBatchOutcomesAddUp) {
  const std::map<policy::RequestId, double> th = {{0, 0.9}, {1, 0.5}, {2, 0.7}, {3, 0.99}, {4, 0.6}, {5, 0.8}};
  for (const auto& [id, c] : th) d_->Start(Spec(id), kBlock, id);
  ASSERT_TRUE(d_->status().ok()) << d_->status().ToString();
  auto out = RunAll(th);
  for (const auto& [id, steps] : out) {
    SCOPED_TRACE("request " + std::to_string(id));
    int unmasked = 0, blocks = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto& o = steps[i];
      EXPECT_GE(o.unmasked, 1);
      unmasked += o.unmasked;
      blocks += o.block_done;
      EXPECT_EQ(o.request_done, i + 1 == steps.size());
      // The features are taken before unmasking: the block's masked positions.
      const auto& f = o.features;
      EXPECT_GE(f.block.count, o.unmasked);
      EXPECT_LE(f.block.count, kBlock);
      EXPECT_GE(f.output.count, f.block.count);
      ExpectSummarySane(f.block);
      ExpectSummarySane(f.output);
      for (size_t k = 1; k < f.block_above.size(); ++k) EXPECT_LE(f.block_above[k - 1], f.block_above[k]);
      EXPECT_LE(f.block_above.back(), f.block.count);
      // At a candidate threshold the step unmasks exactly what clears it (at least one).
      for (size_t k = 0; k < policy::kDefaultThresholds.size(); ++k)
        if (policy::kDefaultThresholds[k] == th.at(id)) {
          EXPECT_EQ(o.unmasked, std::max(1, f.block_above[k]));
        }
    }
    EXPECT_EQ(unmasked, kGen);
    EXPECT_EQ(blocks, kGen / kBlock);
    EXPECT_GE(static_cast<int>(steps.size()), kGen / kBlock);  // one recompute step per block at least
    EXPECT_EQ(d_->NextStepTokens(id), 0);
    EXPECT_EQ(d_->RemainingSteps(id, 0.9), 0);
  }
  // A finished request can no longer step; the error is a value.
  auto bad = d_->TryStep({{0, 0.9}});
  EXPECT_FALSE(bad.ok());
  d_->Finish(0);
  EXPECT_FALSE(d_->Correct(0).has_value());
  EXPECT_EQ(d_->ProblemOf(0), nullptr);
}

// Correct() agrees with the engine's own driver run on the same problem at the same threshold.
TEST_F(EngineDenoiserTest, CorrectMatchesRunToCompletion) {
  std::map<policy::RequestId, double> th;
  for (int id = 0; id < 12; ++id) th[id] = policy::kDefaultThresholds[id % policy::kDefaultThresholds.size()];
  for (const auto& [id, c] : th) d_->Start(Spec(id), kBlock, 0);
  RunAll(th);

  auto model = engine::LoadModel(kModel);
  ASSERT_TRUE(model.ok());
  auto shared = std::make_shared<const engine::LoadedModel>(std::move(model).value());
  auto eng = engine::DiffusionEngine::Create(shared, 1);
  ASSERT_TRUE(eng.ok());
  auto tok = engine::Tokenizer::FromFile(kModel + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  int correct = 0;
  for (const auto& [id, c] : th) {
    SCOPED_TRACE("request " + std::to_string(id));
    const EngineProblem* p = d_->ProblemOf(id);
    ASSERT_NE(p, nullptr);
    auto s = (*eng)->NewRequest(id, p->ids, engine::DecodeOptions{kGen, kBlock, true, false, 0.0f, 0});
    ASSERT_TRUE(s.ok());
    engine::DecodeState* ptr = s->get();
    ASSERT_TRUE(engine::RunToCompletion(**eng, std::span<engine::DecodeState* const>(&ptr, 1),
                                        static_cast<float>(c))
                    .ok());
    const std::string text = tok->Decode(ptr->output_tokens(), shared->config.eos_token_id);
    EXPECT_EQ(*d_->Text(id), text);
    ASSERT_TRUE(d_->Correct(id).has_value());
    EXPECT_EQ(*d_->Correct(id), text == p->answer);
    correct += *d_->Correct(id);
  }
  EXPECT_GE(correct, 9);  // the tiny model is ~95% accurate on its held-out set
}

// The oracle against the real continuation: after two mixed-batch steps, RemainingSteps(c)
// equals the steps the request then takes, still in a mixed batch, at c. Asking the oracle
// for other thresholds first must not disturb anything.
TEST_F(EngineDenoiserTest, OracleMatchesTheActualContinuation) {
  std::map<policy::RequestId, double> th;
  for (int id = 0; id < 16; ++id) {
    th[id] = policy::kDefaultThresholds[(id * 3) % policy::kDefaultThresholds.size()];
    // Longer outputs (4 blocks) so there is something left to predict after two steps.
    d_->Start(Spec(id, 16), kBlock, 0);
  }
  ASSERT_TRUE(d_->status().ok()) << d_->status().ToString();
  std::map<policy::RequestId, double> before_th;
  for (const auto& [id, c] : th) before_th[id] = 0.5 + 0.1 * (id % 5);
  for (int step = 0; step < 2; ++step) {
    std::vector<DenoiseCommand> batch;
    for (const auto& [id, c] : before_th) batch.push_back({id, c});
    ASSERT_EQ(d_->Step(batch).size(), batch.size());
  }
  std::map<policy::RequestId, int> predicted;
  for (const auto& [id, c] : th) {
    const std::string text = *d_->Text(id);
    const int tokens = d_->NextStepTokens(id);
    for (double other : {0.9, 0.5, 0.3}) EXPECT_GE(d_->RemainingSteps(id, other), 1);
    predicted[id] = d_->RemainingSteps(id, c);
    EXPECT_EQ(*d_->Text(id), text);
    EXPECT_EQ(d_->NextStepTokens(id), tokens);
  }
  auto out = RunAll(th);
  int exact = 0;
  for (const auto& [id, steps] : out) {
    EXPECT_EQ(predicted[id], static_cast<int>(steps.size())) << "request " << id << " at " << th[id];
    exact += predicted[id] == static_cast<int>(steps.size());
  }
  EXPECT_EQ(exact, 16);
}

TEST_F(EngineDenoiserTest, StartAndStepErrorsAreRecorded) {
  // Not a multiple of the block size with the cache: refused, nothing registered.
  EXPECT_FALSE(d_->TryStart(Spec(1, 6), kBlock, 0).ok());
  d_->Start(Spec(1, 6), kBlock, 0);
  EXPECT_FALSE(d_->status().ok());
  EXPECT_NE(d_->status().message().find("request 1"), std::string::npos) << d_->status().message();
  EXPECT_EQ(d_->ProblemOf(1), nullptr);
  // Step on something never started: empty result, error kept, nothing else changes.
  ASSERT_TRUE(d_->TryStart(Spec(2), kBlock, 0).ok());
  EXPECT_TRUE(d_->Step({{2, 0.9}, {7, 0.9}}).empty());
  EXPECT_EQ(d_->NextStepTokens(2), d_->PromptLength(2) + kGen);  // 2 did not step
  EXPECT_FALSE(d_->TryStep({{2, 0.9}, {2, 0.5}}).ok());          // duplicate
  EXPECT_FALSE(d_->TryStep({{2, 0.0}}).ok());                    // bad threshold
  EXPECT_FALSE(d_->TryStart(Spec(2), kBlock, 0).ok());           // already started
  EXPECT_TRUE(d_->TryStep({{2, 0.9}}).ok());
}

TEST(EngineDenoiserCreateTest, ValidatesOptions) {
  TempDir tmp;
  EngineDenoiserOptions o;
  o.problems_file = tmp.File("missing.jsonl");
  auto d = EngineDenoiser::Create(kModel, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("missing.jsonl"), std::string::npos);

  {
    std::ofstream(tmp.File("bad.jsonl")) << "{\"prompt\": \"12+3=\", \"answer\": \"15\"}\n{\"prompt\": 5}\n";
  }
  o.problems_file = tmp.File("bad.jsonl");
  d = EngineDenoiser::Create(kModel, o);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("bad.jsonl:2"), std::string::npos) << d.status().message();

  o = {};
  o.max_output_len = 10;  // not a multiple of the model's block size 4
  EXPECT_EQ(EngineDenoiser::Create(kModel, o).status().code(), StatusCode::kInvalidArgument);
  o.max_output_len = 256;  // prompt + output beyond the 256-token context
  EXPECT_EQ(EngineDenoiser::Create(kModel, o).status().code(), StatusCode::kOutOfRange);
  o = {};
  o.tp = 0;
  EXPECT_FALSE(EngineDenoiser::Create(kModel, o).ok());
  o.tp = 3;  // 4 heads do not split over 3 shards
  EXPECT_FALSE(EngineDenoiser::Create(kModel, o).ok());
  EXPECT_FALSE(EngineDenoiser::Create(tmp.File("no-model")).ok());
}

}  // namespace
}  // namespace tediserve::sim
