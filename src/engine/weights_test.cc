#include "engine/weights.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "engine/float16.h"
#include "engine/checkpoint.h"
#include "engine/safetensors.h"
#include "engine/testing/checkpoint_files.h"

namespace tediserve::engine {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// Small but pairwise different sizes, so a swapped dimension shows up as a shape error.
struct Dims {
  int d = 16, layers = 2, heads = 4, kv_heads = 4, mlp = 24, vocab = 20;
  int head_dim() const { return d / heads; }
};

json LLaDAConfig(const Dims& m, bool tied = false) {
  return {{"architectures", {"LLaDAModelLM"}}, {"model_type", "llada"}, {"d_model", m.d},
          {"n_heads", m.heads}, {"n_kv_heads", m.kv_heads}, {"n_layers", m.layers},
          {"mlp_hidden_size", m.mlp}, {"vocab_size", m.vocab}, {"embedding_size", m.vocab},
          {"max_sequence_length", 64}, {"rope_theta", 10000.0}, {"rms_norm_eps", 1e-5},
          {"mask_token_id", 1}, {"eos_token_id", 0}, {"weight_tying", tied},
          {"include_bias", false}};
}

json DreamConfig(const Dims& m, bool tied = false) {
  return {{"architectures", {"DreamModel"}}, {"model_type", "Dream"}, {"hidden_size", m.d},
          {"num_attention_heads", m.heads}, {"num_key_value_heads", m.kv_heads},
          {"num_hidden_layers", m.layers}, {"intermediate_size", m.mlp},
          {"vocab_size", m.vocab}, {"max_position_embeddings", 64}, {"mask_token_id", 2},
          {"eos_token_id", 0}, {"tie_word_embeddings", tied}};
}

// Tensors in the checkpoint's naming, spelled out here independently of weights.cc.
std::vector<std::pair<std::string, std::vector<int64_t>>> CheckpointLayout(Architecture arch,
                                                                          const Dims& m,
                                                                          bool with_head) {
  const int64_t q = m.heads * m.head_dim(), kv = m.kv_heads * m.head_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  if (arch == Architecture::kLLaDA) {
    out.push_back({"model.transformer.wte.weight", {m.vocab, m.d}});
    for (int i = 0; i < m.layers; ++i) {
      const std::string p = "model.transformer.blocks." + std::to_string(i) + ".";
      out.push_back({p + "attn_norm.weight", {m.d}});
      out.push_back({p + "ff_norm.weight", {m.d}});
      out.push_back({p + "q_proj.weight", {q, m.d}});
      out.push_back({p + "k_proj.weight", {kv, m.d}});
      out.push_back({p + "v_proj.weight", {kv, m.d}});
      out.push_back({p + "attn_out.weight", {m.d, q}});
      out.push_back({p + "ff_proj.weight", {m.mlp, m.d}});
      out.push_back({p + "up_proj.weight", {m.mlp, m.d}});
      out.push_back({p + "ff_out.weight", {m.d, m.mlp}});
    }
    out.push_back({"model.transformer.ln_f.weight", {m.d}});
    if (with_head) out.push_back({"model.transformer.ff_out.weight", {m.vocab, m.d}});
    return out;
  }
  out.push_back({"model.embed_tokens.weight", {m.vocab, m.d}});
  for (int i = 0; i < m.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {m.d}});
    out.push_back({p + "post_attention_layernorm.weight", {m.d}});
    out.push_back({p + "self_attn.q_proj.weight", {q, m.d}});
    out.push_back({p + "self_attn.q_proj.bias", {q}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, m.d}});
    out.push_back({p + "self_attn.k_proj.bias", {kv}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, m.d}});
    out.push_back({p + "self_attn.v_proj.bias", {kv}});
    out.push_back({p + "self_attn.o_proj.weight", {m.d, q}});
    out.push_back({p + "mlp.gate_proj.weight", {m.mlp, m.d}});
    out.push_back({p + "mlp.up_proj.weight", {m.mlp, m.d}});
    out.push_back({p + "mlp.down_proj.weight", {m.d, m.mlp}});
  }
  out.push_back({"model.norm.weight", {m.d}});
  if (with_head) out.push_back({"lm_head.weight", {m.vocab, m.d}});
  return out;
}

