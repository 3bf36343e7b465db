#include "engine/tokenizer_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>

#include "common/input.h"
#include "engine/tokenizer.h"

namespace tediserve::engine::tokenizer_internal {

namespace {

using json = nlohmann::json;

// Words longer than this are not cached (as the reference: 256 UTF-16 units); the cache is
// emptied when it holds this many words.
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 17;
constexpr size_t kMaxMerges = size_t{1} << 24;
constexpr size_t kMaxPreTokenizers = 16;
constexpr size_t kMaxPatternBytes = 4096;

std::string Shown(std::string_view s) {
  return s.size() > 60 ? SanitizeUtf8(s.substr(0, 60)) + "..." : SanitizeUtf8(s);
}

std::string TypeOf(const json& v) {
  if (!v.is_object()) return "";
  const auto t = v.find("type");
  return t != v.end() && t->is_string() ? t->get<std::string>() : "";
}

// The GPT-2 byte <-> printable character map: printable Latin-1 bytes map to themselves,
// the other 68 bytes to U+0100.. in byte order.
void ByteLevelChars(std::string (&chars)[256]) {
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    chars[b] = s;
  }
}

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  return 4;
}

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char OtherCase(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : static_cast<char>(c + 32); }

Status Unsupported(std::string_view construct, size_t at, std::string_view pattern) {
  return Unimplemented("regex construct '" + Shown(construct) + "' at byte " + std::to_string(at) +
                       " of pattern '" + Shown(pattern) +
                       "' is not supported (its meaning differs between regex engines)");
}

// An escape "\c..." starting at p[i] == '\\'. Appends the PCRE2 form and returns the number of
// bytes consumed, or an error.
StatusOr<size_t> TranslateEscape(std::string_view p, size_t i, bool in_class, std::string* out) {
  if (i + 1 >= p.size()) return InvalidArgument("pattern '" + Shown(p) + "' ends with a backslash");
  const char c = p[i + 1];
  switch (c) {
    case 's': *out += "\\p{White_Space}"; return 2;
    case 'S': *out += "\\P{White_Space}"; return 2;
    case 'd': *out += "\\p{Nd}"; return 2;
    case 'D': *out += "\\P{Nd}"; return 2;
    case 'r': case 'n': case 't': case 'f': case 'v':
      out->push_back('\\');
      out->push_back(c);
      return 2;
    case 'p': case 'P': {
      const size_t close = p.find('}', i);
      if (i + 2 >= p.size() || p[i + 2] != '{' || close == std::string_view::npos) {
        return Unsupported(p.substr(i, 3), i, p);
      }
      const std::string_view name = p.substr(i + 3, close - i - 3);
      if (name.empty() || name.front() == '^' ||
          !std::all_of(name.begin(), name.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '=' || ch == ' ' || ch == '-'; })) {
        return Unsupported(p.substr(i, close - i + 1), i, p);
      }
      out->append(p.substr(i, close - i + 1));
      return close - i + 1;
    }
    case 'x': {
      if (i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i);
        if (close == std::string_view::npos) return Unsupported(p.substr(i, 3), i, p);
        out->append(p.substr(i, close - i + 1));
        return close - i + 1;
      }
      size_t k = i + 2;
      while (k < p.size() && k < i + 4 && std::isxdigit(static_cast<unsigned char>(p[k]))) ++k;
      if (k == i + 2) return Unsupported(p.substr(i, 2), i, p);
      *out += "\\x{" + std::string(p.substr(i + 2, k - i - 2)) + "}";
      return k - i;
    }
    case 'u': {
      if (i + 6 > p.size() || !std::all_of(p.begin() + i + 2, p.begin() + i + 6, [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); })) {
        return Unsupported(p.substr(i, 2), i, p);
      }
      *out += "\\x{" + std::string(p.substr(i + 2, 4)) + "}";
      return 6;
    }
    default:
      break;
  }
  const auto uc = static_cast<unsigned char>(c);
  if (std::isalnum(uc) || uc >= 0x80) return Unsupported(p.substr(i, 2), i, p);
  (void)in_class;
  out->push_back('\\');
  out->push_back(c);
  return 2;
}

}  // namespace

