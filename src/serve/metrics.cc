#include "serve/metrics.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace tediserve::serve {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  std::ostringstream o;
  o.precision(12);
  o << v;
  return o.str();
}

// Joins a rendered label set "{a="x"}" with one more label.
std::string WithLabel(const std::string& set, const std::string& k, const std::string& v) {
  const std::string add = k + "=\"" + v + "\"";
  if (set.empty()) return "{" + add + "}";
  return set.substr(0, set.size() - 1) + "," + add + "}";
}

}  // namespace

std::string Metrics::Render(const Labels& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); ++i)
    s += (i ? "," : "") + labels[i].first + "=\"" + Escape(labels[i].second) + "\"";
  return s + "}";
}

void Metrics::Counter(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> l(mu_);
  families_[name] = Family{Type::kCounter, help, {}, {}, {}};
}

void Metrics::Gauge(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> l(mu_);
  families_[name] = Family{Type::kGauge, help, {}, {}, {}};
}

void Metrics::Histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::lock_guard<std::mutex> l(mu_);
  families_[name] = Family{Type::kHistogram, help, std::move(bounds), {}, {}};
}

Metrics::Family* Metrics::Find(const std::string& name) {
  auto it = families_.find(name);
  // Using an undeclared family is a programming error, not bad input.
  if (it == families_.end()) throw std::logic_error("undeclared metric " + name);
  return &it->second;
}

void Metrics::Add(const std::string& name, double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Find(name)->values[Render(labels)] += v;
}

void Metrics::Set(const std::string& name, double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Find(name)->values[Render(labels)] = v;
}

void Metrics::Observe(const std::string& name, double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Family* f = Find(name);
  Hist& h = f->hists[Render(labels)];
  if (h.counts.empty()) h.counts.assign(f->bounds.size(), 0);
  for (size_t i = 0; i < f->bounds.size(); ++i)
    if (v <= f->bounds[i]) {
      h.counts[i] += 1;
      break;
    }
  h.sum += v;
  h.count += 1;
}

double Metrics::Value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto jt = it->second.values.find(Render(labels));
  return jt == it->second.values.end() ? 0 : jt->second;
}

std::string Metrics::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::ostringstream o;
  for (const auto& [name, f] : families_) {
    o << "# HELP " << name << " " << f.help << "\n";
    o << "# TYPE " << name << " "
      << (f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram") << "\n";
    if (f.type != Type::kHistogram) {
      if (f.values.empty()) o << name << " 0\n";
      for (const auto& [labels, v] : f.values) o << name << labels << " " << Num(v) << "\n";
      continue;
    }
    auto hists = f.hists;
    if (hists.empty()) hists[""] = Hist{std::vector<double>(f.bounds.size(), 0), 0, 0};
    for (const auto& [labels, h] : hists) {
      double cum = 0;
      for (size_t i = 0; i < f.bounds.size(); ++i) {
        cum += h.counts[i];
        o << name << "_bucket" << WithLabel(labels, "le", Num(f.bounds[i])) << " " << Num(cum) << "\n";
      }
      o << name << "_bucket" << WithLabel(labels, "le", "+Inf") << " " << Num(h.count) << "\n";
      o << name << "_sum" << labels << " " << Num(h.sum) << "\n";
      o << name << "_count" << labels << " " << Num(h.count) << "\n";
    }
  }
  return o.str();
}

}  // namespace tediserve::serve