// Random values already rounded to `dtype`, so what is read back must match exactly.
std::vector<TensorToWrite> RandomTensors(Architecture arch, const Dims& m, DType dtype,
                                         bool with_head, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<TensorToWrite> out;
  for (const auto& [name, shape] : CheckpointLayout(arch, m, with_head)) {
    TensorToWrite t{name, dtype, shape, {}, {}};
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    for (int64_t i = 0; i < n; ++i) {
      const float x = dist(rng);
      t.floats.push_back(dtype == DType::kBF16  ? Bf16ToFloat(FloatToBf16(x))
                         : dtype == DType::kF16 ? F16ToFloat(FloatToF16(x))
                                                : x);
    }
    out.push_back(std::move(t));
  }
  return out;
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  void WriteConfig(const json& config) {
    std::ofstream(dir_.File("config.json")) << config.dump(2);
  }

  // Writes the tensors into `shards` files, round-robin, named like Hugging Face shards.
  void WriteShards(const std::vector<TensorToWrite>& tensors, int shards = 1) {
    std::vector<std::vector<TensorToWrite>> parts(shards);
    for (size_t i = 0; i < tensors.size(); ++i) parts[i % shards].push_back(tensors[i]);
    for (int s = 0; s < shards; ++s) {
      const std::string name = shards == 1 ? "model.safetensors"
                                           : "model-0000" + std::to_string(s + 1) + "-of-0000" +
                                                 std::to_string(shards) + ".safetensors";
      ASSERT_TRUE(WriteSafetensors(dir_.File(name), parts[s]).ok());
    }
  }

  std::string dir() const { return dir_.path().string(); }

  StatusOr<LoadedModel> Load() { return LoadModel(dir()); }

  void ExpectLoadError(StatusCode code, const std::vector<std::string>& needles) {
    StatusOr<LoadedModel> m = Load();
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), code) << m.status().ToString();
    for (const std::string& s : needles) EXPECT_THAT(m.status().message(), HasSubstr(s));
  }

  TempDir dir_{"tedi_weights_test"};
};

// Compares every engine tensor with the checkpoint tensor it must come from.
void ExpectWeightsMatch(const LoadedModel& model, const std::vector<TensorToWrite>& written) {
  std::map<std::string, const TensorToWrite*> by_name;
  for (const TensorToWrite& t : written) by_name[t.name] = &t;
  auto expect_vec = [&](const std::vector<float>& got, const std::string& name) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(got, by_name[name]->floats) << name;
  };
  auto expect_mat = [&](const Matrix& got, const std::string& name) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const TensorToWrite& t = *by_name[name];
    ASSERT_EQ(t.shape.size(), 2u) << name;
    EXPECT_EQ(got.rows, t.shape[0]) << name;
    EXPECT_EQ(got.cols, t.shape[1]) << name;
    EXPECT_EQ(got.ToFloat(), t.floats) << name;
    // 16-bit matrices stay in the checkpoint mapping; F32 ones too when aligned (always, for
    // files this writer makes: every tensor before an F32 one has a multiple of 4 bytes here).
    EXPECT_TRUE(got.is_view()) << name;
    EXPECT_EQ(got.type, t.dtype == DType::kBF16 ? WeightType::kBF16
                        : t.dtype == DType::kF16 ? WeightType::kF16 : WeightType::kF32) << name;
  };
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  ASSERT_EQ(static_cast<int>(w.layers.size()), c.n_layers);
  if (c.arch == Architecture::kLLaDA) {
    expect_mat(w.embed, "model.transformer.wte.weight");
    for (int i = 0; i < c.n_layers; ++i) {
      const std::string p = "model.transformer.blocks." + std::to_string(i) + ".";
      const LayerWeights& l = w.layers[i];
      expect_vec(l.attn_norm, p + "attn_norm.weight");
      expect_vec(l.ffn_norm, p + "ff_norm.weight");
      expect_mat(l.wq, p + "q_proj.weight");
      expect_mat(l.wk, p + "k_proj.weight");
      expect_mat(l.wv, p + "v_proj.weight");
      expect_mat(l.wo, p + "attn_out.weight");
      expect_mat(l.w_gate, p + "ff_proj.weight");
      expect_mat(l.w_up, p + "up_proj.weight");
      expect_mat(l.w_down, p + "ff_out.weight");
      EXPECT_TRUE(l.bq.empty() && l.bk.empty() && l.bv.empty());
    }
    expect_vec(w.final_norm, "model.transformer.ln_f.weight");
    expect_mat(w.lm_head, c.tie_embeddings && !by_name.count("model.transformer.ff_out.weight")
                              ? "model.transformer.wte.weight"
                              : "model.transformer.ff_out.weight");
    return;
  }
  expect_mat(w.embed, "model.embed_tokens.weight");
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const LayerWeights& l = w.layers[i];
    expect_vec(l.attn_norm, p + "input_layernorm.weight");
    expect_vec(l.ffn_norm, p + "post_attention_layernorm.weight");
    expect_mat(l.wq, p + "self_attn.q_proj.weight");
    expect_mat(l.wk, p + "self_attn.k_proj.weight");
    expect_mat(l.wv, p + "self_attn.v_proj.weight");
    expect_vec(l.bq, p + "self_attn.q_proj.bias");
    expect_vec(l.bk, p + "self_attn.k_proj.bias");
    expect_vec(l.bv, p + "self_attn.v_proj.bias");
    expect_mat(l.wo, p + "self_attn.o_proj.weight");
    expect_mat(l.w_gate, p + "mlp.gate_proj.weight");
    expect_mat(l.w_up, p + "mlp.up_proj.weight");
    expect_mat(l.w_down, p + "mlp.down_proj.weight");
  }
  expect_vec(w.final_norm, "model.norm.weight");
  expect_mat(w.lm_head, c.tie_embeddings && !by_name.count("lm_head.weight")
                            ? "model.embed_tokens.weight"
                            : "lm_head.weight");
}

