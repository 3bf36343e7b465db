#include "common/input.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace tediserve {
namespace {

namespace fs = std::filesystem;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// Depth of the deepest array/object nesting, stopping early once it passes `limit`.
// Strings (with escapes) are skipped so brackets inside them do not count.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

Status CheckRegularFile(const std::string& path, const std::string& what,
                        std::uint64_t max_bytes) {
  const std::string where = what + " " + SanitizeUtf8(path);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return IoError(where + ": cannot open: " + ec.message());
    }
    return NotFound(where + ": no such file");
  }
  if (fs::is_directory(st)) return InvalidArgument(where + ": is a directory, expected a file");
  if (!fs::is_regular_file(st)) return InvalidArgument(where + ": not a regular file");
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return IoError(where + ": cannot read its size: " + ec.message());
  if (size > max_bytes) {
    return InvalidArgument(where + ": " + std::to_string(size) + " bytes, more than the " +
                           std::to_string(max_bytes) + " allowed");
  }
  return Status::Ok();
}

StatusOr<std::string> ReadFile(const std::string& path, const std::string& what,
                               std::uint64_t max_bytes) {
  RETURN_IF_ERROR(CheckRegularFile(path, what, max_bytes));
  const std::string where = what + " " + SanitizeUtf8(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(where + ": cannot open: " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_bytes) {
      return InvalidArgument(where + ": more than the " + std::to_string(max_bytes) +
                             " bytes allowed");
    }
  }
  if (in.bad()) return IoError(where + ": read failed");
  return text;
}

StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& where,
                                   int max_depth) {
  if (NestingDepth(text, max_depth) > max_depth) {
    return InvalidArgument(where + ": JSON nested deeper than " + std::to_string(max_depth) +
                           " levels");
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(where + ": not valid JSON (" + SanitizeUtf8(e.what()) + ")");
  }
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, const std::string& what,
                                      int max_depth) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, what));
  return ParseJson(text, what + " " + SanitizeUtf8(path), max_depth);
}

Status ForEachJsonLine(const std::string& path, const std::string& what,
                       const std::function<Status(int line, const nlohmann::json&)>& fn) {
  RETURN_IF_ERROR(CheckRegularFile(path, what));
  const std::string where = what + " " + SanitizeUtf8(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(where + ": cannot open: " + std::strerror(errno));
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    const std::string at = where + ":" + std::to_string(line);
    if (text.size() > kMaxLineBytes) {
      return InvalidArgument(at + ": line longer than " + std::to_string(kMaxLineBytes) +
                             " bytes");
    }
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    ASSIGN_OR_RETURN(const nlohmann::json value, ParseJson(text, at));
    RETURN_IF_ERROR(fn(line, value).WithContext(at));
  }
  if (in.bad()) return IoError(where + ": read failed");
  return Status::Ok();
}

int CsvTable::Column(std::string_view name) const {
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

StatusOr<int> CsvTable::RequireColumn(std::string_view name) const {
  const int i = Column(name);
  if (i < 0) return InvalidArgument(path + ": missing column \"" + std::string(name) + "\"");
  return i;
}

StatusOr<CsvTable> ParseCsv(std::string_view text, const std::string& path) {
  auto trim = [](std::string_view s) {
    const std::size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) return std::string_view();
    const std::size_t e = s.find_last_not_of(" \t\r");
    return s.substr(b, e - b + 1);
  };
  auto where = [&](int line) { return path + ":" + std::to_string(line) + ": "; };
  CsvTable table;
  table.path = path;
  bool have_header = false;
  std::size_t pos = 0;
  for (int line = 1; pos < text.size(); ++line) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view s = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (s.size() > kMaxLineBytes) {
      return InvalidArgument(where(line) + "line longer than " + std::to_string(kMaxLineBytes) +
                             " bytes");
    }
    if (s.empty() || s.front() == '#') continue;
    // Cells split on ','; a cell may be double-quoted ("" inside is a quote, commas are kept).
    std::vector<std::string> cells;
    std::string cur;
    bool quoted = false;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char ch = s[i];
      if (quoted) {
        if (ch == '"' && i + 1 < s.size() && s[i + 1] == '"') {
          cur += '"';
          ++i;
        } else if (ch == '"') {
          quoted = false;
        } else {
          cur += ch;
        }
      } else if (ch == '"') {
        quoted = true;
      } else if (ch == ',') {
        cells.emplace_back(trim(cur));
        cur.clear();
      } else {
        cur += ch;
      }
    }
    if (quoted) return InvalidArgument(where(line) + "unterminated quoted cell");
    cells.emplace_back(trim(cur));
    if (!have_header) {
      for (std::size_t i = 0; i < cells.size(); ++i) {
        if (cells[i].empty()) return InvalidArgument(where(line) + "empty column name in header");
        for (std::size_t k = 0; k < i; ++k) {
          if (cells[k] == cells[i]) {
            return InvalidArgument(where(line) + "duplicate column \"" + SanitizeUtf8(cells[i]) +
                                   "\"");
          }
        }
      }
      table.columns = std::move(cells);
      have_header = true;
      continue;
    }
    if (cells.size() != table.columns.size()) {
      return InvalidArgument(where(line) + "expected " + std::to_string(table.columns.size()) +
                             " fields, got " + std::to_string(cells.size()));
    }
    table.rows.push_back({line, std::move(cells)});
  }
  if (!have_header) return InvalidArgument(path + ": empty file (no header line)");
  return table;
}

