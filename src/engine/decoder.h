// Denoising steps with the semantics of docs/design.md sections 2.4-2.5, batched across
// requests.
//
// A request is a sequence prompt + O mask tokens decoded in blocks of B positions, left to
// right. Each step unmasks every masked position of the current block whose confidence
// (softmax probability of its argmax token) clears the step's threshold, or the single most
// confident one if none does. With the approximate (dual) KV cache the first step of a block
// is a recompute step (the whole sequence goes through the network and refreshes the cache)
// and the rest are cache steps (only the block's B positions go through the network and read
// the cached K/V of every other position). Without the cache every step is a recompute step.
//
// The engine knows nothing of SLOs or clusters: the caller picks the batch and each
// request's threshold per step.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/transformer.h"

namespace tediserve::engine {

struct DecodeOptions {
  int gen_length = 0;        // O: output positions
  int block_size = 0;        // B; with the cache O must be a multiple of B
  bool use_cache = true;     // dual KV cache: recompute step per block, then cache steps
  bool eos_early_stop = false;  // finish once a completed block holds an EOS (the text ends
                                // there; later positions are filled with EOS)
  float temperature = 0.0f;  // 0: greedy; > 0: Gumbel-max sampling of x0
  uint64_t seed = 0;         // for sampling
};

enum class StepKind { kRecompute, kCache };
const char* StepKindName(StepKind kind);

// The candidate thresholds whose "clears it" counts a step reports (docs/design.md
// section 2.6).
inline constexpr std::array<float, 5> kCandidateThresholds = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f};

// Summary of a set of confidences: min, quartiles, mean. count 0 means the set was empty.
struct ConfidenceSummary {
  int count = 0;
  float min = 0, q1 = 0, median = 0, q3 = 0, mean = 0;
};

// Confidence statistics of one step, taken before unmasking (inputs of the step predictor).
struct ConfidenceStats {
  ConfidenceSummary block;   // masked positions of the current block
  ConfidenceSummary output;  // masked positions of the whole output (recompute steps; on
                             // cache steps only the block is seen, and output == block)
  std::array<int, kCandidateThresholds.size()> block_above{};  // masked block positions whose
                                                               // confidence >= each candidate
};

// A request's decoding state. Owned by the caller; the engine reads and updates it.
class DecodeState {
 public:
  int64_t id() const { return id_; }
  int prompt_length() const { return prompt_length_; }
  int gen_length() const { return options_.gen_length; }
  int block_size() const { return options_.block_size; }
  int num_blocks() const { return (options_.gen_length + options_.block_size - 1) / options_.block_size; }
  int current_block() const { return block_; }
  bool done() const { return done_; }
  int steps() const { return steps_; }
  int steps_in_block() const { return steps_in_block_; }
  int masked_remaining() const { return masked_remaining_; }
  int masked_in_block() const;
  const DecodeOptions& options() const { return options_; }
  // The next step's kind: recompute at the start of a block (or always without the cache).
  StepKind next_step_kind() const {
    return (!options_.use_cache || steps_in_block_ == 0) ? StepKind::kRecompute : StepKind::kCache;
  }
  // Tokens pushed through the network by the next step (what a latency profile is keyed on).
  int next_step_tokens() const;
  const std::vector<int32_t>& tokens() const { return tokens_; }  // prompt + output
  std::vector<int32_t> output_tokens() const {
    return {tokens_.begin() + prompt_length_, tokens_.end()};
  }
  size_t kv_bytes() const { return kv_.bytes(); }

 private:
  friend class DiffusionEngine;
  int64_t id_ = 0;
  int prompt_length_ = 0;
  DecodeOptions options_;
  std::vector<int32_t> tokens_;
  int block_ = 0;
  int steps_ = 0;
  int steps_in_block_ = 0;
  int masked_remaining_ = 0;
  bool done_ = false;
  int32_t mask_id_ = -1;
  KvBuffer kv_;
  std::mt19937_64 rng_;
};

struct StepRequest {
  DecodeState* state = nullptr;
  float threshold = 0.9f;  // in (0, 1]
};

struct StepResult {
  int64_t id = 0;
  StepKind kind = StepKind::kRecompute;
  int block = 0;  // the block this step decoded
  float threshold = 0;
  std::vector<std::pair<int, int32_t>> unmasked;  // (output position, token)
  bool block_done = false;
  bool request_done = false;
  ConfidenceStats stats;
};

struct BatchStats {
  int64_t tokens = 0;  // positions through the network
  int recompute_requests = 0;
  int cache_requests = 0;
  double gemm_flops = 0;
  double attention_flops = 0;
};

class DiffusionEngine {
 public:
  // `tp_degree` shards the model over that many threads (one "device" = one core).
  // `layout`: how the transformer holds the weights (packed fp32 copies or the checkpoint
  // mapping; by default chosen by size).
  static StatusOr<std::unique_ptr<DiffusionEngine>> Create(std::shared_ptr<const LoadedModel> model,
                                                           int tp_degree,
                                                           WeightLayout layout = WeightLayout::kAuto);
  const Transformer& transformer() const { return *transformer_; }

  const ModelConfig& config() const { return transformer_->config(); }
  int tp_degree() const { return transformer_->tp_degree(); }

  // Validates the options against the model (context length, block size, ...) and returns
  // a fresh state with the output fully masked.
  StatusOr<std::unique_ptr<DecodeState>> NewRequest(int64_t id, const std::vector<int32_t>& prompt,
                                                    const DecodeOptions& options) const;

  // A request resumed from its canonical tokens on another engine (a migration, or the
  // scheduler re-placing the requests of a failed worker): `output` holds the output positions
  // decoded so far and the mask id elsewhere; `steps` is how many steps it has run. Decoding
  // goes on at the first block with a masked position, starting with a recompute step (this
  // engine holds no KV cache for it). Earlier blocks must be complete and later ones fully
  // masked, as block-by-block decoding leaves them.
  StatusOr<std::unique_ptr<DecodeState>> ResumeRequest(int64_t id, const std::vector<int32_t>& prompt,
                                                       const DecodeOptions& options,
                                                       const std::vector<int32_t>& output, int steps) const;

  // One denoising step for every request of the batch (each at most once, none done), in
  // one forward call mixing recompute and cache steps. Results in batch order.
  Status Step(std::span<const StepRequest> batch, std::vector<StepResult>* results,
              BatchStats* stats = nullptr);

  // Logits of every position of `tokens` in one recompute forward (for tests and tools).
  StatusOr<std::vector<float>> FullLogits(const std::vector<int32_t>& tokens);

 private:
  explicit DiffusionEngine(std::unique_ptr<Transformer> t) : transformer_(std::move(t)) {}
  std::unique_ptr<Transformer> transformer_;
  std::vector<float> logits_;
  std::vector<float> conf_;
};

}  // namespace tediserve::engine