TEST_F(WeightsTest, LoadsLLaDAValueByValue) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  const auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, true, 1);
  WriteShards(tensors);
  StatusOr<LoadedModel> model = Load();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->dir, dir());
  EXPECT_EQ(model->config.arch, Architecture::kLLaDA);
  EXPECT_EQ(model->config.d_model, m.d);
  EXPECT_EQ(model->config.head_dim, m.head_dim());
  EXPECT_FLOAT_EQ(model->config.rope_theta, 10000.0f);
  ExpectWeightsMatch(*model, tensors);
}

TEST_F(WeightsTest, LoadsLLaDAGqaBf16FromTwoShards) {
  Dims m;
  m.kv_heads = 2;
  m.layers = 3;
  WriteConfig(LLaDAConfig(m));
  const auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kBF16, true, 2);
  WriteShards(tensors, 2);
  StatusOr<LoadedModel> model = Load();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->weights.layers[0].wk.rows, m.kv_heads * m.head_dim());
  ExpectWeightsMatch(*model, tensors);
}

TEST_F(WeightsTest, LoadsDreamWithBiasesAndGqa) {
  Dims m;
  m.heads = 4;
  m.kv_heads = 2;
  m.d = 32;
  m.mlp = 40;
  WriteConfig(DreamConfig(m));
  const auto tensors = RandomTensors(Architecture::kDream, m, DType::kF16, true, 3);
  WriteShards(tensors, 2);
  StatusOr<LoadedModel> model = Load();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->config.arch, Architecture::kDream);
  EXPECT_TRUE(model->config.qkv_bias);
  EXPECT_TRUE(model->config.shift_logits);
  EXPECT_EQ(model->weights.layers[1].bk.size(), static_cast<size_t>(m.kv_heads * m.head_dim()));
  ExpectWeightsMatch(*model, tensors);
}

TEST_F(WeightsTest, TiedHeadCopiesTheEmbedding) {
  const Dims m;
  WriteConfig(LLaDAConfig(m, /*tied=*/true));
  const auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, false, 4);
  WriteShards(tensors);
  StatusOr<LoadedModel> model = Load();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectWeightsMatch(*model, tensors);
  EXPECT_EQ(model->weights.lm_head.ToFloat(), model->weights.embed.ToFloat());
}

