#include "engine/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/decoder.h"
#include "engine/safetensors.h"
#include "engine/testing/random_model.h"

namespace tediserve::engine {
namespace {

const std::string kSrc = TEDI_SOURCE_DIR;

float MaxAbsDiff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The PyTorch fixture written by tools/train_tiny_model.py: rows of input ids (padded with -1)
// and the fp32 logits PyTorch computed for them with the shipped (bf16) weights.
void CheckAgainstFixture(const std::string& model_dir, const std::string& fixture) {
  auto model = LoadModel(model_dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto shared = std::make_shared<const LoadedModel>(std::move(model).value());
  auto file = SafetensorsFile::Open(fixture);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto ids = file->ReadInt32("input_ids");
  auto ref = file->ReadFloat("logits");
  ASSERT_TRUE(ids.ok() && ref.ok());
  const auto& shape = file->Find("input_ids")->shape;
  const int rows = static_cast<int>(shape[0]), S = static_cast<int>(shape[1]);
  const int V = shared->config.vocab_size;
  ASSERT_EQ(ref->size(), static_cast<size_t>(rows) * S * V);
  for (int tp : {1, 2}) {
    auto eng = DiffusionEngine::Create(shared, tp);
    ASSERT_TRUE(eng.ok()) << eng.status().ToString();
    for (int r = 0; r < rows; ++r) {
      std::vector<int32_t> seq;
      for (int p = 0; p < S && (*ids)[r * S + p] >= 0; ++p) seq.push_back((*ids)[r * S + p]);
      auto logits = (*eng)->FullLogits(seq);
      ASSERT_TRUE(logits.ok()) << logits.status().ToString();
      const float diff = MaxAbsDiff(logits->data(), ref->data() + static_cast<size_t>(r) * S * V, seq.size() * V);
      EXPECT_LE(diff, 1e-3f) << model_dir << " row " << r << " tp " << tp;
      std::printf("%s row %d (%zu tokens), TP %d: max |C++ - PyTorch| = %.3g\n", fixture.c_str(), r, seq.size(), tp,
                  diff);
    }
  }
}

TEST(TransformerTest, TinyLladaMatchesPyTorchReference) {
  CheckAgainstFixture(kSrc + "/models/tiny-llada", kSrc + "/tests/fixtures/llada_reference.safetensors");
}

TEST(TransformerTest, DreamLayoutMatchesPyTorchReference) {
  CheckAgainstFixture(kSrc + "/tests/fixtures/tiny-dream", kSrc + "/tests/fixtures/dream_reference.safetensors");
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(2, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = u(rng);
  return t;
}

std::vector<float> Full(Transformer& t, const std::vector<int32_t>& tokens) {
  const int S = static_cast<int>(tokens.size());
  KvBuffer kv(t.config(), S);
  SequenceInput in{tokens.data(), S, 0, S, &kv, 0, S};
  std::vector<float> out;
  t.Forward(std::span<const SequenceInput>(&in, 1), &out);
  return out;
}

TEST(TransformerTest, TensorParallelMatchesSingleShard) {
  for (bool dream : {false, true}) {
    auto model = testing::RandomModel(32, 2, 4, dream ? 2 : 4, 64, 40, dream);
    auto t1 = Transformer::Create(model, 1);
    auto t2 = Transformer::Create(model, 2);
    ASSERT_TRUE(t1.ok() && t2.ok());
    auto tokens = RandomTokens(37, 40, 3);
    auto a = Full(**t1, tokens), b = Full(**t2, tokens);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LE(MaxAbsDiff(a.data(), b.data(), a.size()), 1e-4f);
  }
}

TEST(TransformerTest, RejectsDegreeThatDoesNotDivideHeads) {
  auto model = testing::RandomModel(32, 1, 4, 2, 64, 40);
  auto t = Transformer::Create(model, 3);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("divide"), std::string::npos);
}

TEST(TransformerTest, BatchOfMixedLengthsMatchesEachAlone) {
  auto model = testing::RandomModel();
  auto t = Transformer::Create(model, 2);
  ASSERT_TRUE(t.ok());
  std::vector<std::vector<int32_t>> seqs = {RandomTokens(5, 40, 1), RandomTokens(30, 40, 2), RandomTokens(17, 40, 3)};
  std::vector<KvBuffer> kvs;
  for (auto& s : seqs) kvs.emplace_back(model->config, static_cast<int>(s.size()));
  std::vector<SequenceInput> in;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int S = static_cast<int>(seqs[i].size());
    in.push_back({seqs[i].data(), S, 0, S, &kvs[i], 0, S});
  }
  std::vector<float> batched;
  ForwardStats st = (*t)->Forward(in, &batched);
  EXPECT_EQ(st.tokens, 52);
  size_t off = 0;
  for (auto& s : seqs) {
    auto alone = Full(**t, s);
    EXPECT_LE(MaxAbsDiff(batched.data() + off, alone.data(), alone.size()), 1e-4f);
    off += alone.size();
  }
  EXPECT_EQ(off, batched.size());
}

// With a fresh cache (nothing changed since the recompute), a cache step over a block gives
// exactly the full forward's logits for that block: the approximation only comes from
// tokens that change after the refresh.
TEST(TransformerTest, CacheStepWithFreshCacheMatchesFullForward) {
  for (bool dream : {false, true}) {
    auto model = testing::RandomModel(32, 2, 4, 2, 64, 40, dream);
    auto t = Transformer::Create(model, 1);
    ASSERT_TRUE(t.ok());
    auto tokens = RandomTokens(40, 40, 9);
    const int S = 40, lo = 16, hi = 24, shift = dream ? 1 : 0;
    KvBuffer kv(model->config, S);
    SequenceInput full{tokens.data(), S, 0, S, &kv, 0, S};
    std::vector<float> ref;
    (*t)->Forward(std::span<const SequenceInput>(&full, 1), &ref);
    SequenceInput cache{tokens.data(), S, lo - shift, hi, &kv, lo - shift, hi - shift};
    std::vector<float> got;
    ForwardStats st = (*t)->Forward(std::span<const SequenceInput>(&cache, 1), &got);
    EXPECT_EQ(st.tokens, hi - lo + shift);
    const int V = model->config.vocab_size;
    ASSERT_EQ(got.size(), static_cast<size_t>(hi - lo) * V);
    EXPECT_LE(MaxAbsDiff(got.data(), ref.data() + static_cast<size_t>(lo - shift) * V, got.size()), 1e-4f)
        << (dream ? "dream" : "llada");
  }
}

}  // namespace
}  // namespace tediserve::engine
