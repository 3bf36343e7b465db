#include "cli/tokenize_command.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/input.h"
#include "engine/tokenizer.h"

namespace tediserve::cli {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Calls fn(line_number, line) for each line of `text` (a final newline ends the last line,
// it does not start an empty one). Stops at the first error.
template <typename Fn>
Status ForEachLine(std::string_view text, Fn&& fn) {
  int number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    RETURN_IF_ERROR(fn(number, text.substr(start, end - start)));
    start = end + 1;
  }
  return Status::Ok();
}

StatusOr<json> ParseLine(std::string_view line, const std::string& where) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return InvalidArgument(where + ": empty line");
  }
  if (line.size() > kMaxLineBytes) return InvalidArgument(where + ": line longer than " + std::to_string(kMaxLineBytes) + " bytes");
  return ParseJson(line, where);
}

struct Loaded {
  engine::Tokenizer tokenizer;
  std::string input;
  double load_s = 0;
};

StatusOr<Loaded> Load(const TokenizeArgs& args) {
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(engine::Tokenizer tok, engine::Tokenizer::FromFileOrDir(args.tokenizer));
  const double load_s = Seconds(t0);
  ASSIGN_OR_RETURN(std::string input, ReadFile(args.input, "input"));
  return Loaded{std::move(tok), std::move(input), load_s};
}

int Fail(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return ExitCode(s);
}

}  // namespace

CLI::App* AddTokenizeCommands(CLI::App& app, TokenizeArgs* tokenize, TokenizeArgs* detokenize,
                              CLI::App** detokenize_command) {
  CLI::App* t = app.add_subcommand("tokenize", "text -> token ids: one JSON string per input line, one JSON array per output line");
  t->add_option("--tokenizer", tokenize->tokenizer, "tokenizer.json, or a model folder holding one")->required();
  t->add_option("--input", tokenize->input, "file with one JSON string per line")->required();
  t->add_flag("--add-special-tokens", tokenize->add_special_tokens, "apply the tokenizer's post-processor template (e.g. a BOS token)");
  t->add_flag("--timing", tokenize->timing, "print the load and encode times on stderr");
  CLI::App* d = app.add_subcommand("detokenize", "token ids -> text: one JSON array of ids per input line, one JSON string per output line");
  d->add_option("--tokenizer", detokenize->tokenizer, "tokenizer.json, or a model folder holding one")->required();
  d->add_option("--input", detokenize->input, "file with one JSON array of token ids per line")->required();
  d->add_flag("--skip-special-tokens", detokenize->skip_special_tokens, "leave special tokens out of the text");
  *detokenize_command = d;
  return t;
}

int RunTokenize(const TokenizeArgs& args) {
  StatusOr<Loaded> loaded = Load(args);
  if (!loaded.ok()) return Fail(loaded.status());
  const engine::Tokenizer& tok = loaded->tokenizer;
  // As node reads a file as "utf8": ill-formed sequences become U+FFFD before JSON parsing.
  const std::string text = engine::ReplaceInvalidUtf8(loaded->input);
  const std::string name = SanitizeUtf8(args.input);
  std::vector<std::string> texts;
  Status st = ForEachLine(text, [&](int number, std::string_view line) -> Status {
    const std::string where = name + ":" + std::to_string(number);
    ASSIGN_OR_RETURN(const json value, ParseLine(line, where));
    if (!value.is_string()) return InvalidArgument(where + ": expected a JSON string, got " + JsonSnippet(value));
    texts.push_back(value.get<std::string>());
    return Status::Ok();
  });
  if (!st.ok()) return Fail(st);
  const auto t0 = Clock::now();
  std::vector<std::vector<int32_t>> all;
  all.reserve(texts.size());
  size_t bytes = 0, tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    StatusOr<std::vector<int32_t>> ids = tok.Encode(texts[i], args.add_special_tokens);
    if (!ids.ok()) return Fail(ids.status().WithContext(name + ":" + std::to_string(i + 1)));
    bytes += texts[i].size();
    tokens += ids->size();
    all.push_back(std::move(ids).value());
  }
  const double encode_s = Seconds(t0);
  std::string out;
  for (const auto& ids : all) {
    out.push_back('[');
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k > 0) out.push_back(',');
      out += std::to_string(ids[k]);
    }
    out += "]\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (args.timing) {
    std::fprintf(stderr, "tokenize: %s tokenizer loaded in %.3f s; %zu lines, %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n",
                 tok.model_type().c_str(), loaded->load_s, all.size(), bytes, tokens, encode_s,
                 encode_s > 0 ? static_cast<double>(bytes) / 1e6 / encode_s : 0.0);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int RunDetokenize(const TokenizeArgs& args) {
  StatusOr<Loaded> loaded = Load(args);
  if (!loaded.ok()) return Fail(loaded.status());
  const engine::Tokenizer& tok = loaded->tokenizer;
  const std::string name = SanitizeUtf8(args.input);
  std::string out;
  Status st = ForEachLine(loaded->input, [&](int number, std::string_view line) -> Status {
    const std::string where = name + ":" + std::to_string(number);
    ASSIGN_OR_RETURN(const json value, ParseLine(line, where));
    if (!value.is_array()) return InvalidArgument(where + ": expected a JSON array of token ids, got " + JsonSnippet(value));
    std::vector<int32_t> ids;
    ids.reserve(value.size());
    for (size_t k = 0; k < value.size(); ++k) {
      const json& v = value[k];
      StatusOr<int64_t> id = JsonInt(v, "id", 0, std::numeric_limits<int32_t>::max());
      if (!id.ok() || !tok.HasId(static_cast<int32_t>(*id))) {
        return InvalidArgument(where + ": element " + std::to_string(k) + " (" + JsonSnippet(v) +
                               ") is not a token id of this tokenizer (ids 0.." + std::to_string(tok.vocab_size() - 1) + ")");
      }
      ids.push_back(static_cast<int32_t>(*id));
    }
    out += json(tok.DecodeAll(ids, args.skip_special_tokens)).dump(-1, ' ', false, json::error_handler_t::replace);
    out.push_back('\n');
    return Status::Ok();
  });
  if (!st.ok()) return Fail(st);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace tediserve::cli
