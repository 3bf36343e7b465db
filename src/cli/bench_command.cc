// `tediserve bench`: what one engine step costs, measured in one run so ratios are fair.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "engine/decoder.h"

namespace tediserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct StepTiming {
  double recompute_ms = 0, cache_ms = 0;
  int64_t recompute_tokens = 0, cache_tokens = 0;
  double recompute_flops = 0;  // GEMM + attention FLOPs of the recompute step
  double recompute_gemm_flops = 0;
};

class Bench {
 public:
  Bench(const ModelBundle& b, const BenchArgs& a, int gen_length, int block_size)
      : args_(a), gen_length_(gen_length), block_size_(block_size) {
    std::mt19937 rng(1);
    const auto& c = b.model->config;
    std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
    prompt_.resize(a.prompt_length);
    for (auto& t : prompt_) {
      do t = tok(rng);
      while (t == c.mask_token_id || t == c.eos_token_id);
    }
  }

  // Median latency of a batch of `batch` requests' first step (recompute) and second step
  // (cache, when caching).
  StatusOr<StepTiming> Time(engine::DiffusionEngine& eng, int batch, bool cache) {
    StepTiming t;
    std::vector<double> rec, cac;
    for (int rep = 0; rep <= args_.reps; ++rep) {  // rep 0 warms up
      std::vector<std::unique_ptr<engine::DecodeState>> states;
      std::vector<engine::StepRequest> reqs;
      engine::DecodeOptions o{gen_length_, block_size_, cache, false, 0.0f, 0};
      for (int i = 0; i < batch; ++i) {
        ASSIGN_OR_RETURN(auto s, eng.NewRequest(i, prompt_, o));
        states.push_back(std::move(s));
        reqs.push_back({states.back().get(), 1.0f});  // one token per step: block stays open
      }
      std::vector<engine::StepResult> results;
      engine::BatchStats bs;
      auto t0 = Clock::now();
      RETURN_IF_ERROR(eng.Step(reqs, &results, &bs));
      const double r_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      t.recompute_tokens = bs.tokens;
      t.recompute_flops = bs.gemm_flops + bs.attention_flops;
      t.recompute_gemm_flops = bs.gemm_flops;
      if (cache) {
        t0 = Clock::now();
        RETURN_IF_ERROR(eng.Step(reqs, &results, &bs));
        const double c_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        t.cache_tokens = bs.tokens;
        if (rep > 0) cac.push_back(c_ms);
      }
      if (rep > 0) rec.push_back(r_ms);
    }
    t.recompute_ms = Median(rec);
    if (cache) t.cache_ms = Median(cac);
    return t;
  }

 private:
  const BenchArgs& args_;
  int gen_length_, block_size_;
  std::vector<int32_t> prompt_;
};

// GFLOP/s of plain single-threaded sgemm over exactly these shapes (C = A * B^T, as the
// engine calls it), median of reps.
double SgemmRate(const std::vector<engine::Transformer::GemmShape>& shapes, int reps) {
  size_t a_max = 0, b_max = 0, c_max = 0;
  double flops = 0;
  for (const auto& s : shapes) {
    a_max = std::max(a_max, static_cast<size_t>(s.m) * s.k);
    b_max = std::max(b_max, static_cast<size_t>(s.n) * s.k);
    c_max = std::max(c_max, static_cast<size_t>(s.m) * s.n);
    flops += 2.0 * s.m * s.n * s.k;
  }
  std::vector<float> A(a_max, 0.01f), B(b_max, 0.02f), C(c_max);
  std::vector<double> times;
  for (int rep = 0; rep <= reps; ++rep) {
    auto t0 = Clock::now();
    for (const auto& s : shapes)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, A.data(), s.k, B.data(), s.k, 0.0f,
                  C.data(), s.n);
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rep > 0) times.push_back(sec);
  }
  return flops / Median(times) / 1e9;
}

}  // namespace

