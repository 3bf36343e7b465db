#include "engine/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/temp_dir.h"
#include "engine/decoder.h"
#include "engine/float16.h"
#include "engine/safetensors.h"
#include "engine/testing/checkpoint_files.h"
#include "engine/testing/random_model.h"
#include "engine/testing/reference_forward.h"

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
  for (int tp : {1, 2})
  for (WeightLayout layout : {WeightLayout::kPacked, WeightLayout::kMapped}) {
    auto eng = DiffusionEngine::Create(shared, tp, layout);
    ASSERT_TRUE(eng.ok()) << eng.status().ToString();
    ASSERT_EQ((*eng)->transformer().layout(), layout);
    for (int r = 0; r < rows; ++r) {
      std::vector<int32_t> seq;
      for (int p = 0; p < S && (*ids)[r * S + p] >= 0; ++p) seq.push_back((*ids)[r * S + p]);
      auto logits = (*eng)->FullLogits(seq);
      ASSERT_TRUE(logits.ok()) << logits.status().ToString();
      const float diff = MaxAbsDiff(logits->data(), ref->data() + static_cast<size_t>(r) * S * V, seq.size() * V);
      EXPECT_LE(diff, 1e-3f) << model_dir << " row " << r << " tp " << tp << " " << WeightLayoutName(layout);
      std::printf("%s row %d (%zu tokens), TP %d, %s: max |C++ - PyTorch| = %.3g\n", fixture.c_str(), r, seq.size(),
                  tp, WeightLayoutName(layout), diff);
    }
  }
}

TEST(TransformerTest, TinyLladaMatchesPyTorchReference) {
  CheckAgainstFixture(kSrc + "/models/tiny-llada", kSrc + "/tests/fixtures/llada_reference.safetensors");
}

TEST(TransformerTest, TinyLladaLongMatchesPyTorchReference) {
  CheckAgainstFixture(kSrc + "/models/tiny-llada-long", kSrc + "/tests/fixtures/llada_long_reference.safetensors");
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

TEST(TransformerTest, SmallModelsArePackedByDefault) {
  auto model = testing::RandomModel();
  auto t = Transformer::Create(model, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->layout(), WeightLayout::kPacked);
  EXPECT_GT((*t)->packed_bytes(), 0u);
  auto m = Transformer::Create(model, 1, WeightLayout::kMapped);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->layout(), WeightLayout::kMapped);
  EXPECT_EQ((*m)->packed_bytes(), 0u);
}

// The mapped layout on fp32 weights held in memory (sgemm straight on the model's matrices,
// separate Q/K/V and gate/up GEMMs, column blocks for the output projections) against the
// packed one, for LLaDA and Dream (GQA, biases), TP 1 and 2.
TEST(TransformerTest, MappedLayoutMatchesPackedOnFp32Weights) {
  for (bool dream : {false, true}) {
    auto model = testing::RandomModel(32, 2, 4, 2, 64, 40, dream);
    auto tokens = RandomTokens(29, 40, 4);
    auto packed = Transformer::Create(model, 1, WeightLayout::kPacked);
    ASSERT_TRUE(packed.ok());
    const auto ref = Full(**packed, tokens);
    for (int tp : {1, 2}) {
      auto mapped = Transformer::Create(model, tp, WeightLayout::kMapped);
      ASSERT_TRUE(mapped.ok());
      const auto got = Full(**mapped, tokens);
      ASSERT_EQ(got.size(), ref.size());
      EXPECT_LE(MaxAbsDiff(got.data(), ref.data(), ref.size()), 1e-4f) << (dream ? "dream" : "llada") << " tp " << tp;
    }
  }
}