TEST_F(WeightsTest, TiedDreamHeadCopiesTheEmbedding) {
  const Dims m;
  WriteConfig(DreamConfig(m, /*tied=*/true));
  const auto tensors = RandomTensors(Architecture::kDream, m, DType::kBF16, false, 5);
  WriteShards(tensors);
  StatusOr<LoadedModel> model = Load();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectWeightsMatch(*model, tensors);
}

TEST_F(WeightsTest, ExtraTensorsAreIgnored) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, true, 6);
  tensors.push_back({"model.transformer.rotary.inv_freq", DType::kF32, {2}, {1, 2}, {}});
  WriteShards(tensors);
  EXPECT_TRUE(Load().ok());
}

TEST_F(WeightsTest, MissingFolder) {
  const std::string missing = dir() + "/nope";
  StatusOr<LoadedModel> m = LoadModel(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr(missing));
}

TEST_F(WeightsTest, FolderIsAFile) {
  std::ofstream(dir_.File("file")) << "x";
  StatusOr<LoadedModel> m = LoadModel(dir_.File("file"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(WeightsTest, MissingConfig) {
  WriteShards(RandomTensors(Architecture::kLLaDA, Dims(), DType::kF32, true, 7));
  ExpectLoadError(StatusCode::kNotFound, {dir_.File("config.json")});
}

TEST_F(WeightsTest, BadConfigNamesTheFile) {
  json config = LLaDAConfig(Dims());
  config["architectures"] = {"BertModel"};
  WriteConfig(config);
  WriteShards(RandomTensors(Architecture::kLLaDA, Dims(), DType::kF32, true, 8));
  ExpectLoadError(StatusCode::kInvalidArgument,
                  {dir_.File("config.json"), "unknown architecture 'BertModel'"});

  config = LLaDAConfig(Dims());
  config["n_heads"] = 5;
  config["n_kv_heads"] = 5;
  WriteConfig(config);
  ExpectLoadError(StatusCode::kInvalidArgument, {dir_.File("config.json"), "does not divide"});
}

TEST_F(WeightsTest, NoSafetensorsFiles) {
  WriteConfig(LLaDAConfig(Dims()));
  std::ofstream(dir_.File("model.bin")) << "pickle";
  ExpectLoadError(StatusCode::kNotFound, {dir(), "no *.safetensors"});
}

TEST_F(WeightsTest, MissingTensorIsNamed) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, true, 9);
  std::erase_if(tensors, [](const TensorToWrite& t) {
    return t.name == "model.transformer.blocks.1.up_proj.weight";
  });
  WriteShards(tensors);
  ExpectLoadError(StatusCode::kNotFound, {"'model.transformer.blocks.1.up_proj.weight'", dir()});
}

TEST_F(WeightsTest, UntiedHeadMissingIsAnError) {
  const Dims m;
  WriteConfig(DreamConfig(m));
  WriteShards(RandomTensors(Architecture::kDream, m, DType::kF32, false, 10));
  ExpectLoadError(StatusCode::kNotFound, {"'lm_head.weight'"});
}

TEST_F(WeightsTest, MissingBiasIsNamed) {
  const Dims m;
  WriteConfig(DreamConfig(m));
  auto tensors = RandomTensors(Architecture::kDream, m, DType::kF32, true, 11);
  std::erase_if(tensors, [](const TensorToWrite& t) {
    return t.name == "model.layers.0.self_attn.v_proj.bias";
  });
  WriteShards(tensors);
  ExpectLoadError(StatusCode::kNotFound, {"'model.layers.0.self_attn.v_proj.bias'"});
}

TEST_F(WeightsTest, ShapeMismatchWithConfig) {
  Dims m;
  m.kv_heads = 2;
  WriteConfig(LLaDAConfig(m));
  Dims file_dims = m;
  file_dims.kv_heads = 4;  // the file has MHA k/v, config.json says GQA
  WriteShards(RandomTensors(Architecture::kLLaDA, file_dims, DType::kF32, true, 12));
  ExpectLoadError(StatusCode::kInvalidArgument,
                  {dir_.File("model.safetensors"),
                   "tensor 'model.transformer.blocks.0.k_proj.weight' has shape [16,16] but "
                   "config.json implies [8,16]"});
}

TEST_F(WeightsTest, TransposedMatrixIsAShapeMismatch) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, true, 13);
  for (TensorToWrite& t : tensors) {
    if (t.name == "model.transformer.blocks.0.ff_out.weight") t.shape = {m.mlp, m.d};
  }
  WriteShards(tensors);
  ExpectLoadError(StatusCode::kInvalidArgument,
                  {"has shape [24,16] but config.json implies [16,24]"});
}

