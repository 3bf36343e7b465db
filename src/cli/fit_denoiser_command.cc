// `tediserve fit-denoiser`: see fit_denoiser_command.h.
#include "cli/fit_denoiser_command.h"
#include "cli/flags.h"
#include "cli/model_setup.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

namespace tediserve::cli {
namespace {

using namespace tediserve::sim;

int Fail(const Status& s) {
  return ReportError(s);
}

int FitAndSave(const FitTargets& t, const std::string& out) {
  const auto t0 = std::chrono::steady_clock::now();
  auto cal = FitCalibration(t);
  if (!cal.ok()) return Fail(cal.status());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const DenoiserParams& p = cal->params;
  std::printf("%s: block %d, fit in %.1f s\n", cal->name.c_str(), cal->block_size, s);
  std::printf("params: mu %.4f sigma %.4f sigma_request %.4f sigma_block %.4f delta %.4f eta %.4f\n", p.mu, p.sigma,
              p.sigma_request, p.sigma_block, p.delta, p.eta);
  std::printf("%9s %8s %8s %8s\n", "threshold", "target", "fitted", "error");
  for (size_t i = 0; i < cal->thresholds.size(); ++i)
    std::printf("%9.2f %8.3f %8.3f %7.2f%%\n", cal->thresholds[i], cal->tokens_per_step[i],
                cal->fitted_tokens_per_step[i], 100 * (cal->fitted_tokens_per_step[i] / cal->tokens_per_step[i] - 1));
  std::printf("steps CV at %.2f over O=%d: target %.3f fitted %.3f\n", cal->thresholds[0], cal->cv_output_len,
              cal->steps_cv, cal->fitted_steps_cv);
  if (Status st = SaveCalibration(out, *cal); !st.ok()) return Fail(st);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

int Bench(const std::string& path, int requests, int output_len, int concurrency, double threshold) {
  auto cal = LoadCalibration(path);
  if (!cal.ok()) return Fail(cal.status());
  for (int mode = 0; mode < 3; ++mode) {
    const bool features = mode > 0, oracle = mode == 2;
    StatisticalDenoiserOptions o;
    o.params = cal->params;
    o.features = features;
    int64_t oracle_sum = 0;
    StatisticalDenoiser d(o);
    // `concurrency` requests in flight, one batched Step over all of them at a time.
    std::vector<DenoiseCommand> batch;
    int64_t next = 0, steps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (next < requests || !batch.empty()) {
      while (static_cast<int>(batch.size()) < concurrency && next < requests) {
        policy::RequestSpec spec;
        spec.id = next;
        spec.output_len = output_len;
        d.Start(spec, cal->block_size, static_cast<uint64_t>(next));
        batch.push_back({next++, threshold});
      }
      if (oracle)  // what the oracle predictor asks: every candidate, every step
        for (const DenoiseCommand& c : batch)
          for (double th : policy::kDefaultThresholds) oracle_sum += d.RemainingSteps(c.id, th);
      const auto out = d.Step(batch);
      steps += static_cast<int64_t>(out.size());
      std::vector<DenoiseCommand> keep;
      keep.reserve(batch.size());
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].request_done) d.Finish(batch[i].id);
        else keep.push_back(batch[i]);
      }
      batch.swap(keep);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-25s: %d requests x O=%d at %.2f: %lld request-steps in %.3f s = %.2f M steps/s (%.0f ns/step)\n",
                oracle ? "features + 5 oracle calls" : features ? "features on" : "features off", requests,
                output_len, threshold, static_cast<long long>(steps), s, steps / s / 1e6, s / steps * 1e9);
    if (oracle && oracle_sum < 0) std::printf("impossible\n");  // keeps the calls
  }
  return 0;
}

}  // namespace


CLI::App* AddFitDenoiserCommand(CLI::App& app, FitDenoiserArgs* a) {
  CLI::App* fd = app.add_subcommand("fit-denoiser", "fit or benchmark the simulator's statistical denoising model");
  fd->require_subcommand(1);

  FitTargets& t = a->targets;
  CLI::App* ft = fd->add_subcommand("targets", "fit a calibration to measured targets given as flags");
  ft->add_option("--name", t.name)->required()->check(Utf8Text());
  ft->add_option("--block-size", t.block_size)->required()->check(CLI::Range(1, 1024));
  ft->add_option("--thresholds", t.thresholds, "thresholds, high to low")->delimiter(',')->required();
  ft->add_option("--tokens-per-step", t.tokens_per_step, "mean tokens unmasked per step at each threshold")
      ->delimiter(',')->required();
  ft->add_option("--accuracy", t.accuracy, "task accuracy at each threshold")->delimiter(',')->required();
  ft->add_option("--steps-cv", t.steps_cv, "CV of steps per request at the top threshold");
  ft->add_option("--cv-output-len", t.cv_output_len, "output length the CV refers to")->check(CLI::Range(1, 8192));
  ft->add_option("--sigma-block", t.sigma_block, "spread of a block's mean logit (assumed, not fitted)");
  ft->add_option("--source", t.source, "provenance text")->check(Utf8Text());
  ft->add_option("--out", a->targets_out, "calibration JSON to write")->required();

  StepLogOptions& lo = a->log_options;
  CLI::App* fl = fd->add_subcommand("logs", "fit a calibration to `tediserve eval` step logs");
  fl->add_option("--logs", a->logs, "step-log JSONL files")->delimiter(',')->required();
  fl->add_option("--eval-json", lo.eval_json, "tediserve eval --json output (accuracy)");
  fl->add_option("--accuracy", lo.accuracy, "accuracy per threshold instead")->delimiter(',');
  fl->add_option("--name", lo.name)->required()->check(Utf8Text());
  fl->add_option("--block-size", lo.block_size, "override the inferred block size")->check(CLI::Range(1, 1024));
  fl->add_option("--sigma-block", lo.sigma_block, "spread of a block's mean logit (assumed, not fitted)");
  fl->add_option("--note", a->note, "appended to the calibration's source text")->check(Utf8Text());
  fl->add_option("--out", a->logs_out, "calibration JSON to write")->required();

  CLI::App* bn = fd->add_subcommand("bench", "request-steps per second of the fitted model");
  bn->add_option("--calibration", a->calibration)->required();
  bn->add_option("--requests", a->requests)->check(CLI::Range(1, 10000000));
  bn->add_option("--output-len", a->output_len)->check(CLI::Range(1, 8192));
  bn->add_option("--concurrency", a->concurrency)->check(CLI::Range(1, 100000));
  bn->add_option("--threshold", a->threshold);
  return fd;
}

int RunFitDenoiser(const CLI::App& command, const FitDenoiserArgs& a) {
  if (command.got_subcommand("targets")) return FitAndSave(a.targets, a.targets_out);
  if (command.got_subcommand("logs")) {
    auto targets = TargetsFromStepLogs(a.logs, a.log_options);
    if (!targets.ok()) return Fail(targets.status());
    if (!a.note.empty()) targets->source += "; " + a.note;
    return FitAndSave(*targets, a.logs_out);
  }
  if (command.got_subcommand("bench")) {
    if (a.requests < 1 || a.output_len < 1 || a.concurrency < 1)
      return Fail(InvalidArgument("bench sizes (--requests, --output-len, --concurrency) must be >= 1"));
    if (!(a.threshold > 0 && a.threshold <= 1)) return Fail(InvalidArgument("--threshold must be in (0, 1]"));
    return Bench(a.calibration, a.requests, a.output_len, a.concurrency, a.threshold);
  }
  return 2;
}

}  // namespace tediserve::cli
