// Prometheus metrics of the server (text exposition format 0.0.4), all named tediserve_*.
// Families are declared once with their type and help; samples are keyed by a label set.
// Thread-safe: the runtime's tasks update, HTTP threads render.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tediserve::serve {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  void Counter(const std::string& name, const std::string& help);
  void Gauge(const std::string& name, const std::string& help);
  void Histogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  void Add(const std::string& name, double v, const Labels& labels = {});  // counter or gauge
  void Set(const std::string& name, double v, const Labels& labels = {});  // gauge
  void Observe(const std::string& name, double v, const Labels& labels = {});  // histogram
  double Value(const std::string& name, const Labels& labels = {}) const;      // counter/gauge (tests)

  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Hist {
    std::vector<double> counts;  // per bound, not cumulative
    double sum = 0;
    double count = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, double> values;  // rendered label set -> value
    std::map<std::string, Hist> hists;
  };
  static std::string Render(const Labels& labels);
  Family* Find(const std::string& name);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

}  // namespace tediserve::serve