TEST_F(WeightsTest, TensorInTwoShardsIsAnError) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  const auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, true, 14);
  WriteShards(tensors);
  ASSERT_TRUE(WriteSafetensors(dir_.File("extra.safetensors"), {tensors[3]}).ok());
  ExpectLoadError(StatusCode::kDataLoss, {"'" + tensors[3].name + "' appears in both",
                                          "extra.safetensors", "model.safetensors"});
}

TEST_F(WeightsTest, TruncatedShard) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  WriteShards(RandomTensors(Architecture::kLLaDA, m, DType::kBF16, true, 15), 2);
  const std::string shard = dir_.File("model-00002-of-00002.safetensors");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  ExpectLoadError(StatusCode::kDataLoss, {shard, "truncated"});
}

TEST_F(WeightsTest, IntegerTensorWhereFloatExpected) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, true, 16);
  tensors.back() = {tensors.back().name, DType::kI32, tensors.back().shape, {},
                    std::vector<int64_t>(m.vocab * m.d, 1)};
  WriteShards(tensors);
  ExpectLoadError(StatusCode::kInvalidArgument, {"'model.transformer.ff_out.weight'", "I32"});
}

// --- Sharded checkpoints with model.safetensors.index.json ---

class IndexedCheckpointTest : public WeightsTest {
 protected:
  // A LLaDA folder in 3 bf16 shards with an index; returns the index written.
  json WriteIndexed(const Dims& m = Dims(), uint32_t seed = 30) {
    WriteConfig(LLaDAConfig(m));
    tensors_ = RandomTensors(Architecture::kLLaDA, m, DType::kBF16, true, seed);
    StatusOr<json> index = testing::WriteCheckpoint(dir_.path(), tensors_, 3, true);
    EXPECT_TRUE(index.ok());
    return index.ok() ? *index : json();
  }
  void RewriteIndex(const json& index) { std::ofstream(dir_.File(kCheckpointIndexFile)) << index.dump(1); }
  std::vector<TensorToWrite> tensors_;
};

TEST_F(IndexedCheckpointTest, LoadsShardsByIndexAndKeepsBf16Mapped) {
  const json index = WriteIndexed();
  StatusOr<LoadedModel> model = Load();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectWeightsMatch(*model, tensors_);
  EXPECT_EQ(model->files.size(), 3u);
  // Every matrix is a view into the mapping, in bf16: mapped bytes are the matrices' 2 bytes
  // per element; only the norms were copied (as fp32).
  uint64_t matrix_bytes = 0, vector_bytes = 0;
  for (const TensorToWrite& t : tensors_) (t.shape.size() == 2 ? matrix_bytes : vector_bytes) += t.floats.size() * 2;
  EXPECT_EQ(model->mapped_bytes, matrix_bytes);
  EXPECT_EQ(model->owned_bytes, vector_bytes * 2);
  EXPECT_EQ(model->weights.layers[0].wq.type, WeightType::kBF16);
  EXPECT_EQ(model->weights.layers[0].wq.ptr(), nullptr);  // no fp32 copy exists
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), matrix_bytes + vector_bytes);
}

TEST_F(IndexedCheckpointTest, StrayShardsOutsideTheIndexAreNotOpened) {
  WriteIndexed();
  std::ofstream(dir_.File("consolidated.safetensors")) << "not a safetensors file";
  StatusOr<LoadedModel> model = Load();
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->files.size(), 3u);
}

TEST_F(IndexedCheckpointTest, MissingShard) {
  WriteIndexed();
  const std::string shard = dir_.File(testing::ShardName(1, 3));
  std::filesystem::remove(shard);
  ExpectLoadError(StatusCode::kNotFound, {"names shard 'model-00002-of-00003.safetensors'", shard,
                                          "does not exist"});
}

