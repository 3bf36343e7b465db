// Byte-level BPE for engine::Tokenizer (internal to tokenizer.cc; see tokenizer.h for the
// contract and docs/design.md "Tokenizers" for what is supported and refused).
//
// Pipeline of Encode, in the order @huggingface/tokenizers applies it:
//   invalid UTF-8 -> U+FFFD; split out added tokens whose "normalized" is false (longest match
//   at the leftmost position); NFC each remaining section (ICU); split out added tokens whose
//   "normalized" is true; pre-tokenize (each Split regex with PCRE2, then ByteLevel); BPE each
//   piece (merge ranks in a hash map, a per-word cache); optional post-processor template.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tediserve::engine::tokenizer_internal {

// A compiled PCRE2 pattern (UTF + UCP, JIT when available).
class Regex {
 public:
  // `pattern` is PCRE2 syntax; `shown` names it in messages.
  static StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern, const std::string& shown);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the pieces of `text` as a Split with behavior "Isolated" yields them: every
  // non-empty match and every non-empty gap between matches, in order. Matches are found as
  // JavaScript's String.matchAll does (after an empty match the search resumes one code
  // point later). keep_gaps false: the matches only (String.match). `text` must be valid UTF-8.
  Status SplitIsolated(std::string_view text, std::vector<std::string_view>* out, bool keep_gaps = true) const;

 private:
  explicit Regex(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*
};

// Translates a tokenizer.json "Regex" pattern (Oniguruma syntax, as the Rust library reads
// it) to PCRE2 syntax with the semantics the JS reference gives it: \s and \S are the Unicode
// White_Space property, \d is \p{Nd}, (?i:...) folds ASCII letters only, '.' excludes only
// '\n', {,n} is {0,n}. Constructs whose meaning differs between the engines or that the
// reference cannot reproduce (\w \b \A \z \G \h, ^ and $, possessive quantifiers, nested
// classes and &&, backreferences, other (?...) groups) are kUnimplemented naming the construct.
StatusOr<std::string> OnigurumaToPcre2(std::string_view pattern);

// NFC of valid UTF-8 text (ICU).
StatusOr<std::string> NfcNormalize(std::string_view text);

class Bpe {
 public:
  // `j` is the whole tokenizer.json (already checked to have model.type "BPE");
  // id_to_token/special: the vocabulary and added tokens as engine::Tokenizer built them.
  static StatusOr<std::shared_ptr<const Bpe>> Build(const nlohmann::json& j,
                                                     const std::vector<std::string>& id_to_token,
                                                     const std::vector<bool>& special);

  Status Encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>* ids) const;
  // Stops before the first stop_id (-1: none); unknown ids become U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids, int32_t stop_id, bool skip_special) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
  };
  // Longest-match splitting on a set of added tokens (the reference's DictionarySplitter).
  struct AddedSplitter {
    // first byte -> tokens starting with it, longest first
    std::vector<std::vector<AddedToken>> by_first_byte = std::vector<std::vector<AddedToken>>(256);
    bool empty = true;
    void Add(const AddedToken& t);
    // Calls fn(section, id) for each section in order: id >= 0 for an added token, -1 for
    // the text between them (non-empty).
    template <typename Fn>
    Status Split(std::string_view text, Fn&& fn) const;
  };
  struct PreSplit {
    std::unique_ptr<Regex> regex;
  };
  struct Scratch;

  Bpe() = default;
  Status EncodeSection(std::string_view section, std::vector<int32_t>* ids, Scratch* s) const;
  Status EncodeWord(std::string_view word, std::vector<int32_t>* ids, Scratch* s) const;
  int32_t MergedId(int32_t a, int32_t b, int32_t* rank) const;

  // model
  std::unordered_map<std::string, int32_t> vocab_;          // byte-level strings -> id
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (a, b) -> (rank, id)
  int32_t byte_ids_[256];                                    // byte -> id of its byte-level char, or -1
  std::string byte_chars_[256];                              // byte -> its byte-level char (UTF-8)
  int32_t unk_id_ = -1;
  bool ignore_merges_ = false;
  // normalizer / pre-tokenizer
  bool nfc_ = false;
  AddedSplitter raw_added_, normalized_added_;
  std::vector<PreSplit> splits_;
  bool add_prefix_space_ = false;
  std::unique_ptr<Regex> byte_level_regex_;  // set when ByteLevel's use_regex is true
  // post-processor: the "single" template; -1 stands for the sequence. Empty: none.
  std::vector<int32_t> template_single_;
  // decoder
  std::vector<std::string> token_bytes_;  // id -> bytes it decodes to ("" for unused ids)
  std::vector<bool> added_, special_;
  // the per-word cache
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tediserve::engine::tokenizer_internal
