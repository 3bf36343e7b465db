// tediserve: the command-line entry point. Subcommands:
//   generate  prompt -> text with the bundled (or any) model
//   eval      a held-out task set: threshold -> accuracy, steps, tokens per step, time
//   bench     engine throughput, GEMM efficiency, cache-step speed-up, TP scaling
//   make-checkpoint  a random-weight checkpoint in a published layout (LLaDA-8B, Dream-7B shapes)
//   profile   step latency by batch tokens and TP degree (a latency profile for the simulator)
//   simulate  discrete-event simulation of a cluster, a policy and a workload
//   fit-denoiser  fit (or benchmark) the simulator's statistical denoising model
//   collect-steps    step logs for the step predictor: requests under every candidate threshold
//   train-predictor  train the step predictor (XGBoost) from step logs, with a held-out report
//   serve     serve a model over an OpenAI-compatible HTTP API (starts its workers)
//   agent     one per node: starts workers on its cores for the scheduler it joins
//   worker    one model instance serving the scheduler over gRPC (started by an agent)
//   plan      reconfiguration planner: workload + cluster -> TP layout and plan steps
//   chat-template  render conversations with a model's chat template (JSON lines)
//   tokenize / detokenize  text <-> token ids with a model's tokenizer (JSON lines)
//   bench-serve  load generator: held-out prompts to a live server (or one per policy it starts)
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/bench_serve_command.h"
#include "cli/chat_template_command.h"
#include "cli/commands.h"
#include "cli/fit_denoiser_command.h"
#include "cli/make_checkpoint_command.h"
#include "cli/predictor_commands.h"
#include "cli/model_setup.h"
#include "cli/plan_command.h"
#include "cli/profile_command.h"
#include "cli/serve_command.h"
#include "cli/tokenize_command.h"
#include "engine/model_config.h"

