#include "sim/experiment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "sim/calibration.h"
#include "sim/engine_denoiser.h"
#include "sim/frontier.h"
#include "sim/plots.h"
#include "sim/results.h"
#include "sim/simulator.h"
#include "sim/statistical_denoiser.h"
#include "sim/workload.h"
#include "sim/yaml_fields.h"
#include "common/input.h"

namespace tediserve::sim {
namespace {

namespace fs = std::filesystem;
using policy::Seconds;

// Bounds on simulated time: a run spans at most kMaxSimSeconds (a year), and ticks and
// timeline samples are at least kMinIntervalSeconds apart, so no config makes the event loop
// spin for ever (the simulator also bounds the number of ticks and samples it will take).
constexpr double kMaxSimSeconds = 365.0 * 24 * 3600;
constexpr double kMinIntervalSeconds = 1e-3;

std::string Fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// At most this many runs (policies x sweep values) in one experiment.
constexpr size_t kMaxRuns = 1000;

// A run tag usable as one directory name: letters, digits, '.', '-', '_' kept, the rest '_'.
std::string SafeFileName(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 100)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

std::string ResolvePath(const std::string& p, const std::string& base_dir) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  const fs::path rel = fs::path(base_dir) / p;
  if (fs::exists(rel)) return rel.string();
  return p;
}

// Sets root.a.b.c = value for key "a.b.c", creating maps as needed. (Recursion on copies:
// yaml-cpp's Node::operator= would rebind shared nodes.)
void SetPath(YAML::Node node, const std::vector<std::string>& parts, size_t i, const YAML::Node& value) {
  if (i + 1 == parts.size()) {
    node[parts[i]] = value;
    return;
  }
  SetPath(node[parts[i]], parts, i + 1, value);
}

std::vector<std::string> SplitDots(const std::string& key) {
  std::vector<std::string> out;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) out.push_back(part);
  return out;
}

// ---- One run's configuration. ------------------------------------------------------------

struct RunConfig {
  std::string name;
  uint64_t seed = 1;
  SimOptions sim;
  std::string profile_csv;
  std::map<int, std::string> profile_json;
  std::string truth_csv;                   // truth.profile (empty: the model's)
  std::map<int, std::string> truth_json;
  std::string denoiser_type;
  std::string calibration_path;
  std::string engine_model;
  std::string engine_problems;
  WorkloadSpec workload;
  double slo_seconds = 0, slo_scale = 0;
  std::vector<Period> periods;
  std::string out_dir;
  bool plots = true;
};

Status ParseCluster(const YAML::Node& n, RunConfig* rc) {
  const std::string p = "cluster";
  RETURN_IF_ERROR(CheckKeys(n, p, {"nodes", "gpus_per_node", "tp", "token_budget", "batch_steps"}));
  ASSIGN_OR_RETURN(int nodes, GetIntOr(n, p, "nodes", 1, 1, 100000));
  ASSIGN_OR_RETURN(int gpus, GetInt(n, p, "gpus_per_node", 1, 1024));
  ASSIGN_OR_RETURN(int budget, GetIntOr(n, p, "token_budget", 8192, 1, 1 << 24));
  rc->sim.policy.token_budget = budget;
  ASSIGN_OR_RETURN(rc->sim.policy.batch_steps, GetIntOr(n, p, "batch_steps", 1, 1, policy::kMaxBatchSteps));
  rc->sim.reconfig.gpus_per_node.assign(nodes, gpus);
  std::vector<int> tps;
  if (n["tp"]) {
    if (!n["tp"].IsSequence() || n["tp"].size() == 0) {
      return InvalidArgument("cluster.tp: must be a non-empty list of TP degrees per node, e.g. [2, 1, 1]");
    }
    int used = 0;
    for (size_t i = 0; i < n["tp"].size(); ++i) {
      int tp = 0;
      try {
        tp = n["tp"][i].as<int>();
      } catch (const YAML::Exception&) {
        return InvalidArgument("cluster.tp[" + std::to_string(i) + "]: not an integer");
      }
      if (tp <= 0 || tp > gpus) {
        return InvalidArgument("cluster.tp[" + std::to_string(i) + "]: must be in [1, gpus_per_node = " +
                               std::to_string(gpus) + "], got " + std::to_string(tp));
      }
      used += tp;
      if (used > gpus) break;  // reported below
      tps.push_back(tp);
    }
    if (used > gpus) {
      return InvalidArgument("cluster.tp: the instances of one node use " + std::to_string(used) +
                             " GPUs, but cluster.gpus_per_node is " + std::to_string(gpus));
    }
  } else {
    tps.assign(gpus, 1);
  }
  constexpr int64_t kMaxInstances = 1 << 16;
  if (int64_t{nodes} * static_cast<int64_t>(tps.size()) > kMaxInstances) {
    return InvalidArgument("cluster: " + std::to_string(int64_t{nodes} * static_cast<int64_t>(tps.size())) +
                           " instances, more than the " + std::to_string(kMaxInstances) + " a simulation allows");
  }
  int id = 0;
  for (int node = 0; node < nodes; ++node) {
    int device = 0;
    for (int tp : tps) {
      policy::InstanceInfo info{id++, tp, node, {}};
      for (int d = 0; d < tp; ++d) info.devices.push_back(device++);
      rc->sim.instances.push_back(std::move(info));
    }
  }
  return Status::Ok();
}

