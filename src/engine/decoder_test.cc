#include "engine/decoder.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "engine/testing/random_model.h"

namespace tediserve::engine {
namespace {

std::vector<int32_t> Prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(2, 39);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = u(rng);
  return t;
}

class DecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::RandomModel();
    auto e = DiffusionEngine::Create(model_, 1);
    ASSERT_TRUE(e.ok());
    engine_ = std::move(e).value();
  }
  std::unique_ptr<DecodeState> New(int64_t id, const std::vector<int32_t>& prompt, int gen, int block, bool cache) {
    auto s = engine_->NewRequest(id, prompt, DecodeOptions{gen, block, cache, false, 0.0f, 0});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<DiffusionEngine> engine_;
};

// Step semantics against logits computed independently: every masked position of the block
// whose softmax max clears the threshold unmasks with its argmax; nothing outside the block.
TEST_F(DecoderTest, StepUnmasksExactlyTheBlockPositionsAboveThreshold) {
  auto prompt = Prompt(10, 1);
  auto s = New(7, prompt, 16, 8, /*cache=*/false);
  const int V = model_->config.vocab_size;
  for (float th : {0.3f, 0.5f, 0.7f}) {
    if (s->done()) break;
    auto logits = engine_->FullLogits(s->tokens());
    ASSERT_TRUE(logits.ok());
    const int lo = 10 + s->current_block() * 8;
    std::vector<std::pair<int, int32_t>> expect;
    float best_conf = -1;
    std::pair<int, int32_t> best;
    for (int p = lo; p < lo + 8; ++p) {
      if (s->tokens()[p] != model_->config.mask_token_id) continue;
      const float* l = logits->data() + static_cast<size_t>(p) * V;
      const int mask = model_->config.mask_token_id;  // never an answer
      int am = mask == 0 ? 1 : 0;
      for (int v = 0; v < V; ++v)
        if (v != mask && l[v] > l[am]) am = v;
      double sum = 0;
      for (int v = 0; v < V; ++v)
        if (v != mask) sum += std::exp(static_cast<double>(l[v] - l[am]));
      const float conf = static_cast<float>(1.0 / sum);
      if (conf >= th) expect.emplace_back(p - 10, am);
      if (conf > best_conf) {
        best_conf = conf;
        best = {p - 10, am};
      }
    }
    if (expect.empty()) expect.push_back(best);
    std::vector<StepResult> res;
    StepRequest req{s.get(), th};
    ASSERT_TRUE(engine_->Step(std::span<const StepRequest>(&req, 1), &res).ok());
    ASSERT_EQ(res.size(), 1u);
    EXPECT_EQ(res[0].id, 7);
    EXPECT_EQ(res[0].unmasked, expect) << "threshold " << th;
    for (auto [pos, tok] : res[0].unmasked) {
      EXPECT_GE(pos, (lo - 10));
      EXPECT_LT(pos, (lo - 10) + 8);
    }
  }
}

TEST_F(DecoderTest, FallbackUnmasksOneTokenPerStepWhenNothingClears) {
  auto s = New(1, Prompt(6, 2), 16, 4, true);
  std::vector<StepResult> res;
  int steps = 0;
  int expected_block = 0;
  while (!s->done() && steps < 100) {
    const StepKind kind = s->next_step_kind();
    StepRequest req{s.get(), 1.0f};  // a random model is never fully certain
    ASSERT_TRUE(engine_->Step(std::span<const StepRequest>(&req, 1), &res).ok());
    ++steps;
    EXPECT_EQ(res[0].unmasked.size(), 1u);
    EXPECT_EQ(res[0].block, expected_block);
    EXPECT_EQ(res[0].kind, kind);
    // The first step of every block is a recompute step, the other three cache steps.
    EXPECT_EQ(kind, steps % 4 == 1 ? StepKind::kRecompute : StepKind::kCache) << "step " << steps;
    EXPECT_EQ(res[0].block_done, steps % 4 == 0);
    if (res[0].block_done) ++expected_block;
  }
  EXPECT_EQ(steps, 16);
  EXPECT_EQ(s->steps(), 16);
  EXPECT_TRUE(res[0].request_done);
  EXPECT_EQ(s->masked_remaining(), 0);
  for (int32_t t : s->output_tokens()) EXPECT_NE(t, model_->config.mask_token_id);
}

