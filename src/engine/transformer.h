// The bidirectional transformer forward pass on CPU (OpenBLAS GEMMs), tensor-parallel over
// the shards of a ShardPool: each shard owns a slice of the attention heads and of the MLP
// columns, computes its partial output projections, and the shards all-reduce.
//
// One Forward() call runs a batch of sequences of different lengths. Each sequence pushes a
// contiguous range of its positions through the network (all of them for a recompute step,
// the current block for a cache step); attention reads the sequence's KV buffer for every
// position, after the active positions' fresh K/V have been written into it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/model_config.h"
#include "engine/shard_pool.h"
#include "engine/weights.h"

namespace tediserve::engine {

// Keys and values of every position of one sequence, per layer and kv head, K after RoPE.
// Layout: [layer][kv_head][position][head_dim].
class KvBuffer {
 public:
  KvBuffer() = default;
  KvBuffer(const ModelConfig& config, int positions);
  int positions() const { return positions_; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }
  float* k(int layer, int kv_head) { return k_.data() + Offset(layer, kv_head); }
  float* v(int layer, int kv_head) { return v_.data() + Offset(layer, kv_head); }

 private:
  size_t Offset(int layer, int kv_head) const {
    return (static_cast<size_t>(layer) * kv_heads_ + kv_head) * positions_ * head_dim_;
  }
  int kv_heads_ = 0, head_dim_ = 0, positions_ = 0;
  std::vector<float> k_, v_;
};

struct SequenceInput {
  const int32_t* tokens = nullptr;  // all seq_len tokens of the sequence
  int seq_len = 0;
  int active_begin = 0;  // positions [active_begin, active_end) go through the network
  int active_end = 0;
  KvBuffer* kv = nullptr;  // read for every position, written for the active ones
  int logits_begin = 0;    // hidden rows (absolute positions, inside the active range)
  int logits_end = 0;      // projected through the LM head
};

// Work done by one Forward(), for benchmarks and logs.
struct ForwardStats {
  int64_t tokens = 0;        // active positions over the batch
  double gemm_flops = 0;     // linear layers and LM head
  double attention_flops = 0;
};

// How the transformer holds the layer weights (docs/design.md 2.3).
enum class WeightLayout {
  kAuto,    // kPacked when the fp32 copy is at most kPackedWeightLimitBytes, else kMapped
  kPacked,  // per-shard fused fp32 copies (Q/K/V in one matrix, gate/up in another)
  kMapped,  // read in place from the LoadedModel's matrices (the checkpoint mapping), 16-bit
            // weights converted to fp32 panel by panel just before each GEMM
};
const char* WeightLayoutName(WeightLayout layout);

class Transformer {
 public:
  // Builds the sharded weights for a tensor-parallel degree (heads and kv heads must divide).
  static StatusOr<std::unique_ptr<Transformer>> Create(std::shared_ptr<const LoadedModel> model,
                                                      int tp_degree,
                                                      WeightLayout layout = WeightLayout::kAuto);

  const ModelConfig& config() const { return config_; }
  int tp_degree() const { return pool_.size(); }
  WeightLayout layout() const { return packed_ ? WeightLayout::kPacked : WeightLayout::kMapped; }
  // Bytes this object allocated for weights (the packed copies; 0 when mapped).
  uint64_t packed_bytes() const { return packed_bytes_; }

  // Runs the batch; logits of all sequences' requested rows are written to `logits`
  // (resized to rows x vocab, rows in batch order). Inputs must be valid (the decoder checks
  // them); positions must be < config().max_seq_len.
  ForwardStats Forward(std::span<const SequenceInput> batch, std::vector<float>* logits);

  // GEMM shapes (M, N, K) of C = A * B^T that one Forward() over `tokens` active rows and
  // `logit_rows` LM-head rows runs on each shard, for the sgemm baseline of the benchmark.
  struct GemmShape {
    int m, n, k;
  };
  static std::vector<GemmShape> GemmShapesFor(const ModelConfig& config, int tp_degree, int tokens,
                                              int logit_rows);

  // Rows [r0, r0 + rows) and columns [c0, c0 + cols) of a weight matrix.
  struct WeightBlock {
    const Matrix* m = nullptr;
    int r0 = 0, rows = 0, c0 = 0, cols = 0;
  };
  // C[M x b.rows] (leading dimension ldc) = A[M x b.cols] (lda) * b^T + beta * C, with
  // cblas_sgemm: directly on fp32 weights; for 16-bit weights, panels of rows are converted
  // into `scratch` first (panel height from M: small for few rows, so the panel stays in
  // cache; large for many, so each sgemm call amortises its packing of A).
  static void GemmBlock(int M, const float* A, int lda, const WeightBlock& b, float beta, float* C,
                        int ldc, std::vector<float>* scratch);

 private:
  struct Shard {
    int q_heads = 0, kv_heads = 0;  // heads owned
    int q_head0 = 0, kv_head0 = 0;
    int mlp = 0;                    // MLP columns owned
    struct Layer {
      std::vector<float> bqkv;  // empty without biases
      // Packed layout:
      std::vector<float> wqkv;  // [(q+2kv)*hd x d]
      std::vector<float> wo;    // [d x q*hd]
      std::vector<float> wgu;   // [2*mlp x d]: gate rows then up rows
      std::vector<float> wdown; // [d x mlp]
      // Mapped layout: this shard's blocks of the model's matrices.
      WeightBlock q, k, v, o, gate, up, down;
    };
    std::vector<Layer> layers;
    int vocab0 = 0, vocab = 0;  // LM head rows owned
    // Scratch, grown on demand.
    std::vector<float> h, qkv, attn, partial, act, scores, logits_h, panel;
  };

  Transformer(std::shared_ptr<const LoadedModel> model, int tp_degree, bool packed);
  void RunShard(int s, std::span<const SequenceInput> batch, const std::vector<int>& row0,
                int total_rows, const std::vector<int>& logit_row0, int logit_rows,
                std::vector<float>* logits);

  std::shared_ptr<const LoadedModel> model_;  // embedding, norms and LM head are read in place
  ModelConfig config_;
  bool packed_ = true;
  uint64_t packed_bytes_ = 0;
  std::vector<float> lm_head_f32_;  // packed layout, when the LM head is not fp32 already
  std::vector<Shard> shards_;
  std::vector<float> rope_cos_, rope_sin_;  // [max_seq_len x head_dim/2]
  std::vector<float> x_;                    // residual stream [rows x d]
  ShardPool pool_;
};

}  // namespace tediserve::engine
