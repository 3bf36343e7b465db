#include "serve/reconfigurer.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "policy/scheduler.h"
#include "serve/runtime.h"
#include "sim/calibration.h"

namespace tediserve::serve {
namespace {

constexpr size_t kMaxHistory = 1000;

void Log(const std::string& m) { std::cerr << ("tediserve serve: reconfigure: " + m + "\n") << std::flush; }

// Recompute batch bins for a live server: powers of two from the shortest class's prompt +
// output up to the token budget, the smallest five and the budget itself. Stage 1's default
// keeps the largest six instead, which for a small model's short requests (the bundled one:
// about 24 tokens against a budget of 8192) starts at 256 tokens and charges every recompute
// step as a batch ten times the request.
std::vector<int> LiveRecomputeBins(const std::vector<plan::LengthClass>& classes, int budget) {
  int lo = budget;
  for (const plan::LengthClass& c : classes) lo = std::min(lo, c.prompt_len + c.output_len);
  std::vector<int> bins;
  for (int b = 1; b < budget; b *= 2)
    if (b >= lo && bins.size() < 5) bins.push_back(b);
  bins.push_back(budget);
  return bins;
}

std::string LayoutName(const std::map<int, int>& layout) {
  if (layout.empty()) return "(none)";
  std::string s;
  for (auto it = layout.rbegin(); it != layout.rend(); ++it)
    s += (s.empty() ? "" : " + ") + std::to_string(it->second) + " x TP" + std::to_string(it->first);
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<Reconfigurer>> Reconfigurer::Create(ReconfigurerOptions o) {
  if (!(std::isfinite(o.period_s) && o.period_s >= 0.1 && o.period_s <= 86400))
    return InvalidArgument("--reconfigure-period must be in [0.1, 86400] s");
  if (!(std::isfinite(o.window_s) && o.window_s >= 0.1 && o.window_s <= 86400))
    return InvalidArgument("--reconfigure-window must be in [0.1, 86400] s");
  if (!(std::isfinite(o.min_gain) && o.min_gain >= 0 && o.min_gain < 10))
    return InvalidArgument("--reconfigure-min-gain must be in [0, 10)");
  if (o.prompt_round < 1 || o.prompt_round > (1 << 20)) return InvalidArgument("--reconfigure-prompt-round must be >= 1");
  if (o.output_round < 0 || o.output_round > (1 << 20))
    return InvalidArgument("--reconfigure-output-round must be >= 0 (0: the block size)");
  if (!(std::isfinite(o.solve_time_limit_s) && o.solve_time_limit_s > 0 && o.solve_time_limit_s <= 3600))
    return InvalidArgument("reconfigure: the solve time limit must be in (0, 3600] s");
  for (int d : o.tp_degrees)
    if (d < 1 || d > 1024) return InvalidArgument("--reconfigure-tp: degrees must be in [1, 1024]");
  return std::unique_ptr<Reconfigurer>(new Reconfigurer(std::move(o)));
}

Reconfigurer::~Reconfigurer() { Stop(); }

double Reconfigurer::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void Reconfigurer::Record(int prompt_len, int output_len, double slo_s) {
  std::lock_guard<std::mutex> l(mu_);
  if (!monitor_) return;  // not started yet
  // Times come from one steady clock under the lock, so they arrive in order; a request the
  // monitor refuses (it cannot: the core validated it) is only left out of the statistics.
  (void)monitor_->Record(Now(), prompt_len, output_len, slo_s);
}

Status Reconfigurer::Start(Runtime* rt) {
  if (rt == nullptr) return InvalidArgument("reconfigure: no runtime");
  if (thread_.joinable()) return FailedPrecondition("reconfigure: already started");
  ASSIGN_OR_RETURN(profile_, policy::LatencyProfile::LoadCsv(options_.profile_csv));
  ASSIGN_OR_RETURN(const sim::Calibration cal, sim::LoadCalibration(options_.calibration));
  ASSIGN_OR_RETURN(const policy::PolicyOptions po, policy::PolicyOptions::Named(options_.policy));
  thresholds_ = po.thresholds;
  tokens_per_step_.clear();
  for (double c : thresholds_) tokens_per_step_.push_back(cal.TokensPerStepAt(c));
  token_budget_ = po.token_budget;
  block_size_ = rt->block_size();
  max_context_ = rt->config().max_seq_len;
  if (options_.tp_degrees.empty()) options_.tp_degrees = profile_.TpDegrees();
  for (int d : options_.tp_degrees)
    if (!profile_.HasTp(d))
      return InvalidArgument("--reconfigure-tp: the profile " + options_.profile_csv + " has no TP-" + std::to_string(d) +
                             " column (measure it with tediserve profile --tp)");
  if (options_.output_round == 0) options_.output_round = block_size_;
  if (block_size_ < 1 || options_.output_round % block_size_ != 0)
    return InvalidArgument("--reconfigure-output-round " + std::to_string(options_.output_round) +
                           " is not a multiple of the block size " + std::to_string(block_size_));
  plan::MonitorOptions mo;
  mo.window_s = options_.window_s;
  mo.prompt_round = options_.prompt_round;
  mo.output_round = options_.output_round;
  ASSIGN_OR_RETURN(plan::WorkloadMonitor mon, plan::WorkloadMonitor::Create(mo));
  Metrics& m = rt->metrics();
  m.Counter("tediserve_reconfig_decisions_total",
            "Reconfiguration decisions, by result: keep, change (a new layout was asked for), busy (a change "
            "was under way), error.");
  m.Gauge("tediserve_reconfig_chosen_instances", "Instances per TP degree in the planner's last chosen layout.");
  m.Gauge("tediserve_reconfig_classes", "Length classes with arrivals in the monitor's window at the last decision.");
  m.Gauge("tediserve_reconfig_solve_seconds", "Wall time of the last decision's Stage 1 solves.");
  {
    std::lock_guard<std::mutex> l(mu_);
    monitor_ = std::make_unique<plan::WorkloadMonitor>(std::move(mon));
    stop_ = false;
  }
  rt_ = rt;
  std::ostringstream degrees;
  for (int d : options_.tp_degrees) degrees << (degrees.tellp() > 0 ? "," : "") << d;
  Log("every " + std::to_string(options_.period_s) + " s over a " + std::to_string(options_.window_s) +
      " s window, TP degrees " + degrees.str() + ", min gain " + std::to_string(options_.min_gain));
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void Reconfigurer::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reconfigurer::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait_for(l, std::chrono::duration<double>(options_.period_s), [this] { return stop_; });
    if (stop_) return;
    l.unlock();
    ReconfigDecision d = DecideOnce();
    l.lock();
    history_.push_back(std::move(d));
    if (history_.size() > kMaxHistory) history_.erase(history_.begin());
  }
}

std::vector<ReconfigDecision> Reconfigurer::History() const {
  std::lock_guard<std::mutex> l(mu_);
  return history_;
}

ReconfigDecision Reconfigurer::DecideOnce() {
  ReconfigDecision r;
  r.time_s = Now();
  if (rt_ == nullptr) {
    r.error = "not started";
    return r;
  }
  Metrics& m = rt_->metrics();
  // The current layout: every instance not leaving. While one is starting, waiting for
  // devices or draining, the last change is still under way: decide next period.
  std::map<int, int> current;
  for (const Runtime::InstanceView& i : rt_->Instances()) {
    if (i.state != "up") r.busy = true;
    if (i.state != "draining") ++current[i.tp];
  }
  r.decision.current = current;
  if (r.busy) {
    m.Add("tediserve_reconfig_decisions_total", 1, {{"result", "busy"}});
    Log("a layout change is under way (" + LayoutName(current) + " so far); no decision");
    return r;
  }
  plan::Stage1Inputs in;
  for (const AgentInfo& a : rt_->Agents()) in.gpus_per_node.push_back(static_cast<int>(a.devices.size()));
  in.tp_degrees = options_.tp_degrees;
  in.profile = &profile_;
  in.thresholds = thresholds_;
  in.tokens_per_step = tokens_per_step_;
  in.block_size = block_size_;
  in.max_context = max_context_;
  in.token_budget = token_budget_;
  {
    std::lock_guard<std::mutex> l(mu_);
    in.classes = monitor_->Classes(Now());
  }
  if (!in.classes.empty()) in.recompute_bins = LiveRecomputeBins(in.classes, in.token_budget);
  // Degrees no agent can hold are not candidates.
  int largest = 0;
  for (int g : in.gpus_per_node) largest = std::max(largest, g);
  std::vector<int> fit;
  for (int d : in.tp_degrees)
    if (d <= largest) fit.push_back(d);
  in.tp_degrees = fit;
  if (in.gpus_per_node.empty() || in.tp_degrees.empty()) {
    r.error = "no agent can hold any candidate degree";
    m.Add("tediserve_reconfig_decisions_total", 1, {{"result", "error"}});
    Log(r.error);
    return r;
  }
  plan::MipOptions mip;
  mip.time_limit_s = options_.solve_time_limit_s;
  StatusOr<plan::LayoutDecision> d = plan::DecideLayout(in, current, options_.min_gain, mip);
  if (!d.ok()) {
    r.error = d.status().message();
    m.Add("tediserve_reconfig_decisions_total", 1, {{"result", "error"}});
    Log("planner: " + r.error);
    return r;
  }
  r.decision = *d;
  m.Set("tediserve_reconfig_classes", d->classes);
  m.Set("tediserve_reconfig_solve_seconds", d->solve_seconds);
  for (int deg : options_.tp_degrees) {
    auto it = d->chosen.find(deg);
    m.Set("tediserve_reconfig_chosen_instances", it == d->chosen.end() ? 0 : it->second, {{"tp", std::to_string(deg)}});
  }
  std::ostringstream line;
  line << d->classes << " class(es), current " << LayoutName(current) << ", chosen " << LayoutName(d->chosen) << " ("
       << plan::Stage1OutcomeName(d->outcome) << "; threshold " << d->chosen_threshold << " vs " << d->current_threshold
       << ", latency " << d->chosen_latency_s << " s vs " << d->current_latency_s << " s): ";
  if (!d->change) {
    m.Add("tediserve_reconfig_decisions_total", 1, {{"result", "keep"}});
    Log(line.str() + "keep (" + d->reason + ")");
    return r;
  }
  for (auto it = d->chosen.rbegin(); it != d->chosen.rend(); ++it)
    for (int k = 0; k < it->second; ++k) r.layout.push_back(it->first);
  StatusOr<Runtime::LayoutChange> c = rt_->ChangeLayout(r.layout);
  if (!c.ok()) {
    r.error = c.status().message();
    m.Add("tediserve_reconfig_decisions_total", 1, {{"result", "error"}});
    Log(line.str() + "change refused: " + r.error);
    return r;
  }
  m.Add("tediserve_reconfig_decisions_total", 1, {{"result", "change"}});
  Log(line.str() + "change (" + d->reason + "): keep " + std::to_string(c->keep.size()) + ", drain " +
      std::to_string(c->drain.size()) + ", launch " + std::to_string(c->launch.size()));
  return r;
}

}  // namespace tediserve::serve