TEST_F(DecoderTest, LowerThresholdTakesNoMoreSteps) {
  std::vector<int> steps;
  for (float th : {0.9f, 0.5f, 0.1f}) {
    auto s = New(1, Prompt(8, 3), 32, 8, true);
    DecodeState* p = s.get();
    ASSERT_TRUE(RunToCompletion(*engine_, std::span<DecodeState* const>(&p, 1), th).ok());
    steps.push_back(s->steps());
  }
  EXPECT_GE(steps[0], steps[1]);
  EXPECT_GE(steps[1], steps[2]);
  EXPECT_GE(steps[2], 4);  // at least one step per block
}

// One batched call mixing prompt/output lengths, thresholds and step kinds gives each
// request exactly what it gets alone.
TEST_F(DecoderTest, BatchedMixMatchesEachRequestAlone) {
  struct Spec {
    int prompt, gen, block;
    bool cache;
    float th;
  };
  const std::vector<Spec> specs = {{5, 16, 8, true, 0.9f}, {20, 24, 8, true, 0.5f}, {9, 12, 4, false, 0.7f},
                                   {14, 32, 16, true, 0.3f}};
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto s = New(static_cast<int64_t>(i), Prompt(specs[i].prompt, 10 + i), specs[i].gen, specs[i].block, specs[i].cache);
    DecodeState* p = s.get();
    ASSERT_TRUE(RunToCompletion(*engine_, std::span<DecodeState* const>(&p, 1), specs[i].th).ok());
    alone.push_back(s->output_tokens());
  }
  std::vector<std::unique_ptr<DecodeState>> states;
  for (size_t i = 0; i < specs.size(); ++i)
    states.push_back(New(static_cast<int64_t>(i), Prompt(specs[i].prompt, 10 + i), specs[i].gen, specs[i].block,
                         specs[i].cache));
  bool mixed_kinds = false;
  std::vector<StepResult> res;
  for (;;) {
    std::vector<StepRequest> batch;
    bool rec = false, cac = false;
    for (size_t i = 0; i < specs.size(); ++i)
      if (!states[i]->done()) {
        batch.push_back({states[i].get(), specs[i].th});
        (states[i]->next_step_kind() == StepKind::kRecompute ? rec : cac) = true;
      }
    if (batch.empty()) break;
    mixed_kinds = mixed_kinds || (rec && cac);
    ASSERT_TRUE(engine_->Step(batch, &res).ok());
    ASSERT_EQ(res.size(), batch.size());
    for (size_t j = 0; j < batch.size(); ++j) EXPECT_EQ(res[j].id, batch[j].state->id());
  }
  EXPECT_TRUE(mixed_kinds);
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(states[i]->output_tokens(), alone[i]) << "request " << i;
}

TEST_F(DecoderTest, FirstStepWithAndWithoutCacheAgree) {
  auto a = New(1, Prompt(12, 4), 16, 8, true);
  auto b = New(1, Prompt(12, 4), 16, 8, false);
  std::vector<StepResult> ra, rb;
  StepRequest qa{a.get(), 0.6f}, qb{b.get(), 0.6f};
  ASSERT_TRUE(engine_->Step(std::span<const StepRequest>(&qa, 1), &ra).ok());
  ASSERT_TRUE(engine_->Step(std::span<const StepRequest>(&qb, 1), &rb).ok());
  EXPECT_EQ(ra[0].unmasked, rb[0].unmasked);
  EXPECT_EQ(ra[0].kind, StepKind::kRecompute);
}

