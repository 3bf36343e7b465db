#include "predictor/step_log.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/input.h"

namespace tediserve::predictor {
namespace {

using json = nlohmann::json;

json SummaryJson(const policy::ConfidenceSummary& s) {
  return {s.count, s.min, s.q1, s.median, s.q3, s.mean};
}

// [count, min, q1, median, q3, mean], values in [0, 1].
bool ParseSummary(const json& j, policy::ConfidenceSummary* s) {
  if (!j.is_array() || j.size() != 6 || !j[0].is_number_integer()) return false;
  if (!JsonInt(j[0], "count", 0, 1 << 24).ok()) return false;
  for (size_t i = 1; i < 6; ++i)
    if (!j[i].is_number() || j[i].get<double>() < 0 || j[i].get<double>() > 1) return false;
  s->count = j[0].get<int>();
  s->min = j[1].get<float>();
  s->q1 = j[2].get<float>();
  s->median = j[3].get<float>();
  s->q3 = j[4].get<float>();
  s->mean = j[5].get<float>();
  return s->count >= 0;
}

}  // namespace

std::string StepLogRowJson(const StepLogRow& row) {
  const policy::RequestState& r = row.state;
  json j = {{"request", r.spec.id},
            {"problem", row.problem},
            {"threshold", row.threshold},
            {"prompt_len", r.spec.prompt_len},
            {"output_len", r.spec.output_len},
            {"block_size", r.block_size},
            {"steps", r.steps},
            {"block", r.block},
            {"steps_in_block", r.steps_in_block},
            {"unmasked", r.unmasked},
            {"unmasked_in_block", r.unmasked_in_block},
            {"conf_block", SummaryJson(r.features.block)},
            {"conf_output", SummaryJson(r.features.output)},
            {"block_above", r.features.block_above},
            {"remaining", row.remaining}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<std::vector<StepLogRow>> ReadStepLog(const std::string& path) {
  std::vector<StepLogRow> rows;
  RETURN_IF_ERROR(ForEachJsonLine(path, "step log", [&](int, const json& j) -> Status {
    const std::string where;
    if (!j.is_object()) return InvalidArgument(where + "not a JSON object");
    auto integer = [&](const char* key, int lo, int* out) -> Status {
      if (!j.contains(key) || !j[key].is_number_integer()) return InvalidArgument(where + "missing integer field \"" + key + "\"");
      ASSIGN_OR_RETURN(const int64_t v, JsonInt(j[key], std::string("field \"") + key + "\" out of range", lo, 1 << 24));
      *out = static_cast<int>(v);
      return Status::Ok();
    };
    StepLogRow row;
    policy::RequestState& r = row.state;
    if (!j.contains("request") || !j["request"].is_number_integer())
      return InvalidArgument(where + "missing integer field \"request\"");
    r.spec.id = j["request"].get<int64_t>();
    row.problem = r.spec.id;
    if (j.contains("problem")) {
      if (!j["problem"].is_number_integer()) return InvalidArgument(where + "field \"problem\" must be an integer");
      row.problem = j["problem"].get<int64_t>();
    }
    RETURN_IF_ERROR(integer("prompt_len", 0, &r.spec.prompt_len));
    RETURN_IF_ERROR(integer("output_len", 1, &r.spec.output_len));
    RETURN_IF_ERROR(integer("block_size", 1, &r.block_size));
    RETURN_IF_ERROR(integer("steps", 0, &r.steps));
    RETURN_IF_ERROR(integer("block", 0, &r.block));
    RETURN_IF_ERROR(integer("steps_in_block", 0, &r.steps_in_block));
    RETURN_IF_ERROR(integer("unmasked", 0, &r.unmasked));
    RETURN_IF_ERROR(integer("unmasked_in_block", 0, &r.unmasked_in_block));
    RETURN_IF_ERROR(integer("remaining", 1, &row.remaining));
    if (!j.contains("threshold") || !j["threshold"].is_number() || !(j["threshold"].get<double>() > 0) ||
        j["threshold"].get<double>() > 1)
      return InvalidArgument(where + "field \"threshold\" must be a number in (0, 1]");
    row.threshold = j["threshold"].get<double>();
    r.threshold = row.threshold;
    r.num_blocks = (r.spec.output_len + r.block_size - 1) / r.block_size;
    if (r.block >= r.num_blocks || r.unmasked > r.spec.output_len || r.unmasked_in_block > r.block_size)
      return InvalidArgument(where + "progress fields past the request's length");
    if (!j.contains("conf_block") || !ParseSummary(j["conf_block"], &r.features.block) ||
        !j.contains("conf_output") || !ParseSummary(j["conf_output"], &r.features.output))
      return InvalidArgument(where + "conf_block / conf_output must be [count, min, q1, median, q3, mean]");
    const json& above = j.contains("block_above") ? j["block_above"] : json();
    if (!above.is_array() || above.size() != r.features.block_above.size())
      return InvalidArgument(where + "block_above must list " + std::to_string(r.features.block_above.size()) + " counts");
    for (size_t k = 0; k < above.size(); ++k) {
      auto count = JsonInt(above[k], "block_above must hold counts >= 0", 0, 1 << 24);
      if (!count.ok()) return count.status();
      r.features.block_above[k] = static_cast<int>(*count);
    }
    rows.push_back(std::move(row));
    return Status::Ok();
  }));
  if (rows.empty()) return InvalidArgument(path + ": no rows");
  return rows;
}

Status WriteStepLog(const std::string& path, const std::vector<StepLogRow>& rows) {
  std::ofstream f(path);
  if (!f) return IoError("cannot write step log " + path);
  for (const StepLogRow& r : rows) f << StepLogRowJson(r) << '\n';
  f.close();
  if (!f) return DataLoss("writing step log " + path + " failed");
  return Status::Ok();
}

}  // namespace tediserve::predictor
