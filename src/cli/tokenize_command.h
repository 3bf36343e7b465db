// `tediserve tokenize` and `tediserve detokenize` (issue 16 item 4): a model's tokenizer on
// JSON lines, for checking a tokenizer and for tests against the reference implementation.
//
//   tediserve tokenize   --tokenizer FILE_OR_DIR --input TEXTS.jsonl [--add-special-tokens] [--timing]
//   tediserve detokenize --tokenizer FILE_OR_DIR --input IDS.jsonl [--skip-special-tokens]
//
// tokenize: each input line is one JSON string; prints one JSON array of ids per line. The
// file is read as node reads a file as "utf8": ill-formed UTF-8 becomes U+FFFD (maximal
// subparts) before the line is parsed. --timing prints the load and encode times on stderr.
// detokenize: each input line is one JSON array of ids; prints one JSON string per line
// (special tokens kept unless --skip-special-tokens).
// A malformed line, an id the tokenizer does not have or an unreadable file is an error
// naming the file and line; exit 2 (bad input) or 1 (failure).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace tediserve::cli {

struct TokenizeArgs {
  std::string tokenizer;  // tokenizer.json or a model folder holding one
  std::string input;
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
  bool timing = false;
};

// Adds both subcommands; *detokenize receives the second one.
CLI::App* AddTokenizeCommands(CLI::App& app, TokenizeArgs* tokenize, TokenizeArgs* detokenize,
                              CLI::App** detokenize_command);
int RunTokenize(const TokenizeArgs& args);
int RunDetokenize(const TokenizeArgs& args);

}  // namespace tediserve::cli
