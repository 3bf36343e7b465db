// The architecture hyper-parameters of a diffusion LM, read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tediserve::engine {

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
  int32_t eos_token_id = -1;
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
  // a feature the engine lacks (LLaDA include_bias, Dream rope_scaling or sliding window) is
  // kUnimplemented. The result has passed Validate().
  static StatusOr<ModelConfig> FromJson(const std::string& json_text);

  // Checks the numbers are consistent (positive, heads divide d_model, kv heads divide heads,
  // ids inside the vocabulary).
  Status Validate() const;
};

// TeDiServe's own optional section of a model folder's config.json:
// "tediserve": {"gen_length": N, "block_size": B}; 128 / 32 where absent or unreadable.
struct GenerationDefaults {
  int gen_length = 128;
  int block_size = 32;
};
GenerationDefaults ReadGenerationDefaults(const std::string& model_dir);

}  // namespace tediserve::engine
