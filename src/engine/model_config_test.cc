#include "engine/model_config.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tediserve::engine {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// The real LLaDA-8B config.json (the keys the engine reads).
json LLaDA8B() {
  return json::parse(R"({"architectures":["LLaDAModelLM"],"model_type":"llada","d_model":4096,
    "n_heads":32,"n_kv_heads":32,"n_layers":32,"mlp_hidden_size":12288,"vocab_size":126464,
    "embedding_size":126464,"max_sequence_length":4096,"rope_theta":500000.0,
    "rms_norm_eps":1e-05,"mask_token_id":126336,"eos_token_id":126081,"weight_tying":false,
    "include_bias":false})");
}

// Dream-7B's config.json (the keys the engine reads).
json Dream7B() {
  return json::parse(R"({"architectures":["DreamModel"],"model_type":"Dream","hidden_size":3584,
    "intermediate_size":18944,"num_attention_heads":28,"num_key_value_heads":4,
    "num_hidden_layers":28,"vocab_size":152064,"max_position_embeddings":131072,
    "rope_theta":1000000.0,"rms_norm_eps":1e-06,"mask_token_id":151666,"eos_token_id":151643,
    "tie_word_embeddings":false,"rope_scaling":null,"use_sliding_window":false})");
}

void ExpectError(const json& j, StatusCode code, const std::string& what) {
  StatusOr<ModelConfig> c = ModelConfig::FromJson(j.dump());
  ASSERT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().ToString();
  EXPECT_THAT(c.status().message(), HasSubstr(what));
}

TEST(ModelConfigTest, ParsesLLaDA8B) {
  StatusOr<ModelConfig> c = ModelConfig::FromJson(LLaDA8B().dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kLLaDA);
  EXPECT_EQ(c->d_model, 4096);
  EXPECT_EQ(c->n_layers, 32);
  EXPECT_EQ(c->n_heads, 32);
  EXPECT_EQ(c->n_kv_heads, 32);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->mlp_hidden, 12288);
  EXPECT_EQ(c->vocab_size, 126464);
  EXPECT_EQ(c->max_seq_len, 4096);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-5f);
  EXPECT_EQ(c->mask_token_id, 126336);
  EXPECT_EQ(c->eos_token_id, 126081);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->shift_logits);
  EXPECT_FALSE(c->tie_embeddings);
}

TEST(ModelConfigTest, LLaDADefaultsAndVocabRows) {
  json j = LLaDA8B();
  for (const char* key : {"n_kv_heads", "rope_theta", "rms_norm_eps", "mask_token_id",
                          "eos_token_id", "weight_tying", "include_bias", "embedding_size"}) {
    j.erase(key);
  }
  j["vocab_size"] = 126400;
  StatusOr<ModelConfig> c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->n_kv_heads, 32);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-5f);
  EXPECT_EQ(c->mask_token_id, 126336);
  EXPECT_EQ(c->eos_token_id, 126081);
  EXPECT_EQ(c->vocab_size, 126400);  // no embedding_size: vocab_size

  j["embedding_size"] = 126464;  // padded embedding rows win over the tokenizer vocab
  c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->vocab_size, 126464);

  j["n_kv_heads"] = nullptr;  // null means "not set"
  c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->n_kv_heads, 32);
}

TEST(ModelConfigTest, ParsesDreamWithGqaBiasAndShift) {
  StatusOr<ModelConfig> c = ModelConfig::FromJson(Dream7B().dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kDream);
  EXPECT_EQ(c->d_model, 3584);
  EXPECT_EQ(c->n_heads, 28);
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->n_layers, 28);
  EXPECT_EQ(c->mlp_hidden, 18944);
  EXPECT_EQ(c->vocab_size, 152064);
  EXPECT_EQ(c->max_seq_len, 131072);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-6f);
  EXPECT_EQ(c->mask_token_id, 151666);
  EXPECT_EQ(c->eos_token_id, 151643);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->shift_logits);
  EXPECT_FALSE(c->tie_embeddings);
}

