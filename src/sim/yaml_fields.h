// The one layer that reads fields of TeDiServe's YAML files (experiment configs and their
// workload sections). Every error starts with the field's dotted path ("policy.tick_s: ...")
// and shows the offending value, bounded and with invalid UTF-8 replaced; a null value counts
// as absent; strings must be valid UTF-8 (they end up in JSON results). yaml-cpp exceptions
// never leave these functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/status.h"

namespace tediserve::sim {

// "path.key", or "key" at the root (path "").
std::string FieldPath(const std::string& path, const std::string& key);
// A short rendering of a node for messages: "null", "a list", "a map" or "\"scalar\"".
std::string DescribeYaml(const YAML::Node& node);

// Whether `map` has `key` with a non-null value (false when map is not a mapping).
bool HasField(const YAML::Node& map, const std::string& key);
// map[key] for a mapping (an undefined node otherwise); never throws.
YAML::Node Field(const YAML::Node& map, const std::string& key);

Status ExpectMap(const YAML::Node& node, const std::string& path);
// Unknown keys are errors: a misspelt optional key would otherwise be ignored silently.
// `what` is added after "allowed" (e.g. " for type poisson").
Status CheckKeys(const YAML::Node& map, const std::string& path,
                 std::initializer_list<const char*> allowed, const std::string& what = "");
Status CheckKeys(const YAML::Node& map, const std::string& path, const std::vector<std::string>& allowed,
                 const std::string& what = "");

// Required fields ("<path>.<key>: missing" when absent).
StatusOr<double> GetDouble(const YAML::Node& map, const std::string& path, const std::string& key,
                           double lo = -1e300, double hi = 1e300);
StatusOr<double> GetPositive(const YAML::Node& map, const std::string& path,
                             const std::string& key, double hi = 1e300);
StatusOr<int64_t> GetInt(const YAML::Node& map, const std::string& path, const std::string& key,
                         int64_t lo, int64_t hi);
StatusOr<std::string> GetString(const YAML::Node& map, const std::string& path,
                                const std::string& key);

// Optional fields: `fallback` when absent or null; the range applies to given values.
StatusOr<double> GetDoubleOr(const YAML::Node& map, const std::string& path,
                             const std::string& key, double fallback, double lo, double hi);
StatusOr<double> GetPositiveOr(const YAML::Node& map, const std::string& path,
                               const std::string& key, double fallback, double hi = 1e300);
StatusOr<int> GetIntOr(const YAML::Node& map, const std::string& path, const std::string& key,
                       int fallback, int lo, int hi);
StatusOr<std::string> GetStringOr(const YAML::Node& map, const std::string& path,
                                  const std::string& key, const std::string& fallback);
StatusOr<bool> GetBoolOr(const YAML::Node& map, const std::string& path, const std::string& key,
                         bool fallback);

// A list of numbers in [lo, hi] with between min_count and max_count entries.
StatusOr<std::vector<double>> GetDoubleList(const YAML::Node& map, const std::string& path,
                                            const std::string& key, double lo, double hi,
                                            size_t min_count, size_t max_count);

// Parses YAML text (a config file's contents; `where` names it in messages). The root must be
// a mapping. (yaml-cpp refuses nesting deeper than 2000 levels itself.)
StatusOr<YAML::Node> ParseYamlMap(const std::string& text, const std::string& where);
// Reads and parses a YAML file (regular file, bounded size).
StatusOr<YAML::Node> LoadYamlFile(const std::string& path);

}  // namespace tediserve::sim
