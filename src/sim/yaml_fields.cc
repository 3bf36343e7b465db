#include "sim/yaml_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/input.h"

namespace tediserve::sim {
namespace {

std::string FormatDouble(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// The node's scalar as a double; false when it is not one (or not finite).
bool ScalarDouble(const YAML::Node& node, double* out) {
  if (!node.IsScalar()) return false;
  double v = 0;
  try {
    if (!YAML::convert<double>::decode(node, v)) return false;
  } catch (const YAML::Exception&) {
    return false;
  }
  *out = v;
  return true;
}

bool ScalarInt(const YAML::Node& node, int64_t* out) {
  if (!node.IsScalar()) return false;
  try {
    return YAML::convert<int64_t>::decode(node, *out);
  } catch (const YAML::Exception&) {
    return false;
  }
}

Status Missing(const std::string& field) { return InvalidArgument(field + ": missing"); }

}  // namespace

std::string FieldPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string DescribeYaml(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  std::string s = SanitizeUtf8(node.Scalar());
  if (s.size() > 60) s = SanitizeUtf8(s.substr(0, 60)) + "...";
  return "\"" + s + "\"";
}

YAML::Node Field(const YAML::Node& map, const std::string& key) {
  if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  try {
    return map[key];
  } catch (const YAML::Exception&) {
    return YAML::Node(YAML::NodeType::Undefined);
  }
}

bool HasField(const YAML::Node& map, const std::string& key) {
  const YAML::Node v = Field(map, key);
  return v.IsDefined() && !v.IsNull();
}

Status ExpectMap(const YAML::Node& node, const std::string& path) {
  if (!node.IsDefined()) return Missing(path);
  if (!node.IsMap()) return InvalidArgument(path + ": expected a map, got " + DescribeYaml(node));
  return Status::Ok();
}

Status CheckKeys(const YAML::Node& map, const std::string& path,
                 std::initializer_list<const char*> allowed, const std::string& what) {
  return CheckKeys(map, path, std::vector<std::string>(allowed.begin(), allowed.end()), what);
}

Status CheckKeys(const YAML::Node& map, const std::string& path, const std::vector<std::string>& allowed,
                 const std::string& what) {
  RETURN_IF_ERROR(ExpectMap(map, path.empty() ? "the config" : path));
  std::string unknown;
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : DescribeYaml(kv.first);
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      unknown += (unknown.empty() ? "\"" : ", \"") + SanitizeUtf8(key) + "\"";
    }
  }
  if (unknown.empty()) return Status::Ok();
  std::string expected;
  for (const std::string& a : allowed) expected += (expected.empty() ? "" : ", ") + a;
  return InvalidArgument((path.empty() ? std::string("the config") : path) + ": unknown key " +
                         unknown + " (allowed" + what + ": " + expected + ")");
}

StatusOr<double> GetDouble(const YAML::Node& map, const std::string& path, const std::string& key,
                           double lo, double hi) {
  const YAML::Node node = Field(map, key);
  const std::string field = FieldPath(path, key);
  if (!node.IsDefined() || node.IsNull()) return Missing(field);
  double v = 0;
  if (!ScalarDouble(node, &v)) {
    return InvalidArgument(field + ": expected a number, got " + DescribeYaml(node));
  }
  if (!std::isfinite(v)) return InvalidArgument(field + ": must be finite, got " + DescribeYaml(node));
  if (v < lo || v > hi) {
    return InvalidArgument(field + ": must be in [" + FormatDouble(lo) + ", " + FormatDouble(hi) +
                           "], got " + FormatDouble(v));
  }
  return v;
}

StatusOr<double> GetPositive(const YAML::Node& map, const std::string& path,
                             const std::string& key, double hi) {
  ASSIGN_OR_RETURN(const double v, GetDouble(map, path, key));
  const std::string field = FieldPath(path, key);
  if (!(v > 0)) return InvalidArgument(field + ": must be > 0, got " + FormatDouble(v));
  if (v > hi) {
    return InvalidArgument(field + ": must be <= " + FormatDouble(hi) + ", got " +
                           FormatDouble(v));
  }
  return v;
}