TEST(ModelConfigTest, DreamDefaults) {
  json j = Dream7B();
  for (const char* key : {"num_key_value_heads", "rope_theta", "rms_norm_eps", "mask_token_id",
                          "eos_token_id"}) {
    j.erase(key);
  }
  j["tie_word_embeddings"] = true;
  StatusOr<ModelConfig> c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->n_kv_heads, 28);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-6f);
  EXPECT_EQ(c->mask_token_id, 151666);
  EXPECT_EQ(c->eos_token_id, 151643);
  EXPECT_TRUE(c->tie_embeddings);

  j["eos_token_id"] = {151643, 151645};  // Hugging Face allows a list
  c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eos_token_id, 151643);
}

TEST(ModelConfigTest, ArchitectureFromModelTypeAlone) {
  json j = LLaDA8B();
  j.erase("architectures");
  StatusOr<ModelConfig> c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kLLaDA);
  j = Dream7B();
  j.erase("architectures");
  c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kDream);
}

TEST(ModelConfigTest, UnknownArchitecture) {
  json j = LLaDA8B();
  j["architectures"] = {"LlamaForCausalLM"};
  StatusOr<ModelConfig> c = ModelConfig::FromJson(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "unknown architecture 'LlamaForCausalLM' (supported: LLaDA, Dream)");

  j.erase("architectures");
  j["model_type"] = "gpt2";
  ExpectError(j, StatusCode::kInvalidArgument, "unknown architecture 'gpt2'");
  j.erase("model_type");
  ExpectError(j, StatusCode::kInvalidArgument, "neither 'architectures' nor 'model_type'");
  j["architectures"] = "LLaDAModelLM";  // not a list
  ExpectError(j, StatusCode::kInvalidArgument, "'architectures'");
}

TEST(ModelConfigTest, MissingRequiredKeyIsNamed) {
  for (const char* key : {"d_model", "n_heads", "n_layers", "mlp_hidden_size",
                          "max_sequence_length"}) {
    json j = LLaDA8B();
    j.erase(key);
    ExpectError(j, StatusCode::kInvalidArgument, std::string("missing required key '") + key);
  }
  json j = LLaDA8B();
  j.erase("vocab_size");
  j.erase("embedding_size");
  ExpectError(j, StatusCode::kInvalidArgument, "'vocab_size'");
  for (const char* key : {"hidden_size", "num_attention_heads", "num_hidden_layers",
                          "intermediate_size", "vocab_size", "max_position_embeddings"}) {
    json d = Dream7B();
    d.erase(key);
    ExpectError(d, StatusCode::kInvalidArgument, std::string("missing required key '") + key);
  }
}

TEST(ModelConfigTest, WrongTypeIsNamed) {
  json j = LLaDA8B();
  j["d_model"] = "4096";
  ExpectError(j, StatusCode::kInvalidArgument, "key 'd_model' must be an integer");
  j = LLaDA8B();
  j["n_heads"] = 32.5;
  ExpectError(j, StatusCode::kInvalidArgument, "key 'n_heads' must be an integer");
  j = LLaDA8B();
  j["rope_theta"] = "big";
  ExpectError(j, StatusCode::kInvalidArgument, "key 'rope_theta' must be a number");
  j = LLaDA8B();
  j["weight_tying"] = 1;
  ExpectError(j, StatusCode::kInvalidArgument, "key 'weight_tying' must be true or false");
  j = LLaDA8B();
  j["d_model"] = 1e12;
  ExpectError(j, StatusCode::kInvalidArgument, "'d_model'");
  j = LLaDA8B();
  j["d_model"] = int64_t{1} << 40;
  ExpectError(j, StatusCode::kInvalidArgument, "'d_model'");
}