StatusOr<std::string> OnigurumaToPcre2(std::string_view p) {
  if (p.size() > kMaxPatternBytes) {
    return InvalidArgument("regex pattern of " + std::to_string(p.size()) + " bytes, more than " +
                           std::to_string(kMaxPatternBytes));
  }
  std::string out;
  std::vector<bool> groups;  // true: a (?i:...) group
  int ci = 0;                // (?i:...) groups open
  bool after_quantifier = false;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\') {
      ASSIGN_OR_RETURN(const size_t n, TranslateEscape(p, i, false, &out));
      i += n;
      after_quantifier = false;
      continue;
    }
    if (c == '[') {
      // A character class, up to its closing ']'.
      out.push_back('[');
      size_t k = i + 1;
      if (k < p.size() && p[k] == '^') out.push_back(p[k++]);
      if (k < p.size() && p[k] == ']') out += "\\]", ++k;  // a leading ']' is literal
      bool closed = false;
      while (k < p.size()) {
        const char d = p[k];
        if (d == ']') {
          closed = true;
          ++k;
          break;
        }
        if (d == '[') return Unsupported("[", k, p);
        if (d == '&' && k + 1 < p.size() && p[k + 1] == '&') return Unsupported("&&", k, p);
        if (d == '\\') {
          ASSIGN_OR_RETURN(const size_t n, TranslateEscape(p, k, true, &out));
          k += n;
          continue;
        }
        if (ci > 0 && IsAsciiLetter(d)) {
          const bool range_from = k + 2 < p.size() && p[k + 1] == '-' && p[k + 2] != ']';
          const bool range_to = k >= i + 3 && p[k - 1] == '-' && p[k - 2] != '[' && p[k - 2] != '^';
          if (range_from || range_to) {
            return Unsupported(p.substr(k > 0 ? k - 1 : k, 3), k, p);  // a letter range under (?i:)
          }
          out.push_back(d);
          out.push_back(OtherCase(d));
          ++k;
          continue;
        }
        const size_t len = std::min(Utf8Length(static_cast<unsigned char>(d)), p.size() - k);
        out.append(p.substr(k, len));
        k += len;
      }
      if (!closed) return InvalidArgument("pattern '" + Shown(p) + "' has an unterminated character class");
      out.push_back(']');
      i = k;
      after_quantifier = false;
      continue;
    }
    if (c == '(') {
      const std::string_view rest = p.substr(i);
      if (rest.substr(0, 4) == "(?i:") {
        groups.push_back(true);
        ++ci;
        out += "(?:";
        i += 4;
      } else if (rest.substr(0, 4) == "(?<=" || rest.substr(0, 4) == "(?<!") {
        groups.push_back(false);
        out.append(rest.substr(0, 4));
        i += 4;
      } else if (rest.substr(0, 3) == "(?:" || rest.substr(0, 3) == "(?=" || rest.substr(0, 3) == "(?!") {
        groups.push_back(false);
        out.append(rest.substr(0, 3));
        i += 3;
      } else if (rest.substr(0, 2) == "(?") {
        return Unsupported(rest.substr(0, 3), i, p);
      } else {
        groups.push_back(false);
        out.push_back('(');
        ++i;
      }
      after_quantifier = false;
      continue;
    }
    if (c == ')') {
      if (groups.empty()) return InvalidArgument("pattern '" + Shown(p) + "' has an unbalanced ')'");
      if (groups.back()) --ci;
      groups.pop_back();
      out.push_back(')');
      ++i;
      after_quantifier = false;
      continue;
    }
    if (c == '^' || c == '$') return Unsupported(std::string(1, c), i, p);
    if (c == '.') {
      out += "[^\\n]";
      ++i;
      after_quantifier = false;
      continue;
    }
    if (c == '+' || c == '*' || c == '?') {
      if (after_quantifier && c == '+') return Unsupported(p.substr(i - 1, 2), i - 1, p);
      out.push_back(c);
      ++i;
      after_quantifier = true;
      continue;
    }
    if (c == '{') {
      // {n}, {n,}, {n,m}, {,m}; anything else is a literal brace.
      size_t k = i + 1;
      std::string lo, hi;
      while (k < p.size() && std::isdigit(static_cast<unsigned char>(p[k]))) lo.push_back(p[k++]);
      bool comma = false;
      if (k < p.size() && p[k] == ',') {
        comma = true;
        ++k;
        while (k < p.size() && std::isdigit(static_cast<unsigned char>(p[k]))) hi.push_back(p[k++]);
      }
      if (k < p.size() && p[k] == '}' && (!lo.empty() || !hi.empty()) && lo.size() <= 5 && hi.size() <= 5) {
        out += "{" + (lo.empty() ? std::string("0") : lo) + (comma ? "," + hi : "") + "}";
        i = k + 1;
        after_quantifier = true;
      } else {
        out += "\\{";
        ++i;
        after_quantifier = false;
      }
      continue;
    }
    if (c == '}') {
      out += "\\}";
      ++i;
      after_quantifier = false;
      continue;
    }
    if (ci > 0 && IsAsciiLetter(c)) {
      out += "[";
      out.push_back(c);
      out.push_back(OtherCase(c));
      out += "]";
      ++i;
      after_quantifier = false;
      continue;
    }
    const size_t len = std::min(Utf8Length(static_cast<unsigned char>(c)), p.size() - i);
    out.append(p.substr(i, len));
    i += len;
    after_quantifier = false;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Regex