// A latency profile given as {csv: FILE} or {json: {TP: FILE, ...}}.
Status ParseProfileRef(const YAML::Node& prof, const std::string& path, const std::string& base, std::string* csv_out,
                       std::map<int, std::string>* json_out) {
  RETURN_IF_ERROR(CheckKeys(prof, path, {"csv", "json"}));
  if (prof["csv"] && prof["json"]) return InvalidArgument(path + ": give csv or json, not both");
  if (prof["csv"]) {
    ASSIGN_OR_RETURN(std::string csv, GetString(prof, path, "csv"));
    *csv_out = ResolvePath(csv, base);
  } else if (prof["json"]) {
    if (!prof["json"].IsMap()) return InvalidArgument(path + ".json: must map TP degree -> file");
    for (const auto& kv : prof["json"]) {
      int tp = 0;
      bool ok = kv.first.IsScalar();
      try {
        if (ok) tp = kv.first.as<int>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
      if (!ok || tp <= 0 || tp > 1024) {
        return InvalidArgument(path + ".json: key " + DescribeYaml(kv.first) + " is not a TP degree in [1, 1024]");
      }
      const std::string field = path + ".json." + std::to_string(tp);
      if (!kv.second.IsScalar() || !IsValidUtf8(kv.second.Scalar())) {
        return InvalidArgument(field + ": expected a file name, got " + DescribeYaml(kv.second));
      }
      (*json_out)[tp] = ResolvePath(kv.second.Scalar(), base);
    }
  } else {
    return InvalidArgument(path + ": needs csv or json");
  }
  return Status::Ok();
}

StatusOr<policy::LatencyProfile> LoadProfileRef(const std::string& csv, const std::map<int, std::string>& json) {
  if (!csv.empty()) return policy::LatencyProfile::LoadCsv(csv);
  return policy::LatencyProfile::LoadJson(json);
}

// truth: {profile: {csv|json}, step_time_sigma, step_time_scale, batch_overhead_ms}: step
// times that differ from the policy's model (another profile, noise, a machine this much
// slower, a round trip per batch).
Status ParseTruth(const YAML::Node& n, const std::string& base, RunConfig* rc) {
  const std::string p = "truth";
  RETURN_IF_ERROR(CheckKeys(n, p, {"profile", "step_time_sigma", "step_time_scale", "batch_overhead_ms"}));
  ASSIGN_OR_RETURN(const double overhead_ms, GetDoubleOr(n, p, "batch_overhead_ms", 0.0, 0, 10000));
  rc->sim.batch_overhead = overhead_ms / 1000;
  ASSIGN_OR_RETURN(const double scale, GetDoubleOr(n, p, "step_time_scale", 1.0, 0.001, 1000));
  if (scale != 1) rc->sim.step_time_factor = [scale](policy::Seconds) { return scale; };
  if (n["profile"]) {
    RETURN_IF_ERROR(ParseProfileRef(n["profile"], "truth.profile", base, &rc->truth_csv, &rc->truth_json));
  }
  ASSIGN_OR_RETURN(rc->sim.step_time_sigma, GetDoubleOr(n, p, "step_time_sigma", 0.0, 0, 3));
  if (!(rc->sim.step_time_sigma >= 0 && rc->sim.step_time_sigma <= 3)) {
    return InvalidArgument("truth.step_time_sigma: must be in [0, 3]");
  }
  return Status::Ok();
}

// faults: instance failures and drains (at given or random times), failed steps, cancellations.
Status ParseFaults(const YAML::Node& n, RunConfig* rc) {
  const std::string p = "faults";
  RETURN_IF_ERROR(CheckKeys(n, p, {"random_failures", "random_drains", "from_s", "to_s", "recover_after_s",
                                   "readd_after_s", "failure_rate_per_hour", "step_failure_probability",
                                   "cancel_fraction", "events"}));
  FaultOptions& f = rc->sim.faults;
  ASSIGN_OR_RETURN(f.random_failures, GetIntOr(n, p, "random_failures", 0, 0, 1000000));
  ASSIGN_OR_RETURN(f.random_drains, GetIntOr(n, p, "random_drains", 0, 0, 1000000));
  ASSIGN_OR_RETURN(f.window_from, GetDoubleOr(n, p, "from_s", 0.0, 0, kMaxSimSeconds));
  ASSIGN_OR_RETURN(f.window_to, GetDoubleOr(n, p, "to_s", 0.0, 0, kMaxSimSeconds));
  ASSIGN_OR_RETURN(f.recover_after, GetDoubleOr(n, p, "recover_after_s", 60.0, 0, kMaxSimSeconds));
  ASSIGN_OR_RETURN(f.readd_after, GetDoubleOr(n, p, "readd_after_s", 60.0, 0, kMaxSimSeconds));
  ASSIGN_OR_RETURN(f.failure_rate_per_hour, GetDoubleOr(n, p, "failure_rate_per_hour", 0.0, 0, 3600));
  ASSIGN_OR_RETURN(f.step_failure_probability, GetDoubleOr(n, p, "step_failure_probability", 0.0, 0, 1));
  ASSIGN_OR_RETURN(f.cancel_fraction, GetDoubleOr(n, p, "cancel_fraction", 0.0, 0, 1));
  if (f.random_failures < 0 || f.random_drains < 0) return InvalidArgument("faults: random_failures and random_drains must be >= 0");
  if (f.window_to > 0 && !(f.window_to > f.window_from)) return InvalidArgument("faults.to_s: must be > from_s");
  if (n["events"]) {
    const YAML::Node es = n["events"];
    if (!es.IsSequence()) return InvalidArgument("faults.events: must be a list of {time_s, instance, kind, back_after_s}");
    for (size_t i = 0; i < es.size(); ++i) {
      const std::string ep = "faults.events[" + std::to_string(i) + "]";
      RETURN_IF_ERROR(CheckKeys(es[i], ep, {"time_s", "instance", "kind", "back_after_s"}));
      FaultOptions::Event e;
      ASSIGN_OR_RETURN(e.time, GetDouble(es[i], ep, "time_s", 0, kMaxSimSeconds));
      ASSIGN_OR_RETURN(e.instance, GetInt(es[i], ep, "instance", 0, INT_MAX));
      ASSIGN_OR_RETURN(std::string kind, GetStringOr(es[i], ep, "kind", std::string("fail")));
      if (kind != "fail" && kind != "drain") return InvalidArgument(ep + ".kind: expected fail or drain, got \"" + kind + "\"");
      e.drain = kind == "drain";
      ASSIGN_OR_RETURN(e.back_after, GetDoubleOr(es[i], ep, "back_after_s", 60.0, 0, kMaxSimSeconds));
      bool known = false;
      for (const auto& inst : rc->sim.instances) known = known || inst.id == e.instance;
      if (!known) return InvalidArgument(ep + ".instance: no instance " + std::to_string(e.instance) + " in the cluster");
      f.events.push_back(e);
    }
  }
  return Status::Ok();
}

Status ParseModel(const YAML::Node& n, const std::string& base, RunConfig* rc) {
  const std::string p = "model";
  RETURN_IF_ERROR(CheckKeys(n, p, {"profile", "denoiser", "block_size", "cache"}));
  if (!n["profile"]) return InvalidArgument("model.profile: missing");
  RETURN_IF_ERROR(ParseProfileRef(n["profile"], "model.profile", base, &rc->profile_csv, &rc->profile_json));
  const YAML::Node d = n["denoiser"];
  if (!d) return InvalidArgument("model.denoiser: missing");
  RETURN_IF_ERROR(CheckKeys(d, "model.denoiser", {"type", "calibration", "model", "problems"}));
  ASSIGN_OR_RETURN(rc->denoiser_type, GetString(d, "model.denoiser", "type"));
  if (rc->denoiser_type != "statistical" && rc->denoiser_type != "engine") {
    return InvalidArgument("model.denoiser.type: unknown \"" + rc->denoiser_type + "\" (expected statistical, engine)");
  }
  ASSIGN_OR_RETURN(std::string cal, GetString(d, "model.denoiser", "calibration"));
  rc->calibration_path = ResolvePath(cal, base);
  if (rc->denoiser_type == "engine") {
    ASSIGN_OR_RETURN(std::string m, GetString(d, "model.denoiser", "model"));
    rc->engine_model = ResolvePath(m, base);
    ASSIGN_OR_RETURN(std::string pr, GetStringOr(d, "model.denoiser", "problems", std::string()));
    rc->engine_problems = pr.empty() ? pr : ResolvePath(pr, base);
  }
  ASSIGN_OR_RETURN(rc->sim.policy.block_size, GetIntOr(n, p, "block_size", 32, 1, 4096));
  ASSIGN_OR_RETURN(rc->sim.policy.cache, GetBoolOr(n, p, "cache", true));
  return Status::Ok();
}

// The keys of a policy section (and of a mapping entry of `policies:`, which adds `label`).
std::vector<std::string> PolicyKeys() {
  return {"name", "thresholds", "fixed_threshold", "estimator", "oracle_refresh_tokens", "predictor",
          "predictor_refresh_tokens", "predictor_async", "predictor_latency_s",
          "load_control_debounce_s", "capacity_slo_s", "capacity_concurrency", "llumnix_margin_tokens",
          "proteus_period_s", "proteus_headroom", "proteus_change_z", "proteus_window",
          "proteus_headroom_slo_ratio", "step_scale_weight", "max_live_requests",
          "max_step_failures", "plan_latency_z", "plan_latency_miss_target"};
}

Status ParsePolicy(const YAML::Node& n, const std::string& base, RunConfig* rc) {
  const std::string p = "policy";
  RETURN_IF_ERROR(CheckKeys(n, p, PolicyKeys()));
  ASSIGN_OR_RETURN(std::string name, GetString(n, p, "name"));
  auto named = policy::PolicyOptions::Named(name);
  if (!named.ok()) return named.status().WithContext("policy.name");
  policy::PolicyOptions o = *named;
  o.block_size = rc->sim.policy.block_size;
  o.cache = rc->sim.policy.cache;
  o.token_budget = rc->sim.policy.token_budget;
  o.batch_steps = rc->sim.policy.batch_steps;
  if (HasField(n, "thresholds")) {
    ASSIGN_OR_RETURN(o.thresholds, GetDoubleList(n, p, "thresholds", 0, 1, 1, 64));
  }
  ASSIGN_OR_RETURN(o.fixed_threshold, GetDoubleOr(n, p, "fixed_threshold", 0.9, 0, 1));
  ASSIGN_OR_RETURN(rc->sim.estimator, GetStringOr(n, p, "estimator", std::string("oneshot")));
  ASSIGN_OR_RETURN(int refresh, GetIntOr(n, p, "oracle_refresh_tokens", 0, 0, 1 << 20));
  if (refresh < 0) return InvalidArgument("policy.oracle_refresh_tokens: must be >= 0");
  rc->sim.oracle_refresh_tokens = refresh;
  if (n["predictor"]) {
    ASSIGN_OR_RETURN(std::string model, GetString(n, p, "predictor"));
    rc->sim.predictor_model = ResolvePath(model, base);
  }
  if (rc->sim.estimator == "predictor" && rc->sim.predictor_model.empty())
    return InvalidArgument("policy.predictor: the model file is required with estimator: predictor");
  ASSIGN_OR_RETURN(rc->sim.predictor_refresh_tokens, GetIntOr(n, p, "predictor_refresh_tokens", -1, -1, 1 << 20));
  if (rc->sim.predictor_refresh_tokens < -1)
    return InvalidArgument("policy.predictor_refresh_tokens: must be >= 0 (or -1: the model's)");
  ASSIGN_OR_RETURN(rc->sim.predictor_async, GetBoolOr(n, p, "predictor_async", false));
  ASSIGN_OR_RETURN(rc->sim.predictor_latency, GetDoubleOr(n, p, "predictor_latency_s", 0.001, 0, 10));
  if (!(rc->sim.predictor_latency >= 0) || rc->sim.predictor_latency > 10)
    return InvalidArgument("policy.predictor_latency_s: must be in [0, 10] seconds");
  ASSIGN_OR_RETURN(o.load_control_debounce, GetDoubleOr(n, p, "load_control_debounce_s", 1.0, 0, kMaxSimSeconds));
  if (o.load_control_debounce < 0) return InvalidArgument("policy.load_control_debounce_s: must be >= 0");
  ASSIGN_OR_RETURN(o.capacity_slo, GetDoubleOr(n, p, "capacity_slo_s", 0.0, 0, kMaxSimSeconds));
  if (o.capacity_slo < 0) return InvalidArgument("policy.capacity_slo_s: must be >= 0");
  ASSIGN_OR_RETURN(o.capacity_concurrency, GetIntOr(n, p, "capacity_concurrency", 2, 0, 1 << 20));
  if (o.capacity_concurrency < 0) return InvalidArgument("policy.capacity_concurrency: must be >= 0");
  ASSIGN_OR_RETURN(o.llumnix_margin_tokens, GetIntOr(n, p, "llumnix_margin_tokens", 4096, 1, 1 << 24));
  ASSIGN_OR_RETURN(o.proteus_period, GetPositiveOr(n, p, "proteus_period_s", 10.0, kMaxSimSeconds));
  ASSIGN_OR_RETURN(o.proteus_headroom, GetPositiveOr(n, p, "proteus_headroom", o.proteus_headroom, 100));
  ASSIGN_OR_RETURN(o.proteus_change_z, GetDoubleOr(n, p, "proteus_change_z", o.proteus_change_z, 0, 100));
  ASSIGN_OR_RETURN(o.proteus_headroom_slo_ratio,
                   GetDoubleOr(n, p, "proteus_headroom_slo_ratio", o.proteus_headroom_slo_ratio, 0, 100));
  ASSIGN_OR_RETURN(o.proteus_window, GetIntOr(n, p, "proteus_window", o.proteus_window, 1, 100000));
  ASSIGN_OR_RETURN(o.step_scale_weight, GetDoubleOr(n, p, "step_scale_weight", o.step_scale_weight, 0, 1));
  ASSIGN_OR_RETURN(o.max_live_requests, GetIntOr(n, p, "max_live_requests", 0, 0, 1 << 30));
  if (o.max_live_requests < 0) return InvalidArgument("policy.max_live_requests: must be >= 0 (0: no limit)");
  ASSIGN_OR_RETURN(o.max_step_failures, GetIntOr(n, p, "max_step_failures", 3, 1, 1000000));
  ASSIGN_OR_RETURN(o.plan_latency_z, GetDoubleOr(n, p, "plan_latency_z", o.plan_latency_z, 0, 10));
  ASSIGN_OR_RETURN(o.plan_latency_miss_target,
                   GetDoubleOr(n, p, "plan_latency_miss_target", o.plan_latency_miss_target, 0, 1));
  rc->sim.policy = o;
  return Status::Ok();
}

// reconfig: periodic reconfiguration (docs/design.md section 10.5).
Status ParseReconfig(const YAML::Node& n, RunConfig* rc) {
  const std::string p = "reconfig";
  RETURN_IF_ERROR(ExpectMap(n, p));
  RETURN_IF_ERROR(CheckKeys(n, p, {"enabled", "tp_degrees", "period_s", "window_s", "load_delay_s", "min_gain",
                                   "prompt_round", "output_round", "class_lengths", "batch_model", "max_context",
                                   "node_limit"}));
  ReconfigOptions& o = rc->sim.reconfig;
  ASSIGN_OR_RETURN(o.enabled, GetBoolOr(n, p, "enabled", true));
  if (HasField(n, "tp_degrees")) {
    ASSIGN_OR_RETURN(std::vector<double> ds, GetDoubleList(n, p, "tp_degrees", 1, 1024, 1, 16));
    o.tp_degrees.clear();
    for (double d : ds) {
      if (d != std::floor(d)) return InvalidArgument("reconfig.tp_degrees: entries must be integers");
      o.tp_degrees.push_back(static_cast<int>(d));
    }
  }
  ASSIGN_OR_RETURN(o.period_s, GetPositiveOr(n, p, "period_s", 300, kMaxSimSeconds));
  ASSIGN_OR_RETURN(o.window_s, GetPositiveOr(n, p, "window_s", 300, kMaxSimSeconds));
  ASSIGN_OR_RETURN(o.load_delay_s, GetDoubleOr(n, p, "load_delay_s", 20, 0, 3600));
  ASSIGN_OR_RETURN(o.min_gain, GetDoubleOr(n, p, "min_gain", 0.1, 0, 10));
  ASSIGN_OR_RETURN(o.prompt_round, GetIntOr(n, p, "prompt_round", 256, 1, 1 << 20));
  ASSIGN_OR_RETURN(o.output_round, GetIntOr(n, p, "output_round", 256, 1, 1 << 20));
  ASSIGN_OR_RETURN(std::string lengths, GetStringOr(n, p, "class_lengths", "mean"));
  if (lengths != "mean" && lengths != "bound")
    return InvalidArgument("reconfig.class_lengths: must be \"mean\" or \"bound\", got \"" + SanitizeUtf8(lengths) + "\"");
  o.class_means = lengths == "mean";
  ASSIGN_OR_RETURN(std::string batches, GetStringOr(n, p, "batch_model", "split"));
  if (batches != "mixed" && batches != "split")
    return InvalidArgument("reconfig.batch_model: must be \"mixed\" or \"split\", got \"" + SanitizeUtf8(batches) + "\"");
  o.mixed_batches = batches == "mixed";
  ASSIGN_OR_RETURN(o.max_context, GetIntOr(n, p, "max_context", 4096, 2, 1 << 24));
  ASSIGN_OR_RETURN(int nl, GetIntOr(n, p, "node_limit", 20000, 0, 1 << 30));
  o.node_limit = nl;
  if (o.period_s < 1) return InvalidArgument("reconfig.period_s: must be >= 1");
  return Status::Ok();
}

Status ParseRun(const YAML::Node& root, const std::string& base, RunConfig* rc) {
  RETURN_IF_ERROR(CheckKeys(root, "", {"name", "seed", "seeds", "cluster", "model", "policy", "policies", "sweep",
                                       "workload", "slo", "periods", "output", "timeline_interval_s", "tick_s",
                                       "truth", "faults", "frontier", "reconfig"}));
  ASSIGN_OR_RETURN(rc->name, GetStringOr(root, "", "name", std::string("simulation")));
  int64_t seed = 1;
  if (HasField(root, "seed")) {
    ASSIGN_OR_RETURN(seed, GetInt(root, "", "seed", 0, std::numeric_limits<int64_t>::max()));
  }
  rc->seed = static_cast<uint64_t>(seed);
  rc->sim.seed = rc->seed;
  if (!root["cluster"]) return InvalidArgument("cluster: missing");
  RETURN_IF_ERROR(ParseCluster(root["cluster"], rc));
  if (!root["model"]) return InvalidArgument("model: missing");
  RETURN_IF_ERROR(ParseModel(root["model"], base, rc));
  if (!root["policy"]) return InvalidArgument("policy: missing");
  RETURN_IF_ERROR(ParsePolicy(root["policy"], base, rc));
  rc->sim.policy.seed = rc->seed;
  if (!root["workload"]) return InvalidArgument("workload: missing");
  ASSIGN_OR_RETURN(rc->workload, ParseWorkload(root["workload"], base));
  const YAML::Node slo = root["slo"];
  if (!slo) return InvalidArgument("slo: missing (give slo.seconds or slo.scale)");
  RETURN_IF_ERROR(CheckKeys(slo, "slo", {"seconds", "scale"}));
  if (slo["seconds"] && slo["scale"]) return InvalidArgument("slo: give seconds or scale, not both");
  if (slo["seconds"]) {
    ASSIGN_OR_RETURN(rc->slo_seconds, GetPositive(slo, "slo", "seconds", kMaxSimSeconds));
  } else if (slo["scale"]) {
    ASSIGN_OR_RETURN(rc->slo_scale, GetPositive(slo, "slo", "scale", 1e6));
  } else {
    return InvalidArgument("slo: give slo.seconds or slo.scale");
  }
  if (root["periods"]) {
    const YAML::Node ps = root["periods"];
    if (!ps.IsSequence()) return InvalidArgument("periods: must be a list of {name, from_s, to_s}");
    for (size_t i = 0; i < ps.size(); ++i) {
      const std::string pp = "periods[" + std::to_string(i) + "]";
      RETURN_IF_ERROR(CheckKeys(ps[i], pp, {"name", "from_s", "to_s"}));
      Period per;
      ASSIGN_OR_RETURN(per.name, GetString(ps[i], pp, "name"));
      ASSIGN_OR_RETURN(per.from_s, GetDouble(ps[i], pp, "from_s", 0, kMaxSimSeconds));
      ASSIGN_OR_RETURN(per.to_s, GetDouble(ps[i], pp, "to_s", 0, kMaxSimSeconds));
      if (!(per.to_s > per.from_s)) return InvalidArgument(pp + ": to_s must be > from_s");
      rc->periods.push_back(per);
    }
  }
  const YAML::Node out = root["output"];
  rc->out_dir = "results/" + SafeFileName(rc->name);
  if (out) {
    RETURN_IF_ERROR(CheckKeys(out, "output", {"dir", "plots"}));
    ASSIGN_OR_RETURN(rc->out_dir, GetStringOr(out, "output", "dir", rc->out_dir));
    ASSIGN_OR_RETURN(rc->plots, GetBoolOr(out, "output", "plots", true));
  }
  ASSIGN_OR_RETURN(rc->sim.timeline_interval, GetPositiveOr(root, "", "timeline_interval_s", 10.0, kMaxSimSeconds));
  if (rc->sim.timeline_interval < kMinIntervalSeconds) {
    return InvalidArgument("timeline_interval_s: must be >= " + Fmt("%g", kMinIntervalSeconds) + ", got " +
                           Fmt("%g", rc->sim.timeline_interval));
  }
  ASSIGN_OR_RETURN(rc->sim.tick, GetPositiveOr(root, "", "tick_s", 0.25, 3600));
  if (rc->sim.tick < kMinIntervalSeconds) {
    return InvalidArgument("tick_s: must be >= " + Fmt("%g", kMinIntervalSeconds) + ", got " + Fmt("%g", rc->sim.tick));
  }
  if (root["truth"]) RETURN_IF_ERROR(ParseTruth(root["truth"], base, rc));
  if (root["faults"]) RETURN_IF_ERROR(ParseFaults(root["faults"], rc));
  if (root["reconfig"]) RETURN_IF_ERROR(ParseReconfig(root["reconfig"], rc));
  return Status::Ok();
}

// ---- Running. -----------------------------------------------------------------------------

std::string LayoutText(const std::map<int, int>& l) {
  std::string s;
  for (const auto& [d, n] : l) {
    if (!s.empty()) s += ' ';
    s += std::to_string(n);
    s += "xTP";
    s += std::to_string(d);
  }
  return s.empty() ? "-" : s;
}

// layouts.csv (t_s, tp<d>...) and plans.csv (one row per decision; no wall times, so the
// files stay byte-identical between runs).
Status WriteReconfigFiles(const std::string& dir, const SimResult& res, std::vector<int> degrees) {
  for (const SimResult::LayoutPoint& lp : res.layouts)
    for (const auto& [d, n] : lp.layout)
      if (std::find(degrees.begin(), degrees.end(), d) == degrees.end()) degrees.push_back(d);
  std::sort(degrees.begin(), degrees.end());
  std::ostringstream lay;
  lay << "t_s";
  for (int d : degrees) lay << ",tp" << d;
  lay << "\n";
  for (const SimResult::LayoutPoint& lp : res.layouts) {
    lay << Fmt("%.3f", lp.time);
    for (int d : degrees) lay << "," << (lp.layout.count(d) ? lp.layout.at(d) : 0);
    lay << "\n";
  }
  std::ostringstream pl;
  pl << "t_s,classes,outcome,current,chosen,current_feasible,current_threshold,current_latency_s,chosen_threshold,"
        "chosen_latency_s,switched,reason\n";
  for (const PlanRecord& r : res.plans)
    pl << Fmt("%.3f", r.time) << "," << r.classes << "," << r.outcome << "," << LayoutText(r.current) << ","
       << LayoutText(r.chosen) << "," << (r.current_feasible ? 1 : 0) << "," << Fmt("%.4f", r.current_threshold) << ","
       << Fmt("%.4f", r.current_latency_s) << "," << Fmt("%.4f", r.chosen_threshold) << ","
       << Fmt("%.4f", r.chosen_latency_s) << "," << (r.switched ? 1 : 0) << "," << r.reason << "\n";
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"layouts.csv", lay.str()}, {"plans.csv", pl.str()}}) {
    std::ofstream f(dir + "/" + name);
    f << text;
    if (!f) return IoError("cannot write " + dir + "/" + name);
  }
  return Status::Ok();
}