TEST(ModelConfigTest, NotJson) {
  StatusOr<ModelConfig> c = ModelConfig::FromJson("{\"d_model\": ");
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("not valid JSON"));
  c = ModelConfig::FromJson("[1]");
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelConfigTest, BadValues) {
  json j = LLaDA8B();
  j["n_heads"] = 30;
  j["n_kv_heads"] = 30;
  ExpectError(j, StatusCode::kInvalidArgument, "n_heads (30) does not divide d_model (4096)");
  j = LLaDA8B();
  j["n_kv_heads"] = 5;
  ExpectError(j, StatusCode::kInvalidArgument, "n_kv_heads (5) does not divide n_heads (32)");
  j = LLaDA8B();
  j["n_layers"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "n_layers must be positive");
  j = LLaDA8B();
  j["d_model"] = -4096;
  ExpectError(j, StatusCode::kInvalidArgument, "d_model must be positive");
  j = LLaDA8B();
  j["d_model"] = 96;  // head_dim 3: RoPE rotates pairs
  ExpectError(j, StatusCode::kInvalidArgument, "must be even");
  j = LLaDA8B();
  j["mask_token_id"] = 126464;
  ExpectError(j, StatusCode::kInvalidArgument, "mask_token_id 126464 is outside");
  j = LLaDA8B();
  j["eos_token_id"] = -1;
  ExpectError(j, StatusCode::kInvalidArgument, "eos_token_id -1 is outside");
  j = LLaDA8B();
  j["rms_norm_eps"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "rms_norm_eps");
  j = LLaDA8B();
  j["rope_theta"] = -1.0;
  ExpectError(j, StatusCode::kInvalidArgument, "rope_theta");
}

TEST(ModelConfigTest, UnsupportedFeatures) {
  json j = LLaDA8B();
  j["include_bias"] = true;
  ExpectError(j, StatusCode::kUnimplemented, "include_bias");
  j = Dream7B();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  ExpectError(j, StatusCode::kUnimplemented, "rope_scaling");
  j = Dream7B();
  j["use_sliding_window"] = true;
  ExpectError(j, StatusCode::kUnimplemented, "use_sliding_window");
}

TEST(ModelConfigTest, ValidateDirectly) {
  ModelConfig c = *ModelConfig::FromJson(LLaDA8B().dump());
  EXPECT_TRUE(c.Validate().ok());
  c.head_dim = 64;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelConfig().Validate().code(), StatusCode::kInvalidArgument);
}

TEST(ModelConfigTest, DimensionLimitsNameTheKey) {
  json j = LLaDA8B();
  j["n_layers"] = 1000000000;
  ExpectError(j, StatusCode::kInvalidArgument, "n_layers = 1000000000 is outside the supported range [1, 1024]");
  j = LLaDA8B();
  j["max_sequence_length"] = 2147483647;
  ExpectError(j, StatusCode::kInvalidArgument, "max_sequence_length = 2147483647 is outside");
  j = Dream7B();
  j["max_position_embeddings"] = 100000000;
  ExpectError(j, StatusCode::kInvalidArgument, "max_position_embeddings = 100000000");
  j = LLaDA8B();
  j["embedding_size"] = 2;  // only mask and eos: nothing to say
  j["mask_token_id"] = 1;
  j["eos_token_id"] = 0;
  ExpectError(j, StatusCode::kInvalidArgument, "vocab_size = 2 is outside the supported range [3,");
  j = LLaDA8B();
  j["rope_theta"] = 1e300;  // beyond float: refused, not converted
  ExpectError(j, StatusCode::kInvalidArgument, "rope_theta");
}

TEST(ModelConfigTest, DeepOrDuplicatedJsonIsAnError) {
  std::string deep = LLaDA8B().dump();
  deep.insert(deep.size() - 1, ",\"x\":" + std::string(100000, '[') + std::string(100000, ']'));
  StatusOr<ModelConfig> c = ModelConfig::FromJson(deep);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("nested deeper than"));
  std::string dup = LLaDA8B().dump();
  dup.insert(dup.size() - 1, ",\"n_layers\":1000000000");
  c = ModelConfig::FromJson(dup);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("key 'n_layers' appears twice"));
}

TEST(ModelConfigTest, MemoryEstimateRefusesWhatCannotFit) {
  ModelConfig c = *ModelConfig::FromJson(LLaDA8B().dump());
  const ModelMemory m = EstimateModelMemory(c);
  // 8B parameters in fp32 (no stored size given); too big to pack.
  EXPECT_GT(m.weights, uint64_t{29} << 30);
  EXPECT_LT(m.weights, uint64_t{31} << 30);
  EXPECT_FALSE(PacksByDefault(c));
  EXPECT_EQ(m.packed, 0u);
  EXPECT_EQ(m.kv_cache, uint64_t{2} * 32 * 32 * 128 * 4096 * 4);
  EXPECT_TRUE(CheckModelFitsMemory(c, uint64_t{1} << 40).ok());
  const Status s = CheckModelFitsMemory(c, uint64_t{8} << 30);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the model needs about"));
  EXPECT_THAT(s.message(), HasSubstr("8.0 GiB"));
  // As published: 16,031,162,368 bytes of bf16 (the index's total_size), which with a
  // 4096-token KV buffer fits a 24 GB machine but not in fp32.
  const uint64_t bf16 = 16031162368ull;
  EXPECT_EQ(EstimateModelMemory(c, bf16).weights, bf16);
  EXPECT_TRUE(CheckModelFitsMemory(c, uint64_t{22} << 30, bf16).ok());
  EXPECT_FALSE(CheckModelFitsMemory(c, uint64_t{22} << 30).ok());
}

