#include "sim/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>

namespace tediserve::sim {
namespace {

using policy::RequestSpec;

// Bounds on a trace: a year of arrivals, 1M-token prompts and outputs, 50M requests.
constexpr double kMaxTraceSeconds = 365.0 * 24 * 3600;
constexpr int kMaxTraceTokens = 1 << 20;
constexpr size_t kMaxTraceRequests = 50'000'000;

constexpr std::string_view kTraceColumns[] = {"arrival_s", "prompt_len", "output_len", "slo_s",
                                              "priority"};

// Shortest text that parses back to the same double (std::to_chars guarantees it).
std::string FormatDouble(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string Where(const std::string& path, int line) {
  return path + ":" + std::to_string(line) + ": ";
}

// The checks every request of a trace must pass, however it was read; `where` is the
// message prefix (path:line: ).
Status CheckRequest(const RequestSpec& r, const std::string& where) {
  if (!std::isfinite(r.arrival) || r.arrival < 0 || r.arrival > kMaxTraceSeconds) {
    return InvalidArgument(where + "arrival_s: must be finite and in [0, " +
                           FormatDouble(kMaxTraceSeconds) + "], got " + FormatDouble(r.arrival));
  }
  if (r.prompt_len <= 0 || r.prompt_len > kMaxTraceTokens) {
    return InvalidArgument(where + "prompt_len: must be > 0 and <= " +
                           std::to_string(kMaxTraceTokens) + ", got " +
                           std::to_string(r.prompt_len));
  }
  if (r.output_len <= 0 || r.output_len > kMaxTraceTokens) {
    return InvalidArgument(where + "output_len: must be > 0 and <= " +
                           std::to_string(kMaxTraceTokens) + ", got " +
                           std::to_string(r.output_len));
  }
  if (!std::isfinite(r.slo) || r.slo < 0 || r.slo > kMaxTraceSeconds) {
    return InvalidArgument(where + "slo_s: must be finite and in [0, " +
                           FormatDouble(kMaxTraceSeconds) + "] (0 = the run's SLO), got " +
                           FormatDouble(r.slo));
  }
  return Status::Ok();
}

StatusOr<std::vector<RequestSpec>> ReadCsvTrace(const std::string& path) {
  ASSIGN_OR_RETURN(CsvTable table, ReadCsv(path));
  for (const std::string& c : table.columns) {
    if (std::find(std::begin(kTraceColumns), std::end(kTraceColumns), c) ==
        std::end(kTraceColumns)) {
      return InvalidArgument(path + ":1: unknown column \"" + c +
                             "\" (expected arrival_s, prompt_len, output_len, slo_s, priority)");
    }
  }
  ASSIGN_OR_RETURN(const int arrival, table.RequireColumn("arrival_s"));
  ASSIGN_OR_RETURN(const int prompt, table.RequireColumn("prompt_len"));
  ASSIGN_OR_RETURN(const int output, table.RequireColumn("output_len"));
  const int slo = table.Column("slo_s");
  const int priority = table.Column("priority");

  if (table.rows.size() > kMaxTraceRequests) {
    return InvalidArgument(path + ": more than " + std::to_string(kMaxTraceRequests) + " requests");
  }
  std::vector<RequestSpec> requests;
  requests.reserve(table.rows.size());
  for (const CsvTable::Row& row : table.rows) {
    RequestSpec r;
    ASSIGN_OR_RETURN(r.arrival, CsvDouble(table, row, arrival));
    ASSIGN_OR_RETURN(r.prompt_len, CsvInt(table, row, prompt));
    ASSIGN_OR_RETURN(r.output_len, CsvInt(table, row, output));
    // An empty slo_s / priority cell means the default.
    if (slo >= 0 && !row.cells[slo].empty()) {
      ASSIGN_OR_RETURN(r.slo, CsvDouble(table, row, slo));
    }
    if (priority >= 0 && !row.cells[priority].empty()) {
      ASSIGN_OR_RETURN(r.priority, CsvInt(table, row, priority));
    }
    RETURN_IF_ERROR(CheckRequest(r, Where(path, row.line)));
    requests.push_back(r);
  }
  return requests;
}

// Reads `key` of a JSONL object into *out; absent (or null when optional) keeps *out.
Status JsonField(const nlohmann::json& obj, const char* key, bool required, double* out) {
  const auto it = obj.find(key);
  if (it == obj.end() || (!required && it->is_null())) {
    if (required) return InvalidArgument(std::string("missing key \"") + key + "\"");
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(*out, JsonNumber(*it, key, -1e308, 1e308));
  return Status::Ok();
}

Status JsonField(const nlohmann::json& obj, const char* key, bool required, int* out) {
  const auto it = obj.find(key);
  if (it == obj.end() || (!required && it->is_null())) {
    if (required) return InvalidArgument(std::string("missing key \"") + key + "\"");
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(const int64_t v, JsonInt(*it, key, INT32_MIN, INT32_MAX));
  *out = static_cast<int>(v);
  return Status::Ok();
}

StatusOr<std::vector<RequestSpec>> ReadJsonlTrace(const std::string& path) {
  std::vector<RequestSpec> requests;
  RETURN_IF_ERROR(ForEachJsonLine(path, "trace", [&](int, const nlohmann::json& obj) -> Status {
    if (!obj.is_object()) return InvalidArgument("expected a JSON object");
    for (const auto& [key, value] : obj.items()) {
      if (std::find(std::begin(kTraceColumns), std::end(kTraceColumns), key) ==
          std::end(kTraceColumns)) {
        return InvalidArgument("unknown key \"" + SanitizeUtf8(key.substr(0, 60)) +
                               "\" (expected arrival_s, prompt_len, output_len, slo_s, "
                               "priority)");
      }
    }
    RequestSpec r;
    RETURN_IF_ERROR(JsonField(obj, "arrival_s", true, &r.arrival));
    RETURN_IF_ERROR(JsonField(obj, "prompt_len", true, &r.prompt_len));
    RETURN_IF_ERROR(JsonField(obj, "output_len", true, &r.output_len));
    RETURN_IF_ERROR(JsonField(obj, "slo_s", false, &r.slo));
    RETURN_IF_ERROR(JsonField(obj, "priority", false, &r.priority));
    RETURN_IF_ERROR(CheckRequest(r, ""));
    if (requests.size() >= kMaxTraceRequests) {
      return InvalidArgument("more than " + std::to_string(kMaxTraceRequests) + " requests");
    }
    requests.push_back(r);
    return Status::Ok();
  }));
  return requests;
}

enum class Format { kCsv, kJsonl, kUnknown };

Format FormatOf(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".csv") return Format::kCsv;
  if (ext == ".jsonl") return Format::kJsonl;
  return Format::kUnknown;
}

Status UnknownFormat(const std::string& path) {
  return InvalidArgument(path + ": unknown trace format (expected a .csv or .jsonl file)");
}

}  // namespace

StatusOr<std::vector<RequestSpec>> ReadTrace(const std::string& path) {
  StatusOr<std::vector<RequestSpec>> read = UnknownFormat(path);
  switch (FormatOf(path)) {
    case Format::kCsv: read = ReadCsvTrace(path); break;
    case Format::kJsonl: read = ReadJsonlTrace(path); break;
    case Format::kUnknown: break;
  }
  if (!read.ok()) return read.status();
  std::vector<RequestSpec> requests = std::move(read).value();
  if (requests.empty()) return InvalidArgument(path + ": the trace has no requests");
  std::stable_sort(
      requests.begin(), requests.end(),
      [](const RequestSpec& a, const RequestSpec& b) { return a.arrival < b.arrival; });
  for (size_t i = 0; i < requests.size(); ++i) requests[i].id = static_cast<int64_t>(i);
  return requests;
}

Status WriteTrace(const std::string& path, const std::vector<RequestSpec>& requests) {
  const Format format = FormatOf(path);
  if (format == Format::kUnknown) return UnknownFormat(path);
  // Refuse what ReadTrace would refuse, so every written trace reads back.
  for (size_t i = 0; i < requests.size(); ++i) {
    RETURN_IF_ERROR(CheckRequest(requests[i], "request " + std::to_string(i) + ": "));
  }
  std::ostringstream out;
  if (format == Format::kCsv) {
    out << "arrival_s,prompt_len,output_len,slo_s,priority\n";
    for (const RequestSpec& r : requests) {
      out << FormatDouble(r.arrival) << ',' << r.prompt_len << ',' << r.output_len << ','
          << FormatDouble(r.slo) << ',' << r.priority << '\n';
    }
  } else {
    // Written by hand: the numbers are finite, and to_chars' shortest form is valid JSON.
    for (const RequestSpec& r : requests) {
      out << "{\"arrival_s\":" << FormatDouble(r.arrival) << ",\"prompt_len\":" << r.prompt_len
          << ",\"output_len\":" << r.output_len << ",\"slo_s\":" << FormatDouble(r.slo)
          << ",\"priority\":" << r.priority << "}\n";
    }
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return FailedPrecondition(path + ": cannot open for writing");
  const std::string text = out.str();
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.close();
  if (!file) return DataLoss(path + ": write failed");
  return Status::Ok();
}

}  // namespace tediserve::sim
