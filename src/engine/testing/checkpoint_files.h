// Test helpers: the tensor names and shapes of the two published checkpoint layouts, spelled
// out here independently of weights.cc, random tensors for them, and a writer of Hugging
// Face style sharded folders (model-0000i-of-0000n.safetensors + model.safetensors.index.json).
#pragma once

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/float16.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace tediserve::engine::testing {

struct Dims {
  int d = 16, layers = 2, heads = 4, kv_heads = 4, mlp = 24, vocab = 20;
  int head_dim() const { return d / heads; }
};

inline nlohmann::json LLaDAConfigJson(const Dims& m, bool tied = false) {
  return {{"architectures", {"LLaDAModelLM"}}, {"model_type", "llada"}, {"d_model", m.d},
          {"n_heads", m.heads}, {"n_kv_heads", m.kv_heads}, {"n_layers", m.layers},
          {"mlp_hidden_size", m.mlp}, {"vocab_size", m.vocab}, {"embedding_size", m.vocab},
          {"max_sequence_length", 64}, {"rope_theta", 10000.0}, {"rms_norm_eps", 1e-5},
          {"mask_token_id", 1}, {"eos_token_id", 0}, {"weight_tying", tied},
          {"include_bias", false}};
}

inline nlohmann::json DreamConfigJson(const Dims& m, bool tied = false) {
  return {{"architectures", {"DreamModel"}}, {"model_type", "Dream"}, {"hidden_size", m.d},
          {"num_attention_heads", m.heads}, {"num_key_value_heads", m.kv_heads},
          {"num_hidden_layers", m.layers}, {"intermediate_size", m.mlp},
          {"vocab_size", m.vocab}, {"max_position_embeddings", 64}, {"mask_token_id", 2},
          {"eos_token_id", 0}, {"tie_word_embeddings", tied}};
}

using TensorShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Tensors in the checkpoint's naming (LLaDA: model.transformer.*, Dream: Qwen2's model.*).
inline TensorShapes CheckpointLayout(Architecture arch, const Dims& m, bool with_head) {
  const int64_t q = m.heads * m.head_dim(), kv = m.kv_heads * m.head_dim();
  TensorShapes out;
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

// Random values already rounded to `dtype`, so what is read back must match exactly. Norm
// weights lie in [0.5, 1.5], biases in [-0.2, 0.2], matrices in +-scale/sqrt(fan_in) (scale 1
// by default: activations stay O(1), logits spread enough for confidences in (0, 1)).
inline std::vector<TensorToWrite> RandomTensors(Architecture arch, const Dims& m, DType dtype, bool with_head,
                                                uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<TensorToWrite> out;
  for (const auto& [name, shape] : CheckpointLayout(arch, m, with_head)) {
    TensorToWrite t{name, dtype, shape, {}, {}};
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    const bool is_norm = shape.size() == 1 && name.find("bias") == std::string::npos;
    const bool is_bias = name.find("bias") != std::string::npos;
    const float amp = shape.size() == 2 ? scale * 1.7f / std::sqrt(static_cast<float>(shape[1])) : 1.0f;
    for (int64_t i = 0; i < n; ++i) {
      float x = dist(rng);
      x = is_norm ? 1.0f + 0.5f * x : is_bias ? 0.2f * x : amp * x;
      t.floats.push_back(dtype == DType::kBF16  ? Bf16ToFloat(FloatToBf16(x))
                         : dtype == DType::kF16 ? F16ToFloat(FloatToF16(x))
                                                : x);
    }
    out.push_back(std::move(t));
  }
  return out;
}

inline std::string ShardName(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

// Writes `tensors` into `shards` files round-robin (one model.safetensors when shards == 1
// and no index), and model.safetensors.index.json naming every tensor's shard when
// `with_index`. Returns the index JSON it wrote (null without one).
inline StatusOr<nlohmann::json> WriteCheckpoint(const std::filesystem::path& dir,
                                                const std::vector<TensorToWrite>& tensors, int shards,
                                                bool with_index) {
  std::vector<std::vector<TensorToWrite>> parts(shards);
  nlohmann::json map = nlohmann::json::object();
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    parts[i % shards].push_back(tensors[i]);
    const std::string file = shards == 1 && !with_index ? "model.safetensors" : ShardName(static_cast<int>(i % shards), shards);
    map[tensors[i].name] = file;
    total += (tensors[i].floats.size() + tensors[i].ints.size()) *
             (tensors[i].dtype == DType::kF32 || tensors[i].dtype == DType::kI32 ? 4
              : tensors[i].dtype == DType::kI64                                  ? 8
                                                                                 : 2);
  }
  for (int s = 0; s < shards; ++s) {
    const std::string file = shards == 1 && !with_index ? "model.safetensors" : ShardName(s, shards);
    RETURN_IF_ERROR(WriteSafetensors((dir / file).string(), parts[s]));
  }
  if (!with_index) return nlohmann::json();
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  return index;
}

}  // namespace tediserve::engine::testing
