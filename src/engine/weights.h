// Model weights in the engine's own layout (independent of the file layout). Large matrices
// are views into the memory-mapped checkpoint in the dtype they are stored in (BF16, F16 or
// F32), so an 8B bf16 model costs its 16 GB of file pages and no copy; norms and biases are
// small and held as fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model_config.h"

namespace tediserve::engine {

class SafetensorsFile;

// The element type of a weight matrix as stored.
enum class WeightType { kF32, kBF16, kF16 };
const char* WeightTypeName(WeightType type);
size_t WeightTypeSize(WeightType type);

// A dense [rows x cols] row-major matrix. Linear weights keep the PyTorch layout
// [out_features x in_features], so y = x * W^T. Either `data` holds the fp32 values (models
// built in memory, F32 tensors the mapping cannot serve aligned), or `mapped` points at
// rows * cols elements of `type` inside a checkpoint mapping that the LoadedModel keeps alive.
struct Matrix {
  int rows = 0;
  int cols = 0;
  std::vector<float> data;          // owned fp32 values (empty for a view)
  const void* mapped = nullptr;     // a view: row-major elements of `type`
  WeightType type = WeightType::kF32;  // of `mapped`; owned data is always fp32

  bool is_view() const { return mapped != nullptr; }
  // fp32 elements when the matrix is fp32 (owned, or an F32 view), else nullptr.
  const float* ptr() const {
    if (!is_view()) return data.data();
    return type == WeightType::kF32 ? static_cast<const float*>(mapped) : nullptr;
  }
  // Elements [c0, c0 + n) of row r, as fp32 (exact for every type).
  void RowToFloat(int r, int c0, int n, float* out) const;
  // The whole matrix as fp32.
  std::vector<float> ToFloat() const;
  // Bytes the matrix occupies as stored.
  uint64_t stored_bytes() const {
    return static_cast<uint64_t>(rows) * cols * (is_view() ? WeightTypeSize(type) : sizeof(float));
  }
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
  // The mapped checkpoint shards the weight views point into (empty for models built in
  // memory). Shared, so copies of a LoadedModel keep them alive too.
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  // Bytes of the weights as stored: mapped (file pages, shared with the page cache) and
  // owned (fp32 copies in this process's heap).
  uint64_t mapped_bytes = 0, owned_bytes = 0;
};

// Loads a Hugging Face style folder: config.json and the checkpoint (Checkpoint::Open: the
// shards model.safetensors.index.json names, or every *.safetensors file). Matrices stay in
// the checkpoint mapping in their stored dtype (F32, BF16 or F16); 1-D tensors (norms,
// biases) are read as fp32. Every tensor the architecture needs must be present with the
// shape config.json implies, and a float dtype: an integer tensor is kInvalidArgument, F64 or
// F8 kUnimplemented; errors name the file and tensor. config.json is validated before any
// tensor is read: dimensions within the kMax* bounds, the "tediserve" generation defaults
// consistent with the context, and the model's memory estimate within what this process can
// allocate (kInvalidArgument otherwise).
// Special tokens (config.eos_token_ids, bos_token_id, pad_token_id): config.json's, then
// generation_config.json's (optional; eos/bos/pad_token_id, each an id or null, eos also a
// list; ids must lie inside the vocabulary), then tokenizer_config.json's "eos_token"
// (optional; a string or {"content": ...}, resolved through its "added_tokens_decoder" or
// tokenizer.json's "added_tokens"; a name neither knows is kInvalidArgument). The EOS set is
// the union in that order; eos_token_id stays config.json's.
StatusOr<LoadedModel> LoadModel(const std::string& dir);

// The special-token part of LoadModel: adds MODEL_DIR's generation_config.json and
// tokenizer_config.json ids (both files optional) to `config`'s and validates the result.
Status LoadSpecialTokens(const std::string& dir, ModelConfig* config);

}  // namespace tediserve::engine