StatusOr<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern, const std::string& shown) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
  if (ctx == nullptr) return Internal("pcre2: out of memory");
  pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, ctx);
  pcre2_compile_context_free(ctx);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("regex '" + Shown(shown) + "' does not compile (as PCRE2 '" + Shown(pattern) +
                           "'): " + reinterpret_cast<const char*>(message) + " at offset " +
                           std::to_string(offset));
  }
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // the interpreter when JIT is unavailable
  return std::unique_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Status Regex::SplitIsolated(std::string_view text, std::vector<std::string_view>* out, bool keep_gaps) const {
  auto* code = static_cast<pcre2_code*>(code_);
  struct MatchData {
    pcre2_match_data* md;
    ~MatchData() { pcre2_match_data_free(md); }
  } data{pcre2_match_data_create(1, nullptr)};
  if (data.md == nullptr) return Internal("pcre2: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t search = 0, prev = 0;
  while (search <= n) {
    const int rc = pcre2_match(code, subject, n, search, PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return InvalidArgument(std::string("pre-tokenizer regex failed on the text: ") +
                             reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t s = ov[0], e = ov[1];
    if (e < s || e > n) return Internal("pre-tokenizer regex returned a bad match");
    if (prev < s && keep_gaps) out->push_back(text.substr(prev, s - prev));
    if (e > s) out->push_back(text.substr(s, e - s));
    prev = e;
    if (e > s) {
      search = e;
    } else {
      if (e >= n) break;
      search = e + Utf8Length(static_cast<unsigned char>(text[e]));
    }
  }
  if (prev < n && keep_gaps) out->push_back(text.substr(prev));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// NFC

StatusOr<std::string> NfcNormalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);
  }
  if (text.size() > (size_t{1} << 30)) return InvalidArgument("text too long to normalize");
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) return Internal(std::string("ICU NFC: ") + u_errorName(err));
  std::u16string utf16(text.size(), u'\0');  // UTF-16 never has more units than UTF-8 bytes
  int32_t len16 = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(utf16.data()), static_cast<int32_t>(utf16.size()), &len16,
                text.data(), static_cast<int32_t>(text.size()), &err);
  if (U_FAILURE(err)) return Internal(std::string("ICU UTF-8 -> UTF-16: ") + u_errorName(err));
  utf16.resize(static_cast<size_t>(len16));
  const auto* src = reinterpret_cast<const UChar*>(utf16.data());
  if (unorm2_isNormalized(nfc, src, len16, &err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  // NFC can grow text (at most 3x in UTF-16 units); ask for the size first when it does.
  std::u16string normalized(static_cast<size_t>(len16) + 16, u'\0');
  int32_t nlen = unorm2_normalize(nfc, src, len16, reinterpret_cast<UChar*>(normalized.data()),
                                  static_cast<int32_t>(normalized.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    normalized.assign(static_cast<size_t>(nlen), u'\0');
    nlen = unorm2_normalize(nfc, src, len16, reinterpret_cast<UChar*>(normalized.data()), nlen, &err);
  }
  if (U_FAILURE(err)) return Internal(std::string("ICU NFC: ") + u_errorName(err));
  std::string out(static_cast<size_t>(nlen) * 3, '\0');
  int32_t len8 = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len8,
              reinterpret_cast<const UChar*>(normalized.data()), nlen, &err);
  if (U_FAILURE(err)) return Internal(std::string("ICU UTF-16 -> UTF-8: ") + u_errorName(err));
  out.resize(static_cast<size_t>(len8));
  return out;
}

// ---------------------------------------------------------------------------------------
// Added tokens

void Bpe::AddedSplitter::Add(const AddedToken& t) {
  auto& list = by_first_byte[static_cast<unsigned char>(t.content[0])];
  list.push_back(t);
  std::stable_sort(list.begin(), list.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  empty = false;
}

template <typename Fn>
Status Bpe::AddedSplitter::Split(std::string_view text, Fn&& fn) const {
  if (empty) return text.empty() ? Status::Ok() : fn(text, -1);
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* match = nullptr;
    for (const AddedToken& t : by_first_byte[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, t.content.size(), t.content) == 0) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    if (i > start) RETURN_IF_ERROR(fn(text.substr(start, i - start), -1));
    RETURN_IF_ERROR(fn(std::string_view(match->content), match->id));
    i += match->content.size();
    start = i;
  }
  if (start < text.size()) RETURN_IF_ERROR(fn(text.substr(start), -1));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Building

namespace {

Status CheckKeys(const json& obj, const std::string& what, std::initializer_list<const char*> allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();  // (no structured binding: clang 14 cannot capture one)
    if (std::find_if(allowed.begin(), allowed.end(), [&key](const char* a) { return key == a; }) == allowed.end()) {
      return Unimplemented(what + " option '" + Shown(key) + "' is not supported");
    }
  }
  return Status::Ok();
}

// A boolean option: absent or null gives `dflt`.
StatusOr<bool> BoolOption(const json& obj, const char* key, bool dflt, const std::string& what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return InvalidArgument(what + " '" + key + "' is not a boolean: " + JsonSnippet(*it));
  return it->get<bool>();
}

}  // namespace

StatusOr<std::shared_ptr<const Bpe>> Bpe::Build(const json& j, const std::vector<std::string>& id_to_token,
                                                const std::vector<bool>& special) {
  std::shared_ptr<Bpe> bpe(new Bpe());
  const json& model = j.at("model");

  // --- model options
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return Unimplemented("BPE model option '" + std::string(key) + "' " + JsonSnippet(*it) + " is not supported");
    }
  }
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null() &&
                                            !(it->is_number() && it->get<double>() == 0.0)) {
    return Unimplemented("BPE dropout " + JsonSnippet(*it) + " is not supported (encoding would be random)");
  }
  ASSIGN_OR_RETURN(const bool byte_fallback, BoolOption(model, "byte_fallback", false, "BPE model"));
  if (byte_fallback) return Unimplemented("BPE byte_fallback (SentencePiece-style BPE) is not supported");
  ASSIGN_OR_RETURN(bpe->ignore_merges_, BoolOption(model, "ignore_merges", false, "BPE model"));
  ASSIGN_OR_RETURN(const bool fuse_unk, BoolOption(model, "fuse_unk", false, "BPE model"));
  (void)fuse_unk;  // with byte-level pieces every byte has a token; unk never fuses

  const json& vocab = model.at("vocab");  // checked by the caller
  bpe->vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) bpe->vocab_[token] = id.get<int32_t>();
  if (const auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument("BPE unk_token is not a string: " + JsonSnippet(*it));
    const auto v = bpe->vocab_.find(it->get<std::string>());
    if (v == bpe->vocab_.end()) return InvalidArgument("BPE unk_token '" + Shown(it->get<std::string>()) + "' is not in the vocabulary");
    bpe->unk_id_ = v->second;
  }

  ByteLevelChars(bpe->byte_chars_);
  for (int b = 0; b < 256; ++b) {
    const auto v = bpe->vocab_.find(bpe->byte_chars_[b]);
    bpe->byte_ids_[b] = v == bpe->vocab_.end() ? -1 : v->second;
  }

  // --- merges: "a b" strings or [a, b] pairs; a later duplicate takes the later rank, as in
  // the Rust and JS libraries.
  const auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) {
    return InvalidArgument("BPE model has no 'merges' list");
  }
  const json& merges = *merges_it;
  if (merges.size() > kMaxMerges) return InvalidArgument("BPE model has more than " + std::to_string(kMaxMerges) + " merges");
  bpe->merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    std::string a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 >= s.size() || s.find(' ', space + 1) != std::string::npos) {
        return InvalidArgument("BPE merges[" + std::to_string(r) + "] '" + Shown(s) + "' is not two tokens separated by one space");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return InvalidArgument("BPE merges[" + std::to_string(r) + "] " + JsonSnippet(m) + " is neither \"a b\" nor [a, b]");
    }
    const auto ia = bpe->vocab_.find(a), ib = bpe->vocab_.find(b), iab = bpe->vocab_.find(a + b);
    if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end() || iab == bpe->vocab_.end()) {
      const std::string& missing = ia == bpe->vocab_.end() ? a : ib == bpe->vocab_.end() ? b : a + b;
      return InvalidArgument("BPE merges[" + std::to_string(r) + "] (" + Shown(a) + ", " + Shown(b) + "): token '" +
                             Shown(missing) + "' is not in the vocabulary");
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
    bpe->merges_[key] = {static_cast<int32_t>(r), iab->second};
  }

  // --- normalizer: null, NFC, or a Sequence of those
  std::vector<const json*> pending;
  if (const auto it = j.find("normalizer"); it != j.end()) pending.push_back(&*it);
  for (size_t k = 0; k < pending.size(); ++k) {
    const json& n = *pending[k];
    if (n.is_null()) continue;
    if (k > 64) return InvalidArgument("tokenizer normalizer nests too deeply");
    const std::string type = TypeOf(n);
    if (type == "NFC") {
      bpe->nfc_ = true;
    } else if (type == "Sequence") {
      const auto list = n.find("normalizers");
      if (list == n.end() || !list->is_array()) return InvalidArgument("normalizer Sequence has no 'normalizers' list");
      for (const json& x : *list) pending.push_back(&x);
    } else if (type.empty()) {
      return InvalidArgument("tokenizer normalizer " + JsonSnippet(n) + " has no string 'type'");
    } else {
      return Unimplemented("tokenizer normalizer type '" + Shown(type) + "' is not supported (supported: NFC, Sequence)");
    }
  }

  // --- pre-tokenizer: Split(regex or string, Isolated)* then ByteLevel
  std::vector<const json*> steps;
  if (const auto it = j.find("pre_tokenizer"); it != j.end() && !it->is_null()) {
    if (TypeOf(*it) == "Sequence") {
      const auto list = it->find("pretokenizers");
      if (list == it->end() || !list->is_array()) return InvalidArgument("pre_tokenizer Sequence has no 'pretokenizers' list");
      for (const json& x : *list) steps.push_back(&x);
    } else {
      steps.push_back(&*it);
    }
  }
  if (steps.size() > kMaxPreTokenizers) return InvalidArgument("pre_tokenizer Sequence is longer than " + std::to_string(kMaxPreTokenizers));
  bool byte_level = false;
  for (size_t k = 0; k < steps.size(); ++k) {
    const json& s = *steps[k];
    const std::string type = TypeOf(s);
    const std::string what = "pre_tokenizer " + (type.empty() ? JsonSnippet(s) : type);
    if (byte_level) return Unimplemented("pre_tokenizer " + what + " after ByteLevel is not supported (ByteLevel must come last)");
    if (type == "Split") {
      RETURN_IF_ERROR(CheckKeys(s, what, {"type", "pattern", "behavior", "invert"}));
      const auto behavior = s.find("behavior");
      if (behavior == s.end() || !behavior->is_string()) return InvalidArgument(what + " has no string 'behavior'");
      if (*behavior != "Isolated") {
        return Unimplemented(what + " behavior '" + Shown(behavior->get<std::string>()) + "' is not supported (supported: Isolated)");
      }
      ASSIGN_OR_RETURN(const bool invert, BoolOption(s, "invert", false, what));
      if (invert) return Unimplemented(what + " with invert true is not supported");
      const auto pattern = s.find("pattern");
      if (pattern == s.end() || !pattern->is_object() || pattern->size() != 1) {
        return InvalidArgument(what + " has no 'pattern' {\"Regex\": ...} or {\"String\": ...}");
      }
      std::string pcre;
      std::string source;
      if (pattern->contains("Regex") && pattern->at("Regex").is_string()) {
        source = pattern->at("Regex").get<std::string>();
        ASSIGN_OR_RETURN(pcre, OnigurumaToPcre2(source));
      } else if (pattern->contains("String") && pattern->at("String").is_string()) {
        source = pattern->at("String").get<std::string>();
        if (source.size() > kMaxPatternBytes) return InvalidArgument(what + " pattern is longer than " + std::to_string(kMaxPatternBytes) + " bytes");
        // \Q...\E quotes everything but "\E" itself.
        size_t from = 0;
        for (size_t e = source.find("\\E"); e != std::string::npos; e = source.find("\\E", from)) {
          pcre += "\\Q" + source.substr(from, e - from) + "\\E\\\\E";
          from = e + 2;
        }
        pcre += "\\Q" + source.substr(from) + "\\E";
        pcre = "(?:" + pcre + ")";
      } else {
        return InvalidArgument(what + " 'pattern' " + JsonSnippet(*pattern) + " is not {\"Regex\": string} or {\"String\": string}");
      }
      if (!IsValidUtf8(source)) return InvalidArgument(what + " pattern is not valid UTF-8");
      ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(pcre, source));
      bpe->splits_.push_back({std::move(regex)});
    } else if (type == "ByteLevel") {
      RETURN_IF_ERROR(CheckKeys(s, what, {"type", "add_prefix_space", "trim_offsets", "use_regex"}));
      ASSIGN_OR_RETURN(bpe->add_prefix_space_, BoolOption(s, "add_prefix_space", false, what));
      ASSIGN_OR_RETURN(const bool trim_offsets, BoolOption(s, "trim_offsets", false, what));
      (void)trim_offsets;  // offsets only
      ASSIGN_OR_RETURN(const bool use_regex, BoolOption(s, "use_regex", true, what));
      if (use_regex) {
        // The reference's own GPT-2 pattern, where \s is JavaScript's \s: White_Space without
        // U+0085, plus U+FEFF (the ECMAScript definition).
        const std::string js_space = "\\t\\n\\x{0B}\\f\\r\\p{Zs}\\x{2028}\\x{2029}\\x{FEFF}";
        const std::string pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + js_space + "\\p{L}\\p{N}]+|[" +
                                    js_space + "]+(?![^" + js_space + "])|[" + js_space + "]+";
        ASSIGN_OR_RETURN(bpe->byte_level_regex_, Regex::Compile(pattern, "ByteLevel GPT-2 pattern"));
      }
      byte_level = true;
    } else if (type.empty()) {
      return InvalidArgument("tokenizer pre_tokenizer " + JsonSnippet(s) + " has no string 'type'");
    } else {
      return Unimplemented("tokenizer pre_tokenizer type '" + Shown(type) +
                           "' is not supported with a BPE model (supported: Split, ByteLevel, Sequence)");
    }
  }
  if (!byte_level) {
    return Unimplemented("BPE without a ByteLevel pre_tokenizer (e.g. SentencePiece-style Metaspace BPE) is not supported");
  }

  // --- decoder: ByteLevel
  {
    const auto it = j.find("decoder");
    const json d = it == j.end() ? json() : *it;
    const std::string type = TypeOf(d);
    if (d.is_null()) return Unimplemented("BPE without a decoder is not supported (expected decoder ByteLevel)");
    if (type.empty()) return InvalidArgument("tokenizer decoder " + JsonSnippet(d) + " has no string 'type'");
    if (type != "ByteLevel") return Unimplemented("tokenizer decoder type '" + Shown(type) + "' is not supported (supported: ByteLevel)");
  }

  // --- post-processor: null, ByteLevel (offsets only), TemplateProcessing, or a Sequence
  {
    std::vector<const json*> post;
    if (const auto it = j.find("post_processor"); it != j.end() && !it->is_null()) {
      if (TypeOf(*it) == "Sequence") {
        const auto list = it->find("processors");
        if (list == it->end() || !list->is_array() || list->size() > kMaxPreTokenizers) {
          return InvalidArgument("post_processor Sequence has no (short) 'processors' list");
        }
        for (const json& x : *list) post.push_back(&x);
      } else {
        post.push_back(&*it);
      }
    }
    bool have_template = false;
    for (const json* p : post) {
      const std::string type = TypeOf(*p);
      if (type == "ByteLevel") continue;
      if (type != "TemplateProcessing") {
        if (type.empty()) return InvalidArgument("tokenizer post_processor " + JsonSnippet(*p) + " has no string 'type'");
        return Unimplemented("tokenizer post_processor type '" + Shown(type) +
                             "' is not supported (supported: ByteLevel, TemplateProcessing, Sequence)");
      }
      if (have_template) return Unimplemented("more than one TemplateProcessing post_processor is not supported");
      have_template = true;
      const auto single = p->find("single");
      if (single == p->end() || !single->is_array() || single->size() > 64) {
        return InvalidArgument("TemplateProcessing has no (short) 'single' list");
      }
      const json specials = p->value("special_tokens", json::object());
      bool sequence = false;
      for (const json& item : *single) {
        if (item.is_object() && item.contains("Sequence")) {
          const json& seq = item.at("Sequence");
          if (!seq.is_object() || seq.value("id", json()) != "A") {
            return InvalidArgument("TemplateProcessing 'single' item " + JsonSnippet(item) + " is not sequence A");
          }
          bpe->template_single_.push_back(-1);
          sequence = true;
        } else if (item.is_object() && item.contains("SpecialToken") && item.at("SpecialToken").is_object() &&
                   item.at("SpecialToken").contains("id") && item.at("SpecialToken").at("id").is_string()) {
          const std::string name = item.at("SpecialToken").at("id").get<std::string>();
          std::vector<int32_t> ids;
          if (specials.is_object() && specials.contains(name)) {
            const json& entry = specials.at(name);
            if (!entry.is_object() || !entry.contains("ids") || !entry.at("ids").is_array() || entry.at("ids").size() > 64) {
              return InvalidArgument("TemplateProcessing special_tokens['" + Shown(name) + "'] has no 'ids' list");
            }
            for (const json& id : entry.at("ids")) {
              ASSIGN_OR_RETURN(const int64_t v, JsonInt(id, "TemplateProcessing special token id", 0, static_cast<int64_t>(id_to_token.size()) - 1));
              ids.push_back(static_cast<int32_t>(v));
            }
          } else {
            const auto v = std::find(id_to_token.begin(), id_to_token.end(), name);
            if (v == id_to_token.end()) return InvalidArgument("TemplateProcessing special token '" + Shown(name) + "' is not in the vocabulary");
            ids.push_back(static_cast<int32_t>(v - id_to_token.begin()));
          }
          bpe->template_single_.insert(bpe->template_single_.end(), ids.begin(), ids.end());
        } else {
          return InvalidArgument("TemplateProcessing 'single' item " + JsonSnippet(item) + " is not a SpecialToken or Sequence");
        }
      }
      if (!sequence) return InvalidArgument("TemplateProcessing 'single' has no Sequence A");
    }
  }

  // --- added tokens (content, id and special were checked by the caller)
  bpe->added_.assign(id_to_token.size(), false);
  bpe->special_ = special;
  if (const auto it = j.find("added_tokens"); it != j.end() && it->is_array()) {
    for (size_t k = 0; k < it->size(); ++k) {
      const json& t = (*it)[k];
      const std::string what = "tokenizer added_tokens[" + std::to_string(k) + "]";
      for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        ASSIGN_OR_RETURN(const bool on, BoolOption(t, flag, false, what));
        if (on) return Unimplemented(what + " has '" + std::string(flag) + "': true, which is not supported");
      }
      const bool is_special = t.value("special", json(false)).get<bool>();
      ASSIGN_OR_RETURN(const bool normalized, BoolOption(t, "normalized", !is_special, what));
      AddedToken added{t.at("content").get<std::string>(), static_cast<int32_t>(t.at("id").get<int64_t>())};
      bpe->added_[static_cast<size_t>(added.id)] = true;
      if (normalized && bpe->nfc_) {
        if (!IsValidUtf8(added.content)) return InvalidArgument(what + " content is not valid UTF-8");
        ASSIGN_OR_RETURN(added.content, NfcNormalize(added.content));
        if (added.content.empty()) continue;
        bpe->normalized_added_.Add(added);
      } else {
        bpe->raw_added_.Add(added);
      }
    }
  }

  // --- what each id decodes to: added tokens as written, others through the byte map (a
  // token with a character outside the map decodes to its own UTF-8, as the Rust library).
  std::unordered_map<std::string, unsigned char> char_to_byte;
  for (int b = 0; b < 256; ++b) char_to_byte[bpe->byte_chars_[b]] = static_cast<unsigned char>(b);
  bpe->token_bytes_.resize(id_to_token.size());
  for (size_t id = 0; id < id_to_token.size(); ++id) {
    const std::string& tok = id_to_token[id];
    if (tok.empty() || bpe->added_[id]) {
      bpe->token_bytes_[id] = tok;
      continue;
    }
    std::string bytes;
    bool mapped = true;
    for (size_t k = 0; k < tok.size();) {
      const size_t len = std::min(Utf8Length(static_cast<unsigned char>(tok[k])), tok.size() - k);
      const auto c = char_to_byte.find(tok.substr(k, len));
      if (c == char_to_byte.end()) {
        mapped = false;
        break;
      }
      bytes.push_back(static_cast<char>(c->second));
      k += len;
    }
    bpe->token_bytes_[id] = mapped ? bytes : tok;
  }
  return std::shared_ptr<const Bpe>(std::move(bpe));
}

