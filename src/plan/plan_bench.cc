// plan_bench: solve time of both reconfiguration stages (docs/experiments.md, "Planner
// solve time"). Clusters of 16 GPUs (4 nodes x 4), 64 (16 x 4) and 256 (64 x 4), TP degrees
// 1/2/4, the 5 LLaDA thresholds, 30 length classes (prompts 256..1536 x outputs 256..1280),
// the H100 profile, SLO = 5 x the class's solo latency on TP-1 at 0.9, at three loads (requests
// per second per GPU). Stage 2 starts from all TP-1. Prints one line per (cluster, load).
//   build-plan/src/plan/plan_bench [--node-limit N] [--repeats R] [--loads 0.1,0.6,1.2] [--gpus 16,64,256]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "plan/stage1.h"
#include "plan/stage2.h"

using namespace tediserve;
using namespace tediserve::plan;

namespace {

std::vector<LengthClass> Classes(const policy::LatencyProfile& prof, double total_rps) {
  std::vector<LengthClass> out;
  double wsum = 0;
  for (int p = 1; p <= 6; ++p)
    for (int o = 1; o <= 5; ++o) {
      LengthClass c;
      c.prompt_len = 256 * p;
      c.output_len = 256 * o;
      const double blocks = c.output_len / 32.0;
      const double solo = blocks * prof.StepSeconds(1, c.prompt_len + c.output_len) +
                          (c.output_len / 3.02 - blocks) * prof.StepSeconds(1, 32);
      c.slo_s = 5 * solo;
      c.rps = 1.0 / (p * o);  // shorter classes are more common
      wsum += c.rps;
      out.push_back(c);
    }
  for (LengthClass& c : out) c.rps *= total_rps / wsum;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t node_limit = 0;
  int repeats = 1;
  std::string src = TEDI_SOURCE_DIR;
  std::vector<double> loads = {0.1, 0.6, 1.2};
  std::vector<int> sizes = {16, 64, 256};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--node-limit" && i + 1 < argc) {
      node_limit = std::atoll(argv[++i]);
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if ((a == "--loads" || a == "--gpus") && i + 1 < argc) {
      std::vector<double> v;
      for (char* t = std::strtok(argv[++i], ","); t != nullptr; t = std::strtok(nullptr, ",")) v.push_back(std::atof(t));
      if (a == "--loads") {
        loads = v;
      } else {
        sizes.clear();
        for (double g : v)
          if (g >= 4) sizes.push_back(static_cast<int>(g) / 4 * 4);
      }
    } else if (a == "--source-dir" && i + 1 < argc) {
      src = argv[++i];
    } else {
      std::fprintf(stderr, "usage: plan_bench [--node-limit N] [--repeats R] [--loads RPS_PER_GPU,...] [--gpus N,...] [--source-dir DIR]\n");
      return 2;
    }
  }
  StatusOr<policy::LatencyProfile> prof =
      policy::LatencyProfile::LoadCsv(src + "/data/profiles/llada-8b-base/h100_step_latency_ms.csv");
  if (!prof.ok()) {
    std::fprintf(stderr, "error: %s\n", prof.status().ToString().c_str());
    return 2;
  }
  std::printf("%-6s %-5s %-8s | %-9s %-9s %-9s %-9s %-9s %-7s | %-8s %-5s %-5s | %s\n", "GPUs", "nodes", "rps/GPU", "s1 obj1",
              "s1 obj2", "s1 obj3", "s1 total", "s1 CPU", "nodes", "s2", "kept", "new", "layout / status");
  for (int gpus : sizes) {
    for (double per_gpu : loads) {
      Stage1Inputs in;
      in.gpus_per_node.assign(gpus / 4, 4);
      in.tp_degrees = {1, 2, 4};
      in.profile = &prof.value();
      in.thresholds = {0.9, 0.8, 0.7, 0.6, 0.5};
      in.tokens_per_step = {3.02, 3.89, 4.77, 5.65, 6.58};
      in.block_size = 32;
      in.max_context = 4096;
      in.token_budget = 8192;
      in.classes = Classes(prof.value(), per_gpu * gpus);
      Stage1Options opt;
      opt.mip.node_limit = node_limit;
      std::vector<double> t1(4, 1e9), t2(1, 1e9);
      double cpu1 = 1e9;  // process CPU seconds of Stage 1 (less sensitive to other load than wall time)
      StatusOr<Stage1Result> r1 = PlanStage1(in, opt);
      StatusOr<Stage2Result> r2 = Internal("not run");
      for (int rep = 0; rep < repeats; ++rep) {
        const std::clock_t c0 = std::clock();
        r1 = PlanStage1(in, opt);
        cpu1 = std::min(cpu1, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
        if (!r1.ok()) {
          std::fprintf(stderr, "error: %s\n", r1.status().ToString().c_str());
          return 1;
        }
        for (size_t i = 0; i < r1->solves.size() && i < 3; ++i) t1[i] = std::min(t1[i], r1->solves[i].seconds);
        t1[3] = std::min(t1[3], r1->seconds);
        Stage2Inputs s2;
        s2.gpus_per_node = in.gpus_per_node;
        s2.target = r1->instances;
        int id = 0;
        for (int n = 0; n < gpus / 4; ++n)
          for (int g = 0; g < 4; ++g) s2.current.push_back({id++, n, 1, {g}});
        r2 = PlanStage2(s2, opt.mip);
        if (!r2.ok()) {
          std::fprintf(stderr, "error: %s\n", r2.status().ToString().c_str());
          return 1;
        }
        t2[0] = std::min(t2[0], r2->seconds);
      }
      std::string layout;
      for (const auto& [d, n] : r1->instances) layout += std::to_string(n) + "xTP" + std::to_string(d) + " ";
      int64_t nodes = 0;
      std::string statuses;
      for (const ObjectiveSolve& s : r1->solves) {
        nodes += s.nodes;
        statuses += std::string(s.status == MipStatus::kOptimal ? "opt" : MipStatusName(s.status)) + ",";
      }
      auto ms = [](double s) { return s >= 1e8 ? std::string("-") : std::to_string(s).substr(0, 8); };
      std::printf("%-6d %-5d %-8.2f | %-9s %-9s %-9s %-9s %-9s %-7lld | %-8s %-5zu %-5zu | %s(%s) thr %.4f lat %.3f s; s2 %s\n",
                  gpus, gpus / 4, per_gpu, ms(t1[0]).c_str(), ms(t1[1]).c_str(), ms(t1[2]).c_str(), ms(t1[3]).c_str(),
                  ms(cpu1).c_str(), static_cast<long long>(nodes), ms(t2[0]).c_str(), r2->kept.size(), r2->launched.size(), layout.c_str(),
                  r1->outcome == Stage1Outcome::kPlanned ? statuses.c_str() : Stage1OutcomeName(r1->outcome),
                  r1->mean_threshold, r1->mean_latency_s, MipStatusName(r2->status));
      std::fflush(stdout);
    }
  }
  std::printf("(times in seconds, the minimum of %d run(s); s1 objN: one MILP solve per objective (wall); s1 CPU: the process's CPU time for Stage 1; node limit %lld)\n", repeats,
              static_cast<long long>(node_limit));
  return 0;
}
