// `tediserve profile`. For each token count n of the grid and each TP degree, the median
// wall time of one DiffusionEngine::Step whose batch pushes exactly n tokens:
//  - recompute (default): ceil(n / S) requests at their first step, S = prompt + gen length,
//    n split over them as evenly as possible (each at most S tokens);
//  - cache: n / B requests at a cache step (each pushes its B block positions), after an
//    untimed recompute step that opened the block.
// The simulator charges l_d(total batch tokens) whatever the mix, so the recompute profile
// (the larger share of tokens in a cached run) is the default.
#include "cli/profile_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include "cli/model_setup.h"
#include "common/input.h"
#include "engine/decoder.h"
#include "engine/model_config.h"

namespace tediserve::cli {

namespace {
constexpr int kMaxBatchTokens = 1 << 20;  // tokens of one profiled step
constexpr int64_t kMaxGridPoints = 4096;
}  // namespace

CLI::App* AddProfileCommand(CLI::App& app, ProfileArgs* a) {
  CLI::App* p = app.add_subcommand("profile", "measure the step-latency profile l_d(n) of a model on this machine");
  a->model_dir = DefaultModelDir();
  p->add_option("--model", a->model_dir, "model folder (config.json, *.safetensors, tokenizer.json)");
  // Flag bounds: token counts up to kMaxBatchTokens, lengths up to the longest supported
  // context; the model's own context and memory are checked once it is loaded.
  const int max_len = engine::kMaxSeqLen;
  p->add_option("--tp", a->tp, "tensor-parallel degrees, one CSV column each")->delimiter(',')->check(CLI::Range(1, 256));
  p->add_option("--min-tokens", a->min_tokens, "smallest batch token count")->check(CLI::Range(1, kMaxBatchTokens));
  p->add_option("--max-tokens", a->max_tokens, "largest batch token count")->check(CLI::Range(1, kMaxBatchTokens));
  p->add_option("--step-tokens", a->step_tokens, "grid step (linear grid)")->check(CLI::Range(1, kMaxBatchTokens));
  p->add_flag("--geometric", a->geometric, "doubling grid from --min-tokens instead of a linear one");
  p->add_option("--repeats", a->repeats, "timed steps per point (median reported)")->check(CLI::Range(1, 1000));
  p->add_option("--kind", a->kind, "step kind filling the batch: recompute or cache");
  p->add_option("--prompt-length", a->prompt_length, "prompt tokens per request")->check(CLI::Range(1, max_len));
  p->add_option("--gen-length", a->gen_length, "output tokens per request (default: the model's)")
      ->check(CLI::Range(1, max_len));
  p->add_option("--block-size", a->block_size, "decoding block size (default: the model's)")
      ->check(CLI::Range(1, max_len));
  p->add_option("--out", a->out, "write the CSV here (default: stdout)");
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;

Status Validate(const ProfileArgs& a) {
  if (a.tp.empty()) return InvalidArgument("--tp needs at least one degree");
  std::set<int> seen;
  for (int d : a.tp) {
    if (d < 1 || d > 256) return InvalidArgument("--tp degrees must be in 1..256, got " + std::to_string(d));
    if (!seen.insert(d).second) return InvalidArgument("--tp lists degree " + std::to_string(d) + " twice");
  }
  if (a.repeats < 1 || a.repeats > 1000)
    return InvalidArgument("--repeats must be in [1, 1000], got " + std::to_string(a.repeats));
  if (a.min_tokens < 1) return InvalidArgument("--min-tokens must be >= 1, got " + std::to_string(a.min_tokens));
  if (a.max_tokens < a.min_tokens)
    return InvalidArgument("--max-tokens (" + std::to_string(a.max_tokens) + ") must be >= --min-tokens (" +
                           std::to_string(a.min_tokens) + ")");
  if (a.max_tokens > kMaxBatchTokens)
    return InvalidArgument("--max-tokens must be <= " + std::to_string(kMaxBatchTokens) + ", got " +
                           std::to_string(a.max_tokens));
  // Every point is measured (repeats + 1) x |tp| times: a finer grid would run for hours.
  const int64_t points = a.geometric ? 64 : (int64_t{a.max_tokens} - a.min_tokens) / std::max(1, a.step_tokens) + 1;
  if (points > kMaxGridPoints)
    return InvalidArgument("the grid --min-tokens " + std::to_string(a.min_tokens) + " .. --max-tokens " +
                           std::to_string(a.max_tokens) + " step --step-tokens " + std::to_string(a.step_tokens) +
                           " has " + std::to_string(points) + " points, more than " + std::to_string(kMaxGridPoints) +
                           "; use a larger --step-tokens or --geometric");
  if (!a.geometric && a.step_tokens < 1)
    return InvalidArgument("--step-tokens must be >= 1, got " + std::to_string(a.step_tokens));
  if (a.kind != "recompute" && a.kind != "cache")
    return InvalidArgument("--kind must be recompute or cache, got '" + SanitizeUtf8(a.kind.substr(0, 40)) + "'");
  if (a.prompt_length < 1 || a.prompt_length > engine::kMaxSeqLen)
    return InvalidArgument("--prompt-length must be in [1, " + std::to_string(engine::kMaxSeqLen) + "], got " +
                           std::to_string(a.prompt_length));
  return Status::Ok();
}

std::vector<int> Grid(const ProfileArgs& a) {
  std::vector<int> g;
  if (a.geometric) {
    for (int64_t n = a.min_tokens; n <= a.max_tokens; n *= 2) g.push_back(static_cast<int>(n));
  } else {
    for (int64_t n = a.min_tokens; n <= a.max_tokens; n += a.step_tokens) g.push_back(static_cast<int>(n));
  }
  if (g.back() != a.max_tokens) g.push_back(a.max_tokens);
  return g;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Builds and times batches of exactly n tokens.
class Profiler {
 public:
  Profiler(const engine::ModelConfig& c, const ProfileArgs& a, int gen, int block)
      : args_(a), gen_(gen), block_(block) {
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
    tokens_.resize(c.max_seq_len);
    for (auto& t : tokens_) {
      do t = tok(rng);
      while (t == c.mask_token_id || t == c.eos_token_id);
    }
  }

  // Request lengths (prompt + output) of a recompute batch of n tokens: ceil(n / S) requests,
  // n split as evenly as possible.
  std::vector<int> Split(int n) const {
    const int S = args_.prompt_length + gen_;
    const int k = (n + S - 1) / S;
    std::vector<int> len(k);
    for (int i = 0; i < k; ++i) len[i] = n / k + (i < n % k ? 1 : 0);
    return len;
  }

  // Checks that a grid point can be built; the message names it.
  Status CheckPoint(int n) const {
    if (args_.kind == "recompute") {
      const auto len = Split(n);
      if (*std::min_element(len.begin(), len.end()) < 2)
        return InvalidArgument("cannot build a recompute batch of " + std::to_string(n) +
                               " tokens: every request needs a prompt and an output token");
      return Status::Ok();
    }
    if (n % block_ != 0)
      return InvalidArgument("with --kind cache every grid point must be a multiple of the block size " +
                             std::to_string(block_) + "; " + std::to_string(n) + " is not");
    return Status::Ok();
  }

  // Fresh requests whose timed step pushes n tokens, with the untimed steps before it done.
  StatusOr<std::vector<std::unique_ptr<engine::DecodeState>>> Build(engine::DiffusionEngine& eng, int n) {
    std::vector<std::unique_ptr<engine::DecodeState>> states;
    if (args_.kind == "recompute") {
      const auto len = Split(n);
      for (size_t i = 0; i < len.size(); ++i) {
        const int out = std::min(gen_, len[i] - 1);
        // Without the cache any output length is allowed; the recompute forward is the same.
        engine::DecodeOptions o{out, out, /*use_cache=*/false, false, 0.0f, 0};
        std::vector<int32_t> p(tokens_.begin(), tokens_.begin() + (len[i] - out));
        ASSIGN_OR_RETURN(auto s, eng.NewRequest(static_cast<int64_t>(i), p, o));
        states.push_back(std::move(s));
      }
      return states;
    }
    const int k = n / block_;
    std::vector<int32_t> p(tokens_.begin(), tokens_.begin() + args_.prompt_length);
    engine::DecodeOptions o{gen_, block_, /*use_cache=*/true, false, 0.0f, 0};
    std::vector<engine::StepRequest> reqs;
    for (int i = 0; i < k; ++i) {
      ASSIGN_OR_RETURN(auto s, eng.NewRequest(i, p, o));
      states.push_back(std::move(s));
      reqs.push_back({states.back().get(), 1.0f});  // threshold 1: one token, the block stays open
    }
    std::vector<engine::StepResult> results;
    RETURN_IF_ERROR(eng.Step(reqs, &results));
    // A model certain enough to reach confidence 1.0 closes the block at once.
    for (const auto& s : states)
      if (s->done() || s->next_step_kind() != engine::StepKind::kCache)
        return Internal("the recompute step closed a whole block, so no cache step follows; "
                        "try a larger --block-size");
    return states;
  }

  // Milliseconds of one step of n tokens.
  StatusOr<double> TimeOnce(engine::DiffusionEngine& eng, int n) {
    ASSIGN_OR_RETURN(auto states, Build(eng, n));
    std::vector<engine::StepRequest> reqs;
    for (auto& s : states) reqs.push_back({s.get(), 1.0f});
    std::vector<engine::StepResult> results;
    engine::BatchStats bs;
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(eng.Step(reqs, &results, &bs));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (bs.tokens != n)
      return Internal("the batch for " + std::to_string(n) + " tokens pushed " + std::to_string(bs.tokens));
    return ms;
  }

 private:
  const ProfileArgs& args_;
  int gen_, block_;
  std::vector<int32_t> tokens_;
};

}  // namespace

int RunProfile(const ProfileArgs& a) {
  if (Status s = Validate(a); !s.ok()) return ReportError(s);
  auto bundle = LoadBundle(a.model_dir);
  if (!bundle.ok()) return ReportError(bundle.status());
  auto lengths = ResolveLengths(a.gen_length, a.block_size, bundle->default_gen_length, bundle->default_block_size);
  if (!lengths.ok()) return ReportError(lengths.status());
  const int gen = lengths->gen_length, block = lengths->block_size;
  const auto& c = bundle->model->config;
  const int64_t seq = int64_t{a.prompt_length} + gen;  // both <= kMaxSeqLen: no overflow
  if (seq > c.max_seq_len)
    return ReportError(InvalidArgument("--prompt-length + gen length (" + std::to_string(seq) +
                                       ") exceeds the model's context of " + std::to_string(c.max_seq_len)));
  if (a.kind == "cache") {
    if (gen % block != 0)
      return ReportError(InvalidArgument("gen length " + std::to_string(gen) + " must be a multiple of the block size " +
                                         std::to_string(block) + " for cache steps"));
    if (block < 2)
      return ReportError(InvalidArgument("cache steps need a block size >= 2 (a block of 1 closes at its recompute step)"));
  }
  {
    // The largest point: recompute packs ceil(n / S) requests, cache n / B requests of S tokens.
    const int64_t n = a.max_tokens;
    const int64_t requests = a.kind == "cache" ? n / block : (n + seq - 1) / seq;
    if (Status s = CheckBatchFits(*bundle->model, std::max<int64_t>(1, requests), seq, "--max-tokens / --prompt-length / --gen-length");
        !s.ok())
      return ReportError(s);
  }
  Profiler prof(c, a, gen, block);
  const std::vector<int> grid = Grid(a);
  for (int n : grid)
    if (Status s = prof.CheckPoint(n); !s.ok()) return ReportError(s);

  // Open the output first: an unwritable path should not cost a whole measurement.
  std::ofstream file;
  if (!a.out.empty()) {
    file.open(a.out);
    if (!file) return ReportError(IoError("cannot write " + a.out));
  }

  std::vector<std::unique_ptr<engine::DiffusionEngine>> engines;
  for (int d : a.tp) {
    auto e = engine::DiffusionEngine::Create(bundle->model, d);
    if (!e.ok()) return ReportError(e.status().WithContext("TP " + std::to_string(d)));
    engines.push_back(std::move(e).value());
  }
  std::fprintf(stderr, "profile: %s, %s steps, prompt %d + gen %d tokens per request%s, %zu points x TP {",
               a.model_dir.c_str(), a.kind.c_str(), a.prompt_length, gen,
               a.kind == "cache" ? (", block " + std::to_string(block)).c_str() : "", grid.size());
  for (size_t i = 0; i < a.tp.size(); ++i) std::fprintf(stderr, "%s%d", i ? "," : "", a.tp[i]);
  std::fprintf(stderr, "}, median of %d\n", a.repeats);

  // Every repeat sweeps the whole grid (and every TP degree at each point), so a burst of
  // load on the machine lands on a few samples of every point instead of on all samples of
  // a few points; the median then drops it.
  std::vector<std::vector<std::vector<double>>> ms(grid.size(), std::vector<std::vector<double>>(engines.size()));
  for (int rep = 0; rep <= a.repeats; ++rep) {  // rep 0 warms up
    for (size_t g = 0; g < grid.size(); ++g)
      for (size_t i = 0; i < engines.size(); ++i) {
        auto t = prof.TimeOnce(*engines[i], grid[g]);
        if (!t.ok()) return ReportError(Internal(t.status().message()));
        if (rep > 0) ms[g][i].push_back(*t);
      }
    if (rep > 0) std::fprintf(stderr, "  repeat %d/%d done\n", rep, a.repeats);
  }
  std::ostringstream csv;
  csv << "num_batched_tokens";
  for (int d : a.tp) csv << ",tp" << d << "_ms";
  csv << "\n";
  for (size_t g = 0; g < grid.size(); ++g) {
    csv << grid[g];
    for (size_t i = 0; i < engines.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4f", Median(ms[g][i]));
      csv << "," << buf;
    }
    csv << "\n";
  }
  if (a.out.empty()) {
    std::cout << csv.str();
    return 0;
  }
  file << csv.str();
  file.close();
  if (!file) return ReportError(Internal("writing " + a.out + " failed"));
  std::fprintf(stderr, "profile: wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace tediserve::cli