// ---------------------------------------------------------------------------------------
// Encoding

struct Bpe::Scratch {
  std::vector<std::string_view> pieces, next_pieces, words;
  std::vector<int32_t> ids, prev, next;
};

int32_t Bpe::MergedId(int32_t a, int32_t b, int32_t* rank) const {
  if (a < 0 || b < 0) return -1;
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  const auto it = merges_.find(key);
  if (it == merges_.end()) return -1;
  *rank = it->second.first;
  return it->second.second;
}

Status Bpe::EncodeWord(std::string_view word, std::vector<int32_t>* out, Scratch* s) const {
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    const auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  const size_t begin = out->size();
  bool whole = false;
  if (ignore_merges_) {
    std::string chars;
    for (unsigned char b : word) chars += byte_chars_[b];
    const auto it = vocab_.find(chars);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    // Symbols in a linked list; a heap of candidate merges ordered by (rank, position), checked
    // for staleness when popped. Equals applying the lowest-ranked adjacent pair, leftmost
    // first, until none applies (the reference's order).
    const size_t m = word.size();
    auto& ids = s->ids;
    auto& prev = s->prev;
    auto& next = s->next;
    ids.resize(m);
    prev.resize(m);
    next.resize(m);
    for (size_t k = 0; k < m; ++k) {
      ids[k] = byte_ids_[static_cast<unsigned char>(word[k])];
      prev[k] = static_cast<int32_t>(k) - 1;
      next[k] = k + 1 < m ? static_cast<int32_t>(k + 1) : -1;
    }
    struct Candidate {
      int32_t rank, pos, left, right;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto consider = [&](int32_t pos) {
      if (pos < 0 || next[pos] < 0) return;
      int32_t rank = 0;
      if (MergedId(ids[pos], ids[next[pos]], &rank) >= 0) heap.push({rank, pos, ids[pos], ids[next[pos]]});
    };
    for (size_t k = 0; k + 1 < m; ++k) consider(static_cast<int32_t>(k));
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const int32_t r = next[c.pos];
      if (ids[c.pos] != c.left || r < 0 || ids[r] != c.right) continue;  // stale
      int32_t rank = 0;
      ids[c.pos] = MergedId(c.left, c.right, &rank);
      ids[r] = -2;  // removed
      next[c.pos] = next[r];
      if (next[r] >= 0) prev[next[r]] = c.pos;
      consider(prev[c.pos]);
      consider(c.pos);
    }
    for (int32_t k = m > 0 ? 0 : -1; k >= 0; k = next[k]) {
      int32_t id = ids[k];
      if (id < 0) {
        if (unk_id_ < 0) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(word[k]));
          return InvalidArgument(std::string("byte ") + hex + " has no token in the BPE vocabulary and there is no unk_token");
        }
        id = unk_id_;
      }
      out->push_back(id);
    }
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out->begin() + static_cast<std::ptrdiff_t>(begin), out->end()));
  }
  return Status::Ok();
}

