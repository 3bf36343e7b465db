// Request traces on disk (CSV through the common reader in common/input.h, or JSONL).
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

#include "common/input.h"
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

}  // namespace tediserve::sim