struct RunOutcome {
  std::string policy;  // the run's label (the policy name unless `policies:` gave one)
  size_t point = 0;    // index of its sweep value
  std::string x;
  double x_value = 0;
  bool x_numeric = false;  // sweeps over names (e.g. policy.estimator) have no goodput
  Summary overall;
  std::vector<Summary> periods;
  std::vector<Summary> groups;  // per SLO class and priority, where the workload has them
  // What the summaries were made from, kept for pooling runs of several seeds (`seeds:`).
  std::vector<RequestResult> requests;
  std::vector<Period> period_defs;
  std::vector<Group> group_defs;
  double wall_s = 0;
  int64_t events = 0;
  int64_t lost_steps = 0, instance_failures = 0, drains = 0, failed_batches = 0, unaccounted = 0;
};

// The denoising model of a run and its requests (lengths from the workload, or from the
// engine's problems when the engine is in the loop).
// Confidence features are computed only when something reads them (the step predictor, step
// collection): they are a third of a statistical step's cost and change no other result.
StatusOr<ExperimentModel> BuildModel(const RunConfig& rc, const Calibration& cal, bool need_features) {
  ExperimentModel m;
  m.block_size = rc.sim.policy.block_size;
  m.cache = rc.sim.policy.cache;
  m.thresholds = rc.sim.policy.thresholds;
  for (double c : m.thresholds) m.tokens_per_step.push_back(cal.TokensPerStepAt(c));
  ASSIGN_OR_RETURN(m.requests, GenerateWorkload(rc.workload, rc.seed));
  if (rc.denoiser_type == "statistical") {
    if (cal.block_size != rc.sim.policy.block_size) {
      return InvalidArgument("model.block_size " + std::to_string(rc.sim.policy.block_size) +
                             " differs from the calibration's block size " + std::to_string(cal.block_size) +
                             " (" + rc.calibration_path + ")");
    }
    StatisticalDenoiserOptions so;
    so.params = cal.params;
    so.run_seed = rc.seed;
    so.features = need_features;
    m.denoiser = std::make_unique<StatisticalDenoiser>(so);
  } else {
    EngineDenoiserOptions eopt;
    eopt.problems_file = rc.engine_problems;
    eopt.use_cache = rc.sim.policy.cache;
    eopt.block_size = rc.sim.policy.block_size;
    auto e = EngineDenoiser::Create(rc.engine_model, eopt);
    if (!e.ok()) return e.status().WithContext("model.denoiser");
    m.engine = e->get();
    // The engine decides lengths: its problems' prompts and the model's output length.
    for (auto& r : m.requests) {
      r.prompt_len = m.engine->ProblemPromptLength(r.id);
      r.output_len = m.engine->default_output_len();
    }
    m.denoiser = std::move(*e);
  }
  return m;
}