namespace {

void AddEngineFlags(CLI::App* app, tediserve::cli::EngineArgs* e) {
  e->model_dir = tediserve::cli::DefaultModelDir();
  app->add_option("--model", e->model_dir, "model folder (config.json, *.safetensors, tokenizer.json)");
  app->add_option("--tp,--threads", e->tp, "tensor-parallel degree: threads, one core each")
      ->check(CLI::Range(1, 256));
  // Bounded by the longest supported context; the model's own context is checked later.
  app->add_option("--gen-length", e->gen_length, "output tokens (default: the model's)")
      ->check(CLI::Range(1, tediserve::engine::kMaxSeqLen));
  app->add_option("--block-size", e->block_size, "decoding block size (default: the model's)")
      ->check(CLI::Range(1, tediserve::engine::kMaxSeqLen));
  app->add_flag("--no-cache", e->no_cache, "recompute every step (no approximate KV cache)");
  app->add_flag("--eos-early-stop", e->eos_early_stop, "finish once a completed block holds an EOS (the text ends there)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tediserve::cli;
  CLI::App app{"TeDiServe: serving diffusion language models under latency SLOs"};
  app.require_subcommand(1);

  GenerateArgs gen;
  CLI::App* g = app.add_subcommand("generate", "generate text for one prompt");
  AddEngineFlags(g, &gen.engine);
  g->add_option("prompt,--prompt", gen.prompt, "the prompt text")->required();
  g->add_option("--threshold", gen.threshold, "confidence threshold in (0, 1]");
  g->add_option("--temperature", gen.temperature, "Gumbel sampling temperature (0: greedy)")->check(CLI::Range(0.0, 100.0));
  g->add_option("--seed", gen.seed, "sampling seed");
  g->add_flag("--trace", gen.trace, "print every step as a JSON line on stderr");
  g->add_option("--step-log", gen.step_log, "write every step as a JSON line to this file");

  EvalArgs ev;
  CLI::App* e = app.add_subcommand("eval", "accuracy / steps / time by threshold on a held-out task set");
  AddEngineFlags(e, &ev.engine);
  e->add_option("--tasks", ev.tasks, "JSONL of {prompt, answer[, task]} (default: MODEL/heldout.jsonl)");
  e->add_option("--thresholds", ev.thresholds, "thresholds to evaluate")->delimiter(',');
  e->add_option("--cache", ev.cache, "on, off or both");
  e->add_option("--batch", ev.batch, "requests per batched step")->check(CLI::Range(1, 4096));
  e->add_option("--limit", ev.limit, "evaluate only the first N problems")->check(CLI::Range(0, 1 << 20));
  e->add_option("--json", ev.json_out, "also write the results as JSON to this file");
  e->add_option("--step-log", ev.step_log, "write every step as a JSON line to this file");

  BenchArgs bn;
  CLI::App* b = app.add_subcommand("bench", "engine benchmark: step throughput, sgemm efficiency, TP scaling");
  AddEngineFlags(b, &bn.engine);
  b->add_option("--batches", bn.batches, "batch sizes")->delimiter(',')->check(CLI::Range(1, 4096));
  b->add_option("--prompt-length", bn.prompt_length, "prompt tokens per request")
      ->check(CLI::Range(1, tediserve::engine::kMaxSeqLen));
  b->add_option("--reps", bn.reps, "repetitions per measurement (median reported)")->check(CLI::Range(1, 1000));
  b->add_option("--json", bn.json_out, "also write the results as JSON to this file");
  b->add_flag("--large", bn.large,
              "real-scale checkpoint benchmark: load time, RSS, recompute and cache step latency vs sgemm peak");
  b->add_option("--step-tokens", bn.step_tokens, "--large: tokens of the recompute step (prompt + gen)")
      ->check(CLI::Range(2, tediserve::engine::kMaxSeqLen));
  b->add_option("--recompute-reps", bn.recompute_reps, "--large: recompute steps (the first is cold)")
      ->check(CLI::Range(1, 100));
  b->add_option("--cache-reps", bn.cache_reps, "--large: cache steps after each recompute step")
      ->check(CLI::Range(0, 100));
  b->add_option("--layout", bn.layout, "weights: auto, packed (fp32 copies) or mapped (checkpoint mapping)")
      ->check(CLI::IsMember({"auto", "packed", "mapped"}));
  b->add_flag("--no-prefault", bn.no_prefault, "--large: do not page the weights in at load (the first step does)");

  ProfileArgs pf;
  CLI::App* pr = AddProfileCommand(app, &pf);

  SimulateArgs sm;
  CLI::App* s = app.add_subcommand("simulate", "discrete-event simulation of a cluster, policy and workload");
  s->add_option("config", sm.config, "experiment file (YAML or JSON)")->required();
  s->add_option("--out", sm.out_dir, "results folder (overrides output.dir)");
  s->add_flag("--no-plots", sm.no_plots, "skip the gnuplot PNGs");
  s->add_flag("--quiet", sm.quiet, "no progress lines");

  FitDenoiserArgs fd;
  CLI::App* fdc = AddFitDenoiserCommand(app, &fd);

  CollectStepsArgs cs;
  CLI::App* csc = AddCollectStepsCommand(app, &cs);
  TrainPredictorArgs tp;
  CLI::App* tpc = AddTrainPredictorCommand(app, &tp);

  ServeArgs sv;
  CLI::App* svc = AddServeCommand(app, &sv);
  WorkerArgs wk;
  CLI::App* wkc = AddWorkerCommand(app, &wk);
  AgentArgs ag;
  CLI::App* agc = AddAgentCommand(app, &ag);
  PlanArgs pl;
  CLI::App* plc = AddPlanCommand(app, &pl);
  ChatTemplateArgs ct;
  CLI::App* ctc = AddChatTemplateCommand(app, &ct);
  BenchServeArgs bs;
  CLI::App* bsc = AddBenchServeCommand(app, &bs);
  MakeCheckpointArgs mk;
  CLI::App* mkc = AddMakeCheckpointCommand(app, &mk);
  TokenizeArgs tk, dtk;
  CLI::App* dtkc = nullptr;
  CLI::App* tkc = AddTokenizeCommands(app, &tk, &dtk, &dtkc);

  // CLI11 reports a misspelt subcommand as "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string sub = argv[1];
    std::string known;
    bool found = false;
    for (const CLI::App* c : app.get_subcommands([](CLI::App*) { return true; })) {
      found = found || c->get_name() == sub;
      known += (known.empty() ? "" : ", ") + c->get_name();
    }
    if (!found) {
      std::cerr << "error: unknown subcommand '" << sub << "' (expected one of " << known << "; see --help)\n";
      return 2;
    }
  }
  // `serve --config FILE` becomes the flags the file sets, ahead of the command line's.
  auto args = ExpandServeConfig(svc, std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) {
    std::cerr << "error: " << args.status().message() << "\n";
    return 2;
  }
  try {
    std::vector<std::string> reversed(args->rbegin(), args->rend());  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const CLI::ParseError& err) {
    return app.exit(err) == 0 ? 0 : 2;
  }
  if (*g) return RunGenerate(gen);
  if (*e) return RunEval(ev);
  if (*b) return RunBench(bn);
  if (*mkc) return RunMakeCheckpoint(mk);
  if (*s) return RunSimulate(sm);
  if (*pr) return RunProfile(pf);
  if (*fdc) return RunFitDenoiser(*fdc, fd);
  if (*csc) return RunCollectSteps(cs);
  if (*tpc) return RunTrainPredictor(tp);
  if (*svc) return RunServe(sv);
  if (*wkc) return RunWorker(wk);
  if (*agc) return RunAgent(ag);
  if (*plc) return RunPlan(pl);
  if (*ctc) return RunChatTemplate(ct);
  if (*tkc) return RunTokenize(tk);
  if (*bsc) return RunBenchServe(*bsc, bs);
  if (*dtkc) return RunDetokenize(dtk);
  return 2;
}