int RunBench(const BenchArgs& a) {
  if (a.reps < 1 || a.reps > 1000 || a.prompt_length < 1 || a.prompt_length > engine::kMaxSeqLen ||
      a.batches.empty()) {
    std::cerr << "error: --reps must be in [1, 1000], --prompt-length in [1, " << engine::kMaxSeqLen
              << "] and --batches non-empty\n";
    return 2;
  }
  for (int b : a.batches)
    if (b < 1 || b > 4096) {
      std::cerr << "error: --batches: batch sizes must be in [1, 4096], got " << b << "\n";
      return 2;
    }
  auto bundle = LoadBundle(a.engine.model_dir);
  if (!bundle.ok()) return ReportError(bundle.status());
  // Unset lengths are the model's own (config.json's tediserve section), as in eval.
  auto lengths =
      ResolveLengths(a.engine.gen_length, a.engine.block_size, bundle->default_gen_length, bundle->default_block_size);
  if (!lengths.ok()) return ReportError(lengths.status());
  const int gen = lengths->gen_length, block = lengths->block_size;
  if (gen % block != 0) {
    std::cerr << "error: gen length must be a multiple of the block size\n";
    return 2;
  }
  const auto& c = bundle->model->config;
  if (static_cast<int64_t>(a.prompt_length) + gen > c.max_seq_len) {
    std::cerr << "error: prompt length + gen length exceeds the model's context of " << c.max_seq_len << "\n";
    return 2;
  }
  {
    // The largest batch the sections below run: the flags', 16 (section 3), and the one
    // whose step pushes 1024 tokens (section 2).
    const int64_t S64 = int64_t{a.prompt_length} + gen;
    int64_t biggest = std::max<int64_t>(16, (1024 + S64 - 1) / S64);
    for (int b : a.batches) biggest = std::max<int64_t>(biggest, b);
    if (Status s = CheckBatchFits(c, biggest, S64, "--batches / --prompt-length / --gen-length"); !s.ok())
      return ReportError(s);
  }
  Bench bench(*bundle, a, gen, block);
  nlohmann::json out;
  const int S = a.prompt_length + gen;
  std::printf("bench: d_model %d, %d layers, %d heads, mlp %d, vocab %d; prompt %d + gen %d = %d tokens, block %d\n",
              c.d_model, c.n_layers, c.n_heads, c.mlp_hidden, c.vocab_size, a.prompt_length, gen, S, block);

  auto eng1 = engine::DiffusionEngine::Create(bundle->model, 1);
  if (!eng1.ok()) return ReportError(eng1.status());
  std::printf("\n[1] step throughput, TP 1 (median of %d)\n", a.reps);
  std::printf("%6s %14s %16s %12s %16s %10s\n", "batch", "recompute_ms", "recompute_tok/s", "cache_ms",
              "cache_tok/s", "rec/cache");
  std::map<int, StepTiming> tp1;
  for (int b : a.batches) {
    auto t = bench.Time(**eng1, b, true);
    if (!t.ok()) {
      std::cerr << "error: " << t.status().message() << "\n";
      return 1;
    }
    tp1[b] = *t;
    std::printf("%6d %14.3f %16.0f %12.3f %16.0f %10.2f\n", b, t->recompute_ms, t->recompute_tokens / t->recompute_ms * 1e3,
                t->cache_ms, t->cache_tokens / t->cache_ms * 1e3, t->recompute_ms / t->cache_ms);
    out["throughput"].push_back({{"batch", b},
                                 {"recompute_ms", t->recompute_ms},
                                 {"recompute_tokens_per_s", t->recompute_tokens / t->recompute_ms * 1e3},
                                 {"cache_ms", t->cache_ms},
                                 {"cache_tokens_per_s", t->cache_tokens / t->cache_ms * 1e3},
                                 {"recompute_over_cache", t->recompute_ms / t->cache_ms}});
  }

  // [2] GEMM efficiency: the smallest batch whose recompute step pushes >= 1024 tokens.
  const int big = (1024 + S - 1) / S;
  auto tb = bench.Time(**eng1, big, false);
  if (!tb.ok()) {
    std::cerr << "error: " << tb.status().message() << "\n";
    return 1;
  }
  const double step_gflops = tb->recompute_flops / (tb->recompute_ms * 1e-3) / 1e9;
  const double gemm_only = tb->recompute_gemm_flops / (tb->recompute_ms * 1e-3) / 1e9;
  const double sgemm =
      SgemmRate(engine::Transformer::GemmShapesFor(c, 1, static_cast<int>(tb->recompute_tokens), big * gen), a.reps);
  std::printf("\n[2] recompute step of %lld tokens (batch %d), TP 1: %.3f ms\n",
              static_cast<long long>(tb->recompute_tokens), big, tb->recompute_ms);
  std::printf("    step rate %.2f GFLOP/s (GEMM + attention), GEMM FLOPs alone / step time %.2f GFLOP/s\n",
              step_gflops, gemm_only);
  std::printf("    plain sgemm on the same shapes: %.2f GFLOP/s  ->  step reaches %.1f%% of sgemm\n", sgemm,
              100.0 * step_gflops / sgemm);
  out["gemm_efficiency"] = {{"tokens", tb->recompute_tokens}, {"batch", big},
                            {"step_ms", tb->recompute_ms},     {"step_gflops", step_gflops},
                            {"gemm_only_gflops", gemm_only},   {"sgemm_gflops", sgemm},
                            {"fraction_of_sgemm", step_gflops / sgemm}};

  // [3] cache step vs recompute step at batch 16.
  const int b16 = 16;
  StepTiming t16;
  if (tp1.count(b16)) {
    t16 = tp1[b16];
  } else {
    auto t = bench.Time(**eng1, b16, true);
    if (!t.ok()) {
      std::cerr << "error: " << t.status().message() << "\n";
      return 1;
    }
    t16 = *t;
  }
  std::printf("\n[3] batch %d, gen %d, block %d: recompute step %.3f ms, cache step %.3f ms -> cache step %.2fx faster\n",
              b16, gen, block, t16.recompute_ms, t16.cache_ms, t16.recompute_ms / t16.cache_ms);
  out["cache_speedup"] = {{"batch", b16}, {"recompute_ms", t16.recompute_ms}, {"cache_ms", t16.cache_ms},
                          {"ratio", t16.recompute_ms / t16.cache_ms}};

  // [4] TP-2 vs TP-1.
  auto eng2 = engine::DiffusionEngine::Create(bundle->model, 2);
  if (!eng2.ok()) {
    std::printf("\n[4] TP 2 not possible for this model: %s\n", eng2.status().message().c_str());
  } else {
    std::printf("\n[4] TP 2 vs TP 1 step latency (batch %d)\n", b16);
    std::printf("%6s %12s %12s %10s\n", "step", "tp1_ms", "tp2_ms", "speedup");
    for (int b : {1, b16}) {
      auto t1 = bench.Time(**eng1, b, true);
      auto t2 = bench.Time(**eng2, b, true);
      if (!t1.ok() || !t2.ok()) {
        std::cerr << "error: TP timing failed\n";
        return 1;
      }
      std::printf("%-6s %12.3f %12.3f %10.2f   (batch %d)\n", "rec", t1->recompute_ms, t2->recompute_ms,
                  t1->recompute_ms / t2->recompute_ms, b);
      std::printf("%-6s %12.3f %12.3f %10.2f   (batch %d)\n", "cache", t1->cache_ms, t2->cache_ms,
                  t1->cache_ms / t2->cache_ms, b);
      out["tp"].push_back({{"batch", b},
                           {"tp1_recompute_ms", t1->recompute_ms},
                           {"tp2_recompute_ms", t2->recompute_ms},
                           {"tp1_cache_ms", t1->cache_ms},
                           {"tp2_cache_ms", t2->cache_ms}});
    }
  }
  if (!a.json_out.empty()) {
    std::ofstream f(a.json_out);
    if (!f) {
      std::cerr << "error: cannot write " << a.json_out << "\n";
      return 1;
    }
    f << out.dump(1) << "\n";
  }
  return 0;
}

}  // namespace tediserve::cli