Status Bpe::EncodeSection(std::string_view section, std::vector<int32_t>* ids, Scratch* s) const {
  // Pre-tokenize: each Split in turn over the pieces, then ByteLevel.
  auto& pieces = s->pieces;
  pieces.assign(1, section);
  for (const PreSplit& split : splits_) {
    auto& next = s->next_pieces;
    next.clear();
    for (std::string_view piece : pieces) RETURN_IF_ERROR(split.regex->SplitIsolated(piece, &next));
    pieces.swap(next);
  }
  std::vector<std::string> prefixed;  // owns pieces given a prefix space
  if (add_prefix_space_) {
    prefixed.reserve(pieces.size());
    for (std::string_view& piece : pieces) {
      if (!piece.empty() && piece.front() == ' ') continue;
      prefixed.push_back(" " + std::string(piece));
      piece = prefixed.back();
    }
  }
  for (std::string_view piece : pieces) {
    if (piece.empty()) continue;
    if (byte_level_regex_ == nullptr) {
      RETURN_IF_ERROR(EncodeWord(piece, ids, s));
      continue;
    }
    // The GPT-2 pattern's matches only (gaps are dropped, as String.match does).
    auto& words = s->words;
    words.clear();
    RETURN_IF_ERROR(byte_level_regex_->SplitIsolated(piece, &words, /*keep_gaps=*/false));
    for (std::string_view w : words) RETURN_IF_ERROR(EncodeWord(w, ids, s));
  }
  return Status::Ok();
}

