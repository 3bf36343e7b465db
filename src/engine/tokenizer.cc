#include "engine/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "common/json_keys.h"
#include "engine/tokenizer_bpe.h"

namespace tediserve::engine {

namespace {

using json = nlohmann::json;

// Ids index dense tables; a corrupt id must not allocate gigabytes.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
// Encode tries every length up to the longest token at each position, so the longest token
// bounds its cost; real vocabularies' tokens are under 100 bytes.
constexpr size_t kMaxTokenBytes = 1024;
// tokenizer.json of a 150k-token BPE model is about 10 MB.
constexpr uint64_t kMaxTokenizerBytes = uint64_t{256} << 20;

// A token as shown in a message: bounded, valid UTF-8.
std::string Shown(const std::string& token) {
  return token.size() > 60 ? SanitizeUtf8(token.substr(0, 60)) + "..." : SanitizeUtf8(token);
}

// Decodes the UTF-8 sequence at s[i]; returns its length, or 0 if the bytes are not valid
// UTF-8 (used only to name the offending character in an error).
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  size_t len = 0;
  uint32_t cp = 0;
  if (b0 < 0x80) {
    len = 1;
    cp = b0;
  } else if ((b0 & 0xe0) == 0xc0) {
    len = 2;
    cp = b0 & 0x1f;
  } else if ((b0 & 0xf0) == 0xe0) {
    len = 3;
    cp = b0 & 0x0f;
  } else if ((b0 & 0xf8) == 0xf0) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  *code_point = cp;
  return len;
}

std::string CodePointName(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "U+%04X", cp);
  return buf;
}

bool IsCharacterSplit(const json& pre) {
  if (pre.is_null()) return true;
  if (!pre.is_object() || !pre.contains("type") || pre.at("type") != "Split") return false;
  const auto pattern = pre.find("pattern");
  return pattern != pre.end() && pattern->is_object() && pattern->contains("String") &&
         pattern->at("String") == "";
}

}  // namespace

std::string ReplaceInvalidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    // The WHATWG UTF-8 decoder: the lead byte fixes the length and the range of the first
    // continuation byte (no overlongs, no surrogates, nothing above U+10FFFF); an unexpected
    // byte ends the sequence with one U+FFFD and is itself decoded next.
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (size_t k = 0; k < need; ++k, ++j) {
      if (j >= n || p[j] < lo || p[j] > hi) {
        ok = false;
        break;
      }
      lo = 0x80;
      hi = 0xBF;
    }
    if (ok) {
      out.append(text.substr(i, j - i));
    } else {
      out += kReplacement;
    }
    i = j;
  }
  return out;
}

StatusOr<Tokenizer> Tokenizer::FromFileOrDir(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return FromFile((std::filesystem::path(path) / "tokenizer.json").string());
  }
  return FromFile(path);
}

StatusOr<Tokenizer> Tokenizer::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "tokenizer", kMaxTokenizerBytes));
  StatusOr<Tokenizer> tok = FromJson(text);
  if (!tok.ok()) return tok.status().WithContext(SanitizeUtf8(path));
  return tok;
}