TEST_F(IndexedCheckpointTest, IndexNamesATensorItsShardLacks) {
  json index = WriteIndexed();
  index["weight_map"]["model.transformer.blocks.7.q_proj.weight"] = testing::ShardName(0, 3);
  RewriteIndex(index);
  ExpectLoadError(StatusCode::kDataLoss, {"maps tensor 'model.transformer.blocks.7.q_proj.weight'",
                                          testing::ShardName(0, 3), "which has no such tensor"});
}

TEST_F(IndexedCheckpointTest, IndexPutsATensorInTheWrongShard) {
  json index = WriteIndexed();
  const std::string name = "model.transformer.blocks.0.q_proj.weight";
  const std::string actual = index["weight_map"][name];
  index["weight_map"][name] = actual == testing::ShardName(0, 3) ? testing::ShardName(1, 3) : testing::ShardName(0, 3);
  RewriteIndex(index);
  ExpectLoadError(StatusCode::kDataLoss, {"'" + name + "'", "which has no such tensor"});
}

TEST_F(IndexedCheckpointTest, TensorInAShardButMappedElsewhere) {
  json index = WriteIndexed();
  // A tensor both shards hold would be a duplicate; instead the index maps a tensor of shard
  // 1 to shard 2 while shard 2 really holds a copy under that name.
  const std::string name = "model.transformer.ln_f.weight";
  const std::string real = index["weight_map"][name];
  const std::string other = real == testing::ShardName(2, 3) ? testing::ShardName(0, 3) : testing::ShardName(2, 3);
  std::vector<TensorToWrite> other_tensors;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (index["weight_map"][tensors_[i].name] == other) other_tensors.push_back(tensors_[i]);
  for (const TensorToWrite& t : tensors_)
    if (t.name == name) other_tensors.push_back(t);
  ASSERT_TRUE(WriteSafetensors(dir_.File(other), other_tensors).ok());
  // The index still maps `name` to its original shard: the copy in `other` contradicts it.
  ExpectLoadError(StatusCode::kDataLoss, {"tensor '" + name + "' is in", other, "maps it to '" + real + "'"});
}

TEST_F(IndexedCheckpointTest, NeededTensorMissingFromTheIndex) {
  json index = WriteIndexed();
  index["weight_map"].erase("model.transformer.blocks.1.ff_norm.weight");
  RewriteIndex(index);
  ExpectLoadError(StatusCode::kNotFound, {"'model.transformer.blocks.1.ff_norm.weight' is not in",
                                          kCheckpointIndexFile});
}

TEST_F(IndexedCheckpointTest, TruncatedShard) {
  WriteIndexed();
  const std::string shard = dir_.File(testing::ShardName(2, 3));
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 10);
  ExpectLoadError(StatusCode::kDataLoss, {shard, "truncated"});
}

TEST_F(IndexedCheckpointTest, DtypeAndShapeMismatchesInAShard) {
  json index = WriteIndexed();
  const std::string name = "model.transformer.blocks.1.k_proj.weight";
  const std::string shard = index["weight_map"][name];
  auto rewrite = [&](const std::function<void(TensorToWrite*)>& change) {
    std::vector<TensorToWrite> part;
    for (TensorToWrite t : tensors_) {
      if (index["weight_map"][t.name] != shard) continue;
      if (t.name == name) change(&t);
      part.push_back(std::move(t));
    }
    ASSERT_TRUE(WriteSafetensors(dir_.File(shard), part).ok());
  };
  rewrite([](TensorToWrite* t) {
    t->dtype = DType::kI64;
    t->ints.assign(t->floats.size(), 3);
    t->floats.clear();
  });
  ExpectLoadError(StatusCode::kInvalidArgument, {dir_.File(shard), "'" + name + "'", "dtype I64", "not a float dtype"});
  rewrite([](TensorToWrite* t) { t->shape = {t->shape[0] / 2, t->shape[1] * 2}; });
  ExpectLoadError(StatusCode::kInvalidArgument, {"'" + name + "' has shape [8,32] but config.json implies [16,16]"});
}