StatusOr<RunOutcome> RunOne(RunConfig rc, const ExperimentOptions& eo, bool keep_requests = false) {
  ASSIGN_OR_RETURN(policy::LatencyProfile profile, LoadProfileRef(rc.profile_csv, rc.profile_json));
  std::optional<policy::LatencyProfile> truth;
  if (!rc.truth_csv.empty() || !rc.truth_json.empty()) {
    auto t = LoadProfileRef(rc.truth_csv, rc.truth_json);
    if (!t.ok()) return t.status().WithContext("truth.profile");
    truth = std::move(*t);
    rc.sim.truth_profile = &*truth;
  }
  auto cal_or = LoadCalibration(rc.calibration_path);
  if (!cal_or.ok()) return cal_or.status().WithContext("model.denoiser.calibration");
  const Calibration cal = *cal_or;
  // The policy's offline profile: tokens per step and accuracy at each candidate threshold.
  rc.sim.tokens_per_step.clear();
  rc.sim.policy.tokens_per_step.clear();
  rc.sim.policy.accuracy.clear();
  rc.sim.policy.steps_cv = cal.steps_cv;
  for (double c : rc.sim.policy.thresholds) {
    rc.sim.tokens_per_step.push_back(cal.TokensPerStepAt(c));
    rc.sim.policy.tokens_per_step.push_back(cal.TokensPerStepAt(c));
    rc.sim.policy.accuracy.push_back(cal.AccuracyAt(c));
  }

  ASSIGN_OR_RETURN(ExperimentModel model, BuildModel(rc, cal, rc.sim.estimator == "predictor"));
  std::vector<policy::RequestSpec>& requests = model.requests;
  std::unique_ptr<DenoiserModel>& denoiser = model.denoiser;
  EngineDenoiser* engine = model.engine;

  for (const auto& i : rc.sim.instances) {
    if (!profile.HasTp(i.tp)) {
      return InvalidArgument("cluster.tp: TP degree " + std::to_string(i.tp) + " is not in the latency profile " +
                             profile.source());
    }
  }
  // Requests without an SLO from the trace get the configured one (the host defaults it).
  rc.sim.slo_seconds = rc.slo_seconds;
  rc.sim.slo_scale = rc.slo_scale;
  rc.sim.progress = eo.progress;

  AccuracyFn acc = [&cal](double c) { return cal.AccuracyAt(c); };
  MeasuredQualityFn measured;
  if (engine != nullptr) {
    measured = [engine](policy::RequestId id) -> std::optional<double> {
      auto c = engine->Correct(id);
      if (!c) return std::nullopt;
      return *c ? 1.0 : 0.0;
    };
  }
  auto res = Simulate(rc.sim, profile, *denoiser, requests, acc, measured);
  if (!res.ok()) return res.status();
  if (engine != nullptr && !engine->status().ok()) return engine->status().WithContext("engine in the loop");

  nlohmann::json info = {{"name", rc.name}, {"policy", rc.sim.policy.name}, {"seed", rc.seed},
                         {"instances", rc.sim.instances.size()}, {"estimator", rc.sim.estimator},
                         {"denoiser", rc.denoiser_type}, {"calibration", cal.name}};
  std::vector<Group> groups;
  if (rc.workload.slo_classes.size() > 1) {
    for (size_t c = 0; c < rc.workload.slo_classes.size(); ++c) {
      groups.push_back({"class " + rc.workload.slo_classes[c].name, static_cast<int>(c), -1});
    }
  }
  if (rc.workload.high_fraction > 0) {
    groups.push_back({"priority", -1, 1});
    groups.push_back({"normal", -1, 0});
  }
  if (rc.sim.reconfig.enabled) {
    info["reconfig_launches"] = res->reconfig_launches;
    info["reconfig_terminations"] = res->reconfig_terminations;
    int64_t switches = 0;
    for (const PlanRecord& pr : res->plans) switches += pr.switched;
    info["reconfig_plans"] = res->plans.size();
    info["reconfig_switches"] = switches;
  }
  RETURN_IF_ERROR(WriteRunFiles(rc.out_dir, *res, rc.periods, info, groups));
  if (rc.sim.reconfig.enabled) RETURN_IF_ERROR(WriteReconfigFiles(rc.out_dir, *res, rc.sim.reconfig.tp_degrees));
  if (rc.plots && eo.plots && res->timeline.size() >= 3) {
    Status s = PlotTimeline(rc.out_dir, rc.name + " - " + rc.sim.policy.name);
    if (!s.ok() && !eo.quiet) std::fprintf(stderr, "warning: no timeline plot: %s\n", s.message().c_str());
    if (rc.sim.reconfig.enabled) {
      s = PlotLayouts(rc.out_dir, rc.name + " - " + rc.sim.policy.name + " - layout over time");
      if (!s.ok() && !eo.quiet) std::fprintf(stderr, "warning: no layout plot: %s\n", s.message().c_str());
    }
  }
  RunOutcome out;
  out.policy = rc.sim.policy.name;
  out.overall = Summarize(res->requests, "overall");
  for (const Period& p : rc.periods) out.periods.push_back(Summarize(res->requests, p.name, p.from_s, p.to_s));
  for (const Group& g : groups) out.groups.push_back(Summarize(res->requests, g));
  if (keep_requests) {
    out.requests = std::move(res->requests);  // the summaries above are made
    out.period_defs = rc.periods;
    out.group_defs = groups;
  }
  out.wall_s = res->wall_seconds;
  out.events = res->events;
  out.lost_steps = res->scheduler_stats.lost_steps;
  out.instance_failures = res->instance_failures;
  out.drains = res->drains;
  out.failed_batches = res->failed_batches;
  out.unaccounted = res->unaccounted;
  return out;
}

