// The simulator's denoising model (a) of docs/design.md section 4.2: the real engine in the
// loop.
// Each simulated request is a problem of a held-out task set, decoded by the real
// DiffusionEngine, so what a step unmasks (and whether the answer comes out right) is exact.
// Time is not taken from the engine: the simulator charges each step from a latency profile
// keyed on NextStepTokens().
//
// Not thread-safe: one simulator loop owns it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/decoder.h"
#include "engine/task_file.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"
#include "sim/denoiser.h"

namespace tediserve::sim {

struct EngineDenoiserOptions {
  std::string problems_file;  // JSONL {"prompt", "answer"[, "task"]}; empty: <model_dir>/heldout.jsonl
  bool use_cache = true;      // dual KV cache (recompute step per block, then cache steps)
  int tp = 1;                 // tensor-parallel degree of the engine (threads)
  // What the simulator will ask for, checked once in Create so that Start cannot fail on a
  // well-formed workload: the block size B, and the longest output length. 0: the model's
  // defaults ("tediserve" section of config.json, else 32 / 128).
  int block_size = 0;
  int max_output_len = 0;
  bool eos_early_stop = false;
  float temperature = 0.0f;   // 0: greedy (the oracle is exact only up to batch numerics)
};

// One problem of the task set.
using EngineProblem = engine::TaskProblem;

class EngineDenoiser : public DenoiserModel {
 public:
  // Loads the model folder (config.json, *.safetensors, tokenizer.json) and the problems, and
  // checks that every problem's prompt + max_output_len fits the model's context and that
  // the block size suits the output length (a multiple of it with the cache).
  static StatusOr<std::unique_ptr<EngineDenoiser>> Create(const std::string& model_dir,
                                                         const EngineDenoiserOptions& options = {});

  // DenoiserModel. Start takes problem spec.id % num_problems(); spec.prompt_len is ignored
  // (the prompt is the problem's: see PromptLength). A failing Start (id already started,
  // output_len or block_size the engine refuses) registers nothing and records the error in
  // status(); TryStart returns it instead.
  void Start(const policy::RequestSpec& spec, int block_size, uint64_t seed) override;
  // One batched DiffusionEngine::Step over all commands. On an error (unknown or finished
  // id, duplicate, bad threshold) no request changes, the error is recorded in status()
  // and the result is empty; TryStep returns it instead.
  std::vector<policy::StepOutcome> Step(const std::vector<DenoiseCommand>& batch) override;
  // Runs a copy of the request's state to completion alone at `threshold`. 0 when done,
  // -1 for an unknown id or a threshold outside (0, 1]. Exact as long as a step's logits do
  // not depend on what else is in its batch; on the CPU engine the batch changes the GEMM
  // row blocking only, which the tests check gives the same steps.
  int RemainingSteps(policy::RequestId id, double threshold) const override;
  void Finish(policy::RequestId id) override;

  Status TryStart(const policy::RequestSpec& spec, int block_size, uint64_t seed);
  StatusOr<std::vector<policy::StepOutcome>> TryStep(const std::vector<DenoiseCommand>& batch);

  // The first error Start or Step recorded (ok if none).
  const Status& status() const { return status_; }

  // Exact match of the decoded answer with the problem's answer; nullopt until the request
  // is done (and after Finish, or for an unknown id).
  std::optional<bool> Correct(policy::RequestId id) const;
  // The decoded output (up to the first EOS; masked positions are left out); nullopt for an
  // unknown id. Final once the request is done.
  std::optional<std::string> Text(policy::RequestId id) const;
  // The problem a request decodes; nullptr for an unknown id.
  const EngineProblem* ProblemOf(policy::RequestId id) const;
  // The real prompt length (tokens) and the tokens the request's next step pushes through
  // the network (the latency-profile key); -1 for an unknown id, 0 tokens once done.
  int PromptLength(policy::RequestId id) const;
  // The prompt length request `id` will have (its problem is id mod num_problems()), known
  // before Start: the scheduler needs it to cost the request's steps.
  int ProblemPromptLength(policy::RequestId id) const {
    return static_cast<int>(problems_[static_cast<size_t>(id % static_cast<int64_t>(problems_.size()))].ids.size());
  }
  int NextStepTokens(policy::RequestId id) const;

  int num_problems() const { return static_cast<int>(problems_.size()); }
  int default_block_size() const { return block_size_; }
  int default_output_len() const { return max_output_len_; }
  const engine::ModelConfig& model_config() const { return engine_->config(); }

 private:
  struct Request {
    int problem = 0;
    std::unique_ptr<engine::DecodeState> state;
  };
  EngineDenoiser() = default;
  const Request* Find(policy::RequestId id) const;

  EngineDenoiserOptions options_;
  int block_size_ = 0, max_output_len_ = 0;
  std::shared_ptr<const engine::LoadedModel> model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  // The oracle (a const method) steps the engine too: its scratch buffers are not state.
  std::unique_ptr<engine::DiffusionEngine> engine_;
  std::vector<EngineProblem> problems_;
  std::map<policy::RequestId, Request> requests_;
  Status status_;
};

}  // namespace tediserve::sim
