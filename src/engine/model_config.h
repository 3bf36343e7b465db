// The architecture hyper-parameters of a diffusion LM, read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tediserve::engine {

// Upper bounds on config.json dimensions, about 4x the largest open models (Llama-3 405B:
// d_model 16384, 126 layers, 128 heads, MLP 53248, 128k vocabulary, 128k context), so a
// corrupt value is refused by name before anything is allocated. The memory check below
// (CheckModelFitsMemory) then bounds the combination by what the machine has.
inline constexpr int kMaxDModel = 1 << 16;
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxHeads = 1024;
inline constexpr int kMaxMlpHidden = 1 << 20;
inline constexpr int kMaxVocab = 1 << 24;   // the tokenizer's id bound too
inline constexpr int kMaxSeqLen = 1 << 20;  // also the bound on --gen-length, --prompt-length

enum class Architecture {
  kLLaDA,  // Llama-like mask predictor: MHA (or GQA), no biases, logits at the same position
  kDream,  // Qwen2-like: GQA, q/k/v biases, logits shifted (position i from hidden i-1)
};

const char* ArchitectureName(Architecture arch);

struct ModelConfig {
  Architecture arch = Architecture::kLLaDA;
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;      // d_model / n_heads
  int mlp_hidden = 0;
  int vocab_size = 0;    // rows of the embedding and LM head
  int max_seq_len = 0;   // longest prompt + output the model accepts
  float rope_theta = 0;
  float rms_eps = 0;
  int32_t mask_token_id = -1;
  int32_t eos_token_id = -1;   // the id written after an answer ends (first of eos_token_ids)
  // Every id that ends an answer: eos_token_id first, then config.json's other eos ids (it
  // may hold a list) and, after LoadModel, those of generation_config.json and
  // tokenizer_config.json (see LoadModel).
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;   // -1: none given
  int32_t pad_token_id = -1;
  bool qkv_bias = false;      // Dream
  bool shift_logits = false;  // Dream
  bool tie_embeddings = false;

  // Parses config.json text. Knows the LLaDA keys (d_model, n_heads, n_kv_heads, n_layers,
  // mlp_hidden_size, embedding_size/vocab_size, max_sequence_length, rope_theta,
  // rms_norm_eps, mask_token_id, eos_token_id) and the Dream/Qwen2 keys (hidden_size,
  // num_attention_heads, num_key_value_heads, num_hidden_layers, intermediate_size,
  // vocab_size, max_position_embeddings, ...). The architecture comes from
  // "architectures"/"model_type"; anything else is kInvalidArgument naming the value.
  // A missing required key or a value of the wrong type is kInvalidArgument naming the key;
  // a feature the engine lacks is kUnimplemented naming the key: for LLaDA anything but the
  // published 8B layout (activation_type silu, block_type llama, layer_norm_type rms with
  // affine weights and no bias, rope on, no alibi, no include_bias / include_qkv_bias, no
  // attention_layer_norm, input_emb_norm, scale_logits, clip_qkv or multi_query_attention);
  // for Dream hidden_act other than silu, rope_scaling, use_sliding_window, or a head_dim
  // other than hidden_size / num_attention_heads. The result has passed Validate().
  // The text must be JSON nested at most kMaxJsonDepth deep with no key twice in one object
  // (a repeated key would silently mean its last value). `where` starts parse messages.
  static StatusOr<ModelConfig> FromJson(const std::string& json_text,
                                        const std::string& where = "config.json");
  // The same from a parsed object.
  static StatusOr<ModelConfig> FromJsonValue(const nlohmann::json& j);

  // Checks the numbers are consistent (each dimension in [1, its kMax* bound], heads divide
  // d_model, kv heads divide heads, ids inside the vocabulary, at least one token besides
  // mask and eos, a context of at least 2 tokens). Messages name the config.json key.
  Status Validate() const;

  // Whether `id` ends an answer (eos_token_id or one of eos_token_ids).
  bool IsEos(int32_t id) const;
};

// The transformer copies the layer weights into per-shard fused fp32 matrices ("packed")
// when that copy is at most this size, and otherwise reads them in place from the mapped
// checkpoint (converting 16-bit weights panel by panel); see docs/design.md 2.3.
inline constexpr uint64_t kPackedWeightLimitBytes = 512ull << 20;
// fp32 bytes of every layer's weight matrices (what packing would copy).
uint64_t LayerWeightBytesFp32(const ModelConfig& config);
// Whether Transformer::Create packs this model by default (LayerWeightBytesFp32 <= the limit).
bool PacksByDefault(const ModelConfig& config);

// The KV buffer the estimate below reserves covers one sequence of at most this many tokens
// (a request's buffer is sized to its own prompt + output; longer ones are checked when made).
inline constexpr int kKvEstimateTokens = 4096;

// Bytes a loaded model occupies: the weights as stored (`stored_bytes`: mapped file pages or
// owned copies; 0 means every tensor in fp32), the packed fp32 copy of the layers and the
// LM head a small model gets, the RoPE tables for max_seq_len positions, and the KV buffer of
// one sequence of min(max_seq_len, kKvEstimateTokens) tokens. Saturates instead of
// overflowing.
struct ModelMemory {
  uint64_t weights = 0, packed = 0, rope = 0, kv_cache = 0;
  uint64_t total() const;
};
ModelMemory EstimateModelMemory(const ModelConfig& config, uint64_t stored_bytes = 0);
// InvalidArgument (the config describes a model this machine cannot hold; exit 2) naming
// the parts when the estimate exceeds `available` bytes
// (UsableMemoryBytes() by default): a model that cannot fit fails before loading.
Status CheckModelFitsMemory(const ModelConfig& config, uint64_t available = 0,
                            uint64_t stored_bytes = 0);

// TeDiServe's own optional section of a model folder's config.json:
// "tediserve": {"gen_length": N, "block_size": B}; 128 / 32 where absent (capped to the
// context). Present values must be integers with 1 <= block_size <= gen_length,
// gen_length + 1 <= max_seq_len (one prompt token at least) and gen_length a multiple of
// block_size; anything else is kInvalidArgument naming tediserve.gen_length/block_size.
struct GenerationDefaults {
  int gen_length = 128;
  int block_size = 32;
};
StatusOr<GenerationDefaults> ParseGenerationDefaults(const nlohmann::json& config_json,
                                                     const ModelConfig& config);
// Reads MODEL_DIR/config.json and parses both sections. LoadModel does this, so a model that
// loaded has valid defaults (LoadedModel::generation).
StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& model_dir);
// Kept for callers that load the model first (LoadModel has then validated the section):
// LoadGenerationDefaults, or the built-in defaults when it fails.
GenerationDefaults ReadGenerationDefaults(const std::string& model_dir);

}  // namespace tediserve::engine
