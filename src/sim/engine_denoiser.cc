#include "sim/engine_denoiser.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

namespace tediserve::sim {
namespace {

static_assert(engine::kCandidateThresholds.size() == policy::kDefaultThresholds.size(),
              "the engine's and the policy's candidate thresholds must line up");

policy::ConfidenceSummary ToPolicy(const engine::ConfidenceSummary& s) {
  return {s.count, s.min, s.q1, s.median, s.q3, s.mean};
}

policy::StepOutcome ToOutcome(const engine::StepResult& r) {
  policy::StepOutcome o;
  o.id = r.id;
  o.unmasked = static_cast<int>(r.unmasked.size());
  o.block_done = r.block_done;
  o.request_done = r.request_done;
  o.features.block = ToPolicy(r.stats.block);
  o.features.output = ToPolicy(r.stats.output);
  for (size_t k = 0; k < o.features.block_above.size(); ++k) o.features.block_above[k] = r.stats.block_above[k];
  return o;
}

}  // namespace

StatusOr<std::unique_ptr<EngineDenoiser>> EngineDenoiser::Create(const std::string& model_dir,
                                                                 const EngineDenoiserOptions& options) {
  if (options.tp < 1) return InvalidArgument("tp must be >= 1, got " + std::to_string(options.tp));
  if (options.block_size < 0 || options.max_output_len < 0)
    return InvalidArgument("block size and max output length must be >= 0 (0: the model's default)");
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    return InvalidArgument("temperature must be >= 0");
  std::unique_ptr<EngineDenoiser> d(new EngineDenoiser());
  d->options_ = options;
  ASSIGN_OR_RETURN(engine::LoadedModel m, engine::LoadModel(model_dir));
  d->model_ = std::make_shared<const engine::LoadedModel>(std::move(m));
  const std::string tok_path = (std::filesystem::path(model_dir) / "tokenizer.json").string();
  ASSIGN_OR_RETURN(engine::Tokenizer tok, engine::Tokenizer::FromFile(tok_path));
  d->tokenizer_ = std::make_unique<engine::Tokenizer>(std::move(tok));
  ASSIGN_OR_RETURN(d->engine_, engine::DiffusionEngine::Create(d->model_, options.tp));

  const engine::GenerationDefaults defaults = engine::ReadGenerationDefaults(model_dir);
  const int gen = defaults.gen_length, block = defaults.block_size;
  d->block_size_ = options.block_size > 0 ? options.block_size : block;
  d->max_output_len_ = options.max_output_len > 0 ? options.max_output_len : gen;
  if (options.use_cache && d->max_output_len_ % d->block_size_ != 0)
    return InvalidArgument("with the KV cache the output length (" + std::to_string(d->max_output_len_) +
                           ") must be a multiple of the block size (" + std::to_string(d->block_size_) + ")");

  const std::string problems = options.problems_file.empty()
                                   ? (std::filesystem::path(model_dir) / "heldout.jsonl").string()
                                   : options.problems_file;
  ASSIGN_OR_RETURN(d->problems_, engine::ReadTaskFile(problems, *d->tokenizer_));
  // Every problem must fit with the longest output, so Start cannot fail on the context.
  const int max_seq = d->model_->config.max_seq_len;
  for (size_t i = 0; i < d->problems_.size(); ++i) {
    const int64_t total = static_cast<int64_t>(d->problems_[i].ids.size()) + d->max_output_len_;
    if (total > max_seq)
      return OutOfRange(problems + ": problem " + std::to_string(i + 1) + " (" +
                        std::to_string(d->problems_[i].ids.size()) + " prompt tokens) + output length " +
                        std::to_string(d->max_output_len_) + " exceeds the model's context of " +
                        std::to_string(max_seq));
  }
  return d;
}

Status EngineDenoiser::TryStart(const policy::RequestSpec& spec, int block_size, uint64_t seed) {
  if (requests_.count(spec.id)) return FailedPrecondition("request " + std::to_string(spec.id) + " already started");
  if (spec.id < 0) return InvalidArgument("request id must be >= 0, got " + std::to_string(spec.id));
  Request r;
  r.problem = static_cast<int>(spec.id % static_cast<int64_t>(problems_.size()));
  engine::DecodeOptions o;
  o.gen_length = spec.output_len;
  o.block_size = block_size;
  o.use_cache = options_.use_cache;
  o.eos_early_stop = options_.eos_early_stop;
  o.temperature = options_.temperature;
  o.seed = seed;
  auto s = engine_->NewRequest(spec.id, problems_[r.problem].ids, o);
  if (!s.ok()) return s.status().WithContext("request " + std::to_string(spec.id));
  r.state = std::move(s).value();
  requests_.emplace(spec.id, std::move(r));
  return Status::Ok();
}

void EngineDenoiser::Start(const policy::RequestSpec& spec, int block_size, uint64_t seed) {
  Status s = TryStart(spec, block_size, seed);
  if (!s.ok() && status_.ok()) status_ = s;
}

StatusOr<std::vector<policy::StepOutcome>> EngineDenoiser::TryStep(const std::vector<DenoiseCommand>& batch) {
  // Check every command before the engine touches any state, so an error changes nothing.
  std::vector<engine::StepRequest> reqs;
  reqs.reserve(batch.size());
  std::unordered_set<policy::RequestId> seen;
  for (const DenoiseCommand& c : batch) {
    auto it = requests_.find(c.id);
    if (it == requests_.end()) return FailedPrecondition("request " + std::to_string(c.id) + " was not started");
    if (it->second.state->done()) return FailedPrecondition("request " + std::to_string(c.id) + " is already done");
    if (!(c.threshold > 0.0 && c.threshold <= 1.0))
      return InvalidArgument("request " + std::to_string(c.id) + ": threshold must be in (0, 1], got " +
                             std::to_string(c.threshold));
    if (!seen.insert(c.id).second)
      return InvalidArgument("request " + std::to_string(c.id) + " appears twice in one batch");
    reqs.push_back({it->second.state.get(), static_cast<float>(c.threshold)});
  }
  std::vector<policy::StepOutcome> out;
  if (reqs.empty()) return out;
  std::vector<engine::StepResult> results;
  RETURN_IF_ERROR(engine_->Step(reqs, &results));
  out.reserve(results.size());
  for (const auto& r : results) out.push_back(ToOutcome(r));
  return out;
}

std::vector<policy::StepOutcome> EngineDenoiser::Step(const std::vector<DenoiseCommand>& batch) {
  auto r = TryStep(batch);
  if (r.ok()) return std::move(r).value();
  if (status_.ok()) status_ = r.status();
  return {};
}

int EngineDenoiser::RemainingSteps(policy::RequestId id, double threshold) const {
  const Request* r = Find(id);
  if (r == nullptr || !(threshold > 0.0 && threshold <= 1.0)) return -1;
  if (r->state->done()) return 0;
  // DecodeState is a value (tokens, KV buffer, RNG): a copy continues exactly where the
  // original stands, and the original is never touched.
  engine::DecodeState copy = *r->state;
  const engine::StepRequest req{&copy, static_cast<float>(threshold)};
  std::vector<engine::StepResult> results;
  int steps = 0;
  while (!copy.done()) {
    // Cannot fail: the copy is valid, not done and alone in its batch.
    if (!engine_->Step(std::span<const engine::StepRequest>(&req, 1), &results).ok()) return -1;
    ++steps;
  }
  return steps;
}

void EngineDenoiser::Finish(policy::RequestId id) { requests_.erase(id); }

const EngineDenoiser::Request* EngineDenoiser::Find(policy::RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

std::optional<bool> EngineDenoiser::Correct(policy::RequestId id) const {
  const Request* r = Find(id);
  if (r == nullptr || !r->state->done()) return std::nullopt;
  return *Text(id) == problems_[r->problem].answer;
}

std::optional<std::string> EngineDenoiser::Text(policy::RequestId id) const {
  const Request* r = Find(id);
  if (r == nullptr) return std::nullopt;
  // Decode skips special tokens (the mask among them) and stops at the model's EOS.
  return tokenizer_->Decode(r->state->output_tokens(), engine_->config().eos_token_id);
}

const EngineProblem* EngineDenoiser::ProblemOf(policy::RequestId id) const {
  const Request* r = Find(id);
  return r == nullptr ? nullptr : &problems_[r->problem];
}

int EngineDenoiser::PromptLength(policy::RequestId id) const {
  const Request* r = Find(id);
  return r == nullptr ? -1 : r->state->prompt_length();
}

int EngineDenoiser::NextStepTokens(policy::RequestId id) const {
  const Request* r = Find(id);
  if (r == nullptr) return -1;
  return r->state->done() ? 0 : r->state->next_step_tokens();
}

}  // namespace tediserve::sim
