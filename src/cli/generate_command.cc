#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "engine/generate.h"

namespace tediserve::cli {

int RunGenerate(const GenerateArgs& a) {
  if (Status s = ValidateThreshold(a.threshold); !s.ok()) return ReportError(s);
  auto bundle = LoadBundle(a.engine.model_dir);
  if (!bundle.ok()) return ReportError(bundle.status());
  auto engine = engine::DiffusionEngine::Create(bundle->model, a.engine.tp);
  if (!engine.ok()) return ReportError(engine.status());
  auto ids = bundle->tokenizer->Encode(a.prompt);
  if (!ids.ok()) {
    std::cerr << "error: prompt: " << ids.status().message() << "\n";
    return 2;
  }
  auto lengths = ResolveLengths(a.engine.gen_length, a.engine.block_size, bundle->default_gen_length,
                                bundle->default_block_size);
  if (!lengths.ok()) return ReportError(lengths.status());
  if (Status s = CheckBatchFits(*bundle->model, 1, static_cast<int64_t>(ids->size()) + lengths->gen_length,
                                "--gen-length");
      !s.ok())
    return ReportError(s);
  engine::DecodeOptions o;
  o.gen_length = lengths->gen_length;
  o.block_size = lengths->block_size;
  o.use_cache = !a.engine.no_cache;
  o.eos_early_stop = a.engine.eos_early_stop;
  o.temperature = static_cast<float>(a.temperature);
  o.seed = a.seed;
  auto state = (*engine)->NewRequest(0, *ids, o);
  if (!state.ok()) return ReportError(state.status());
  std::ofstream log;
  if (Status s = OpenStepLog(a.step_log, &log); !s.ok()) return ReportError(s);
  engine::DecodeState* s = state->get();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = engine::RunToCompletion(
      **engine, std::span<engine::DecodeState* const>(&s, 1), static_cast<float>(a.threshold), 1,
      [&](const std::vector<engine::StepResult>& rs, const engine::BatchStats& bs, double ms) {
        for (const auto& r : rs) {
          const std::string line = engine::StepResultJson(r, static_cast<int>(rs.size()), bs.tokens, ms);
          if (a.trace) std::cerr << line << "\n";
          if (log) log << line << "\n";
        }
      });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) {
    std::cerr << "error: " << st.message() << "\n";
    return 1;
  }
  const engine::ModelConfig& mc = bundle->model->config;
  std::cout << bundle->tokenizer->Decode(engine::UntilEos(s->output_tokens(), mc), mc.eos_token_id) << "\n";
  std::fprintf(stderr, "[%d steps, %d tokens, %.1f ms, threshold %.2f, %s]\n", s->steps(), o.gen_length,
               secs * 1e3, a.threshold, o.use_cache ? "cache" : "no cache");
  return 0;
}

}  // namespace tediserve::cli