StatusOr<int64_t> GetInt(const YAML::Node& map, const std::string& path, const std::string& key,
                         int64_t lo, int64_t hi) {
  const YAML::Node node = Field(map, key);
  const std::string field = FieldPath(path, key);
  if (!node.IsDefined() || node.IsNull()) return Missing(field);
  int64_t v = 0;
  if (!ScalarInt(node, &v)) {
    return InvalidArgument(field + ": expected an integer, got " + DescribeYaml(node));
  }
  if (v < lo) {
    return InvalidArgument(field + ": must be >= " + std::to_string(lo) + ", got " +
                           std::to_string(v));
  }
  if (v > hi) {
    return InvalidArgument(field + ": must be <= " + std::to_string(hi) + ", got " +
                           std::to_string(v));
  }
  return v;
}

StatusOr<std::string> GetString(const YAML::Node& map, const std::string& path,
                                const std::string& key) {
  const YAML::Node node = Field(map, key);
  const std::string field = FieldPath(path, key);
  if (!node.IsDefined() || node.IsNull()) return Missing(field);
  if (!node.IsScalar()) {
    return InvalidArgument(field + ": expected a string, got " + DescribeYaml(node));
  }
  if (!IsValidUtf8(node.Scalar())) {
    return InvalidArgument(field + ": not valid UTF-8: " + DescribeYaml(node));
  }
  return node.Scalar();
}

StatusOr<double> GetDoubleOr(const YAML::Node& map, const std::string& path,
                             const std::string& key, double fallback, double lo, double hi) {
  if (!HasField(map, key)) return fallback;
  return GetDouble(map, path, key, lo, hi);
}

StatusOr<double> GetPositiveOr(const YAML::Node& map, const std::string& path,
                               const std::string& key, double fallback, double hi) {
  if (!HasField(map, key)) return fallback;
  return GetPositive(map, path, key, hi);
}

StatusOr<int> GetIntOr(const YAML::Node& map, const std::string& path, const std::string& key,
                       int fallback, int lo, int hi) {
  if (!HasField(map, key)) return fallback;
  ASSIGN_OR_RETURN(const int64_t v, GetInt(map, path, key, lo, hi));
  return static_cast<int>(v);
}

StatusOr<std::string> GetStringOr(const YAML::Node& map, const std::string& path,
                                  const std::string& key, const std::string& fallback) {
  if (!HasField(map, key)) return fallback;
  return GetString(map, path, key);
}

StatusOr<bool> GetBoolOr(const YAML::Node& map, const std::string& path, const std::string& key,
                         bool fallback) {
  if (!HasField(map, key)) return fallback;
  const YAML::Node node = Field(map, key);
  bool v = false;
  bool ok = node.IsScalar();
  if (ok) {
    try {
      ok = YAML::convert<bool>::decode(node, v);
    } catch (const YAML::Exception&) {
      ok = false;
    }
  }
  if (!ok) {
    return InvalidArgument(FieldPath(path, key) + ": expected true or false, got " +
                           DescribeYaml(node));
  }
  return v;
}

StatusOr<std::vector<double>> GetDoubleList(const YAML::Node& map, const std::string& path,
                                            const std::string& key, double lo, double hi,
                                            size_t min_count, size_t max_count) {
  const YAML::Node node = Field(map, key);
  const std::string field = FieldPath(path, key);
  if (!node.IsDefined() || node.IsNull()) return Missing(field);
  if (!node.IsSequence()) {
    return InvalidArgument(field + ": expected a list of numbers, got " + DescribeYaml(node));
  }
  if (node.size() < min_count || node.size() > max_count) {
    return InvalidArgument(field + ": expected " + std::to_string(min_count) + " to " +
                           std::to_string(max_count) + " numbers, got " +
                           std::to_string(node.size()));
  }
  std::vector<double> out;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item = field + "[" + std::to_string(i) + "]";
    double v = 0;
    if (!ScalarDouble(node[i], &v) || !std::isfinite(v)) {
      return InvalidArgument(item + ": expected a finite number, got " + DescribeYaml(node[i]));
    }
    if (v < lo || v > hi) {
      return InvalidArgument(item + ": must be in [" + FormatDouble(lo) + ", " +
                             FormatDouble(hi) + "], got " + FormatDouble(v));
    }
    out.push_back(v);
  }
  return out;
}

StatusOr<YAML::Node> ParseYamlMap(const std::string& text, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(where + ":" + std::to_string(e.mark.line + 1) + ": " +
                           SanitizeUtf8(e.msg));
  }
  if (!root.IsMap()) return InvalidArgument(where + ": the config must be a mapping");
  return root;
}

StatusOr<YAML::Node> LoadYamlFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "config", 64u << 20));
  return ParseYamlMap(text, SanitizeUtf8(path));
}

}  // namespace tediserve::sim