TEST(ModelConfigTest, SmallModelsArePackedLargeOnesMapped) {
  ModelConfig c = *ModelConfig::FromJson(LLaDA8B().dump());
  EXPECT_EQ(LayerWeightBytesFp32(c), uint64_t{32} * (4 * 4096 * 4096 + 3 * 12288 * 4096) * 4);
  c.n_layers = 1;
  c.d_model = 256;
  c.n_heads = c.n_kv_heads = 4;
  c.head_dim = 64;
  c.mlp_hidden = 512;
  EXPECT_TRUE(PacksByDefault(c));
  EXPECT_GT(EstimateModelMemory(c).packed, 0u);
}

TEST(ModelConfigTest, GenerationDefaults) {
  json j = LLaDA8B();
  const ModelConfig c = *ModelConfig::FromJson(j.dump());
  StatusOr<GenerationDefaults> d = ParseGenerationDefaults(j, c);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->gen_length, 128);
  EXPECT_EQ(d->block_size, 32);
  j["tediserve"] = {{"gen_length", 64}, {"block_size", 16}};
  d = ParseGenerationDefaults(j, c);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->gen_length, 64);
  EXPECT_EQ(d->block_size, 16);
  auto expect_bad = [&](json section, const std::string& what) {
    j["tediserve"] = std::move(section);
    StatusOr<GenerationDefaults> bad = ParseGenerationDefaults(j, c);
    ASSERT_FALSE(bad.ok()) << j["tediserve"].dump();
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr(what));
  };
  expect_bad({{"gen_length", 8}, {"block_size", 0}}, "tediserve.block_size: expected an integer in [1, 8], got 0");
  expect_bad({{"gen_length", -24}}, "tediserve.gen_length: expected an integer in [1, 4095], got -24");
  expect_bad({{"gen_length", 2147483647}}, "tediserve.gen_length");
  expect_bad({{"gen_length", 4096}}, "tediserve.gen_length");  // no room for a prompt token
  expect_bad({{"gen_length", 24}, {"block_size", 16}}, "not a multiple of tediserve.block_size 16");
  expect_bad({{"gen_length", 1e300}}, "tediserve.gen_length");
  expect_bad({{"block_size", "8"}}, "tediserve.block_size");
  expect_bad(json::array(), "key 'tediserve' must be an object");
}

std::string ReadFixture(const std::string& rel) {
  std::ifstream f(std::string(TEDI_SOURCE_DIR) + "/tests/fixtures/published_configs/" + rel);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// The config.json files as published (tests/fixtures/published_configs/README.md).
TEST(ModelConfigTest, PublishedLLaDA8BInstruct) {
  const std::string text = ReadFixture("llada-8b-instruct/config.json");
  ASSERT_FALSE(text.empty());
  StatusOr<ModelConfig> c = ModelConfig::FromJson(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kLLaDA);
  EXPECT_EQ(c->d_model, 4096);
  EXPECT_EQ(c->n_layers, 32);
  EXPECT_EQ(c->n_heads, 32);
  EXPECT_EQ(c->n_kv_heads, 32);
  EXPECT_EQ(c->mlp_hidden, 12288);
  EXPECT_EQ(c->vocab_size, 126464);
  EXPECT_EQ(c->max_seq_len, 4096);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-5f);
  EXPECT_EQ(c->mask_token_id, 126336);
  EXPECT_EQ(c->eos_token_id, 126081);
  EXPECT_EQ(c->pad_token_id, 126081);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->shift_logits);
  EXPECT_FALSE(c->tie_embeddings);
}

