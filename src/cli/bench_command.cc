// `tediserve bench`: what one engine step costs, measured in one run so ratios are fair.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include <sys/resource.h>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <tuple>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "engine/decoder.h"
#include "engine/float16.h"
#include "engine/safetensors.h"

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

// This process's memory from /proc/self/status, in bytes (0 where unreadable).
struct Rss {
  uint64_t rss = 0, anon = 0, file = 0, peak = 0;
};
Rss ReadRss() {
  Rss r;
  std::ifstream f("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (f >> key) {
    if (key == "VmRSS:" && f >> kb) r.rss = kb << 10;
    else if (key == "RssAnon:" && f >> kb) r.anon = kb << 10;
    else if (key == "RssFile:" && f >> kb) r.file = kb << 10;
    else if (key == "VmHWM:" && f >> kb) r.peak = kb << 10;
  }
  return r;
}

std::string GiB(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(1 << 30));
  return buf;
}

// CPU seconds this process has used (all threads).
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// User and system CPU seconds and page faults of this process so far (getrusage).
struct Usage {
  double user = 0, sys = 0;
  long major = 0, minor = 0;
  static Usage Now() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return {ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6,
            ru.ru_majflt, ru.ru_minflt};
  }
  Usage operator-(const Usage& o) const { return {user - o.user, sys - o.sys, major - o.major, minor - o.minor}; }
  std::string Text() const {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "user %.1f s, sys %.1f s, %ld major + %ld minor page faults", user, sys, major,
                  minor);
    return buf;
  }
};

// A rate measured two ways: per wall-clock second, and per CPU second of this process (on a
// machine shared with other work the wall rate falls with the CPU share we get; the CPU rate
// is what the code achieves while it runs).
struct Rate {
  double wall = 0, cpu = 0;  // GFLOP/s
};

// GFLOP/s of single-threaded GEMMs C = A * B^T over the distinct shapes of a step, each
// weighted by how often the step runs it, best of `reps` per shape: with fp32 B (plain
// cblas_sgemm: the peak the engine's GEMMs could reach), or with B a bf16 matrix run through
// Transformer::GemmBlock (the engine's mapped-layout GEMM: panels converted, then sgemm).
Rate GemmRate(const std::vector<engine::Transformer::GemmShape>& shapes, int reps, bool bf16) {
  std::map<std::tuple<int, int, int>, int> count;
  for (const auto& s : shapes) ++count[{s.m, s.n, s.k}];
  double flops = 0, wall = 0, cpu = 0;
  std::vector<float> scratch;
  for (const auto& [shape, n] : count) {
    const auto [m, full_n, k] = shape;
    // The LM head's [vocab x d] would add GBs to this process's peak memory next to the model;
    // its rate is measured on a slice of at most 32M weights (the same m and k).
    const int nn = std::min(full_n, std::max(16, static_cast<int>((int64_t{32} << 20) / k)));
    std::vector<float> A(static_cast<size_t>(m) * k, 0.01f), B, C(static_cast<size_t>(m) * nn);
    std::vector<uint16_t> B16;
    engine::Matrix W;
    W.rows = nn;
    W.cols = k;
    if (bf16) {
      B16.assign(static_cast<size_t>(nn) * k, engine::FloatToBf16(0.02f));
      W.mapped = B16.data();
      W.type = engine::WeightType::kBF16;
    } else {
      B.assign(static_cast<size_t>(nn) * k, 0.02f);
    }
    double best_wall = 1e300, best_cpu = 1e300;
    for (int rep = 0; rep < reps; ++rep) {
      const double c0 = CpuSeconds();
      auto t0 = Clock::now();
      if (bf16)
        engine::Transformer::GemmBlock(m, A.data(), k, {&W, 0, nn, 0, k}, 0.0f, C.data(), nn, &scratch);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nn, k, 1.0f, A.data(), k, B.data(), k, 0.0f, C.data(),
                    nn);
      best_wall = std::min(best_wall, std::chrono::duration<double>(Clock::now() - t0).count());
      best_cpu = std::min(best_cpu, CpuSeconds() - c0);
    }
    flops += 2.0 * m * nn * k * n;
    wall += best_wall * n;
    cpu += best_cpu * n;
  }
  return {flops / wall / 1e9, flops / std::max(cpu, 1e-9) / 1e9};
}

