#include "engine/weights.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "engine/float16.h"
#include "engine/safetensors.h"

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
    EXPECT_EQ(got.data, t.floats) << name;
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
  EXPECT_EQ(model->weights.lm_head.data, model->weights.embed.data);
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

}  // namespace
}  // namespace tediserve::engine