TEST_F(DecoderTest, ReportsConfidenceStatistics) {
  auto s = New(1, Prompt(7, 5), 16, 8, true);
  std::vector<StepResult> res;
  StepRequest req{s.get(), 0.5f};
  ASSERT_TRUE(engine_->Step(std::span<const StepRequest>(&req, 1), &res).ok());
  const ConfidenceStats& st = res[0].stats;
  EXPECT_EQ(st.block.count, 8);
  EXPECT_EQ(st.output.count, 16);  // a recompute step sees the whole output
  EXPECT_LE(st.block.min, st.block.q1);
  EXPECT_LE(st.block.q1, st.block.median);
  EXPECT_LE(st.block.median, st.block.q3);
  EXPECT_GT(st.block.mean, 0.0f);
  EXPECT_LE(st.block.mean, 1.0f);
  // Counts are monotone in the threshold (0.9 first), and the count at 0.5 is what unmasked
  // (or one, by the fallback).
  for (size_t k = 1; k < kCandidateThresholds.size(); ++k) EXPECT_GE(st.block_above[k], st.block_above[k - 1]);
  EXPECT_EQ(static_cast<int>(res[0].unmasked.size()), std::max(1, st.block_above[4]));
  ASSERT_FALSE(s->done());
  ASSERT_TRUE(engine_->Step(std::span<const StepRequest>(&req, 1), &res).ok());
  if (res[0].kind == StepKind::kCache) {
    EXPECT_EQ(res[0].stats.output.count, res[0].stats.block.count);
  }
}

TEST_F(DecoderTest, EosEarlyStopFinishesAfterAnAllEosBlock) {
  // A zero LM head: all logits equal, so the argmax is id 0 (EOS) everywhere, confidence 1/V.
  auto m = std::make_shared<LoadedModel>(*model_);
  std::fill(m->weights.lm_head.data.begin(), m->weights.lm_head.data.end(), 0.0f);
  auto e = DiffusionEngine::Create(m, 1);
  ASSERT_TRUE(e.ok());
  auto s = (*e)->NewRequest(1, Prompt(5, 6), DecodeOptions{32, 8, true, /*eos_early_stop=*/true, 0.0f, 0});
  ASSERT_TRUE(s.ok());
  DecodeState* p = s->get();
  ASSERT_TRUE(RunToCompletion(**e, std::span<DecodeState* const>(&p, 1), 0.01f).ok());
  EXPECT_TRUE(p->done());
  EXPECT_EQ(p->steps(), 1);  // the first block fills with EOS in one step, then stop
  for (int32_t t : p->output_tokens()) EXPECT_EQ(t, 0);
}

TEST_F(DecoderTest, RejectsBadRequests) {
  auto bad = [&](const std::vector<int32_t>& prompt, DecodeOptions o, StatusCode code, const std::string& what) {
    auto s = engine_->NewRequest(1, prompt, o);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.status().code(), code) << what;
    EXPECT_FALSE(s.status().message().empty());
  };
  bad(Prompt(4, 1), {0, 8, true}, StatusCode::kInvalidArgument, "gen length 0");
  bad(Prompt(4, 1), {12, 8, true}, StatusCode::kInvalidArgument, "not a multiple of block with cache");
  bad(Prompt(4, 1), {16, 0, true}, StatusCode::kInvalidArgument, "block 0");
  bad({}, {16, 8, true}, StatusCode::kInvalidArgument, "empty prompt");
  bad({3, 99}, {16, 8, true}, StatusCode::kInvalidArgument, "token out of vocab");
  bad(Prompt(250, 1), {16, 8, true}, StatusCode::kOutOfRange, "longer than the context");
  auto s = engine_->NewRequest(1, Prompt(250, 1), {16, 8, true});
  EXPECT_NE(s.status().message().find("context"), std::string::npos);
  // Without the cache a gen length that is not a multiple of the block is fine.
  EXPECT_TRUE(engine_->NewRequest(1, Prompt(4, 1), {12, 8, false}).ok());
}