// One outcome for the runs of several seeds of the same policy and sweep point: their
// requests taken together (attainment, quality, latency percentiles over all of them), the
// counts summed.
RunOutcome Pool(std::vector<RunOutcome> runs) {
  RunOutcome out = std::move(runs.front());
  if (runs.size() == 1) return out;  // one seed: its own summaries
  for (size_t i = 1; i < runs.size(); ++i) {
    RunOutcome& r = runs[i];
    out.requests.insert(out.requests.end(), r.requests.begin(), r.requests.end());
    out.wall_s += r.wall_s;
    out.events += r.events;
    out.lost_steps += r.lost_steps;
    out.instance_failures += r.instance_failures;
    out.drains += r.drains;
    out.failed_batches += r.failed_batches;
    out.unaccounted += r.unaccounted;
  }
  out.overall = Summarize(out.requests, "overall");
  out.periods.clear();
  for (const Period& p : out.period_defs) out.periods.push_back(Summarize(out.requests, p.name, p.from_s, p.to_s));
  out.groups.clear();
  for (const Group& g : out.group_defs) out.groups.push_back(Summarize(out.requests, g));
  out.requests.clear();
  out.requests.shrink_to_fit();
  return out;
}

// A CSV field: as is, or quoted with quotes doubled where it holds a comma or a quote.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    out.push_back(c);
    if (c == '"') out.push_back('"');
  }
  out.push_back('"');
  return out;
}


}  // namespace

