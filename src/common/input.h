// The one place where bytes from outside become text and JSON values (docs/design.md
// section 6, Errors: input validation). Every file reader in TeDiServe goes through these:
//  - ReadFile refuses what is not a regular, readable file of a bounded size, with the path in
//    the message (a directory given for a file, a FIFO, a 100 GB file: clear errors, never an
//    uncaught std::ios_base::failure or a hang);
//  - ParseJson bounds the nesting depth before nlohmann::json parses (its serializer and our
//    own walkers recurse, so 100,000 nested arrays would overflow the stack) and reports the
//    parse error's byte position;
//  - ForEachJsonLine is the JSONL loop (traces, task files, step logs, eval records): line
//    numbers in messages, blank lines skipped, a bound on line length;
//  - ReadCsv is the CSV reader (latency profiles, CSV traces, timelines);
//  - JsonSnippet shows a value in a message: bounded length, invalid UTF-8 replaced.
// Field-level checks (ranges, counts, types) stay with each format's parser, which knows what
// its numbers mean; these helpers make the layer below them safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tediserve {

// Limits that follow from what TeDiServe reads: the largest real input is a model's
// safetensors file (read by the weights loader with its own bound, not through ReadFile);
// tokenizer.json of a 150k-vocabulary BPE model is about 10 MB; traces and step logs of a
// long experiment reach hundreds of MB.
inline constexpr std::uint64_t kMaxTextFileBytes = 2ull << 30;  // 2 GiB
inline constexpr int kMaxJsonDepth = 64;                        // real files use < 10
inline constexpr std::size_t kMaxLineBytes = 64u << 20;         // one JSONL/CSV line

// Reads a whole regular file. NotFound when it does not exist, InvalidArgument when it is
// not a regular file or is larger than max_bytes, IoError when reading fails. `what` names
// the input in messages ("latency profile", "tokenizer.json").
StatusOr<std::string> ReadFile(const std::string& path, const std::string& what,
                               std::uint64_t max_bytes = kMaxTextFileBytes);

// Checks that `path` names a readable regular file (same errors as ReadFile) without
// reading it; for inputs read in a streaming way.
Status CheckRegularFile(const std::string& path, const std::string& what,
                        std::uint64_t max_bytes = kMaxTextFileBytes);

// Parses JSON text. InvalidArgument "<where>: not valid JSON (...)" with the parser's
// position, or "<where>: JSON nested deeper than N levels".
StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& where,
                                   int max_depth = kMaxJsonDepth);

// ReadFile + ParseJson.
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, const std::string& what,
                                      int max_depth = kMaxJsonDepth);

// Calls fn(line_number, value) for each non-blank line of a JSONL file, stopping at the first
// error, which gets "<path>:<line>: " in front. A line that is not JSON is an error.
Status ForEachJsonLine(const std::string& path, const std::string& what,
                       const std::function<Status(int line, const nlohmann::json&)>& fn);

// A CSV file with a header row: cells split on ',' (a cell may be double-quoted, with ""
// for a quote inside), trimmed of blanks; blank lines and lines starting with '#' are skipped;
// header names are non-empty and distinct; every row has as many cells as the header.
// Messages read "<path>:<line>: ...".
struct CsvTable {
  struct Row {
    int line = 0;  // 1-based line in the file
    std::vector<std::string> cells;
  };
  std::string path;
  std::vector<std::string> columns;
  std::vector<Row> rows;

  // The index of a column, or -1.
  int Column(std::string_view name) const;
  // The index of a column, or an error `path: missing column "NAME"`.
  StatusOr<int> RequireColumn(std::string_view name) const;
};
StatusOr<CsvTable> ParseCsv(std::string_view text, const std::string& path);
// ReadFile (NotFound, directory, size bound) + ParseCsv.
StatusOr<CsvTable> ReadCsv(const std::string& path);
// Cell readers; errors read `path:line: column NAME: ...`. A whole cell must be the number,
// and it must be finite (a double) or fit in an int.
StatusOr<double> CsvDouble(const CsvTable& table, const CsvTable::Row& row, int column);
StatusOr<int> CsvInt(const CsvTable& table, const CsvTable::Row& row, int column);

// Parses a whole cell as a finite double / an integer in [lo, hi]; false on anything else
// (empty, trailing characters, out of range, nan/inf).
bool ParseDouble(std::string_view cell, double* out);
bool ParseInt64(std::string_view cell, std::int64_t* out);

// Typed reads of one JSON value for field-level checks, with the field's name and the
// offending value in the message: "<field>: expected an integer in [lo, hi], got 1e+300".
// An integer field accepts only JSON integers (not 3.5, not "3", not a double beyond the
// int64 range); a number field accepts any finite JSON number.
StatusOr<std::int64_t> JsonInt(const nlohmann::json& value, const std::string& field,
                               std::int64_t lo, std::int64_t hi);
StatusOr<double> JsonNumber(const nlohmann::json& value, const std::string& field, double lo,
                            double hi);

// A short, printable rendering of a JSON value for error messages: at most max_chars
// characters (then "..."), invalid UTF-8 replaced.
std::string JsonSnippet(const nlohmann::json& value, std::size_t max_chars = 60);

// `text` with invalid UTF-8 sequences replaced by U+FFFD, for messages and for JSON output
// of names that came from outside (file names, experiment names, flags).
std::string SanitizeUtf8(std::string_view text);
// Whether `text` is valid UTF-8.
bool IsValidUtf8(std::string_view text);

}  // namespace tediserve