TEST_F(WeightsTest, F64TensorIsUnimplemented) {
  const Dims m;
  WriteConfig(LLaDAConfig(m));
  auto tensors = RandomTensors(Architecture::kLLaDA, m, DType::kF32, true, 31);
  std::erase_if(tensors, [](const TensorToWrite& t) { return t.name == "model.transformer.ln_f.weight"; });
  ASSERT_TRUE(WriteSafetensors(dir_.File("model-00001-of-00002.safetensors"), tensors).ok());
  // The writer has no F64; the second shard is written by hand: ln_f as F64 zeros.
  std::string header = json{{"model.transformer.ln_f.weight",
                             {{"dtype", "F64"}, {"shape", {m.d}}, {"data_offsets", {0, 8 * m.d}}}}}.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t len = header.size();
  std::string bytes(reinterpret_cast<const char*>(&len), 8);
  bytes += header + std::string(8 * m.d, '\0');
  std::ofstream(dir_.File("model-00002-of-00002.safetensors"), std::ios::binary) << bytes;
  ExpectLoadError(StatusCode::kUnimplemented,
                  {"'model.transformer.ln_f.weight' has dtype F64", "supported: F32, BF16, F16"});
}

TEST(CheckpointIndexTest, ParsesAndRefusesMalformedIndexes) {
  StatusOr<CheckpointIndex> ok = ParseCheckpointIndex(
      R"({"metadata": {"total_size": 16031162368}, "weight_map": {"a": "model-00001-of-00002.safetensors",
          "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})", "idx");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok->total_size, 16031162368ull);
  EXPECT_EQ(ok->shards(), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                    "model-00002-of-00002.safetensors"}));
  EXPECT_TRUE(ParseCheckpointIndex(R"({"weight_map": {"a": "x.safetensors"}, "metadata": {"total_size": 12.0}})", "i").ok());
  auto bad = [](const std::string& text, const std::string& what) {
    StatusOr<CheckpointIndex> r = ParseCheckpointIndex(text, "idx.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr("idx.json"));
    EXPECT_THAT(r.status().message(), HasSubstr(what)) << r.status().ToString();
  };
  bad("{", "not valid JSON");
  bad("[]", "not a JSON object");
  bad(R"({"metadata": {}})", "missing 'weight_map'");
  bad(R"({"weight_map": []})", "'weight_map' must be an object");
  bad(R"({"weight_map": {}})", "'weight_map' is empty");
  bad(R"({"weight_map": {"a": 3}})", "weight_map['a'] must be a shard file name");
  bad(R"({"weight_map": {"a": "../../etc/passwd.safetensors"}})", "not a path");
  bad(R"({"weight_map": {"a": "/abs.safetensors"}})", "not a path");
  bad(R"({"weight_map": {"a": "model.bin"}})", "must end in .safetensors");
  bad(R"({"weight_map": {"a": ".safetensors"}})", "must end in .safetensors");
  bad(R"({"weight_map": {"a": ""}})", "empty file name");
  bad(R"({"weight_map": {"": "x.safetensors"}})", "empty tensor name");
  bad(R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})", "appears twice");
  bad(R"({"metadata": [], "weight_map": {"a": "x.safetensors"}})", "'metadata' must be an object");
  bad(R"({"metadata": {"total_size": -1}, "weight_map": {"a": "x.safetensors"}})", "total_size");
  bad(R"({"metadata": {"total_size": "16"}, "weight_map": {"a": "x.safetensors"}})", "total_size");
}

TEST_F(IndexedCheckpointTest, MalformedIndexFileIsNamed) {
  WriteIndexed();
  std::ofstream(dir_.File(kCheckpointIndexFile)) << R"({"weight_map": {"x": "../outside.safetensors"}})";
  ExpectLoadError(StatusCode::kInvalidArgument, {dir_.File(kCheckpointIndexFile), "not a path"});
}

// --- Special tokens from the folder's config files ---

TEST(SpecialTokensTest, PublishedLLaDAFolder) {
  const std::string dir = std::string(TEDI_SOURCE_DIR) + "/tests/fixtures/published_configs/llada-8b-instruct";
  std::ifstream f(dir + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  StatusOr<ModelConfig> c = ModelConfig::FromJson(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(LoadSpecialTokens(dir, &*c).ok());
  EXPECT_EQ(c->mask_token_id, 126336);
  EXPECT_EQ(c->eos_token_id, 126081);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{126081}));  // tokenizer_config's eos is the same
  EXPECT_EQ(c->pad_token_id, 126081);
  EXPECT_EQ(c->bos_token_id, 126080);  // from tokenizer_config's bos_token via added_tokens_decoder
}