// GemmBlock on 16-bit views, with row and column offsets and enough rows for several
// panels, against a double-precision product; both panel heights (few rows of A, many).
TEST(TransformerTest, GemmBlockConvertsPanelsExactly) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int rows = 1500, cols = 300;
  for (WeightType type : {WeightType::kBF16, WeightType::kF16, WeightType::kF32}) {
    std::vector<uint16_t> half(static_cast<size_t>(rows) * cols);
    std::vector<float> exact(half.size());
    for (size_t i = 0; i < half.size(); ++i) {
      const float x = u(rng);
      half[i] = type == WeightType::kBF16 ? FloatToBf16(x) : FloatToF16(x);
      exact[i] = type == WeightType::kBF16 ? Bf16ToFloat(half[i]) : type == WeightType::kF16 ? F16ToFloat(half[i]) : x;
    }
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.type = type;
    m.mapped = type == WeightType::kF32 ? static_cast<const void*>(exact.data()) : half.data();
    for (int M : {3, 200}) {
      std::vector<float> A(static_cast<size_t>(M) * 250);
      for (float& x : A) x = u(rng);
      const Transformer::WeightBlock b{&m, 37, 1400, 21, 250};  // rows 37..1436, cols 21..270
      const int ldc = 1410;
      std::vector<float> C(static_cast<size_t>(M) * ldc, 5.0f), scratch;
      Transformer::GemmBlock(M, A.data(), 250, b, 0.5f, C.data(), ldc, &scratch);
      double worst = 0;
      for (int i = 0; i < M; ++i) {
        for (int j = 0; j < b.rows; ++j) {
          double acc = 0;
          for (int k = 0; k < b.cols; ++k)
            acc += static_cast<double>(A[static_cast<size_t>(i) * 250 + k]) *
                   exact[static_cast<size_t>(b.r0 + j) * cols + b.c0 + k];
          worst = std::max(worst, std::fabs(C[static_cast<size_t>(i) * ldc + j] - (acc + 2.5)));
        }
        for (int j = b.rows; j < ldc; ++j) ASSERT_EQ(C[static_cast<size_t>(i) * ldc + j], 5.0f);  // untouched
      }
      EXPECT_LE(worst, 1e-3) << WeightTypeName(type) << " M " << M;
    }
  }
}

// A sharded checkpoint with model.safetensors.index.json, in each dtype, loaded (16-bit
// matrices stay mapped) and run in both layouts and TP 1 / 2, against the independent
// double-precision reference (testing/reference_forward.h) computed from the values written:
// LLaDA with GQA, and Dream with GQA, q/k/v biases and shifted logits.
TEST(TransformerTest, ShardedCheckpointMatchesIndependentReference) {
  for (Architecture arch : {Architecture::kLLaDA, Architecture::kDream})
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      TempDir dir("tedi_transformer_ckpt");
      testing::Dims m;
      m.d = 64, m.layers = 2, m.heads = 4, m.kv_heads = 2, m.mlp = 96, m.vocab = 50;
      const bool llada = arch == Architecture::kLLaDA;
      std::ofstream(dir.path() / "config.json")
          << (llada ? testing::LLaDAConfigJson(m) : testing::DreamConfigJson(m)).dump();
      const auto tensors = testing::RandomTensors(arch, m, dtype, true, 21);
      ASSERT_TRUE(testing::WriteCheckpoint(dir.path(), tensors, 3, true).ok());
      std::map<std::string, std::vector<float>> by_name;
      for (const auto& t : tensors) by_name[t.name] = t.floats;

      auto loaded = LoadModel(dir.path().string());
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      EXPECT_EQ(loaded->files.size(), 3u);
      EXPECT_EQ(loaded->weights.layers[1].w_up.is_view(), true);
      auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
      const std::string what = std::string(ArchitectureName(arch)) + " " + DTypeName(dtype);

      auto tokens = RandomTokens(23, m.vocab, 8);
      const std::vector<double> ref = testing::ReferenceLogits(model->config, by_name, tokens);
      for (WeightLayout layout : {WeightLayout::kPacked, WeightLayout::kMapped})
        for (int tp : {1, 2}) {
          auto eng = DiffusionEngine::Create(model, tp, layout);
          ASSERT_TRUE(eng.ok()) << eng.status().ToString();
          auto logits = (*eng)->FullLogits(tokens);
          ASSERT_TRUE(logits.ok());
          ASSERT_EQ(logits->size(), ref.size());
          double worst = 0, scale = 0;
          for (size_t i = 0; i < ref.size(); ++i) {
            worst = std::max(worst, std::fabs((*logits)[i] - ref[i]));
            scale = std::max(scale, std::fabs(ref[i]));
          }
          EXPECT_GT(scale, 1.0) << what;  // the logits are not trivially small
          EXPECT_LE(worst, 2e-4 * std::max(1.0, scale)) << what << " " << WeightLayoutName(layout) << " tp " << tp;
          std::printf("%s, %s, TP %d: max |engine - reference| = %.3g (max |logit| %.3g)\n", what.c_str(),
                      WeightLayoutName(layout), tp, worst, scale);
        }
    }
}

}  // namespace
}  // namespace tediserve::engine
