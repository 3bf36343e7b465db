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

constexpr std::string_view kTraceColumns[] = {"arrival_s", "prompt_len", "output_len", "slo_s",
                                              "priority"};

std::string_view Trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// Shortest text that parses back to the same double (std::to_chars guarantees it).
std::string FormatDouble(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

bool ParseDouble(std::string_view s, double* out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

bool ParseInt(std::string_view s, int* out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

std::string Where(const std::string& path, int line) {
  return path + ":" + std::to_string(line) + ": ";
}

// The checks every request of a trace must pass, however it was read; `where` is the
// message prefix (path:line: ).
Status CheckRequest(const RequestSpec& r, const std::string& where) {
  if (!std::isfinite(r.arrival) || r.arrival < 0) {
    return InvalidArgument(where + "arrival_s: must be finite and >= 0, got " +
                           FormatDouble(r.arrival));
  }
  if (r.prompt_len <= 0) {
    return InvalidArgument(where + "prompt_len: must be > 0, got " +
                           std::to_string(r.prompt_len));
  }
  if (r.output_len <= 0) {
    return InvalidArgument(where + "output_len: must be > 0, got " +
                           std::to_string(r.output_len));
  }
  if (!std::isfinite(r.slo) || r.slo < 0) {
    return InvalidArgument(where + "slo_s: must be finite and >= 0 (0 = the run's SLO), got " +
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

// Reads `key` of a JSONL object as a double (required) into *out.
Status JsonDouble(const nlohmann::json& obj, const char* key, bool required, double* out,
                  const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || (!required && it->is_null())) {
    if (required) return InvalidArgument(where + "missing key \"" + key + "\"");
    return Status::Ok();
  }
  if (!it->is_number()) {
    return InvalidArgument(where + key + ": expected a number, got " + it->dump());
  }
  *out = it->get<double>();
  return Status::Ok();
}

Status JsonInt(const nlohmann::json& obj, const char* key, bool required, int* out,
               const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || (!required && it->is_null())) {
    if (required) return InvalidArgument(where + "missing key \"" + key + "\"");
    return Status::Ok();
  }
  if (!it->is_number_integer()) {
    return InvalidArgument(where + key + ": expected an integer, got " + it->dump());
  }
  // is_number_integer covers both signed and unsigned storage.
  const bool fits = it->is_number_unsigned()
                        ? it->get<uint64_t>() <= uint64_t{std::numeric_limits<int>::max()}
                        : it->get<int64_t>() >= std::numeric_limits<int>::min() &&
                              it->get<int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) return InvalidArgument(where + key + ": out of range: " + it->dump());
  *out = static_cast<int>(it->get<int64_t>());
  return Status::Ok();
}

StatusOr<std::vector<RequestSpec>> ReadJsonlTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open trace");
  std::vector<RequestSpec> requests;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (Trim(text).empty()) continue;
    const std::string where = Where(path, line);
    // allow_exceptions = false: a parse error yields a discarded value instead of a throw.
    const nlohmann::json obj = nlohmann::json::parse(text, nullptr, false);
    if (obj.is_discarded()) return InvalidArgument(where + "not valid JSON");
    if (!obj.is_object()) return InvalidArgument(where + "expected a JSON object");
    for (const auto& [key, value] : obj.items()) {
      if (std::find(std::begin(kTraceColumns), std::end(kTraceColumns), key) ==
          std::end(kTraceColumns)) {
        return InvalidArgument(where + "unknown key \"" + key +
                               "\" (expected arrival_s, prompt_len, output_len, slo_s, "
                               "priority)");
      }
    }
    RequestSpec r;
    RETURN_IF_ERROR(JsonDouble(obj, "arrival_s", true, &r.arrival, where));
    RETURN_IF_ERROR(JsonInt(obj, "prompt_len", true, &r.prompt_len, where));
    RETURN_IF_ERROR(JsonInt(obj, "output_len", true, &r.output_len, where));
    RETURN_IF_ERROR(JsonDouble(obj, "slo_s", false, &r.slo, where));
    RETURN_IF_ERROR(JsonInt(obj, "priority", false, &r.priority, where));
    RETURN_IF_ERROR(CheckRequest(r, where));
    requests.push_back(r);
  }
  if (in.bad()) return DataLoss(path + ": read error");
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

int CsvTable::Column(std::string_view name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

StatusOr<int> CsvTable::RequireColumn(std::string_view name) const {
  const int i = Column(name);
  if (i < 0) return InvalidArgument(path + ": missing column \"" + std::string(name) + "\"");
  return i;
}

StatusOr<CsvTable> ReadCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open");
  CsvTable table;
  table.path = path;
  std::string text;
  bool have_header = false;
  for (int line = 1; std::getline(in, text); ++line) {
    const std::string_view s = Trim(text);
    if (s.empty() || s.front() == '#') continue;
    std::vector<std::string> cells;
    size_t start = 0;
    while (true) {
      const size_t comma = s.find(',', start);
      cells.emplace_back(Trim(s.substr(start, comma == std::string_view::npos
                                                  ? std::string_view::npos
                                                  : comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (!have_header) {
      std::set<std::string> seen;
      for (const std::string& c : cells) {
        if (c.empty()) return InvalidArgument(Where(path, line) + "empty column name in header");
        if (!seen.insert(c).second) {
          return InvalidArgument(Where(path, line) + "duplicate column \"" + c + "\"");
        }
      }
      table.columns = std::move(cells);
      have_header = true;
      continue;
    }
    if (cells.size() != table.columns.size()) {
      return InvalidArgument(Where(path, line) + "expected " +
                             std::to_string(table.columns.size()) + " fields, got " +
                             std::to_string(cells.size()));
    }
    table.rows.push_back({line, std::move(cells)});
  }
  if (in.bad()) return DataLoss(path + ": read error");
  if (!have_header) return InvalidArgument(path + ": empty file (no header line)");
  return table;
}

StatusOr<double> CsvDouble(const CsvTable& table, const CsvTable::Row& row, int column) {
  double v = 0;
  if (!ParseDouble(row.cells[column], &v)) {
    return InvalidArgument(Where(table.path, row.line) + "column " + table.columns[column] +
                           ": not a number: \"" + row.cells[column] + "\"");
  }
  return v;
}

StatusOr<int> CsvInt(const CsvTable& table, const CsvTable::Row& row, int column) {
  int v = 0;
  if (!ParseInt(row.cells[column], &v)) {
    return InvalidArgument(Where(table.path, row.line) + "column " + table.columns[column] +
                           ": not an integer: \"" + row.cells[column] + "\"");
  }
  return v;
}

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
