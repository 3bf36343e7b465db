// Validators shared by the subcommands' flags (CLI11): a flag's bad value is an error naming
// the flag, with exit code 2, before any work starts.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/input.h"

namespace tediserve::cli {

// Text that ends up in a JSON output (names, notes, provenance) must be valid UTF-8. File
// paths need not be: Linux allows any bytes, and messages replace what is not UTF-8.
inline CLI::Validator Utf8Text() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        return IsValidUtf8(value) ? std::string() : std::string("not valid UTF-8");
      },
      "UTF-8", "UTF-8 text");
}

}  // namespace tediserve::cli