StatusOr<ExperimentModel> LoadExperimentModel(const std::string& config_path) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYamlFile(config_path));
  try {
    if (!root["policy"]) root["policy"] = YAML::Node(YAML::NodeType::Map);
    if (!root["policy"]["name"]) root["policy"]["name"] = "tediserve";
    RunConfig rc;
    RETURN_IF_ERROR(ParseRun(root, fs::path(config_path).parent_path().string(), &rc).WithContext(config_path));
    auto cal = LoadCalibration(rc.calibration_path);
    if (!cal.ok()) return cal.status().WithContext("model.denoiser.calibration");
    return BuildModel(rc, *cal, /*need_features=*/true);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(config_path + ": " + e.msg);
  }
}

namespace {

// Prints the frontier table of each sweep point and the target's check, and writes
// <out_root>/frontier.csv (and frontier.png when plots are on).
Status ReportFrontier(const std::vector<RunOutcome>& outcomes, size_t points, const std::string& sweep_key,
                      const std::string& out_root, const std::string& target, double max_attainment_gap,
                      double max_quality_gap) {
  const std::string csv_path = out_root + "/frontier.csv";
  std::ofstream csv(csv_path);
  if (!csv) return IoError("cannot write " + csv_path);
  csv << "x,policy,attainment,quality,dominated,dominated_by,attainment_gap,attainment_gap_by,quality_gap,"
         "quality_gap_by\n";
  std::printf("\nFrontier per %s (attainment gap: the most SLO attainment, in points, that a run of at least this "
              "quality has over this one; quality gap: the most quality that a run of at least this attainment has "
              "over it; both 0 on the frontier):\n",
              sweep_key.empty() ? "run" : sweep_key.c_str());
  std::printf("| %s | policy | attainment | quality | dominated by | attainment gap (pts) | quality gap |\n",
              sweep_key.empty() ? "point" : sweep_key.c_str());
  std::printf("|---|---|---|---|---|---|---|\n");
  int checked = 0, passed = 0;
  std::string failures;
  auto gap = [](double g, const std::string& by, const char* fmt) {
    return g > 0 ? Fmt(fmt, g) + " (" + by + ")" : std::string("0");
  };
  for (size_t point = 0; point < points; ++point) {
    std::vector<const RunOutcome*> runs;
    std::vector<FrontierPoint> fp;
    for (const RunOutcome& o : outcomes) {
      if (o.point != point) continue;
      runs.push_back(&o);
      fp.push_back({o.policy, o.overall.attainment, o.overall.quality});
    }
    const std::vector<FrontierVerdict> verdicts = JudgeFrontier(fp);
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunOutcome& o = *runs[i];
      const FrontierVerdict& v = verdicts[i];
      const std::string x = sweep_key.empty() ? "-" : o.x;
      std::printf("| %s | %s | %.1f%% | %.4f | %s | %s | %s |\n", x.c_str(), o.policy.c_str(),
                  100 * o.overall.attainment, o.overall.quality, v.dominated ? v.dominated_by.c_str() : "-",
                  gap(100 * v.attainment_gap, v.attainment_gap_by, "%.1f").c_str(),
                  gap(v.quality_gap, v.quality_gap_by, "%.4f").c_str());
      csv << CsvField(x) << ',' << CsvField(o.policy) << ',' << Fmt("%.6f", o.overall.attainment) << ','
          << Fmt("%.6f", o.overall.quality) << ',' << (v.dominated ? 1 : 0) << ',' << CsvField(v.dominated_by) << ','
          << Fmt("%.6f", v.attainment_gap) << ',' << CsvField(v.attainment_gap_by) << ','
          << Fmt("%.6f", v.quality_gap) << ',' << CsvField(v.quality_gap_by) << '\n';
      if (o.policy != target) continue;
      ++checked;
      // A tiny tolerance: the gaps are differences of fractions of whole request counts.
      if (v.attainment_gap <= max_attainment_gap + 1e-9 && v.quality_gap <= max_quality_gap + 1e-9) {
        ++passed;
      } else {
        failures += " " + x + " (attainment gap " + gap(100 * v.attainment_gap, v.attainment_gap_by, "%.1f") +
                    " pts, quality gap " + gap(v.quality_gap, v.quality_gap_by, "%.4f") + ");";
      }
    }
  }
  csv.close();
  if (!csv) return IoError("cannot write " + csv_path);
  if (!target.empty()) {
    std::printf("\nfrontier check: %s within %.1f pts of attainment and %.4f of quality at %d of %d points%s%s\n",
                target.c_str(), 100 * max_attainment_gap, max_quality_gap, passed, checked,
                failures.empty() ? "" : "; off at", failures.c_str());
  }
  return Status::Ok();
}

}  // namespace