StatusOr<CsvTable> ReadCsv(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "CSV file"));
  return ParseCsv(text, SanitizeUtf8(path));
}

StatusOr<double> CsvDouble(const CsvTable& table, const CsvTable::Row& row, int column) {
  double v = 0;
  if (!ParseDouble(row.cells[column], &v)) {
    return InvalidArgument(table.path + ":" + std::to_string(row.line) + ": column " +
                           SanitizeUtf8(table.columns[column]) + ": not a finite number: \"" +
                           SanitizeUtf8(row.cells[column].substr(0, 60)) + "\"");
  }
  return v;
}

StatusOr<int> CsvInt(const CsvTable& table, const CsvTable::Row& row, int column) {
  std::int64_t v = 0;
  if (!ParseInt64(row.cells[column], &v) || v < INT32_MIN || v > INT32_MAX) {
    return InvalidArgument(table.path + ":" + std::to_string(row.line) + ": column " +
                           SanitizeUtf8(table.columns[column]) + ": not an integer: \"" +
                           SanitizeUtf8(row.cells[column].substr(0, 60)) + "\"");
  }
  return static_cast<int>(v);
}

bool ParseDouble(std::string_view cell, double* out) {
  if (cell.empty()) return false;
  // std::from_chars for double is in libstdc++ 11+; it does not accept a leading '+'.
  if (cell.front() == '+') cell.remove_prefix(1);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (ec != std::errc() || ptr != cell.data() + cell.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool ParseInt64(std::string_view cell, std::int64_t* out) {
  if (cell.empty()) return false;
  if (cell.front() == '+') cell.remove_prefix(1);
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (ec != std::errc() || ptr != cell.data() + cell.size()) return false;
  *out = v;
  return true;
}

StatusOr<std::int64_t> JsonInt(const nlohmann::json& value, const std::string& field,
                               std::int64_t lo, std::int64_t hi) {
  const std::string expected = field + ": expected an integer in [" + std::to_string(lo) +
                               ", " + std::to_string(hi) + "], got " + JsonSnippet(value);
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi)) return InvalidArgument(expected);
    const auto v = static_cast<std::int64_t>(u);
    if (v < lo) return InvalidArgument(expected);
    return v;
  }
  if (!value.is_number_integer()) return InvalidArgument(expected);
  const auto v = value.get<std::int64_t>();
  if (v < lo || v > hi) return InvalidArgument(expected);
  return v;
}

StatusOr<double> JsonNumber(const nlohmann::json& value, const std::string& field, double lo,
                            double hi) {
  if (value.is_number()) {
    const double v = value.get<double>();
    if (std::isfinite(v) && v >= lo && v <= hi) return v;
  }
  return InvalidArgument(field + ": expected a number in [" + Num(lo) + ", " + Num(hi) +
                         "], got " + JsonSnippet(value));
}

std::string JsonSnippet(const nlohmann::json& value, std::size_t max_chars) {
  // Containers are summarised instead of dumped: a dump recurses over the whole value.
  std::string s;
  if (value.is_object()) {
    s = "an object";
  } else if (value.is_array()) {
    s = "an array of " + std::to_string(value.size());
  } else {
    s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (s.size() > max_chars) {
    s.resize(max_chars);
    s = SanitizeUtf8(s) + "...";
  }
  return s;
}

bool IsValidUtf8(std::string_view text) { return SanitizeUtf8(text) == text; }

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    int len = 0;
    std::uint32_t min = 0;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    std::uint32_t cp = ok ? (c & (0x7F >> len)) : 0;
    for (int k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

}  // namespace tediserve
