// A small model with random weights built in memory, for engine tests that need a model of
// a given shape but not a trained one.
#pragma once

#include <memory>
#include <random>

#include "engine/weights.h"

namespace tediserve::engine::testing {

inline Matrix RandomMatrix(int rows, int cols, std::mt19937& rng, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  Matrix m{rows, cols, std::vector<float>(static_cast<size_t>(rows) * cols)};
  for (float& x : m.data) x = n(rng);
  return m;
}

inline std::vector<float> RandomVector(int n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// LLaDA layout by default; `dream` adds q/k/v biases and shifted logits.
inline std::shared_ptr<const LoadedModel> RandomModel(int d = 32, int layers = 2, int heads = 4, int kv_heads = 4,
                                                      int mlp = 64, int vocab = 40, bool dream = false,
                                                      uint32_t seed = 5) {
  std::mt19937 rng(seed);
  auto m = std::make_shared<LoadedModel>();
  ModelConfig& c = m->config;
  c.arch = dream ? Architecture::kDream : Architecture::kLLaDA;
  c.d_model = d;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = d / heads;
  c.mlp_hidden = mlp;
  c.vocab_size = vocab;
  c.max_seq_len = 256;
  c.rope_theta = dream ? 1e6f : 500000.0f;
  c.rms_eps = 1e-5f;
  c.mask_token_id = 1;
  c.eos_token_id = 0;
  c.qkv_bias = dream;
  c.shift_logits = dream;
  const int hd = c.head_dim;
  // Large-ish weights so confidences spread over (0, 1).
  m->weights.embed = RandomMatrix(vocab, d, rng, 1.0f);
  for (int l = 0; l < layers; ++l) {
    LayerWeights L;
    L.attn_norm = RandomVector(d, rng, 0.5f, 1.5f);
    L.ffn_norm = RandomVector(d, rng, 0.5f, 1.5f);
    L.wq = RandomMatrix(heads * hd, d, rng, 0.3f);
    L.wk = RandomMatrix(kv_heads * hd, d, rng, 0.3f);
    L.wv = RandomMatrix(kv_heads * hd, d, rng, 0.3f);
    if (dream) {
      L.bq = RandomVector(heads * hd, rng, -0.2f, 0.2f);
      L.bk = RandomVector(kv_heads * hd, rng, -0.2f, 0.2f);
      L.bv = RandomVector(kv_heads * hd, rng, -0.2f, 0.2f);
    }
    L.wo = RandomMatrix(d, heads * hd, rng, 0.2f);
    L.w_gate = RandomMatrix(mlp, d, rng, 0.2f);
    L.w_up = RandomMatrix(mlp, d, rng, 0.2f);
    L.w_down = RandomMatrix(d, mlp, rng, 0.2f);
    m->weights.layers.push_back(std::move(L));
  }
  m->weights.final_norm = RandomVector(d, rng, 0.5f, 1.5f);
  m->weights.lm_head = RandomMatrix(vocab, d, rng, 0.5f);
  return m;
}

}  // namespace tediserve::engine::testing
