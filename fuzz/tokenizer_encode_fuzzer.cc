// The BPE encoder on arbitrary text: a fixed byte-level BPE tokenizer (NFC, the Qwen split
// regex, ByteLevel) encodes the fuzzer's bytes (any bytes: ill-formed UTF-8, long runs,
// combining marks). Besides crashes it checks the round trip: decoding the ids must give the
// NFC of the text with ill-formed UTF-8 replaced (this tokenizer has no added tokens, so NFC
// applies to the whole text), and every id must be in range.
#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"
#include "engine/tokenizer_bpe.h"
#include "fuzz_util.h"

namespace {

using json = nlohmann::json;

std::string ByteChar(int b) {
  int n = 0;
  for (int k = 0; k < 256; ++k) {
    const bool printable = (k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE);
    const int cp = printable ? k : 256 + n++;
    if (k == b) {
      return cp < 0x80 ? std::string(1, static_cast<char>(cp))
                       : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
  }
  return "";
}

const tediserve::engine::Tokenizer& Fixed() {
  static const tediserve::engine::Tokenizer tok = [] {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
    json merges = json::array();
    int id = 256;
    // A few merges over common bytes, including multi-byte UTF-8 prefixes and the space.
    for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
             {ByteChar(' '), "t"}, {"h", "e"}, {ByteChar(' ') + "t", "he"}, {"a", "a"}, {"aa", "aa"},
             {ByteChar(0xE4), ByteChar(0xBD)}, {ByteChar(0xC3), ByteChar(0xA9)}, {ByteChar(' '), ByteChar(' ')}}) {
      vocab[a + b] = id++;
      merges.push_back(json::array({a, b}));
    }
    const json j = {
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
             {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    auto t = tediserve::engine::Tokenizer::FromJson(j.dump());
    if (!t.ok()) std::abort();  // the harness itself is broken
    return std::move(t).value();
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const engine::Tokenizer& tok = Fixed();
  const std::string_view text = fuzz::AsText(data, size);
  StatusOr<std::vector<int32_t>> ids = tok.Encode(text);
  if (!ids.ok()) __builtin_trap();  // BPE encoding never fails on text
  for (int32_t id : *ids)
    if (!tok.HasId(id)) __builtin_trap();
  StatusOr<std::string> expected = engine::tokenizer_internal::NfcNormalize(engine::ReplaceInvalidUtf8(text));
  if (!expected.ok() || tok.DecodeAll(*ids) != *expected) __builtin_trap();
  return 0;
}
