#include "plan/stage2.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>

namespace tediserve::plan {

namespace {

Status ValidateInputs(const Stage2Inputs& in) {
  if (in.gpus_per_node.empty()) return InvalidArgument("the cluster has no nodes");
  int total = 0;
  for (int g : in.gpus_per_node) {
    if (g < 0 || g > 1024) return InvalidArgument("GPUs per node must be in [0, 1024]");
    total += g;
  }
  if (total == 0) return InvalidArgument("the cluster has no GPUs");
  int64_t want = 0;
  for (const auto& [d, n] : in.target) {
    if (d < 1 || d > 1024) return InvalidArgument("TP degree " + std::to_string(d) + " out of range");
    if (n < 0 || n > 1 << 20) return InvalidArgument("instance count for TP-" + std::to_string(d) + " out of range");
    want += int64_t{d} * n;
  }
  if (want > total)
    return FailedPrecondition("the target needs " + std::to_string(want) + " GPUs, the cluster has " + std::to_string(total));
  std::set<int> ids;
  std::set<std::pair<int, int>> used;
  for (const Placement& p : in.current) {
    const std::string who = "current instance " + std::to_string(p.id);
    if (!ids.insert(p.id).second) return InvalidArgument(who + ": id listed twice");
    if (p.node < 0 || p.node >= static_cast<int>(in.gpus_per_node.size())) return InvalidArgument(who + ": no such node");
    if (p.tp < 1 || static_cast<int>(p.gpus.size()) != p.tp) return InvalidArgument(who + ": needs exactly tp GPUs");
    for (int g : p.gpus) {
      if (g < 0 || g >= in.gpus_per_node[p.node]) return InvalidArgument(who + ": GPU " + std::to_string(g) + " not on its node");
      if (!used.insert({p.node, g}).second)
        return InvalidArgument(who + ": GPU " + std::to_string(g) + " of node " + std::to_string(p.node) + " is used twice");
    }
  }
  return Status::Ok();
}

bool Overlaps(const Placement& a, const Placement& b) {
  if (a.node != b.node) return false;
  for (int g : a.gpus)
    if (std::find(b.gpus.begin(), b.gpus.end(), g) != b.gpus.end()) return true;
  return false;
}

// One launch at a time, each after the terminations it needs; the fewest terminations first.
std::vector<PlanStep> OrderSteps(const std::vector<Placement>& launched, const std::vector<Placement>& terminated) {
  std::vector<PlanStep> steps;
  std::vector<bool> alive(terminated.size(), true), done(launched.size(), false);
  for (size_t round = 0; round < launched.size(); ++round) {
    size_t best = launched.size();
    int best_cost = 1 << 30;
    for (size_t j = 0; j < launched.size(); ++j) {
      if (done[j]) continue;
      int cost = 0;
      for (size_t i = 0; i < terminated.size(); ++i) cost += alive[i] && Overlaps(launched[j], terminated[i]);
      if (cost < best_cost) {
        best_cost = cost;
        best = j;
      }
    }
    for (size_t i = 0; i < terminated.size(); ++i)
      if (alive[i] && Overlaps(launched[best], terminated[i])) {
        steps.push_back({PlanStep::kTerminate, terminated[i]});
        alive[i] = false;
      }
    steps.push_back({PlanStep::kLaunch, launched[best]});
    done[best] = true;
  }
  for (size_t i = 0; i < terminated.size(); ++i)
    if (alive[i]) steps.push_back({PlanStep::kTerminate, terminated[i]});
  return steps;
}

}  // namespace

StatusOr<Stage2Result> PlanStage2(const Stage2Inputs& in, const MipOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(ValidateInputs(in));
  const int nn = static_cast<int>(in.gpus_per_node.size());
  std::vector<int> degrees;
  for (const auto& [d, n] : in.target)
    if (n > 0) degrees.push_back(d);
  MipModel m;
  m.maximize = true;
  // slot index: [node][degree index][l] -> u column, a columns per GPU
  struct Slot {
    int node, d, l, u;
    std::vector<int> a;  // per GPU of the node
  };
  std::vector<Slot> slots;
  std::map<std::tuple<int, int, int>, int> slot_of;  // (node, d, l) -> slots index
  std::vector<std::vector<std::pair<int, double>>> gpu_rows(0);
  std::map<std::pair<int, int>, std::vector<std::pair<int, double>>> gpu_terms;  // (node, gpu)
  // current instances per (node, degree), in id order: the l-th keeps slot l if preserved
  std::map<std::pair<int, int>, std::vector<const Placement*>> cur;
  {
    std::vector<const Placement*> sorted;
    for (const Placement& p : in.current) sorted.push_back(&p);
    std::sort(sorted.begin(), sorted.end(), [](const Placement* a, const Placement* b) { return a->id < b->id; });
    for (const Placement* p : sorted) cur[{p->node, p->tp}].push_back(p);
  }
  std::map<int, std::vector<std::pair<int, double>>> count_terms;
  for (int n = 0; n < nn; ++n) {
    const int G = in.gpus_per_node[n];
    for (int d : degrees) {
      const int L = G / d;
      const int ncur = static_cast<int>(cur[{n, d}].size());
      for (int l = 0; l < L; ++l) {
        Slot s{n, d, l, -1, {}};
        const std::string tag = std::to_string(n) + "_" + std::to_string(d) + "_" + std::to_string(l);
        s.u = m.AddCol("u_" + tag, 0, 1, true);
        count_terms[d].emplace_back(s.u, 1.0);
        std::vector<std::pair<int, double>> size_terms{{s.u, -static_cast<double>(d)}};
        for (int g = 0; g < G; ++g) {
          const int a = m.AddCol("a_" + tag + "_" + std::to_string(g), 0, 1, true);
          s.a.push_back(a);
          size_terms.emplace_back(a, 1.0);
          gpu_terms[{n, g}].emplace_back(a, 1.0);
        }
        m.AddRow("size_" + tag, 0, 0, size_terms);
        // Symmetry: free slots (beyond those of current instances) are used in order.
        if (l > ncur) m.AddRow("order_" + tag, -kInf, 0, {{s.u, 1.0}, {slots.back().u, -1.0}});
        slot_of[{n, d, l}] = static_cast<int>(slots.size());
        slots.push_back(std::move(s));
      }
    }
  }
  for (int d : degrees) {
    const int want = in.target.at(d);
    if (count_terms[d].empty()) return FailedPrecondition("no node can host a TP-" + std::to_string(d) + " instance");
    m.AddRow("count_" + std::to_string(d), want, want, count_terms[d]);
  }
  for (auto& [key, terms] : gpu_terms) m.AddRow("gpu", -kInf, 1, terms);
  std::vector<std::pair<const Placement*, int>> pres;  // (instance, m column)
  for (const auto& [key, list] : cur) {
    const auto [n, d] = key;
    if (std::find(degrees.begin(), degrees.end(), d) == degrees.end()) continue;
    for (int l = 0; l < static_cast<int>(list.size()); ++l) {
      const Slot& s = slots[slot_of.at({n, d, l})];
      const int mc = m.AddCol("m_" + std::to_string(list[l]->id), 0, 1, true, 1.0);
      pres.emplace_back(list[l], mc);
      m.AddRow("keep_slot", -kInf, 0, {{mc, 1.0}, {s.u, -1.0}});
      for (int g : list[l]->gpus) m.AddRow("keep_gpu", -kInf, 0, {{mc, 1.0}, {s.a[g], -1.0}});
    }
  }
  ASSIGN_OR_RETURN(MipResult res, SolveMip(m, options));
  Stage2Result r;
  r.status = res.status;
  r.detail = res.detail;
  r.nodes = res.nodes;
  if (!res.has_solution())
    return FailedPrecondition(std::string("stage 2 found no assignment: ") + MipStatusName(res.status) + " (" + res.detail + ")");
  const std::vector<double>& x = res.x;
  std::set<int> kept_ids;
  std::set<int> kept_slots;
  for (const auto& [p, mc] : pres)
    if (x[mc] > 0.5) {
      kept_ids.insert(p->id);
      r.kept.push_back(*p);
    }
  for (const auto& [key, list] : cur) {
    const auto [n, d] = key;
    for (int l = 0; l < static_cast<int>(list.size()); ++l)
      if (kept_ids.count(list[l]->id) && slot_of.count({n, d, l})) kept_slots.insert(slot_of.at({n, d, l}));
  }
  for (const Placement& p : in.current)
    if (!kept_ids.count(p.id)) r.terminated.push_back(p);
  for (int i = 0; i < static_cast<int>(slots.size()); ++i) {
    const Slot& s = slots[i];
    if (x[s.u] < 0.5 || kept_slots.count(i)) continue;
    Placement p;
    p.node = s.node;
    p.tp = s.d;
    for (int g = 0; g < static_cast<int>(s.a.size()); ++g)
      if (x[s.a[g]] > 0.5) p.gpus.push_back(g);
    r.launched.push_back(std::move(p));
  }
  std::sort(r.kept.begin(), r.kept.end(), [](const Placement& a, const Placement& b) { return a.id < b.id; });
  r.steps = OrderSteps(r.launched, r.terminated);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RETURN_IF_ERROR(CheckStage2(in, r).WithContext("stage 2 produced an invalid plan (a bug)"));
  return r;
}

int BruteForceMaxKept(const Stage2Inputs& in) {
  std::vector<int> degrees, want;
  for (const auto& [d, n] : in.target)
    if (n > 0) {
      degrees.push_back(d);
      want.push_back(n);
    }
  const int nn = static_cast<int>(in.gpus_per_node.size());
  std::map<std::pair<int, int>, int> cur;
  for (const Placement& p : in.current) ++cur[{p.node, p.tp}];
  std::map<std::pair<int, std::vector<int>>, int> memo;
  const int kNone = -1000000;
  std::function<int(int, std::vector<int>&)> rec = [&](int n, std::vector<int>& left) -> int {
    if (n == nn) {
      for (int v : left)
        if (v != 0) return kNone;
      return 0;
    }
    auto key = std::make_pair(n, left);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    int best = kNone;
    std::vector<int> c(degrees.size(), 0);
    std::function<void(size_t, int)> pick = [&](size_t i, int gpus) {
      if (i == degrees.size()) {
        int kept = 0;
        for (size_t j = 0; j < degrees.size(); ++j) {
          left[j] -= c[j];
          auto it = cur.find({n, degrees[j]});
          kept += std::min(c[j], it == cur.end() ? 0 : it->second);
        }
        const int rest = rec(n + 1, left);
        if (rest != kNone) best = std::max(best, kept + rest);
        for (size_t j = 0; j < degrees.size(); ++j) left[j] += c[j];
        return;
      }
      for (int k = 0; k * degrees[i] <= gpus && k <= left[i]; ++k) {
        c[i] = k;
        pick(i + 1, gpus - k * degrees[i]);
      }
      c[i] = 0;
    };
    pick(0, in.gpus_per_node[n]);
    memo[key] = best;
    return best;
  };
  const int r = rec(0, want);
  return r == kNone ? -1 : r;
}

Status CheckStage2(const Stage2Inputs& in, const Stage2Result& r) {
  std::map<int, int> count;
  std::set<std::pair<int, int>> used;
  auto place = [&](const Placement& p, const char* what) -> Status {
    if (p.node < 0 || p.node >= static_cast<int>(in.gpus_per_node.size())) return Internal(std::string(what) + ": bad node");
    if (static_cast<int>(p.gpus.size()) != p.tp) return Internal(std::string(what) + ": GPU count != tp");
    for (int g : p.gpus) {
      if (g < 0 || g >= in.gpus_per_node[p.node]) return Internal(std::string(what) + ": GPU off its node");
      if (!used.insert({p.node, g}).second) return Internal(std::string(what) + ": GPU assigned twice");
    }
    ++count[p.tp];
    return Status::Ok();
  };
  std::map<int, const Placement*> by_id;
  for (const Placement& p : in.current) by_id[p.id] = &p;
  for (const Placement& p : r.kept) {
    auto it = by_id.find(p.id);
    if (it == by_id.end() || it->second->gpus != p.gpus || it->second->node != p.node || it->second->tp != p.tp)
      return Internal("a kept instance moved");
    RETURN_IF_ERROR(place(p, "kept"));
  }
  for (const Placement& p : r.launched) RETURN_IF_ERROR(place(p, "launched"));
  for (const auto& [d, n] : in.target)
    if (count[d] != n) return Internal("TP-" + std::to_string(d) + ": " + std::to_string(count[d]) + " instances, want " + std::to_string(n));
  for (const auto& [d, n] : count)
    if (!in.target.count(d) && n > 0) return Internal("instances of a degree not in the target");
  if (r.kept.size() + r.terminated.size() != in.current.size()) return Internal("kept + terminated != current");
  // Replay the steps.
  std::set<std::pair<int, int>> busy;
  for (const Placement& p : in.current)
    for (int g : p.gpus) busy.insert({p.node, g});
  std::set<int> term_done;
  size_t launches = 0;
  for (const PlanStep& s : r.steps) {
    if (s.kind == PlanStep::kTerminate) {
      if (!term_done.insert(s.instance.id).second) return Internal("an instance terminated twice");
      for (int g : s.instance.gpus) busy.erase({s.instance.node, g});
    } else {
      for (int g : s.instance.gpus)
        if (!busy.insert({s.instance.node, g}).second) return Internal("a launch onto a GPU still in use");
      ++launches;
    }
  }
  if (launches != r.launched.size() || term_done.size() != r.terminated.size()) return Internal("steps do not cover the plan");
  return Status::Ok();
}

}  // namespace tediserve::plan