int RunLargeBench(const BenchArgs& a) {
  const auto t0 = Clock::now();
  auto loaded = engine::LoadModel(a.engine.model_dir);
  if (!loaded.ok()) return ReportError(loaded.status());
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  auto model = std::make_shared<const engine::LoadedModel>(std::move(loaded).value());
  const auto& c = model->config;
  const engine::WeightLayout layout = a.layout == "packed"   ? engine::WeightLayout::kPacked
                                      : a.layout == "mapped" ? engine::WeightLayout::kMapped
                                                             : engine::WeightLayout::kAuto;
  // Page the weights in now (unless --no-prefault): the load is then done when the model can
  // run at full speed, and the first step measures compute, not disk or page faults.
  double prefault_s = 0;
  if (!a.no_prefault) {
    const auto tp0 = Clock::now();
    for (const auto& f : model->files)
      if (Status st = f->Prefault(); !st.ok()) {
        if (st.code() != StatusCode::kUnimplemented) return ReportError(st);
        std::printf("note: %s\n", st.message().c_str());
        break;
      }
    prefault_s = std::chrono::duration<double>(Clock::now() - tp0).count();
  }
  const auto t1 = Clock::now();
  auto eng = engine::DiffusionEngine::Create(model, a.engine.tp, layout);
  if (!eng.ok()) return ReportError(eng.status());
  const double create_s = std::chrono::duration<double>(Clock::now() - t1).count();
  const Rss after_load = ReadRss();

  auto lengths = ResolveLengths(a.engine.gen_length, a.engine.block_size, model->generation.gen_length,
                                model->generation.block_size);
  if (!lengths.ok()) return ReportError(lengths.status());
  const int gen = lengths->gen_length, block = lengths->block_size;
  const int prompt_len = a.step_tokens - gen;
  if (prompt_len < 1 || gen % block != 0 || a.step_tokens > c.max_seq_len) {
    std::cerr << "error: --step-tokens " << a.step_tokens << " must exceed the gen length " << gen
              << ", fit the context of " << c.max_seq_len << ", and the gen length must be a multiple of the block size "
              << block << "\n";
    return 2;
  }
  if (Status s = CheckBatchFits(*model, 1, a.step_tokens, "--step-tokens"); !s.ok()) return ReportError(s);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
  std::vector<int32_t> prompt(prompt_len);
  for (auto& t : prompt) {
    do t = tok(rng);
    while (t == c.mask_token_id || c.IsEos(t));
  }

  std::printf("bench --large: %s, %s layout, TP %d; d_model %d, %d layers, %d heads (%d kv), mlp %d, vocab %d\n",
              a.engine.model_dir.c_str(), engine::WeightLayoutName((*eng)->transformer().layout()), a.engine.tp,
              c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.mlp_hidden, c.vocab_size);
  std::printf("[load] %.2f s (config, shard headers, %zu shard(s) mapped) + %.2f s paging the weights in%s + engine "
              "%.2f s; weights %s mapped + %s owned + %s packed\n",
              load_s, model->files.size(), prefault_s, a.no_prefault ? " (skipped: --no-prefault)" : "", create_s,
              GiB(model->mapped_bytes).c_str(), GiB(model->owned_bytes).c_str(),
              GiB((*eng)->transformer().packed_bytes()).c_str());
  std::printf("[rss after load] %s (anon %s, file %s)\n", GiB(after_load.rss).c_str(), GiB(after_load.anon).c_str(),
              GiB(after_load.file).c_str());
  std::printf("request: prompt %d + gen %d = %d tokens, block %d\n", prompt_len, gen, a.step_tokens, block);
  std::fflush(stdout);

  nlohmann::json out = {{"model_dir", a.engine.model_dir},
                        {"layout", engine::WeightLayoutName((*eng)->transformer().layout())},
                        {"tp", a.engine.tp},
                        {"load_s", load_s},
                        {"prefault_s", prefault_s},
                        {"engine_create_s", create_s},
                        {"mapped_bytes", model->mapped_bytes},
                        {"owned_bytes", model->owned_bytes},
                        {"rss_after_load", after_load.rss},
                        {"step_tokens", a.step_tokens},
                        {"gen_length", gen},
                        {"block_size", block}};
  std::vector<double> rec_ms, cache_ms, rec_cpu_ms, cache_cpu_ms;
  double rec_flops = 0, cache_flops = 0;
  int64_t rec_tokens = 0, cache_tokens = 0, rec_logit_rows = gen;
  for (int rep = 0; rep < a.recompute_reps; ++rep) {
    engine::DecodeOptions o{gen, block, true, false, 0.0f, 0};
    auto state = (*eng)->NewRequest(rep, prompt, o);
    if (!state.ok()) return ReportError(state.status());
    std::vector<engine::StepRequest> req{{state->get(), 1.0f}};  // one token per step: the block stays open
    std::vector<engine::StepResult> results;
    engine::BatchStats bs;
    auto s0 = Clock::now();
    double c0 = CpuSeconds();
    Usage u0 = Usage::Now();
    if (Status st = (*eng)->Step(req, &results, &bs); !st.ok()) return ReportError(st);
    const Usage ru = Usage::Now() - u0;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
    const double cpu_ms = (CpuSeconds() - c0) * 1e3;
    rec_ms.push_back(ms);
    rec_cpu_ms.push_back(cpu_ms);
    rec_flops = bs.gemm_flops + bs.attention_flops;
    rec_tokens = bs.tokens;
    std::printf("[recompute %d%s] %lld tokens: %.1f ms wall, %.1f ms CPU (%s); %.1f GFLOP/s wall, %.1f per CPU second\n",
                rep, rep == 0 ? ", first" : "", static_cast<long long>(bs.tokens), ms, cpu_ms, ru.Text().c_str(),
                rec_flops / ms / 1e6, rec_flops / cpu_ms / 1e6);
    std::fflush(stdout);
    for (int k = 0; k < a.cache_reps && !state.value()->done(); ++k) {
      s0 = Clock::now();
      c0 = CpuSeconds();
      u0 = Usage::Now();
      if (Status st = (*eng)->Step(req, &results, &bs); !st.ok()) return ReportError(st);
      const Usage cu = Usage::Now() - u0;
      const double cms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
      const double ccpu = (CpuSeconds() - c0) * 1e3;
      cache_ms.push_back(cms);
      cache_cpu_ms.push_back(ccpu);
      cache_flops = bs.gemm_flops + bs.attention_flops;
      cache_tokens = bs.tokens;
      std::printf("[cache %d.%d] %lld tokens: %.1f ms wall, %.1f ms CPU (%s); %.1f GFLOP/s wall, %.1f per CPU second\n",
                  rep, k, static_cast<long long>(bs.tokens), cms, ccpu, cu.Text().c_str(), cache_flops / cms / 1e6,
                  cache_flops / ccpu / 1e6);
      std::fflush(stdout);
    }
  }
  const Rss after_steps = ReadRss();
  // The warm recompute latency: the median of the steps after the first (cold) one.
  auto warm = [](const std::vector<double>& v) {
    return v.size() > 1 ? Median(std::vector<double>(v.begin() + 1, v.end())) : v[0];
  };
  const double rec_warm = warm(rec_ms), rec_warm_cpu = warm(rec_cpu_ms);
  const double cache_med = cache_ms.empty() ? 0.0 : Median(cache_ms);
  const double cache_med_cpu = cache_cpu_ms.empty() ? 0.0 : Median(cache_cpu_ms);

  // The GEMM peak on the same shapes, per shard (TP shards run side by side on their own
  // cores, so one shard's GEMMs at full speed on each core is the ceiling): plain fp32 sgemm,
  // and the bf16 panel GEMM the mapped layout runs.
  const int tp = a.engine.tp;
  const auto rec_shapes =
      engine::Transformer::GemmShapesFor(c, tp, static_cast<int>(rec_tokens), static_cast<int>(rec_logit_rows));
  const auto cache_shapes = engine::Transformer::GemmShapesFor(c, tp, static_cast<int>(std::max<int64_t>(cache_tokens, 1)), block);
  std::printf("\n[gemm peak] measuring sgemm and the bf16 panel GEMM on the steps' shapes...\n");
  std::fflush(stdout);
  const Rate sgemm_rec = GemmRate(rec_shapes, 2, false), bf16_rec = GemmRate(rec_shapes, 2, true);
  const Rate sgemm_cache = GemmRate(cache_shapes, 3, false), bf16_cache = GemmRate(cache_shapes, 3, true);
  std::printf("recompute shapes (M = %lld): sgemm %.1f GFLOP/s wall, %.1f per CPU second; bf16 panel GEMM %.1f / %.1f\n",
              static_cast<long long>(rec_tokens), sgemm_rec.wall, sgemm_rec.cpu, bf16_rec.wall, bf16_rec.cpu);
  std::printf("cache shapes (M = %lld): sgemm %.1f GFLOP/s wall, %.1f per CPU second; bf16 panel GEMM %.1f / %.1f\n",
              static_cast<long long>(cache_tokens), sgemm_cache.wall, sgemm_cache.cpu, bf16_cache.wall, bf16_cache.cpu);

  const double rec_rate = rec_flops / rec_warm / 1e6, rec_rate_cpu = rec_flops / rec_warm_cpu / 1e6;
  const double cache_rate = cache_ms.empty() ? 0 : cache_flops / cache_med / 1e6;
  const double cache_rate_cpu = cache_ms.empty() ? 0 : cache_flops / cache_med_cpu / 1e6;
  std::printf("\n[summary]\n");
  std::printf("load: %.2f s (map %.2f + page in %.2f + engine %.2f); RSS after load %s, after steps %s (anon %s, "
              "file %s), peak %s\n",
              load_s + prefault_s + create_s, load_s, prefault_s, create_s, GiB(after_load.rss).c_str(), GiB(after_steps.rss).c_str(), GiB(after_steps.anon).c_str(),
              GiB(after_steps.file).c_str(), GiB(after_steps.peak).c_str());
  std::printf("recompute step (%lld tokens): first %.1f ms, later %.1f ms wall (%.1f ms CPU); %.1f GFLOP/s wall = %.1f%% "
              "of the sgemm peak (%.1f x %d core(s)); per CPU second %.1f = %.1f%% of sgemm's %.1f\n",
              static_cast<long long>(rec_tokens), rec_ms[0], rec_warm, rec_warm_cpu, rec_rate,
              100.0 * rec_rate / (sgemm_rec.wall * tp), sgemm_rec.wall, tp, rec_rate_cpu,
              100.0 * rec_rate_cpu / sgemm_rec.cpu, sgemm_rec.cpu);
  if (!cache_ms.empty())
    std::printf("cache step (%lld tokens): %.1f ms wall (%.1f ms CPU; median of %zu); %.1f GFLOP/s wall = %.1f%% of the "
                "sgemm peak (%.1f x %d core(s)); per CPU second %.1f = %.1f%% of sgemm's %.1f\n",
                static_cast<long long>(cache_tokens), cache_med, cache_med_cpu, cache_ms.size(), cache_rate,
                100.0 * cache_rate / (sgemm_cache.wall * tp), sgemm_cache.wall, tp, cache_rate_cpu,
                100.0 * cache_rate_cpu / sgemm_cache.cpu, sgemm_cache.cpu);
  out["recompute_ms"] = rec_ms;
  out["recompute_cpu_ms"] = rec_cpu_ms;
  out["recompute_warm_ms"] = rec_warm;
  out["recompute_tokens"] = rec_tokens;
  out["recompute_gflops"] = rec_rate;
  out["recompute_gflops_per_cpu_s"] = rec_rate_cpu;
  out["sgemm_recompute_shapes"] = {{"wall_gflops", sgemm_rec.wall}, {"cpu_gflops", sgemm_rec.cpu}};
  out["bf16_gemm_recompute_shapes"] = {{"wall_gflops", bf16_rec.wall}, {"cpu_gflops", bf16_rec.cpu}};
  out["recompute_fraction_of_peak"] = rec_rate / (sgemm_rec.wall * tp);
  out["recompute_fraction_of_peak_cpu"] = rec_rate_cpu / sgemm_rec.cpu;
  out["cache_ms"] = cache_ms;
  out["cache_cpu_ms"] = cache_cpu_ms;
  out["cache_median_ms"] = cache_med;
  out["cache_tokens"] = cache_tokens;
  out["cache_gflops"] = cache_rate;
  out["cache_gflops_per_cpu_s"] = cache_rate_cpu;
  out["sgemm_cache_shapes"] = {{"wall_gflops", sgemm_cache.wall}, {"cpu_gflops", sgemm_cache.cpu}};
  out["bf16_gemm_cache_shapes"] = {{"wall_gflops", bf16_cache.wall}, {"cpu_gflops", bf16_cache.cpu}};
  out["cache_fraction_of_peak"] = cache_ms.empty() ? 0.0 : cache_rate / (sgemm_cache.wall * tp);
  out["cache_fraction_of_peak_cpu"] = cache_ms.empty() ? 0.0 : cache_rate_cpu / sgemm_cache.cpu;
  out["rss_after_steps"] = after_steps.rss;
  out["rss_anon_after_steps"] = after_steps.anon;
  out["rss_file_after_steps"] = after_steps.file;
  out["rss_peak"] = after_steps.peak;
  if (!a.json_out.empty()) {
    std::ofstream f(a.json_out);
    f << out.dump(1) << "\n";
    if (!f) {
      std::cerr << "error: cannot write " << a.json_out << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int RunBench(const BenchArgs& a) {
  if (a.large) return RunLargeBench(a);
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
    if (Status s = CheckBatchFits(*bundle->model, biggest, S64, "--batches / --prompt-length / --gen-length"); !s.ok())
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
