// Model weights in fp32, row-major, in the engine's own layout (independent of the file layout).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model_config.h"

namespace tediserve::engine {

// A dense fp32 matrix [rows x cols], row-major. Linear weights keep the PyTorch layout
// [out_features x in_features], so y = x * W^T.
struct Matrix {
  int rows = 0;
  int cols = 0;
  std::vector<float> data;
  const float* ptr() const { return data.data(); }
};

struct LayerWeights {
  std::vector<float> attn_norm;           // [d]
  Matrix wq, wk, wv;                      // [n_heads*hd x d], [n_kv*hd x d], [n_kv*hd x d]
  std::vector<float> bq, bk, bv;          // empty unless config.qkv_bias
  Matrix wo;                              // [d x n_heads*hd]
  std::vector<float> ffn_norm;            // [d]
  Matrix w_gate, w_up;                    // [mlp x d]   (LLaDA ff_proj / up_proj)
  Matrix w_down;                          // [d x mlp]   (LLaDA ff_out)
};

struct ModelWeights {
  Matrix embed;                 // [vocab x d]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [d]
  Matrix lm_head;               // [vocab x d]
};

// A loaded model folder: config, weights, and the folder it came from.
struct LoadedModel {
  std::string dir;
  ModelConfig config;
  GenerationDefaults generation;  // config.json's "tediserve" section, validated
  ModelWeights weights;
};

// Loads a Hugging Face style folder: config.json and every *.safetensors file in it
// (tensors may be F32, BF16 or F16; all converted to fp32). Every tensor the architecture
// needs must be present with the shape config.json implies; errors name the file and tensor.
// config.json is validated before any tensor is read: dimensions within the kMax* bounds,
// the "tediserve" generation defaults consistent with the context, and the model's memory
// estimate within what this process can allocate (kInvalidArgument otherwise).
StatusOr<LoadedModel> LoadModel(const std::string& dir);

}  // namespace tediserve::engine
