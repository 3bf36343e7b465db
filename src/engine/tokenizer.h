// Text <-> token ids for Hugging Face tokenizer.json files:
//  - "WordLevel" (the repo's tiny character-level models): greedy longest match;
//  - byte-level "BPE" (GPT-2 / Llama 3 / Qwen / Dream style): NFC normalizer, Split (regex)
//    and ByteLevel pre-tokenizers, added tokens matched before splitting, ByteLevel decoder,
//    optional TemplateProcessing post-processor. Ids equal @huggingface/tokenizers' (the JS
//    reference, tests/hf_reference); see docs/design.md "Tokenizers".
// Anything else (Unigram, WordPiece, other normalizers, pre-tokenizers or decoders, regex
// constructs outside the supported subset) is refused at load time with kUnimplemented naming
// the type, rather than tokenized approximately.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tediserve::engine {

namespace tokenizer_internal {
class Bpe;
}

// `text` with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart,
// as the WHATWG Encoding Standard's decoder (and so node's readFileSync(..., "utf8") and
// TextDecoder) does: "\xE2\x82" -> one U+FFFD, "\xFF\xFE" -> two.
std::string ReplaceInvalidUtf8(std::string_view text);

class Tokenizer {
 public:
  // kNotFound if the file is missing; kInvalidArgument (message starts with the path) if it
  // is not a well-formed WordLevel tokenizer.json; kUnimplemented for other model types, a
  // normalizer, or a pre_tokenizer other than the character split.
  static StatusOr<Tokenizer> FromFile(const std::string& path);
  // A tokenizer.json, or a folder holding one (a Hugging Face model folder).
  static StatusOr<Tokenizer> FromFileOrDir(const std::string& path);
  // The same, from the file's text.
  static StatusOr<Tokenizer> FromJson(const std::string& json_text);

  // Greedy longest match over the vocabulary (added tokens included), so a special token
  // written literally in the text, e.g. "<|eos|>", becomes its id. Text the vocabulary cannot
  // cover is kInvalidArgument naming the character and its byte offset; it is never mapped
  // to the unknown token, so a prompt is not silently changed.
  //
  // BPE: never fails on text (invalid UTF-8 is replaced by U+FFFD first, as the reference
  // reads it); add_special_tokens applies the TemplateProcessing post-processor, when the
  // file has one (WordLevel ignores it). A failure is an internal limit (a regex engine
  // error), reported as kInvalidArgument/kInternal, never a crash.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = false) const;

  // Concatenates the token strings, skipping special tokens, and stops before the first
  // `stop_id` (pass -1 to decode everything). Ids the tokenizer does not know (a model's
  // padded embedding rows) decode as U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids, int32_t stop_id) const;
  // Decode(ids, eos_id()): stops at the end-of-sequence token.
  std::string Decode(const std::vector<int32_t>& ids) const { return Decode(ids, eos_id_); }
  // Every id, as the reference's decode(ids, {skip_special_tokens}) does (no stop token, no
  // clean-up of spaces): special tokens are kept unless skip_special_tokens. BPE: added
  // tokens are written as they are and the byte runs between them decoded as UTF-8 with
  // U+FFFD for ill-formed sequences. Unknown ids decode as U+FFFD (check HasId first).
  std::string DecodeAll(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // "WordLevel" or "BPE".
  const std::string& model_type() const { return model_type_; }
  // Whether `id` names a token (ids below vocab_size() may be unused).
  bool HasId(int32_t id) const {
    return id >= 0 && id < vocab_size() && !id_to_token_[static_cast<size_t>(id)].empty();
  }

  // Highest id + 1.
  int vocab_size() const { return static_cast<int>(id_to_token_.size()); }
  // The special token named "<|eos|>", "<|endoftext|>", "</s>" or "<eos>"; -1 when there is
  // none. A model's config.json eos_token_id is authoritative when the two differ.
  int32_t eos_id() const { return eos_id_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  bool IsSpecial(int32_t id) const;

 private:
  Tokenizer() = default;
  std::string DecodeImpl(const std::vector<int32_t>& ids, int32_t stop_id, bool skip_special) const;

  std::vector<std::string> id_to_token_;  // "" for ids no token uses
  std::vector<bool> special_;
  std::map<std::string, int32_t, std::less<>> token_to_id_;
  size_t max_token_bytes_ = 0;
  int32_t eos_id_ = -1;
  std::string model_type_;
  // Set for BPE models: the merges, the regexes, the normalizer and the word cache. Shared
  // by copies; immutable except for its internally locked cache.
  std::shared_ptr<const tokenizer_internal::Bpe> bpe_;
};

}  // namespace tediserve::engine