Status RunExperiment(const ExperimentOptions& eo) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYamlFile(eo.config_path));
  const std::string base = fs::path(eo.config_path).parent_path().string();

  try {
    // Policies to run (a name, or a mapping of policy keys over `policy:` with a label) and
    // sweep values.
    struct PolicyRun {
      std::string label;
      YAML::Node keys;  // policy keys set over the experiment's `policy:` section
    };
    std::vector<PolicyRun> policies;
    if (HasField(root, "policies")) {
      const YAML::Node ps = root["policies"];
      if (!ps.IsSequence() || ps.size() == 0 || ps.size() > kMaxRuns) {
        return InvalidArgument("policies: must be a list of 1 to " + std::to_string(kMaxRuns) +
                               " policy names or mappings");
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        const std::string where = "policies[" + std::to_string(i) + "]";
        PolicyRun run;
        if (ps[i].IsScalar()) {
          run.label = ps[i].Scalar();
          run.keys["name"] = ps[i].Scalar();
        } else if (ps[i].IsMap()) {
          std::vector<std::string> keys = PolicyKeys();
          keys.push_back("label");
          RETURN_IF_ERROR(CheckKeys(ps[i], where, keys));
          ASSIGN_OR_RETURN(const std::string name, GetString(ps[i], where, "name"));
          ASSIGN_OR_RETURN(run.label, GetStringOr(ps[i], where, "label", name));
          if (run.label.empty() || run.label.size() > 100) {
            return InvalidArgument(where + ".label: expected 1 to 100 characters");
          }
          for (const auto& kv : ps[i]) {
            if (kv.first.Scalar() != "label") run.keys[kv.first.Scalar()] = YAML::Clone(kv.second);
          }
        } else {
          return InvalidArgument(where + ": expected a policy name or a mapping with name (and label), got " +
                                 DescribeYaml(ps[i]));
        }
        auto named = policy::PolicyOptions::Named(run.keys["name"].Scalar());
        if (!named.ok()) return named.status().WithContext(where);
        for (const PolicyRun& other : policies) {
          if (SafeFileName(other.label) == SafeFileName(run.label)) {
            return InvalidArgument(where + ": label \"" + SanitizeUtf8(run.label) + "\" is used twice (" +
                                   "give each entry its own label)");
          }
        }
        policies.push_back(std::move(run));
      }
    } else {
      ASSIGN_OR_RETURN(std::string name, GetString(Field(root, "policy"), "policy", "name"));
      PolicyRun run;
      run.label = name;
      run.keys["name"] = name;
      policies.push_back(std::move(run));
    }
    // frontier: judge each run against every other run of its sweep point (src/sim/frontier.h),
    // and optionally check one of them against gap limits.
    bool frontier = false;
    std::string frontier_target;
    double max_attainment_gap = 0.01, max_quality_gap = 0.002;
    if (HasField(root, "frontier")) {
      const YAML::Node fr = root["frontier"];
      RETURN_IF_ERROR(CheckKeys(fr, "frontier", {"target", "max_attainment_gap_points", "max_quality_gap"}));
      frontier = true;
      ASSIGN_OR_RETURN(frontier_target, GetStringOr(fr, "frontier", "target", std::string()));
      if (!frontier_target.empty() &&
          std::none_of(policies.begin(), policies.end(), [&](const PolicyRun& r) { return r.label == frontier_target; })) {
        return InvalidArgument("frontier.target: \"" + SanitizeUtf8(frontier_target) +
                               "\" is not the label of a run in policies:");
      }
      ASSIGN_OR_RETURN(const double points, GetDoubleOr(fr, "frontier", "max_attainment_gap_points", 1.0, 0, 100));
      max_attainment_gap = points / 100;
      ASSIGN_OR_RETURN(max_quality_gap, GetDoubleOr(fr, "frontier", "max_quality_gap", 0.002, 0, 1));
    }
    // seeds: N runs each policy and sweep point with seeds seed, seed + 1, ..., and judges
    // them by their requests taken together (sampling noise of one arrival sequence averaged).
    int64_t seeds = 1, first_seed = 1;
    if (HasField(root, "seeds")) {
      ASSIGN_OR_RETURN(seeds, GetInt(root, "", "seeds", 1, 100));
    }
    if (seeds > 1 && HasField(root, "seed")) {  // room for the seeds after it
      ASSIGN_OR_RETURN(first_seed, GetInt(root, "", "seed", 0, std::numeric_limits<int64_t>::max() - 100));
    }
    std::string sweep_key;
    std::vector<YAML::Node> sweep_values{YAML::Node()};
    if (HasField(root, "sweep")) {
      const YAML::Node sw = root["sweep"];
      RETURN_IF_ERROR(CheckKeys(sw, "sweep", {"key", "values"}));
      ASSIGN_OR_RETURN(sweep_key, GetString(sw, "sweep", "key"));
      const YAML::Node values = Field(sw, "values");
      if (!values.IsSequence() || values.size() == 0 || values.size() > kMaxRuns) {
        return InvalidArgument("sweep.values: must be a list of 1 to " + std::to_string(kMaxRuns) +
                               " values (sweep.key is a dotted field, e.g. workload.arrivals.rate)");
      }
      const std::vector<std::string> parts = SplitDots(sweep_key);
      if (parts.empty() || std::any_of(parts.begin(), parts.end(), [](const std::string& k) { return k.empty(); })) {
        return InvalidArgument("sweep.key: expected a dotted field such as workload.arrivals.rate, got \"" +
                               SanitizeUtf8(sweep_key) + "\"");
      }
      sweep_values.clear();
      for (const auto& v : values) sweep_values.push_back(v);
    }
    if (policies.size() * sweep_values.size() * static_cast<size_t>(seeds) > kMaxRuns) {
      return InvalidArgument("policies x sweep.values x seeds: " +
                             std::to_string(policies.size() * sweep_values.size() * static_cast<size_t>(seeds)) +
                             " runs, more than " + std::to_string(kMaxRuns));
    }

    std::vector<RunOutcome> outcomes;
    std::string out_root;
    for (const PolicyRun& pol : policies) {
      for (size_t vi = 0; vi < sweep_values.size(); ++vi) {
        const YAML::Node& value = sweep_values[vi];
        // A scalar value names its run; a mapping (e.g. a whole faults section) is run
        // "case<i>" and labelled with its flow form.
        std::string label;
        if (!sweep_key.empty()) {
          if (value.IsScalar()) {
            label = SanitizeUtf8(value.Scalar());
          } else {
            YAML::Emitter em;
            em << YAML::Flow << value;
            label = SanitizeUtf8(em.c_str());
          }
        }
        YAML::Node cfg = YAML::Clone(root);
        if (!cfg["policy"]) cfg["policy"] = YAML::Node(YAML::NodeType::Map);
        for (const auto& kv : pol.keys) cfg["policy"][kv.first.Scalar()] = YAML::Clone(kv.second);
        std::string tag = SafeFileName(pol.label);
        if (!sweep_key.empty()) {
          SetPath(cfg, SplitDots(sweep_key), 0, value);
          tag.push_back('_');
          tag.append(value.IsScalar() ? SafeFileName(label) : "case" + std::to_string(vi));
        }
        std::vector<RunOutcome> per_seed;
        for (int64_t k = 0; k < seeds; ++k) {
          if (seeds > 1) cfg["seed"] = first_seed + k;
          RunConfig rc;
          Status s = ParseRun(cfg, base, &rc);
          if (!s.ok()) return s.WithContext(eo.config_path);
          if (!eo.out_dir.empty()) rc.out_dir = eo.out_dir;
          out_root = rc.out_dir;
          const std::string run_tag = seeds > 1 ? tag + "_seed" + std::to_string(first_seed + k) : tag;
          rc.out_dir += "/" + run_tag;
          if (!eo.quiet) std::fprintf(stderr, "running %s ...\n", run_tag.c_str());
          ASSIGN_OR_RETURN(RunOutcome one, RunOne(std::move(rc), eo, /*keep_requests=*/seeds > 1));
          per_seed.push_back(std::move(one));
        }
        RunOutcome o = Pool(std::move(per_seed));
        o.policy = pol.label;
        o.point = vi;
        if (!sweep_key.empty()) {
          o.x = label;
          try {
            o.x_value = value.IsScalar() ? value.as<double>() : 0;
            o.x_numeric = value.IsScalar();
          } catch (const YAML::Exception&) {
            o.x_value = 0;
          }
        }
        if (!eo.quiet) {
          std::fprintf(stderr, "  %s: %lld events in %.2f s (%.2fM events/s)\n", tag.c_str(),
                       static_cast<long long>(o.events), o.wall_s, o.events / std::max(1e-9, o.wall_s) / 1e6);
        }
        outcomes.push_back(std::move(o));
      }
    }

    // The table, the sweep file, and goodput.
    std::printf("| policy |%s requests | SLO attainment | mean latency (s) | p50 (s) | p99 (s) | quality | mean threshold |\n",
                sweep_key.empty() ? "" : (" " + sweep_key + " |").c_str());
    std::printf("|---|%s---|---|---|---|---|---|---|\n", sweep_key.empty() ? "" : "---|");
    for (const RunOutcome& o : outcomes) {
      auto row = [&](const Summary& s, const std::string& label) {
        std::printf("| %s |%s %d | %.1f%% | %.2f | %.2f | %.2f | %.4f | %.3f |\n", label.c_str(),
                    sweep_key.empty() ? "" : (" " + o.x + " |").c_str(), s.requests, 100 * s.attainment,
                    s.mean_latency, s.p50_latency, s.p99_latency, s.quality, s.mean_threshold);
      };
      row(o.overall, o.policy);
      for (const Summary& p : o.periods) row(p, o.policy + " (" + p.name + ")");
      for (const Summary& g : o.groups) row(g, o.policy + " [" + g.name + "]");
    }
    // Where requests did not all complete (faults, cancellations), how each run's ended.
    const bool any_incomplete = std::any_of(outcomes.begin(), outcomes.end(), [](const RunOutcome& o) {
      return o.overall.completed != o.overall.requests || o.instance_failures > 0 || o.drains > 0;
    });
    if (any_incomplete) {
      std::printf("\n| policy |%s completed | cancelled | failed | unaccounted | instance failures | drains | failed steps | "
                  "lost request steps |\n",
                  sweep_key.empty() ? "" : (" " + sweep_key + " |").c_str());
      std::printf("|---|%s---|---|---|---|---|---|---|---|\n", sweep_key.empty() ? "" : "---|");
      for (const RunOutcome& o : outcomes) {
        const Summary& s = o.overall;
        std::printf("| %s |%s %d | %d | %d | %d | %lld | %lld | %lld | %lld |\n", o.policy.c_str(),
                    sweep_key.empty() ? "" : (" " + o.x + " |").c_str(), s.completed, s.cancelled, s.failed,
                    static_cast<int>(o.unaccounted), static_cast<long long>(o.instance_failures),
                    static_cast<long long>(o.drains), static_cast<long long>(o.failed_batches),
                    static_cast<long long>(o.lost_steps));
      }
    }
    std::error_code ec;
    fs::create_directories(out_root, ec);
    // Experiment-wide plots (sweep, frontier): on unless output.plots or --no-plots says no.
    ASSIGN_OR_RETURN(const bool output_plots, GetBoolOr(Field(root, "output"), "output", "plots", true));
    const bool experiment_plots = output_plots && eo.plots;
    ASSIGN_OR_RETURN(const std::string exp_name, GetStringOr(root, "", "name", ""));
    if (frontier) {
      RETURN_IF_ERROR(ReportFrontier(outcomes, sweep_values.size(), sweep_key, out_root, frontier_target,
                                     max_attainment_gap, max_quality_gap));
      if (experiment_plots) {
        Status s = PlotFrontier(out_root + "/frontier.csv", sweep_key.empty() ? "run" : sweep_key,
                                out_root + "/frontier.png", exp_name);
        if (!s.ok() && !eo.quiet) std::fprintf(stderr, "warning: no frontier plot: %s\n", s.message().c_str());
      }
    }
    if (!sweep_key.empty()) {
      const std::string sweep_csv = out_root + "/sweep.csv";
      std::ofstream f(sweep_csv);
      if (!f) return IoError("cannot write " + sweep_csv);
      f << "policy,x,attainment,mean_latency_s,p50_latency_s,p99_latency_s,quality,mean_threshold\n";
      for (const RunOutcome& o : outcomes) {
        f << CsvField(o.policy) << ',' << CsvField(o.x) << ',' << Fmt("%.6f", o.overall.attainment) << ','
          << Fmt("%.6f", o.overall.mean_latency) << ',' << Fmt("%.6f", o.overall.p50_latency) << ','
          << Fmt("%.6f", o.overall.p99_latency) << ',' << Fmt("%.6f", o.overall.quality) << ','
          << Fmt("%.6f", o.overall.mean_threshold) << '\n';
      }
      f.close();
      // Goodput: the hardest sweep value with >= 90% attainment, per policy. Every sweep key
      // makes the load heavier as it grows except the SLO scale, where smaller is harder.
      const bool smaller_is_harder = sweep_key == "slo.scale";
      // Sweeps that change what is modelled rather than the load (truth.*, faults) have no goodput.
      const bool numeric = std::all_of(outcomes.begin(), outcomes.end(), [](const RunOutcome& o) { return o.x_numeric; }) &&
                           sweep_key.rfind("truth.", 0) != 0 && sweep_key.rfind("faults", 0) != 0;
      if (numeric) {
        std::printf("\n%s (%s %s with >= 90%% SLO attainment):", smaller_is_harder ? "tightest SLO" : "goodput",
                    smaller_is_harder ? "lowest" : "highest", sweep_key.c_str());
        for (const PolicyRun& run : policies) {
          const std::string& pol = run.label;
          std::string best = "none";
          double best_x = -1e300;
          for (const RunOutcome& o : outcomes) {
            const double x = smaller_is_harder ? -o.x_value : o.x_value;
            if (o.policy == pol && o.overall.attainment >= 0.9 && x > best_x) {
              best_x = x;
              best = o.x;
            }
          }
          std::printf(" %s %s;", pol.c_str(), best.c_str());
        }
        std::printf("\n");
      }
      if (numeric && experiment_plots) {
        Status s = PlotSweep(sweep_csv, sweep_key, out_root + "/sweep", exp_name);
        if (!s.ok() && !eo.quiet) std::fprintf(stderr, "warning: no sweep plots: %s\n", s.message().c_str());
      }
    }
    if (!eo.quiet) std::fprintf(stderr, "results in %s\n", out_root.c_str());
  } catch (const YAML::Exception& e) {
    return InvalidArgument(eo.config_path + ": " + e.msg);
  }
  return Status::Ok();
}

}  // namespace tediserve::sim