TEST(SpecialTokensTest, PublishedDreamFolder) {
  const std::string dir = std::string(TEDI_SOURCE_DIR) + "/tests/fixtures/published_configs/dream-v0-instruct-7b";
  std::ifstream f(dir + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  StatusOr<ModelConfig> c = ModelConfig::FromJson(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(LoadSpecialTokens(dir, &*c).ok());  // generation_config's mask_token_id is null
  EXPECT_EQ(c->mask_token_id, 151666);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{151643}));
  EXPECT_EQ(c->bos_token_id, 151643);
  EXPECT_EQ(c->pad_token_id, 151643);
}

class SpecialTokensFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Dims m;
    m.vocab = 200;
    config_ = *ModelConfig::FromJson(LLaDAConfig(m).dump());
  }
  void Write(const std::string& name, const std::string& text) { std::ofstream(dir_.File(name)) << text; }
  Status Run() { return LoadSpecialTokens(dir_.path().string(), &config_); }
  ModelConfig config_;
  TempDir dir_{"tedi_special_tokens"};
};

TEST_F(SpecialTokensFolderTest, EosSetIsTheUnionInOrder) {
  Write("generation_config.json", R"({"eos_token_id": [0, 150, 0], "pad_token_id": null, "bos_token_id": 7})");
  Write("tokenizer_config.json",
        R"({"eos_token": {"content": "<|eot_id|>", "__type": "AddedToken"},
            "added_tokens_decoder": {"151": {"content": "<|eot_id|>"}}})");
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(config_.eos_token_id, 0);
  EXPECT_EQ(config_.eos_token_ids, (std::vector<int32_t>{0, 150, 151}));
  EXPECT_TRUE(config_.IsEos(150));
  EXPECT_TRUE(config_.IsEos(151));
  EXPECT_FALSE(config_.IsEos(1));
  EXPECT_EQ(config_.bos_token_id, 7);
  EXPECT_EQ(config_.pad_token_id, -1);
}

TEST_F(SpecialTokensFolderTest, EosTokenResolvedThroughTokenizerJson) {
  Write("tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  Write("tokenizer.json", R"({"added_tokens": [{"id": 12, "content": "<|x|>"}, {"id": 99, "content": "<|im_end|>"}],
                              "model": {"type": "BPE", "vocab": {"a": 5}}})");
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(config_.eos_token_ids, (std::vector<int32_t>{0, 99}));
}

TEST_F(SpecialTokensFolderTest, Errors) {
  auto expect = [&](const std::string& file, const std::string& text, const std::vector<std::string>& needles) {
    SetUp();
    std::filesystem::remove(dir_.File("generation_config.json"));
    std::filesystem::remove(dir_.File("tokenizer_config.json"));
    Write(file, text);
    const Status s = Run();
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    for (const std::string& n : needles) EXPECT_THAT(s.message(), HasSubstr(n));
  };
  expect("generation_config.json", R"({"eos_token_id": 200})", {"eos_token_id 200 is outside the vocabulary"});
  expect("generation_config.json", R"({"eos_token_id": 1})", {"mask_token_id 1 is also an eos_token_id"});
  expect("generation_config.json", R"({"eos_token_id": "2"})", {dir_.File("generation_config.json"), "eos_token_id"});
  expect("generation_config.json", R"({"mask_token_id": 5})", {"disagrees with config.json's 1"});
  expect("generation_config.json", "[1]", {"not a JSON object"});
  expect("generation_config.json", "{", {"not valid JSON"});
  expect("tokenizer_config.json", R"({"eos_token": "<|nope|>"})",
         {dir_.File("tokenizer_config.json"), "'eos_token' is '<|nope|>'", "neither"});
  expect("tokenizer_config.json", R"({"eos_token": 5})", {"'eos_token' must be a token string"});
  expect("tokenizer_config.json", R"({"eos_token": "<e>", "added_tokens_decoder": {"x1": {"content": "<e>"}}})",
         {"added_tokens_decoder key 'x1' is not a token id"});
}

}  // namespace
}  // namespace tediserve::engine