TEST_F(DecoderTest, RejectsBadBatches) {
  auto s = New(1, Prompt(4, 1), 8, 8, true);
  std::vector<StepResult> res;
  for (float th : {0.0f, -0.1f, 1.5f, std::nanf("")}) {
    StepRequest r{s.get(), th};
    Status st = engine_->Step(std::span<const StepRequest>(&r, 1), &res);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << th;
  }
  std::vector<StepRequest> dup = {{s.get(), 0.9f}, {s.get(), 0.9f}};
  EXPECT_EQ(engine_->Step(dup, &res).code(), StatusCode::kInvalidArgument);
  DecodeState* p = s.get();
  ASSERT_TRUE(RunToCompletion(*engine_, std::span<DecodeState* const>(&p, 1), 0.9f).ok());
  StepRequest r{s.get(), 0.9f};
  EXPECT_EQ(engine_->Step(std::span<const StepRequest>(&r, 1), &res).code(), StatusCode::kFailedPrecondition);
}

// A request resumed from its tokens at a block boundary (a migration) decodes exactly as
// the original goes on: the resumed engine's recompute step rebuilds the same cache.
TEST_F(DecoderTest, ResumedRequestContinuesLikeTheOriginal) {
  auto prompt = Prompt(9, 3);
  auto a = New(1, prompt, 16, 4, /*cache=*/true);
  std::vector<StepResult> res;
  StepRequest ra{a.get(), 0.6f};
  while (a->current_block() < 2 && !a->done()) ASSERT_TRUE(engine_->Step({&ra, 1}, &res).ok());
  ASSERT_FALSE(a->done());
  auto b = engine_->ResumeRequest(1, prompt, a->options(), a->output_tokens(), a->steps());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto& s = *b.value();
  EXPECT_EQ(s.current_block(), a->current_block());
  EXPECT_EQ(s.masked_remaining(), a->masked_remaining());
  EXPECT_EQ(s.steps(), a->steps());
  EXPECT_EQ(s.next_step_kind(), StepKind::kRecompute);
  StepRequest rb{&s, 0.6f};
  while (!a->done()) {
    ASSERT_TRUE(engine_->Step({&ra, 1}, &res).ok());
    ASSERT_TRUE(engine_->Step({&rb, 1}, &res).ok());
  }
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.output_tokens(), a->output_tokens());
}

// Mid-block (a worker failed after some of the block was unmasked): the resumed state starts
// with a recompute step in that block; a finished output is done at once.
TEST_F(DecoderTest, ResumeMidBlockRecomputesAndFinishedIsDone) {
  auto prompt = Prompt(6, 4);
  auto a = New(2, prompt, 8, 8, /*cache=*/true);
  std::vector<StepResult> res;
  StepRequest ra{a.get(), 0.99f};
  ASSERT_TRUE(engine_->Step({&ra, 1}, &res).ok());
  auto out = a->output_tokens();
  auto b = engine_->ResumeRequest(2, prompt, a->options(), out, 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b.value()->current_block(), 0);
  EXPECT_EQ(b.value()->next_step_kind(), StepKind::kRecompute);
  std::vector<int32_t> full(8, 5);
  auto c = engine_->ResumeRequest(3, prompt, a->options(), full, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c.value()->done());
}

TEST_F(DecoderTest, ResumeRejectsInconsistentOutputs) {
  auto prompt = Prompt(6, 5);
  const int M = model_->config.mask_token_id;
  DecodeOptions o{16, 4, true, false, 0.0f, 0};
  std::vector<int32_t> wrong_len(15, M);
  EXPECT_FALSE(engine_->ResumeRequest(1, prompt, o, wrong_len, 0).ok());
  std::vector<int32_t> gap(16, M);
  gap[9] = 5;  // block 2 decoded while block 0 is still masked
  EXPECT_FALSE(engine_->ResumeRequest(1, prompt, o, gap, 0).ok());
  std::vector<int32_t> bad_id(16, M);
  bad_id[0] = model_->config.vocab_size;
  EXPECT_FALSE(engine_->ResumeRequest(1, prompt, o, bad_id, 0).ok());
  std::vector<int32_t> fresh(16, M);
  EXPECT_FALSE(engine_->ResumeRequest(1, prompt, o, fresh, -1).ok());
  EXPECT_TRUE(engine_->ResumeRequest(1, prompt, o, fresh, 0).ok());
}

}  // namespace
}  // namespace tediserve::engine
