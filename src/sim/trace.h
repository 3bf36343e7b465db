// Request traces on disk, and the small CSV reader the workload data files share.
//
// A trace is CSV or JSONL, chosen by the file's extension (.csv / .jsonl):
//   CSV:   header `arrival_s,prompt_len,output_len,slo_s,priority`, one request a row.
//   JSONL: one object a line, {"arrival_s":..,"prompt_len":..,"output_len":..,
//          "slo_s":..,"priority":..}.
// arrival_s, prompt_len and output_len are required; slo_s (seconds, 0 / empty / null = the
// run's SLO) and priority (integer, default 0) are optional. Other columns or keys are errors
// (a misspelt one would otherwise be ignored silently). Rows need not be sorted by arrival.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "policy/request.h"

namespace tediserve::sim {

// Reads a trace: requests sorted by arrival (stable for ties), ids 0..N-1. Every error names
// path:line. An empty trace is an error.
StatusOr<std::vector<policy::RequestSpec>> ReadTrace(const std::string& path);

// Writes requests in the given order (ids are not written: they are re-derived on reading).
// Doubles are written in the shortest form that reads back bit-identical, so ReadTrace gives
// the same vector for sorted input with dense ids. min/max_threshold are not stored.
Status WriteTrace(const std::string& path, const std::vector<policy::RequestSpec>& requests);

// A CSV file of plain cells: no quoting, cells trimmed of blanks; blank lines and lines
// starting with '#' are skipped; every row has as many cells as the header.
struct CsvTable {
  struct Row {
    int line = 0;  // 1-based line in the file, for messages
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

StatusOr<CsvTable> ReadCsv(const std::string& path);

// Cell parsers; errors read `path:line: column NAME: ...`. A whole cell must be the number.
StatusOr<double> CsvDouble(const CsvTable& table, const CsvTable::Row& row, int column);
StatusOr<int> CsvInt(const CsvTable& table, const CsvTable::Row& row, int column);

}  // namespace tediserve::sim