TEST(ModelConfigTest, PublishedDream7BInstruct) {
  const std::string text = ReadFixture("dream-v0-instruct-7b/config.json");
  ASSERT_FALSE(text.empty());
  StatusOr<ModelConfig> c = ModelConfig::FromJson(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Architecture::kDream);
  EXPECT_EQ(c->d_model, 3584);
  EXPECT_EQ(c->n_layers, 28);
  EXPECT_EQ(c->n_heads, 28);
  EXPECT_EQ(c->n_kv_heads, 4);  // GQA: 7 query heads per kv head
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->mlp_hidden, 18944);
  EXPECT_EQ(c->vocab_size, 152064);
  EXPECT_EQ(c->max_seq_len, 131072);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-6f);
  EXPECT_EQ(c->mask_token_id, 151666);
  EXPECT_EQ(c->eos_token_id, 151643);
  EXPECT_EQ(c->bos_token_id, 151643);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->shift_logits);
  // Fits this engine's memory check in bf16 (15.2 GB as stored) with a 4096-token KV buffer.
  const uint64_t bf16 = 2ull * (2ull * 152064 * 3584 + 3584 +
                                28ull * (2 * 3584 + (3584 + 2 * 512) * 3584 + 3584 + 2 * 512 + 3584 * 3584 +
                                         3ull * 18944 * 3584));
  EXPECT_TRUE(CheckModelFitsMemory(*c, uint64_t{20} << 30, bf16).ok());
}

TEST(ModelConfigTest, LLaDAOptionsTheEngineLacksAreRefusedByName) {
  const json base = json::parse(ReadFixture("llada-8b-instruct/config.json"));
  const std::vector<std::pair<std::string, json>> cases = {
      {"activation_type", "swiglu"}, {"block_type", "sequential"}, {"layer_norm_type", "default"},
      {"layer_norm_with_affine", false}, {"bias_for_layer_norm", true}, {"include_qkv_bias", true},
      {"rope", false}, {"alibi", true}, {"attention_layer_norm", true}, {"input_emb_norm", true},
      {"scale_logits", true}, {"clip_qkv", 8.0}, {"multi_query_attention", true}};
  for (const auto& [key, value] : cases) {
    json j = base;
    j[key] = value;
    ExpectError(j, StatusCode::kUnimplemented, "key '" + key + "'");
  }
  json j = base;
  j["activation_type"] = 3;
  ExpectError(j, StatusCode::kInvalidArgument, "key 'activation_type' must be a string");
}

TEST(ModelConfigTest, DreamOptionsTheEngineLacksAreRefusedByName) {
  const json base = json::parse(ReadFixture("dream-v0-instruct-7b/config.json"));
  json j = base;
  j["hidden_act"] = "gelu";
  ExpectError(j, StatusCode::kUnimplemented, "key 'hidden_act'");
  j = base;
  j["head_dim"] = 256;
  ExpectError(j, StatusCode::kUnimplemented, "key 'head_dim' = 256");
  j["head_dim"] = 128;  // the implied value is fine
  EXPECT_TRUE(ModelConfig::FromJson(j.dump()).ok());
}

TEST(ModelConfigTest, EosTokenIdListKeepsEveryId) {
  json j = LLaDA8B();
  j["eos_token_id"] = {126348, 126081, 126348};
  StatusOr<ModelConfig> c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eos_token_id, 126348);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{126348, 126081}));
  EXPECT_TRUE(c->IsEos(126081));
  EXPECT_FALSE(c->IsEos(126336));
  j["eos_token_id"] = {126081, 126336};
  ExpectError(j, StatusCode::kInvalidArgument, "mask_token_id 126336 is also an eos_token_id");
  j["eos_token_id"] = {126081, 200000};
  ExpectError(j, StatusCode::kInvalidArgument, "eos_token_id 200000 is outside the vocabulary");
  j["eos_token_id"] = 126081;
  j["bos_token_id"] = -5;
  ExpectError(j, StatusCode::kInvalidArgument, "bos_token_id -5 is outside the vocabulary");
}

TEST(ModelConfigTest, ArchitectureNames) {
  EXPECT_STREQ(ArchitectureName(Architecture::kLLaDA), "LLaDA");
  EXPECT_STREQ(ArchitectureName(Architecture::kDream), "Dream");
}

}  // namespace
}  // namespace tediserve::engine
