// Text <-> token ids for Hugging Face tokenizer.json files with a "WordLevel" model, which is
// what the repo's tiny character-level model ships. Other model types (BPE, Unigram, ...) are
// refused with kUnimplemented rather than tokenized approximately.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tediserve::engine {

class Tokenizer {
 public:
  // kNotFound if the file is missing; kInvalidArgument (message starts with the path) if it
  // is not a well-formed WordLevel tokenizer.json; kUnimplemented for other model types, a
  // normalizer, or a pre_tokenizer other than the character split.
  static StatusOr<Tokenizer> FromFile(const std::string& path);
  // The same, from the file's text.
  static StatusOr<Tokenizer> FromJson(const std::string& json_text);

  // Greedy longest match over the vocabulary (added tokens included), so a special token
  // written literally in the text, e.g. "<|eos|>", becomes its id. Text the vocabulary cannot
  // cover is kInvalidArgument naming the character and its byte offset; it is never mapped
  // to the unknown token, so a prompt is not silently changed.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;

  // Concatenates the token strings, skipping special tokens, and stops before the first
  // `stop_id` (pass -1 to decode everything). Ids the tokenizer does not know (a model's
  // padded embedding rows) decode as U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids, int32_t stop_id) const;
  // Decode(ids, eos_id()): stops at the end-of-sequence token.
  std::string Decode(const std::vector<int32_t>& ids) const { return Decode(ids, eos_id_); }

  // Highest id + 1.
  int vocab_size() const { return static_cast<int>(id_to_token_.size()); }
  // The special token named "<|eos|>", "<|endoftext|>", "</s>" or "<eos>"; -1 when there is
  // none. A model's config.json eos_token_id is authoritative when the two differ.
  int32_t eos_id() const { return eos_id_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  bool IsSpecial(int32_t id) const;

 private:
  Tokenizer() = default;

  std::vector<std::string> id_to_token_;  // "" for ids no token uses
  std::vector<bool> special_;
  std::map<std::string, int32_t, std::less<>> token_to_id_;
  size_t max_token_bytes_ = 0;
  int32_t eos_id_ = -1;
};

}  // namespace tediserve::engine