Status Bpe::Encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>* ids) const {
  Scratch scratch;
  std::vector<int32_t> body;
  RETURN_IF_ERROR(raw_added_.Split(text, [&](std::string_view section, int32_t added) -> Status {
    if (added >= 0) {
      body.push_back(added);
      return Status::Ok();
    }
    std::string normalized;
    std::string_view sub = section;
    if (nfc_) {
      ASSIGN_OR_RETURN(normalized, NfcNormalize(section));
      sub = normalized;
    }
    return normalized_added_.Split(sub, [&](std::string_view piece, int32_t id) -> Status {
      if (id >= 0) {
        body.push_back(id);
        return Status::Ok();
      }
      return EncodeSection(piece, &body, &scratch);
    });
  }));
  if (add_special_tokens && !template_single_.empty()) {
    for (int32_t id : template_single_) {
      if (id < 0) {
        ids->insert(ids->end(), body.begin(), body.end());
      } else {
        ids->push_back(id);
      }
    }
  } else {
    ids->insert(ids->end(), body.begin(), body.end());
  }
  return Status::Ok();
}

std::string Bpe::Decode(const std::vector<int32_t>& ids, int32_t stop_id, bool skip_special) const {
  std::string text, run;
  auto flush = [&] {
    if (!run.empty()) text += ReplaceInvalidUtf8(run);
    run.clear();
  };
  for (int32_t id : ids) {
    if (stop_id >= 0 && id == stop_id) break;
    if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size() || token_bytes_[static_cast<size_t>(id)].empty()) {
      flush();
      text += "\xEF\xBF\xBD";
      continue;
    }
    const auto u = static_cast<size_t>(id);
    if (skip_special && special_[u]) continue;
    if (added_[u]) {
      flush();
      text += token_bytes_[u];
    } else {
      run += token_bytes_[u];
    }
  }
  flush();
  return text;
}

}  // namespace tediserve::engine::tokenizer_internal