StatusOr<Tokenizer> Tokenizer::FromJson(const std::string& json_text) {
  ASSIGN_OR_RETURN(const json j, ParseJson(json_text, "tokenizer"));
  RETURN_IF_ERROR(CheckNoDuplicateKeys(json_text, "tokenizer"));
  if (!j.is_object()) return InvalidArgument("tokenizer is not a JSON object");
  const auto model_it = j.find("model");
  if (model_it == j.end() || !model_it->is_object()) {
    return InvalidArgument("tokenizer has no 'model' object");
  }
  const json& model = *model_it;
  const auto type_it = model.find("type");
  if (type_it == model.end() || !type_it->is_string()) {
    return InvalidArgument("tokenizer has no string 'model.type'");
  }
  const std::string type = type_it->get<std::string>();
  if (type != "WordLevel" && type != "BPE") {
    return Unimplemented("tokenizer model type '" + Shown(type) +
                         "' is not supported (supported: WordLevel, BPE)");
  }
  // Greedy matching equals the Hugging Face result only when the text is split into single
  // characters first and not rewritten; refuse anything else. (BPE checks its own.)
  if (type == "WordLevel" && j.contains("normalizer") && !j.at("normalizer").is_null()) {
    return Unimplemented("tokenizer normalizer " + JsonSnippet(j.at("normalizer")) +
                         " is not supported");
  }
  if (type == "WordLevel" && j.contains("pre_tokenizer") && !IsCharacterSplit(j.at("pre_tokenizer"))) {
    return Unimplemented("tokenizer pre_tokenizer " + JsonSnippet(j.at("pre_tokenizer")) +
                         " is not supported (only a Split on the empty string)");
  }

  Tokenizer tok;
  tok.model_type_ = type;
  auto add = [&tok](const std::string& token, const json& id_json, bool special) -> Status {
    StatusOr<int64_t> id_or = JsonInt(id_json, "id", 0, kMaxTokenId);
    if (!id_or.ok()) {
      return InvalidArgument("token '" + Shown(token) + "' has id " + JsonSnippet(id_json) +
                             ", expected an integer in [0, " + std::to_string(kMaxTokenId) + "]");
    }
    if (token.empty()) return InvalidArgument("token with id " + JsonSnippet(id_json) + " is empty");
    if (token.size() > kMaxTokenBytes) {
      return InvalidArgument("token '" + Shown(token) + "' is " + std::to_string(token.size()) +
                             " bytes long, more than " + std::to_string(kMaxTokenBytes));
    }
    const auto id = static_cast<int32_t>(*id_or);
    const auto known = tok.token_to_id_.find(token);
    if (known != tok.token_to_id_.end() && known->second != id) {
      return InvalidArgument("token '" + Shown(token) + "' has ids " + std::to_string(known->second) +
                             " and " + std::to_string(id));
    }
    if (static_cast<size_t>(id) >= tok.id_to_token_.size()) {
      tok.id_to_token_.resize(id + 1);
      tok.special_.resize(id + 1, false);
    }
    std::string& slot = tok.id_to_token_[id];
    if (!slot.empty() && slot != token) {
      return InvalidArgument("tokens '" + Shown(slot) + "' and '" + Shown(token) + "' both have id " +
                             std::to_string(id));
    }
    slot = token;
    tok.special_[id] = tok.special_[id] || special;
    tok.token_to_id_[token] = id;
    tok.max_token_bytes_ = std::max(tok.max_token_bytes_, token.size());
    return Status::Ok();
  };

  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return InvalidArgument("tokenizer has no 'model.vocab' object");
  }
  for (const auto& [token, id] : vocab_it->items()) RETURN_IF_ERROR(add(token, id, false));

  if (j.contains("added_tokens") && !j.at("added_tokens").is_null()) {
    const json& added = j.at("added_tokens");
    if (!added.is_array()) return InvalidArgument("tokenizer 'added_tokens' is not a list");
    for (size_t i = 0; i < added.size(); ++i) {
      const json& t = added[i];
      const std::string entry = "tokenizer added_tokens[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
          !t.at("content").is_string()) {
        return InvalidArgument(entry + " " + JsonSnippet(t) + " lacks an 'id' or a string 'content'");
      }
      const json special = t.value("special", json(false));
      if (!special.is_boolean()) {
        return InvalidArgument(entry + " has a non-boolean 'special': " + JsonSnippet(special));
      }
      RETURN_IF_ERROR(add(t.at("content").get<std::string>(), t.at("id"), special.get<bool>())
                          .WithContext(entry));
    }
  }
  if (tok.id_to_token_.empty()) return InvalidArgument("tokenizer vocabulary is empty");
  if (type == "BPE") {
    ASSIGN_OR_RETURN(tok.bpe_, tokenizer_internal::Bpe::Build(j, tok.id_to_token_, tok.special_));
  }

  for (const char* name : {"<|eos|>", "<|endoftext|>", "</s>", "<eos>"}) {
    const auto id = tok.TokenToId(name);
    if (id && tok.IsSpecial(*id)) {
      tok.eos_id_ = *id;
      break;
    }
  }
  return tok;
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (bpe_ != nullptr) {
    RETURN_IF_ERROR(bpe_->Encode(ReplaceInvalidUtf8(text), add_special_tokens, &ids));
    return ids;
  }
  ids.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t longest = std::min(max_token_bytes_, text.size() - i);
    bool matched = false;
    for (size_t len = longest; len > 0; --len) {
      const auto it = token_to_id_.find(text.substr(i, len));
      if (it != token_to_id_.end()) {
        ids.push_back(it->second);
        i += len;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    uint32_t cp = 0;
    const size_t len = DecodeUtf8(text, i, &cp);
    const std::string offset = " at byte offset " + std::to_string(i);
    if (len == 0) {
      char byte[8];
      std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[i]));
      return InvalidArgument("invalid UTF-8 byte " + std::string(byte) + offset);
    }
    const bool printable = cp >= 0x20 && cp != 0x7f;
    // Built by appending: GCC 12 gives a false -Wrestrict for "'" + std::string(...).
    std::string shown = CodePointName(cp);
    if (printable) {
      shown = std::string("'").append(text.substr(i, len)).append("' (").append(shown) + ")";
    }
    return InvalidArgument("character " + shown + offset +
                           " is not in the tokenizer vocabulary");
  }
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, int32_t stop_id) const {
  return DecodeImpl(ids, stop_id, /*skip_special=*/true);
}

std::string Tokenizer::DecodeAll(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return DecodeImpl(ids, -1, skip_special_tokens);
}

std::string Tokenizer::DecodeImpl(const std::vector<int32_t>& ids, int32_t stop_id, bool skip_special) const {
  if (bpe_ != nullptr) return bpe_->Decode(ids, stop_id, skip_special);
  std::string text;
  for (int32_t id : ids) {
    if (stop_id >= 0 && id == stop_id) break;
    if (id < 0 || id >= vocab_size() || id_to_token_[id].empty()) {
      text += kReplacement;
    } else if (!skip_special || !special_[id]) {
      text += id_to_token_[id];
    }
  }
  return text;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  const auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

}  // namespace tediserve::engine
