// The Jinja subset of chat templates (chat_template.h): a lexer and preprocessing that follow
// @huggingface/jinja's rules (trim_blocks and lstrip_blocks on, one trailing newline dropped,
// whitespace control), a recursive-descent parser with that library's operator precedence, a
// check pass for unsupported constructs, and a tree-walking evaluator over reference-counted
// values with the reference's value semantics (JavaScript numbers and string conversion,
// JSON.stringify for tojson). Written from the behaviour of the reference, not from its code.
#include "engine/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/input.h"

namespace tediserve::engine {
namespace chat_template_internal {
namespace {

// ---------------------------------------------------------------------------------------
// Errors: one exception type inside this file, turned into a Status at the API boundary.

struct TemplateError {
  size_t pos;  // offset in the original template text, or npos when unknown
  std::string message;
};
constexpr size_t kNoPos = static_cast<size_t>(-1);

[[noreturn]] void Fail(size_t pos, std::string message) { throw TemplateError{pos, std::move(message)}; }

// ---------------------------------------------------------------------------------------
// UTF-8 helpers. Strings are UTF-8 here and UTF-16 in the reference; the operations whose
// results depend on the encoding (length, indexing) count UTF-16 code units as it does.

// Decodes the code point at s[i] (valid UTF-8 assumed; invalid bytes read as themselves).
uint32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) & 0x3Fu : 0u; };
  if (c < 0x80) { *len = 1; return c; }
  if ((c >> 5) == 0x6 && i + 1 < s.size()) { *len = 2; return ((c & 0x1Fu) << 6) | cont(1); }
  if ((c >> 4) == 0xE && i + 2 < s.size()) { *len = 3; return ((c & 0x0Fu) << 12) | (cont(1) << 6) | cont(2); }
  if ((c >> 3) == 0x1E && i + 3 < s.size()) {
    *len = 4;
    return ((c & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
  }
  *len = 1;
  return c;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// JavaScript's whitespace (String.prototype.trim, \s): Unicode spaces and line terminators.
bool IsJsSpace(uint32_t c) {
  if (c <= 32) return c == 32 || (c >= 9 && c <= 13);
  return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

size_t SpaceLenAt(std::string_view s, size_t i) {
  size_t len;
  return IsJsSpace(DecodeAt(s, i, &len)) ? len : 0;
}

std::string_view TrimStart(std::string_view s) {
  size_t i = 0, n;
  while (i < s.size() && (n = SpaceLenAt(s, i)) > 0) i += n;
  return s.substr(i);
}

std::string_view TrimEnd(std::string_view s) {
  size_t end = 0, i = 0;
  while (i < s.size()) {
    size_t len;
    const uint32_t c = DecodeAt(s, i, &len);
    i += len;
    if (!IsJsSpace(c)) end = i;
  }
  return s.substr(0, end);
}

std::string_view Trim(std::string_view s) { return TrimEnd(TrimStart(s)); }

// Length in UTF-16 code units.
double Utf16Length(std::string_view s) {
  double n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t c = DecodeAt(s, i, &len);
    n += c >= 0x10000 ? 2 : 1;
    i += len;
  }
  return n;
}

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    DecodeAt(s, i, &len);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}
bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// ---------------------------------------------------------------------------------------
// JavaScript number formatting (Number.prototype.toString, radix 10).

std::string JsNumber(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e_at = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_at; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp10 = std::stoi(sci.substr(e_at + 1));
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;
  std::string out = v < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(n - k, '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, n) + "." + digits.substr(n);
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(-n, '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += "e";
    out += (n - 1 >= 0 ? "+" : "-");
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

// JavaScript's StringToNumber, for loose equality between a string and a number.
double JsStringToNumber(std::string_view raw) {
  std::string s(Trim(raw));
  if (s.empty()) return 0;
  auto all = [&](size_t from, auto pred) {
    if (from >= s.size()) return false;
    for (size_t i = from; i < s.size(); ++i)
      if (!pred(s[i])) return false;
    return true;
  };
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && all(2, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }))
    return static_cast<double>(std::stoull(s.substr(2), nullptr, 16));
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O') && all(2, [](char c) { return c >= '0' && c <= '7'; }))
    return static_cast<double>(std::stoull(s.substr(2), nullptr, 8));
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B') && all(2, [](char c) { return c == '0' || c == '1'; }))
    return static_cast<double>(std::stoull(s.substr(2), nullptr, 2));
  size_t i = 0;
  bool neg = false;
  if (s[i] == '+' || s[i] == '-') neg = s[i++] == '-';
  if (s.substr(i) == "Infinity") return neg ? -INFINITY : INFINITY;
  // StrUnsignedDecimalLiteral: digits [. digits] [e [+-] digits], or . digits [...]
  size_t j = i, int_digits = 0, frac_digits = 0;
  while (j < s.size() && IsDigit(s[j])) ++j, ++int_digits;
  if (j < s.size() && s[j] == '.') {
    ++j;
    while (j < s.size() && IsDigit(s[j])) ++j, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return NAN;
  if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
    size_t k = j + 1;
    if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
    size_t exp_digits = 0;
    while (k < s.size() && IsDigit(s[k])) ++k, ++exp_digits;
    if (exp_digits == 0) return NAN;
    j = k;
  }
  if (j != s.size()) return NAN;
  return std::strtod(s.c_str(), nullptr);
}

// JSON.stringify of a string.
void JsonQuote(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      default: break;
    }
    const auto u = static_cast<unsigned char>(c);
    char buf[16];
    if (u < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
      ++i;
      continue;
    }
    size_t len;
    const uint32_t cp = DecodeAt(s, i, &len);
    if (ensure_ascii && cp >= 0x7F) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  out += '"';
}

// ---------------------------------------------------------------------------------------
// Preprocessing, as the reference applies it before lexing: drop one trailing newline;
// lstrip_blocks (spaces and tabs at a line's start before "{%", "{#" or "{-"); trim_blocks
// (the newline after "%}", "#}" or "-}"); {% generation %} tags removed. `origin` maps each
// byte of the result to its offset in the source, for line and column numbers.

struct Preprocessed {
  std::string text;
  std::vector<uint32_t> origin;
};

bool IsLineTerminatorBefore(std::string_view s, size_t i) {
  // Whether position i starts a line: i == 0 or s[i-1] ends a JavaScript line terminator.
  if (i == 0) return true;
  const char p = s[i - 1];
  if (p == '\n' || p == '\r') return true;
  // U+2028, U+2029: E2 80 A8 / E2 80 A9
  return i >= 3 && static_cast<unsigned char>(s[i - 3]) == 0xE2 && static_cast<unsigned char>(s[i - 2]) == 0x80 &&
         (static_cast<unsigned char>(p) == 0xA8 || static_cast<unsigned char>(p) == 0xA9);
}

Preprocessed Preprocess(std::string_view src) {
  Preprocessed a;
  size_t n = src.size();
  if (n > 0 && src[n - 1] == '\n') --n;
  a.text.reserve(n);
  a.origin.reserve(n);
  // lstrip_blocks
  for (size_t i = 0; i < n;) {
    if (IsLineTerminatorBefore(src, i)) {
      size_t j = i;
      while (j < n && (src[j] == ' ' || src[j] == '\t')) ++j;
      if (j + 1 < n && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-')) {
        a.text += src[j];
        a.text += src[j + 1];
        a.origin.push_back(static_cast<uint32_t>(j));
        a.origin.push_back(static_cast<uint32_t>(j + 1));
        i = j + 2;
        continue;
      }
    }
    a.text += src[i];
    a.origin.push_back(static_cast<uint32_t>(i));
    ++i;
  }
  // trim_blocks
  Preprocessed b;
  b.text.reserve(a.text.size());
  b.origin.reserve(a.text.size());
  const std::string& t = a.text;
  for (size_t i = 0; i < t.size();) {
    if (i + 2 < t.size() && (t[i] == '#' || t[i] == '%' || t[i] == '-') && t[i + 1] == '}' && t[i + 2] == '\n') {
      b.text += t[i];
      b.text += t[i + 1];
      b.origin.push_back(a.origin[i]);
      b.origin.push_back(a.origin[i + 1]);
      i += 3;
      continue;
    }
    b.text += t[i];
    b.origin.push_back(a.origin[i]);
    ++i;
  }
  // {% generation %} / {% endgeneration %} (with optional '-' markers) removed.
  Preprocessed c;
  const std::string& u = b.text;
  size_t last = 0;
  for (size_t i = 0; i + 1 < u.size(); ++i) {
    if (u[i] != '{' || u[i + 1] != '%') continue;
    size_t j = i + 2;
    const bool lstrip = j < u.size() && u[j] == '-';
    if (lstrip) ++j;
    size_t w;
    while (j < u.size() && (w = SpaceLenAt(u, j)) > 0) j += w;
    if (u.compare(j, 3, "end") == 0) j += 3;
    if (u.compare(j, 10, "generation") != 0) continue;
    j += 10;
    while (j < u.size() && (w = SpaceLenAt(u, j)) > 0) j += w;
    const bool rstrip = j < u.size() && u[j] == '-';
    if (rstrip) ++j;
    if (u.compare(j, 2, "%}") != 0) continue;
    j += 2;
    const size_t after_begin = j;
    while (j < u.size() && (w = SpaceLenAt(u, j)) > 0) j += w;
    size_t end = i;
    if (lstrip) {
      // Strip whitespace before the tag, not going back past the previous tag.
      while (end > last) {
        size_t k = end - 1;
        while (k > last && (static_cast<unsigned char>(u[k]) & 0xC0) == 0x80) --k;
        size_t len;
        if (!IsJsSpace(DecodeAt(u, k, &len))) break;
        end = k;
      }
    }
    c.text.append(u, last, end - last);
    c.origin.insert(c.origin.end(), b.origin.begin() + last, b.origin.begin() + end);
    if (!rstrip) {
      c.text.append(u, after_begin, j - after_begin);
      c.origin.insert(c.origin.end(), b.origin.begin() + after_begin, b.origin.begin() + j);
    }
    last = j;
    i = j - 1;
  }
  c.text.append(u, last, std::string::npos);
  c.origin.insert(c.origin.end(), b.origin.begin() + last, b.origin.end());
  return c;
}

// ---------------------------------------------------------------------------------------
// Lexer

enum class Tok {
  kText, kNumber, kString, kIdent, kEquals, kLParen, kRParen, kOpenStmt, kCloseStmt, kOpenExpr,
  kCloseExpr, kLBracket, kRBracket, kLBrace, kRBrace, kComma, kDot, kColon, kPipe, kAdditive,
  kMultiplicative, kPower, kComparison, kUnary, kComment,
  kStart  // no token yet
};

const char* TokName(Tok t) {
  switch (t) {
    case Tok::kText: return "text";
    case Tok::kNumber: return "number";
    case Tok::kString: return "string";
    case Tok::kIdent: return "identifier";
    case Tok::kEquals: return "'='";
    case Tok::kLParen: return "'('";
    case Tok::kRParen: return "')'";
    case Tok::kOpenStmt: return "'{%'";
    case Tok::kCloseStmt: return "'%}'";
    case Tok::kOpenExpr: return "'{{'";
    case Tok::kCloseExpr: return "'}}'";
    case Tok::kLBracket: return "'['";
    case Tok::kRBracket: return "']'";
    case Tok::kLBrace: return "'{'";
    case Tok::kRBrace: return "'}'";
    case Tok::kComma: return "','";
    case Tok::kDot: return "'.'";
    case Tok::kColon: return "':'";
    case Tok::kPipe: return "'|'";
    case Tok::kAdditive: return "operator";
    case Tok::kMultiplicative: return "operator";
    case Tok::kPower: return "'**'";
    case Tok::kComparison: return "comparison";
    case Tok::kUnary: return "unary operator";
    case Tok::kComment: return "comment";
    case Tok::kStart: return "start";
  }
  return "token";
}

struct Token {
  Tok type;
  std::string value;
  size_t pos;  // original offset
};

class Lexer {
 public:
  explicit Lexer(const Preprocessed& p) : p_(p), s_(p.text) {}

  std::vector<Token> Run() {
    size_t curly_depth = 0;
    while (i_ < s_.size()) {
      const Tok last = tokens_.empty() ? Tok::kStart : tokens_.back().type;
      if (last == Tok::kStart || last == Tok::kCloseStmt || last == Tok::kCloseExpr || last == Tok::kComment) {
        size_t end = i_;
        while (true) {
          end = s_.find('{', end);
          if (end == std::string::npos) { end = s_.size(); break; }
          const char next = end + 1 < s_.size() ? s_[end + 1] : '\0';
          if (next == '%' || next == '{' || next == '#') break;
          ++end;
        }
        if (end > i_) {
          Push(Tok::kText, s_.substr(i_, end - i_), i_);
          i_ = end;
          continue;
        }
      }
      if (s_[i_] == '{') {
        const char next = At(i_ + 1);
        if (next == '#') {
          const size_t start = i_;
          i_ += 2;
          const bool strip_before = At(i_) == '-';
          if (strip_before) ++i_;
          const size_t end = s_.find("#}", i_);
          if (end == std::string::npos) Fail(Orig(start), "comment '{#' is never closed with '#}'");
          std::string comment = s_.substr(i_, end - i_);
          const bool strip_after = !comment.empty() && comment.back() == '-';
          if (strip_after) comment.pop_back();
          if (strip_before) StripTrailing();
          Push(Tok::kComment, std::move(comment), start);
          i_ = end + 2;
          if (strip_after) SkipSpace();
          continue;
        }
        if (At(i_ + 2) == '-' && (next == '%' || next == '{')) {
          StripTrailing();
          Push(next == '%' ? Tok::kOpenStmt : Tok::kOpenExpr, next == '%' ? "{%" : "{{", i_);
          if (next == '{') curly_depth = 0;
          i_ += 3;
          continue;
        }
      }
      ConsumeWhileSpace();
      const char c = s_[i_];
      if (c == '-' && At(i_ + 2) == '}' && (At(i_ + 1) == '%' || At(i_ + 1) == '}')) {
        Push(At(i_ + 1) == '%' ? Tok::kCloseStmt : Tok::kCloseExpr, At(i_ + 1) == '%' ? "%}" : "}}", i_);
        i_ += 3;
        SkipSpace();
        continue;
      }
      if (c == '-' || c == '+') {
        if (last == Tok::kStart || last == Tok::kText) Fail(Orig(i_), std::string("unexpected character '") + c + "'");
        const bool binary = last == Tok::kIdent || last == Tok::kNumber || last == Tok::kString ||
                            last == Tok::kRParen || last == Tok::kRBracket;
        if (!binary) {
          const size_t start = i_;
          ++i_;
          std::string num = ConsumeDigits();
          if (!num.empty() && At(i_) == '.' && IsDigit(At(i_ + 1))) {
            ++i_;
            num += "." + ConsumeDigits();
          }
          if (num.empty()) Push(Tok::kUnary, std::string(1, c), start);
          else Push(Tok::kNumber, c + num, start);
          continue;
        }
      }
      if (MatchOperator(curly_depth)) continue;
      if (c == '\'' || c == '"') {
        const size_t start = i_;
        ++i_;
        std::string str = ConsumeString(c, start);
        Push(Tok::kString, std::move(str), start);
        ++i_;
        continue;
      }
      if (IsDigit(c)) {
        const size_t start = i_;
        std::string num = ConsumeDigits();
        if (last != Tok::kDot && At(i_) == '.' && IsDigit(At(i_ + 1))) {
          ++i_;
          num += "." + ConsumeDigits();
        }
        Push(Tok::kNumber, std::move(num), start);
        continue;
      }
      if (IsWordChar(c)) {
        const size_t start = i_;
        while (IsWordChar(s_[i_])) {
          if (++i_ >= s_.size()) Fail(Orig(start), "unexpected end of template");
        }
        Push(Tok::kIdent, s_.substr(start, i_ - start), start);
        continue;
      }
      size_t len;
      DecodeAt(s_, i_, &len);
      Fail(Orig(i_), "unexpected character '" + s_.substr(i_, len) + "'");
    }
    return std::move(tokens_);
  }

 private:
  char At(size_t k) const { return k < s_.size() ? s_[k] : '\0'; }
  size_t Orig(size_t k) const { return k < p_.origin.size() ? p_.origin[k] : (p_.origin.empty() ? 0 : p_.origin.back() + 1); }
  void Push(Tok t, std::string v, size_t at) { tokens_.push_back(Token{t, std::move(v), Orig(at)}); }

  void StripTrailing() {
    if (!tokens_.empty() && tokens_.back().type == Tok::kText) {
      tokens_.back().value = std::string(TrimEnd(tokens_.back().value));
      if (tokens_.back().value.empty()) tokens_.pop_back();
    }
  }
  void SkipSpace() {
    size_t n;
    while (i_ < s_.size() && (n = SpaceLenAt(s_, i_)) > 0) i_ += n;
  }
  // Whitespace inside a tag; running into the end of the template is an error (a tag that
  // is never closed).
  void ConsumeWhileSpace() {
    size_t n;
    const size_t start = i_;
    while ((n = SpaceLenAt(s_, i_)) > 0) {
      i_ += n;
      if (i_ >= s_.size()) Fail(Orig(start), "unexpected end of template (a tag is not closed)");
    }
  }
  std::string ConsumeDigits() {
    const size_t start = i_;
    while (i_ < s_.size() && IsDigit(s_[i_])) {
      if (++i_ >= s_.size()) Fail(Orig(start), "unexpected end of template");
    }
    return s_.substr(start, i_ - start);
  }
  std::string ConsumeString(char quote, size_t start) {
    std::string out;
    while (true) {
      if (i_ >= s_.size()) Fail(Orig(start), "string literal is never closed");
      const char c = s_[i_];
      if (c == quote) break;
      ++i_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) Fail(Orig(start), "string literal is never closed");
      const char e = s_[i_++];
      if (e == 'x' || e == 'u') {
        const size_t n = e == 'x' ? 2 : 4;
        const std::string hex = s_.substr(i_, n);
        if (hex.size() != n || !std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
          Fail(Orig(i_ - 2), "invalid hexadecimal escape \\" + std::string(1, e) + hex);
        uint32_t cp = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
        i_ += n;
        if (cp >= 0xD800 && cp <= 0xDBFF && s_.compare(i_, 2, "\\u") == 0 && i_ + 6 <= s_.size()) {
          const std::string lo_hex = s_.substr(i_ + 2, 4);
          if (std::all_of(lo_hex.begin(), lo_hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; })) {
            const auto lo = static_cast<uint32_t>(std::stoul(lo_hex, nullptr, 16));
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              i_ += 6;
            }
          }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) Fail(Orig(i_ - n - 2), "a lone surrogate escape is not supported");
        AppendUtf8(out, cp);
        continue;
      }
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        default: Fail(Orig(i_ - 2), std::string("unknown escape '\\") + e + "' in a string literal");
      }
    }
    return out;
  }
  bool MatchOperator(size_t& curly_depth) {
    struct Rule { const char* seq; Tok type; };
    static const Rule kRules[] = {
        {"{%", Tok::kOpenStmt}, {"%}", Tok::kCloseStmt}, {"{{", Tok::kOpenExpr}, {"}}", Tok::kCloseExpr},
        {"(", Tok::kLParen}, {")", Tok::kRParen}, {"{", Tok::kLBrace}, {"}", Tok::kRBrace},
        {"[", Tok::kLBracket}, {"]", Tok::kRBracket}, {",", Tok::kComma}, {".", Tok::kDot},
        {":", Tok::kColon}, {"|", Tok::kPipe}, {"<=", Tok::kComparison}, {">=", Tok::kComparison},
        {"==", Tok::kComparison}, {"!=", Tok::kComparison}, {"<", Tok::kComparison}, {">", Tok::kComparison},
        {"+", Tok::kAdditive}, {"-", Tok::kAdditive}, {"~", Tok::kAdditive}, {"**", Tok::kPower},
        {"*", Tok::kMultiplicative}, {"//", Tok::kMultiplicative}, {"/", Tok::kMultiplicative},
        {"%", Tok::kMultiplicative}, {"=", Tok::kEquals}};
    for (const Rule& r : kRules) {
      if (r.seq[0] != s_[i_]) continue;
      if (std::strcmp(r.seq, "}}") == 0 && curly_depth > 0) continue;
      const size_t n = std::strlen(r.seq);
      if (s_.compare(i_, n, r.seq) != 0) continue;
      Push(r.type, r.seq, i_);
      if (r.type == Tok::kOpenExpr) curly_depth = 0;
      else if (r.type == Tok::kLBrace) ++curly_depth;
      else if (r.type == Tok::kRBrace) --curly_depth;
      i_ += n;
      return true;
    }
    return false;
  }

  const Preprocessed& p_;
  const std::string& s_;
  size_t i_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// AST

enum class K {
  // statements
  kText, kIf, kFor, kSet, kMacro, kBreak, kContinue, kComment, kFilterBlock,
  // expressions
  kIdent, kInt, kFloat, kStr, kArray, kTuple, kObject, kBinary, kUnary, kMember, kCall, kFilter,
  kTest, kTernary, kSelect, kSlice, kKwArg, kNone
};

struct Node {
  K kind;
  size_t pos = 0;
  std::string str;  // identifier, literal text, operator, filter/test name
  double num = 0;
  bool flag = false;  // kMember: computed; kTest: negated; kFilter: call form
  std::vector<std::unique_ptr<Node>> a;  // operands, arguments, list items
  std::vector<std::unique_ptr<Node>> body, alt;

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Iterative, so that a long chain (a + b + c + ...) cannot overflow the stack when freed.
  ~Node() {
    std::vector<std::unique_ptr<Node>> stack;
    auto take = [&stack](std::vector<std::unique_ptr<Node>>& v) {
      for (auto& c : v)
        if (c) stack.push_back(std::move(c));
      v.clear();
    };
    take(a);
    take(body);
    take(alt);
    while (!stack.empty()) {
      std::unique_ptr<Node> n = std::move(stack.back());
      stack.pop_back();
      take(n->a);
      take(n->body);
      take(n->alt);
    }
  }
};
using NodePtr = std::unique_ptr<Node>;

struct Program {
  std::vector<NodePtr> body;
};

namespace {

NodePtr MakeNode(K kind, size_t pos, std::string str = {}) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->pos = pos;
  n->str = std::move(str);
  return n;
}

// ---------------------------------------------------------------------------------------
// Parser: @huggingface/jinja's grammar and precedence (lowest first): if-else, or, and, not,
// comparison and (not) in, + - ~, * / // %, **, is-tests, | filters, unary sign, call and
// member access, primary.

class Parser {
 public:
  Parser(std::vector<Token> tokens, size_t end_pos) : t_(std::move(tokens)), end_pos_(end_pos) {}

  std::vector<NodePtr> Run() {
    std::vector<NodePtr> body;
    while (i_ < t_.size()) body.push_back(ParseAny());
    return body;
  }

 private:
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > 2 * ChatTemplate::kMaxNesting) Fail(p->Pos(), "template nested too deeply (more than " + std::to_string(2 * ChatTemplate::kMaxNesting) + " levels of blocks and brackets)");
    }
    ~DepthGuard() { --p->depth_; }
  };

  size_t Pos() const { return i_ < t_.size() ? t_[i_].pos : end_pos_; }
  std::string Describe() const {
    if (i_ >= t_.size()) return "the end of the template";
    const Token& t = t_[i_];
    if (t.type == Tok::kIdent || t.type == Tok::kComparison || t.type == Tok::kAdditive || t.type == Tok::kMultiplicative)
      return "'" + t.value + "'";
    if (t.type == Tok::kString) return "a string literal";
    if (t.type == Tok::kNumber) return "the number " + t.value;
    return TokName(t.type);
  }
  bool Is(Tok t, size_t ahead = 0) const { return i_ + ahead < t_.size() && t_[i_ + ahead].type == t; }
  bool IsIdent(std::string_view name, size_t ahead = 0) const {
    return Is(Tok::kIdent, ahead) && t_[i_ + ahead].value == name;
  }
  bool IsStatement(std::initializer_list<std::string_view> names) const {
    if (!Is(Tok::kOpenStmt) || !Is(Tok::kIdent, 1)) return false;
    for (std::string_view n : names)
      if (t_[i_ + 1].value == n) return true;
    return false;
  }
  const Token& Expect(Tok type, const char* what) {
    if (!Is(type)) Fail(Pos(), std::string("expected ") + what + ", found " + Describe());
    return t_[i_++];
  }
  void ExpectIdent(std::string_view name) {
    if (!IsIdent(name)) Fail(Pos(), "expected '" + std::string(name) + "', found " + Describe());
    ++i_;
  }
  // Statements inside a block until one of `ends`; the end of the template first is an error
  // naming the block that is not closed.
  std::vector<NodePtr> Block(std::initializer_list<std::string_view> ends, const char* block, size_t open_pos) {
    std::vector<NodePtr> body;
    while (!IsStatement(ends)) {
      if (i_ >= t_.size()) Fail(open_pos, std::string("'{% ") + block + " %}' is never closed (expected {% end" + block + " %})");
      body.push_back(ParseAny());
    }
    return body;
  }

  NodePtr ParseAny() {
    DepthGuard guard(this);
    const Token& t = t_[i_];
    switch (t.type) {
      case Tok::kComment: ++i_; return MakeNode(K::kComment, t.pos);
      case Tok::kText: ++i_; return MakeNode(K::kText, t.pos, t.value);
      case Tok::kOpenStmt: return ParseStatement();
      case Tok::kOpenExpr: {
        ++i_;
        NodePtr e = ParseExpression();
        Expect(Tok::kCloseExpr, "'}}'");
        return e;
      }
      default: Fail(t.pos, std::string("unexpected ") + Describe());
    }
  }

  NodePtr ParseStatement() {
    const size_t open = t_[i_].pos;
    ++i_;  // {%
    if (!Is(Tok::kIdent)) Fail(Pos(), "expected a statement name after '{%', found " + Describe());
    const std::string name = t_[i_].value;
    const size_t pos = t_[i_].pos;
    ++i_;
    if (name == "set") return ParseSet(pos, open);
    if (name == "if") {
      NodePtr n = ParseIf(pos, open);
      Expect(Tok::kOpenStmt, "'{%'");
      ExpectIdent("endif");
      Expect(Tok::kCloseStmt, "'%}'");
      return n;
    }
    if (name == "for") return ParseFor(pos, open);
    if (name == "macro") return ParseMacro(pos, open);
    if (name == "break" || name == "continue") {
      Expect(Tok::kCloseStmt, "'%}'");
      return MakeNode(name == "break" ? K::kBreak : K::kContinue, pos);
    }
    if (name == "filter") {
      NodePtr n = MakeNode(K::kFilterBlock, pos);
      n->a.push_back(ParseFilterSpec());
      Expect(Tok::kCloseStmt, "'%}'");
      n->body = Block({"endfilter"}, "filter", open);
      i_ += 2;
      Expect(Tok::kCloseStmt, "'%}'");
      return n;
    }
    if (name == "call")
      Fail(pos, "the '{% call %}' statement is not supported by this chat template renderer");
    static const std::set<std::string> kKnownJinja = {"include", "import", "from", "extends", "block", "raw", "with", "autoescape", "do", "trans", "generation"};
    if (kKnownJinja.count(name) > 0)
      Fail(pos, "the '{% " + name + " %}' statement is not supported by this chat template renderer");
    Fail(pos, "unknown statement '{% " + name + " %}'");
  }

  NodePtr ParseSet(size_t pos, size_t open) {
    NodePtr n = MakeNode(K::kSet, pos);
    n->a.push_back(ParseExpressionSequence(false));
    if (Is(Tok::kEquals)) {
      ++i_;
      n->a.push_back(ParseExpressionSequence(false));
      Expect(Tok::kCloseStmt, "'%}'");
    } else {
      Expect(Tok::kCloseStmt, "'=' or '%}'");
      n->body = Block({"endset"}, "set", open);
      i_ += 2;
      Expect(Tok::kCloseStmt, "'%}'");
    }
    const K target = n->a[0]->kind;
    if (target != K::kIdent && target != K::kTuple && target != K::kMember)
      Fail(n->a[0]->pos, "cannot assign to this expression in '{% set %}'");
    if (target == K::kTuple)
      for (const NodePtr& e : n->a[0]->a)
        if (e->kind != K::kIdent) Fail(e->pos, "'{% set %}' can only unpack into names");
    if (target == K::kMember && (n->a[0]->flag || n->a[0]->a[1]->kind != K::kIdent))
      Fail(n->a[0]->pos, "'{% set %}' can only assign an attribute by name (ns.name = ...)");
    return n;
  }

  NodePtr ParseIf(size_t pos, size_t open) {
    NodePtr n = MakeNode(K::kIf, pos);
    n->a.push_back(ParseExpression());
    Expect(Tok::kCloseStmt, "'%}'");
    n->body = Block({"elif", "else", "endif"}, "if", open);
    if (IsStatement({"elif"})) {
      const size_t elif_open = t_[i_].pos, elif_pos = t_[i_ + 1].pos;
      i_ += 2;
      n->alt.push_back(ParseIf(elif_pos, elif_open));
    } else if (IsStatement({"else"})) {
      i_ += 2;
      Expect(Tok::kCloseStmt, "'%}'");
      n->alt = Block({"endif"}, "if", open);
    }
    return n;
  }

  NodePtr ParseFor(size_t pos, size_t open) {
    NodePtr n = MakeNode(K::kFor, pos);
    NodePtr var = ParseExpressionSequence(true);
    if (var->kind != K::kIdent && var->kind != K::kTuple) Fail(var->pos, "expected a name or names after 'for'");
    for (const NodePtr& e : var->a)
      if (e->kind != K::kIdent) Fail(e->pos, "a for loop can only unpack into names");
    if (!IsIdent("in")) Fail(Pos(), "expected 'in' after the loop variable, found " + Describe());
    ++i_;
    n->a.push_back(std::move(var));
    n->a.push_back(ParseExpression());
    Expect(Tok::kCloseStmt, "'%}'");
    n->body = Block({"endfor", "else"}, "for", open);
    if (IsStatement({"else"})) {
      i_ += 2;
      Expect(Tok::kCloseStmt, "'%}'");
      n->alt = Block({"endfor"}, "for", open);
    }
    i_ += 2;  // {% endfor
    Expect(Tok::kCloseStmt, "'%}'");
    return n;
  }

  NodePtr ParseMacro(size_t pos, size_t open) {
    NodePtr n = MakeNode(K::kMacro, pos);
    if (!Is(Tok::kIdent)) Fail(Pos(), "expected the macro's name, found " + Describe());
    n->str = t_[i_++].value;
    Expect(Tok::kLParen, "'('");
    std::set<std::string> names;
    bool saw_default = false;
    while (!Is(Tok::kRParen)) {
      if (i_ >= t_.size()) Fail(pos, "macro parameter list is never closed");
      if (Is(Tok::kPower) || (Is(Tok::kMultiplicative) && t_[i_].value == "*"))
        Fail(Pos(), "argument unpacking in a macro's parameters is not supported");
      NodePtr p = ParseExpression();
      if (Is(Tok::kEquals)) {
        ++i_;
        if (p->kind != K::kIdent) Fail(p->pos, "expected a parameter name");
        NodePtr kw = MakeNode(K::kKwArg, p->pos, p->str);
        kw->a.push_back(ParseExpression());
        p = std::move(kw);
        saw_default = true;
      } else if (p->kind != K::kIdent) {
        Fail(p->pos, "expected a parameter name");
      } else if (saw_default) {
        Fail(p->pos, "a parameter without a default follows one with a default");
      }
      if (!names.insert(p->str).second) Fail(p->pos, "duplicate parameter '" + p->str + "'");
      n->a.push_back(std::move(p));
      if (Is(Tok::kComma)) ++i_;
    }
    ++i_;
    Expect(Tok::kCloseStmt, "'%}'");
    n->body = Block({"endmacro"}, "macro", open);
    i_ += 2;
    Expect(Tok::kCloseStmt, "'%}'");
    return n;
  }

  NodePtr ParseExpressionSequence(bool primary) {
    const size_t pos = Pos();
    NodePtr first = primary ? ParsePrimary() : ParseExpression();
    if (!Is(Tok::kComma)) return first;
    NodePtr tuple = MakeNode(K::kTuple, pos);
    tuple->a.push_back(std::move(first));
    while (Is(Tok::kComma)) {
      ++i_;
      tuple->a.push_back(primary ? ParsePrimary() : ParseExpression());
    }
    return tuple;
  }

  NodePtr ParseExpression() {
    DepthGuard guard(this);
    NodePtr a = ParseOr();
    if (IsIdent("if")) {
      const size_t pos = t_[i_].pos;
      ++i_;
      NodePtr test = ParseOr();
      if (IsIdent("else")) {
        ++i_;
        NodePtr n = MakeNode(K::kTernary, pos);
        n->a.push_back(std::move(test));
        n->a.push_back(std::move(a));
        n->a.push_back(ParseExpression());
        return n;
      }
      NodePtr n = MakeNode(K::kSelect, pos);
      n->a.push_back(std::move(a));
      n->a.push_back(std::move(test));
      return n;
    }
    return a;
  }
  NodePtr Binary(const Token& op, std::string name, NodePtr l, NodePtr r) {
    NodePtr n = MakeNode(K::kBinary, op.pos, std::move(name));
    n->a.push_back(std::move(l));
    n->a.push_back(std::move(r));
    return n;
  }
  NodePtr ParseOr() {
    NodePtr l = ParseAnd();
    while (IsIdent("or")) {
      const Token& op = t_[i_++];
      l = Binary(op, "or", std::move(l), ParseAnd());
    }
    return l;
  }
  NodePtr ParseAnd() {
    NodePtr l = ParseNot();
    while (IsIdent("and")) {
      const Token& op = t_[i_++];
      l = Binary(op, "and", std::move(l), ParseNot());
    }
    return l;
  }
  NodePtr ParseNot() {
    if (IsIdent("not")) {
      DepthGuard guard(this);
      NodePtr n = MakeNode(K::kUnary, t_[i_].pos, "not");
      ++i_;
      n->a.push_back(ParseNot());
      return n;
    }
    return ParseComparison();
  }
  NodePtr ParseComparison() {
    NodePtr l = ParseAdditive();
    while (true) {
      if (IsIdent("not") && IsIdent("in", 1)) {
        const Token& op = t_[i_];
        i_ += 2;
        l = Binary(op, "not in", std::move(l), ParseAdditive());
      } else if (IsIdent("in") || Is(Tok::kComparison)) {
        const Token& op = t_[i_++];
        l = Binary(op, op.value, std::move(l), ParseAdditive());
      } else {
        return l;
      }
    }
  }
  NodePtr ParseAdditive() {
    NodePtr l = ParseMultiplicative();
    while (Is(Tok::kAdditive)) {
      const Token& op = t_[i_++];
      l = Binary(op, op.value, std::move(l), ParseMultiplicative());
    }
    return l;
  }
  NodePtr ParseMultiplicative() {
    NodePtr l = ParsePower();
    while (Is(Tok::kMultiplicative)) {
      const Token& op = t_[i_++];
      l = Binary(op, op.value, std::move(l), ParsePower());
    }
    return l;
  }
  NodePtr ParsePower() {
    NodePtr l = ParseTest();
    while (Is(Tok::kPower)) {
      const Token& op = t_[i_++];
      l = Binary(op, "**", std::move(l), ParseTest());
    }
    return l;
  }
  NodePtr ParseTest() {
    NodePtr operand = ParseFilter();
    while (IsIdent("is")) {
      const size_t pos = t_[i_].pos;
      ++i_;
      const bool negate = IsIdent("not");
      if (negate) ++i_;
      if (!Is(Tok::kIdent)) Fail(Pos(), "expected a test name after 'is', found " + Describe());
      NodePtr n = MakeNode(K::kTest, pos, t_[i_++].value);
      n->flag = negate;
      n->a.push_back(std::move(operand));
      operand = std::move(n);
    }
    return operand;
  }
  // `name` or `name(args)` after '|' or in {% filter %}.
  NodePtr ParseFilterSpec() {
    if (!Is(Tok::kIdent)) Fail(Pos(), "expected a filter name, found " + Describe());
    NodePtr n = MakeNode(K::kFilter, t_[i_].pos, t_[i_].value);
    ++i_;
    if (Is(Tok::kLParen)) {
      n->flag = true;
      n->body = ParseArgs();
      if (Is(Tok::kDot) || Is(Tok::kLBracket) || Is(Tok::kLParen))
        Fail(Pos(), "member access or a call on a filter's result needs parentheses around the filter expression");
    }
    return n;
  }
  NodePtr ParseFilter() {
    NodePtr operand = ParseUnarySign();
    while (Is(Tok::kPipe)) {
      ++i_;
      NodePtr f = ParseFilterSpec();
      f->a.insert(f->a.begin(), std::move(operand));
      operand = std::move(f);
    }
    return operand;
  }
  NodePtr ParseUnarySign() {
    if ((Is(Tok::kUnary) || Is(Tok::kAdditive)) && (t_[i_].value == "-" || t_[i_].value == "+")) {
      DepthGuard guard(this);
      NodePtr n = MakeNode(K::kUnary, t_[i_].pos, t_[i_].value);
      ++i_;
      n->a.push_back(ParseUnarySign());
      return n;
    }
    return ParseCallMember();
  }
  NodePtr ParseCallMember() {
    NodePtr e = ParseMember(ParsePrimary());
    while (Is(Tok::kLParen)) {
      NodePtr call = MakeNode(K::kCall, t_[i_].pos);
      call->body = ParseArgs();
      call->a.push_back(std::move(e));
      e = ParseMember(std::move(call));
    }
    return e;
  }
  // (args): positional expressions, then name=value keyword arguments.
  std::vector<NodePtr> ParseArgs() {
    const size_t open = Pos();
    Expect(Tok::kLParen, "'('");
    std::vector<NodePtr> args;
    bool saw_keyword = false;
    while (!Is(Tok::kRParen)) {
      if (i_ >= t_.size()) Fail(open, "argument list is never closed");
      if (Is(Tok::kPower) || (Is(Tok::kMultiplicative) && t_[i_].value == "*"))
        Fail(Pos(), "argument unpacking ('*' / '**') is not supported by this chat template renderer");
      NodePtr arg = ParseExpression();
      if (Is(Tok::kEquals)) {
        ++i_;
        if (arg->kind != K::kIdent) Fail(arg->pos, "expected a name for a keyword argument");
        NodePtr kw = MakeNode(K::kKwArg, arg->pos, arg->str);
        kw->a.push_back(ParseExpression());
        arg = std::move(kw);
        saw_keyword = true;
      } else if (saw_keyword) {
        Fail(arg->pos, "positional arguments must come before keyword arguments");
      }
      args.push_back(std::move(arg));
      if (Is(Tok::kComma)) ++i_;
    }
    ++i_;
    return args;
  }
  NodePtr ParseMember(NodePtr object) {
    while (Is(Tok::kDot) || Is(Tok::kLBracket)) {
      const bool computed = Is(Tok::kLBracket);
      const size_t pos = t_[i_].pos;
      ++i_;
      NodePtr n = MakeNode(K::kMember, pos);
      n->flag = computed;
      n->a.push_back(std::move(object));
      if (computed) {
        n->a.push_back(ParseSubscript(pos));
        Expect(Tok::kRBracket, "']'");
      } else {
        NodePtr prop = ParsePrimary();
        if (prop->kind != K::kIdent && prop->kind != K::kInt)
          Fail(prop->pos, "expected a name or an integer after '.'");
        n->a.push_back(std::move(prop));
      }
      object = std::move(n);
    }
    return object;
  }
  NodePtr ParseSubscript(size_t pos) {
    std::vector<NodePtr> parts;
    bool slice = false;
    while (!Is(Tok::kRBracket)) {
      if (i_ >= t_.size()) Fail(pos, "'[' is never closed");
      if (Is(Tok::kColon)) {
        parts.push_back(nullptr);
        ++i_;
        slice = true;
      } else {
        parts.push_back(ParseExpression());
        if (Is(Tok::kColon)) {
          ++i_;
          slice = true;
        }
      }
    }
    if (parts.empty()) Fail(pos, "expected an index or a slice inside '[]'");
    if (!slice) {
      if (parts.size() > 1) Fail(pos, "expected one index inside '[]'");
      return std::move(parts[0]);
    }
    if (parts.size() > 3) Fail(pos, "a slice takes at most three parts (start:stop:step)");
    NodePtr n = MakeNode(K::kSlice, pos);
    for (NodePtr& p : parts) n->a.push_back(p ? std::move(p) : MakeNode(K::kNone, pos));
    while (n->a.size() < 3) n->a.push_back(MakeNode(K::kNone, pos));
    return n;
  }
  NodePtr ParsePrimary() {
    DepthGuard guard(this);
    if (i_ >= t_.size()) Fail(end_pos_, "unexpected end of template inside an expression");
    const Token& t = t_[i_++];
    switch (t.type) {
      case Tok::kNumber: {
        NodePtr n = MakeNode(t.value.find('.') != std::string::npos ? K::kFloat : K::kInt, t.pos);
        n->num = std::strtod(t.value.c_str(), nullptr);
        return n;
      }
      case Tok::kString: {
        std::string v = t.value;
        while (Is(Tok::kString)) v += t_[i_++].value;
        return MakeNode(K::kStr, t.pos, std::move(v));
      }
      case Tok::kIdent: return MakeNode(K::kIdent, t.pos, t.value);
      case Tok::kLParen: {
        NodePtr e = ParseExpressionSequence(false);
        Expect(Tok::kRParen, "')'");
        return e;
      }
      case Tok::kLBracket: {
        NodePtr n = MakeNode(K::kArray, t.pos);
        while (!Is(Tok::kRBracket)) {
          if (i_ >= t_.size()) Fail(t.pos, "'[' is never closed");
          n->a.push_back(ParseExpression());
          if (Is(Tok::kComma)) ++i_;
        }
        ++i_;
        return n;
      }
      case Tok::kLBrace: {
        NodePtr n = MakeNode(K::kObject, t.pos);
        while (!Is(Tok::kRBrace)) {
          if (i_ >= t_.size()) Fail(t.pos, "'{' is never closed");
          n->a.push_back(ParseExpression());
          Expect(Tok::kColon, "':' between a key and its value");
          n->a.push_back(ParseExpression());
          if (Is(Tok::kComma)) ++i_;
        }
        ++i_;
        return n;
      }
      default:
        --i_;
        Fail(t.pos, "unexpected " + Describe() + " in an expression");
    }
  }

  std::vector<Token> t_;
  size_t end_pos_;
  size_t i_ = 0;
  int depth_ = 0;
};

// ---------------------------------------------------------------------------------------
// Check pass: everything the renderer would not render as the reference does is refused
// here, before any conversation is formatted.

const std::set<std::string>& KnownFilters() {
  static const std::set<std::string> k = {
      "safe", "tojson", "list", "first", "last", "length", "reverse", "sort", "join", "string",
      "unique", "upper", "lower", "title", "capitalize", "trim", "indent", "int", "float", "abs",
      "items", "bool", "default", "selectattr", "rejectattr", "map", "replace", "keys", "values",
      "dictsort"};
  return k;
}
const std::set<std::string>& KnownTests() {
  static const std::set<std::string> k = {
      "boolean", "callable", "odd", "even", "false", "true", "none", "string", "number", "integer",
      "iterable", "mapping", "sequence", "lower", "upper", "defined", "undefined"};
  return k;
}
const std::set<std::string>& KnownMethods() {
  static const std::set<std::string> k = {
      "upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip", "startswith",
      "endswith", "split", "replace", "get", "items", "keys", "values", "dictsort"};
  return k;
}
const std::set<std::string>& KnownFunctions() {
  static const std::set<std::string> k = {"namespace", "raise_exception", "range"};
  return k;
}

void CollectMacros(const std::vector<NodePtr>& nodes, std::set<std::string>& out) {
  for (const NodePtr& n : nodes) {
    if (!n) continue;
    if (n->kind == K::kMacro) out.insert(n->str);
    CollectMacros(n->body, out);
    CollectMacros(n->alt, out);
  }
}

void Check(const Node* n, const std::set<std::string>& macros, int loops, bool in_macro, int depth = 0) {
  if (n == nullptr) return;
  if (depth > 2 * ChatTemplate::kMaxNesting)
    Fail(n->pos, "expression nested too deeply (more than " + std::to_string(2 * ChatTemplate::kMaxNesting) + " levels; a very long chain of operators?)");
  switch (n->kind) {
    case K::kFilter:
    case K::kFilterBlock: {
      const Node* f = n->kind == K::kFilter ? n : n->a[0].get();
      if (KnownFilters().count(f->str) == 0)
        Fail(f->pos, "the filter '" + f->str + "' is not supported by this chat template renderer");
      break;
    }
    case K::kTest:
      if (n->str == "equalto" || n->str == "eq")
        Fail(n->pos, "the test '" + n->str + "' with an argument is not supported by this chat template renderer");
      if (KnownTests().count(n->str) == 0)
        Fail(n->pos, "the test '" + n->str + "' is not supported by this chat template renderer");
      break;
    case K::kCall: {
      const Node* callee = n->a[0].get();
      if (callee->kind == K::kIdent) {
        if (callee->str == "strftime_now")
          Fail(callee->pos, "the function 'strftime_now' is not supported (a prompt must not depend on the clock)");
        if (KnownFunctions().count(callee->str) == 0 && macros.count(callee->str) == 0)
          Fail(callee->pos, "unknown function '" + callee->str + "' (neither a macro of this template nor namespace, range or raise_exception)");
      } else if (callee->kind == K::kMember && !callee->flag) {
        const std::string& m = callee->a[1]->str;
        if (callee->a[1]->kind != K::kIdent || KnownMethods().count(m) == 0)
          Fail(callee->a[1]->pos, "the method '" + m + "()' is not supported by this chat template renderer");
      }
      break;
    }
    case K::kBreak:
    case K::kContinue:
      if (loops == 0) Fail(n->pos, std::string("'{% ") + (n->kind == K::kBreak ? "break" : "continue") + " %}' outside a for loop");
      break;
    case K::kIdent:
      if (in_macro && (n->str == "varargs" || n->str == "kwargs" || n->str == "caller"))
        Fail(n->pos, "'" + n->str + "' in a macro is not supported by this chat template renderer");
      break;
    default: break;
  }
  const bool macro = in_macro || n->kind == K::kMacro;
  const int inner_loops = n->kind == K::kFor ? loops + 1 : (n->kind == K::kMacro ? 0 : loops);
  for (const NodePtr& c : n->a) Check(c.get(), macros, n->kind == K::kMacro ? 0 : loops, macro, depth + 1);
  for (const NodePtr& c : n->body) Check(c.get(), macros, inner_loops, macro, depth + 1);
  for (const NodePtr& c : n->alt) Check(c.get(), macros, n->kind == K::kFor ? loops : inner_loops, macro, depth + 1);
}

// ---------------------------------------------------------------------------------------
// Values

struct Value;
struct ObjectData;
struct Function;
struct Env;

enum class VT : uint8_t { kUndefined, kNull, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kFunction };

struct Value {
  VT type = VT::kUndefined;
  bool b = false;
  bool is_tuple = false;   // kArray made by a tuple literal
  bool is_kwargs = false;  // kObject holding a call's keyword arguments
  bool has_namespace = false;
  uint16_t depth = 0;  // container nesting
  double num = 0;
  std::shared_ptr<const std::string> str;
  std::shared_ptr<const std::vector<Value>> arr;
  std::shared_ptr<ObjectData> obj;  // kObject (never changed after creation), kNamespace
  std::shared_ptr<const Function> fn;
};

struct ObjectData {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* Find(std::string_view key) const {
    for (const auto& [k, v] : entries)
      if (k == key) return &v;
    return nullptr;
  }
  void Set(const std::string& key, Value v) {
    for (auto& [k, old] : entries)
      if (k == key) {
        old = std::move(v);
        return;
      }
    entries.emplace_back(key, std::move(v));
  }
};

struct Function {
  enum Kind { kNamespace, kRaise, kRange, kMethod, kMacro } kind;
  std::string name;
  Value receiver;           // kMethod
  const Node* macro = nullptr;  // kMacro
  // kMacro: the scope it was defined in. Weak: that scope holds the macro, and a strong
  // pointer back would keep both alive forever.
  std::weak_ptr<Env> env;
};

struct Env {
  std::shared_ptr<Env> parent;
  std::unordered_map<std::string, Value> vars;
  const Value* Lookup(const std::string& name) const {
    for (const Env* e = this; e != nullptr; e = e->parent.get()) {
      auto it = e->vars.find(name);
      if (it != e->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

// Bytes of strings and list items one render may allocate in all (set per render): bounds
// memory when a template builds many large values (x ~ x in a loop).
thread_local size_t g_alloc_budget = 0;
void Charge(size_t bytes) {
  if (bytes > g_alloc_budget) Fail(kNoPos, "rendering allocated more than the memory budget (" + std::to_string(ChatTemplate::kMaxAllocBytes >> 20) + " MiB)");
  g_alloc_budget -= bytes;
}

Value Undefined() { return Value{}; }
Value Null() { Value v; v.type = VT::kNull; return v; }
Value Bool(bool b) { Value v; v.type = VT::kBool; v.b = b; return v; }
Value Int(double d) { Value v; v.type = VT::kInt; v.num = d; return v; }
Value Float(double d) { Value v; v.type = VT::kFloat; v.num = d; return v; }
Value Str(std::string s) {
  if (s.size() > ChatTemplate::kMaxOutputBytes) Fail(kNoPos, "a string grew beyond " + std::to_string(ChatTemplate::kMaxOutputBytes) + " bytes");
  Charge(s.size());
  Value v;
  v.type = VT::kString;
  v.str = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Array(std::vector<Value> items, bool tuple = false) {
  Value v;
  v.type = VT::kArray;
  v.is_tuple = tuple;
  if (items.size() > 1'000'000) Fail(kNoPos, "a list of more than 1000000 items");
  Charge(items.size() * sizeof(Value));
  int depth = 0;
  for (const Value& x : items) {
    depth = std::max<int>(depth, x.depth);
    v.has_namespace = v.has_namespace || x.has_namespace;
  }
  if (depth + 1 > ChatTemplate::kMaxNesting * 4) Fail(kNoPos, "a value nested too deeply");
  v.depth = static_cast<uint16_t>(depth + 1);
  v.arr = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Object(std::shared_ptr<ObjectData> data, VT type = VT::kObject) {
  Value v;
  v.type = type;
  int depth = 0;
  for (const auto& [k, x] : data->entries) {
    depth = std::max<int>(depth, x.depth);
    v.has_namespace = v.has_namespace || x.has_namespace;
  }
  if (depth + 1 > ChatTemplate::kMaxNesting * 4) Fail(kNoPos, "a value nested too deeply");
  v.depth = static_cast<uint16_t>(depth + 1);
  if (type == VT::kNamespace) v.has_namespace = true;
  v.obj = std::move(data);
  return v;
}
Value Func(std::shared_ptr<const Function> f) { Value v; v.type = VT::kFunction; v.fn = std::move(f); return v; }

const char* TypeName(const Value& v) {
  switch (v.type) {
    case VT::kUndefined: return "undefined";
    case VT::kNull: return "none";
    case VT::kBool: return "boolean";
    case VT::kInt: return "integer";
    case VT::kFloat: return "float";
    case VT::kString: return "string";
    case VT::kArray: return v.is_tuple ? "tuple" : "list";
    case VT::kObject: return "mapping";
    case VT::kNamespace: return "namespace";
    case VT::kFunction: return "function";
  }
  return "value";
}
bool IsNumber(const Value& v) { return v.type == VT::kInt || v.type == VT::kFloat; }
bool IsAttrContainer(const Value& v) { return v.type == VT::kObject || v.type == VT::kNamespace; }

bool Truthy(const Value& v) {
  switch (v.type) {
    case VT::kUndefined:
    case VT::kNull: return false;
    case VT::kBool: return v.b;
    case VT::kInt:
    case VT::kFloat: return v.num != 0 && !std::isnan(v.num);
    case VT::kString: return !v.str->empty();
    case VT::kArray: return !v.arr->empty();
    case VT::kObject: return !v.obj->entries.empty();
    case VT::kNamespace:
    case VT::kFunction: return true;
  }
  return false;
}

// Canonical array index keys ("0", "17"; below 2^32 - 1) come first, ascending, as
// JavaScript orders an object's own properties; then the rest in insertion order.
bool IsArrayIndexKey(const std::string& k, uint64_t* index) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : k) {
    if (!IsDigit(c)) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= 4294967295ull) return false;
  *index = v;
  return true;
}

template <typename Json>
Value FromJson(const Json& j, int depth) {
  if (depth > ChatTemplate::kMaxNesting) Fail(kNoPos, "input nested deeper than " + std::to_string(ChatTemplate::kMaxNesting) + " levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Null();
    case nlohmann::json::value_t::boolean: return Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Int(static_cast<double>(j.template get<int64_t>()));
    case nlohmann::json::value_t::number_unsigned: return Int(static_cast<double>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float: {
      const double d = j.template get<double>();
      return std::isfinite(d) && std::floor(d) == d ? Int(d) : Float(d);
    }
    case nlohmann::json::value_t::string: {
      const std::string& s = j.template get_ref<const std::string&>();
      if (!IsValidUtf8(s)) Fail(kNoPos, "input text is not valid UTF-8");
      return Str(s);
    }
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(FromJson(x, depth + 1));
      return Array(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto data = std::make_shared<ObjectData>();
      std::vector<std::pair<uint64_t, std::string>> index_keys;
      for (auto it = j.begin(); it != j.end(); ++it) {
        uint64_t idx;
        if (IsArrayIndexKey(it.key(), &idx)) index_keys.emplace_back(idx, it.key());
      }
      std::sort(index_keys.begin(), index_keys.end());
      for (const auto& [idx, key] : index_keys) data->entries.emplace_back(key, FromJson(j.at(key), depth + 1));
      for (auto it = j.begin(); it != j.end(); ++it) {
        uint64_t idx;
        if (!IsArrayIndexKey(it.key(), &idx)) data->entries.emplace_back(it.key(), FromJson(it.value(), depth + 1));
      }
      return Object(std::move(data));
    }
    default: Fail(kNoPos, "input holds a JSON value of an unsupported type (binary)");
  }
}

// JSON.stringify-like serialisation as the reference's tojson writes it.
struct JsonOptions {
  int indent = 0;
  bool ensure_ascii = false;
  std::optional<std::pair<std::string, std::string>> separators;
  bool undefined_as_null = true;
};

void ToJson(std::string& out, const Value& v, const JsonOptions& o, int depth, size_t pos) {
  if (depth > ChatTemplate::kMaxNesting * 4) Fail(pos, "tojson: value nested too deeply (or refers to itself)");
  if (out.size() > ChatTemplate::kMaxOutputBytes) Fail(pos, "tojson: output grew beyond the size limit");
  const std::string item_sep = o.separators ? o.separators->first : (o.indent > 0 ? "," : ", ");
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  switch (v.type) {
    case VT::kNull: out += "null"; return;
    case VT::kUndefined: out += o.undefined_as_null ? "null" : "undefined"; return;
    case VT::kBool: out += v.b ? "true" : "false"; return;
    case VT::kInt:
    case VT::kFloat: out += std::isfinite(v.num) ? JsNumber(v.num) : "null"; return;
    case VT::kString: JsonQuote(out, *v.str, o.ensure_ascii); return;
    case VT::kFunction: Fail(pos, "tojson: cannot convert a function to JSON");
    default: break;
  }
  const std::string pad = o.indent > 0 ? std::string(static_cast<size_t>(o.indent), ' ') : "";
  std::string base = "\n";
  for (int i = 0; i < depth; ++i) base += pad;
  const std::string child = base + pad;
  if (v.type == VT::kArray) {
    out += '[';
    bool first = true;
    for (const Value& x : *v.arr) {
      if (!first) out += item_sep;
      if (o.indent > 0) out += child;
      first = false;
      ToJson(out, x, o, depth + 1, pos);
    }
    if (o.indent > 0 && !v.arr->empty()) out += base;
    out += ']';
    return;
  }
  out += '{';
  bool first = true;
  for (const auto& [k, x] : v.obj->entries) {
    if (!first) out += item_sep;
    if (o.indent > 0) out += child;
    first = false;
    JsonQuote(out, k, o.ensure_ascii);
    out += key_sep;
    ToJson(out, x, o, depth + 1, pos);
  }
  if (o.indent > 0 && !v.obj->entries.empty()) out += base;
  out += '}';
}

// RuntimeValue.toString() of the reference: what {{ value }} prints.
std::string Display(const Value& v, size_t pos) {
  switch (v.type) {
    case VT::kUndefined:
    case VT::kNull: return "undefined";  // never printed by {{ }}; inside a list's text
    case VT::kBool: return v.b ? "true" : "false";
    case VT::kInt: return JsNumber(v.num);
    case VT::kFloat: {
      if (v.num == 0 && std::signbit(v.num)) return "-0.0";
      if (std::isfinite(v.num) && std::floor(v.num) == v.num) {
        if (std::fabs(v.num) >= 1e21) return JsNumber(v.num);
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof buf, v.num, std::chars_format::fixed, 0);
        return std::string(buf, r.ptr) + ".0";
      }
      return JsNumber(v.num);
    }
    case VT::kString: return *v.str;
    case VT::kArray:
    case VT::kObject:
    case VT::kNamespace: {
      std::string out;
      JsonOptions o;
      o.undefined_as_null = false;
      ToJson(out, v, o, 0, pos);
      return out;
    }
    case VT::kFunction: Fail(pos, "cannot print a function");
  }
  return {};
}

// `value.toString()` of the reference's underlying JavaScript value: what '+' and '~' join.
std::string RawString(const Value& v, size_t pos) {
  switch (v.type) {
    case VT::kInt:
    case VT::kFloat: return JsNumber(v.num);
    case VT::kString: return *v.str;
    case VT::kBool: return v.b ? "true" : "false";
    case VT::kArray: {
      std::string out;
      bool first = true;
      for (const Value& x : *v.arr) {
        if (!first) out += ',';
        first = false;
        out += Display(x, pos);
      }
      return out;
    }
    case VT::kObject:
    case VT::kNamespace: return "[object Map]";
    case VT::kFunction: Fail(pos, "cannot convert a function to text");
    default: Fail(pos, std::string("cannot convert ") + TypeName(v) + " to text");
  }
}

// JavaScript's `a.value == b.value` (loose equality), as the reference compares.
bool LooseEquals(const Value& a, const Value& b, size_t pos) {
  const bool a_nullish = a.type == VT::kUndefined || a.type == VT::kNull;
  const bool b_nullish = b.type == VT::kUndefined || b.type == VT::kNull;
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  auto is_ref = [](const Value& v) { return v.type == VT::kArray || v.type == VT::kObject || v.type == VT::kNamespace || v.type == VT::kFunction; };
  if (is_ref(a) && is_ref(b)) {
    if (a.type != b.type) return false;
    if (a.type == VT::kArray) return a.arr == b.arr;
    if (a.type == VT::kFunction) return a.fn == b.fn;
    return a.obj == b.obj;
  }
  if (is_ref(a)) return LooseEquals(Str(RawString(a, pos)), b, pos);
  if (is_ref(b)) return LooseEquals(a, Str(RawString(b, pos)), pos);
  if (a.type == VT::kString && b.type == VT::kString) return *a.str == *b.str;
  auto to_num = [](const Value& v) {
    if (v.type == VT::kBool) return v.b ? 1.0 : 0.0;
    if (v.type == VT::kString) return JsStringToNumber(*v.str);
    return v.num;
  };
  if (a.type == VT::kBool && b.type == VT::kBool) return a.b == b.b;
  return to_num(a) == to_num(b);
}

// JavaScript's `a.value === b.value`.
bool StrictEquals(const Value& a, const Value& b) {
  const bool a_nullish = a.type == VT::kUndefined || a.type == VT::kNull;
  const bool b_nullish = b.type == VT::kUndefined || b.type == VT::kNull;
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (IsNumber(a) && IsNumber(b)) return a.num == b.num;
  if (a.type != b.type) return false;
  switch (a.type) {
    case VT::kBool: return a.b == b.b;
    case VT::kString: return *a.str == *b.str;
    case VT::kArray: return a.arr == b.arr;
    case VT::kFunction: return a.fn == b.fn;
    default: return a.obj == b.obj;
  }
}

std::string AsciiUpper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  return s;
}
std::string AsciiLower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return s;
}

// Case-insensitive (lower-cased) or exact comparison as the reference sorts.
int CompareValues(const Value& a, const Value& b, bool case_sensitive, size_t pos) {
  const bool a_nullish = a.type == VT::kUndefined || a.type == VT::kNull;
  const bool b_nullish = b.type == VT::kUndefined || b.type == VT::kNull;
  if (a.type == b.type && a_nullish) return 0;
  if (a_nullish || b_nullish) Fail(pos, std::string("cannot compare ") + TypeName(a) + " with " + TypeName(b));
  auto numeric = [](const Value& v) { return IsNumber(v) || v.type == VT::kBool; };
  if (numeric(a) && numeric(b)) {
    const double x = a.type == VT::kBool ? (a.b ? 1 : 0) : a.num;
    const double y = b.type == VT::kBool ? (b.b ? 1 : 0) : b.num;
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.type != b.type) Fail(pos, std::string("cannot compare ") + TypeName(a) + " with " + TypeName(b));
  if (a.type != VT::kString) Fail(pos, std::string("cannot compare values of type ") + TypeName(a));
  std::string x = *a.str, y = *b.str;
  if (!case_sensitive) {
    if (!IsAscii(x) || !IsAscii(y)) Fail(pos, "case-insensitive comparison of non-ASCII text is not supported");
    x = AsciiLower(std::move(x));
    y = AsciiLower(std::move(y));
  }
  // UTF-16 code unit order; for UTF-8 byte order differs only between U+E000..U+FFFF and
  // the supplementary planes.
  auto key = [](const std::string& s) {
    std::u16string u;
    for (size_t i = 0; i < s.size();) {
      size_t len;
      uint32_t c = DecodeAt(s, i, &len);
      i += len;
      if (c >= 0x10000) {
        c -= 0x10000;
        u += static_cast<char16_t>(0xD800 + (c >> 10));
        u += static_cast<char16_t>(0xDC00 + (c & 0x3FF));
      } else {
        u += static_cast<char16_t>(c);
      }
    }
    return u;
  };
  const std::u16string ux = key(x), uy = key(y);
  return ux < uy ? -1 : (ux > uy ? 1 : 0);
}

// Python-style slice bounds over n items, as the reference computes them.
std::vector<size_t> SliceIndices(size_t n, std::optional<double> start, std::optional<double> stop, double step, size_t pos) {
  if (step == 0) Fail(pos, "slice step cannot be zero");
  const double len = static_cast<double>(n);
  std::vector<size_t> out;
  double s, e;
  if (step > 0) {
    s = !start ? 0 : (*start < 0 ? std::max(len + *start, 0.0) : std::min(*start, len));
    e = !stop ? len : (*stop < 0 ? std::max(len + *stop, 0.0) : std::min(*stop, len));
    for (double i = s; i < e; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    s = !start ? len - 1 : (*start < 0 ? std::max(len + *start, -1.0) : std::min(*start, len - 1));
    e = !stop ? -1 : (*stop < -1 ? std::max(len + *stop, -1.0) : std::min(*stop, len - 1));
    for (double i = s; i > e; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

struct BreakSignal {};
struct ContinueSignal {};

// ---------------------------------------------------------------------------------------
// Evaluator

class Interpreter {
 public:
  std::string Run(const Program& program, std::shared_ptr<Env> global) {
    std::string out;
    RenderBlock(program.body, global, out);
    return out;
  }

 private:
  struct DepthGuard {
    Interpreter* in;
    DepthGuard(Interpreter* interp, size_t pos) : in(interp) {
      if (++in->depth_ > ChatTemplate::kMaxNesting * 4) Fail(pos, "rendering nested too deeply (recursive macro?)");
      if (++in->steps_ > ChatTemplate::kMaxSteps) Fail(pos, "rendering took more than " + std::to_string(ChatTemplate::kMaxSteps) + " steps (a runaway loop?)");
    }
    ~DepthGuard() { --in->depth_; }
  };

  static void Append(std::string& out, std::string_view s, size_t pos) {
    if (out.size() + s.size() > ChatTemplate::kMaxOutputBytes) Fail(pos, "the output grew beyond " + std::to_string(ChatTemplate::kMaxOutputBytes) + " bytes");
    out.append(s);
  }

  void RenderBlock(const std::vector<NodePtr>& nodes, const std::shared_ptr<Env>& env, std::string& out) {
    for (const NodePtr& n : nodes) {
      DepthGuard guard(this, n->pos);
      switch (n->kind) {
        case K::kText: Append(out, n->str, n->pos); break;
        case K::kIf: RenderIf(*n, env, out); break;
        case K::kFor: RenderFor(*n, env, out); break;
        case K::kSet: ExecSet(*n, env); break;
        case K::kComment: break;
        case K::kMacro: DefineMacro(*n, env); break;
        case K::kBreak: throw BreakSignal{};
        case K::kContinue: throw ContinueSignal{};
        case K::kFilterBlock: {
          std::string inner;
          RenderBlock(n->body, env, inner);
          const Value v = ApplyFilter(Str(std::move(inner)), *n->a[0], env);
          if (v.type != VT::kNull && v.type != VT::kUndefined) Append(out, Display(v, n->pos), n->pos);
          break;
        }
        default: {
          const Value v = Eval(*n, env);
          if (v.type != VT::kNull && v.type != VT::kUndefined) Append(out, Display(v, n->pos), n->pos);
        }
      }
    }
  }

  void RenderIf(const Node& n, const std::shared_ptr<Env>& env, std::string& out) {
    RenderBlock(Truthy(Eval(*n.a[0], env)) ? n.body : n.alt, env, out);
  }

  static void Bind(const Node& var, const Value& item, Env& scope, size_t pos) {
    if (var.kind == K::kIdent) {
      scope.vars[var.str] = item;
      return;
    }
    if (item.type != VT::kArray) Fail(pos, std::string("cannot unpack a ") + TypeName(item) + " into loop variables");
    if (item.arr->size() != var.a.size())
      Fail(pos, std::string("too ") + (var.a.size() > item.arr->size() ? "few" : "many") + " items to unpack");
    for (size_t j = 0; j < var.a.size(); ++j) scope.vars[var.a[j]->str] = (*item.arr)[j];
  }

  void RenderFor(const Node& n, const std::shared_ptr<Env>& env, std::string& out) {
    auto scope = std::make_shared<Env>();
    scope->parent = env;
    const Node& var = *n.a[0];
    const Node* iter_node = n.a[1].get();
    const Node* test = nullptr;
    if (iter_node->kind == K::kSelect) {
      test = iter_node->a[1].get();
      iter_node = iter_node->a[0].get();
    }
    Value iterable = Eval(*iter_node, scope);
    if (iterable.type == VT::kObject) {
      std::vector<Value> keys;
      for (const auto& [k, v] : iterable.obj->entries) keys.push_back(Str(k));
      iterable = Array(std::move(keys));
    }
    if (iterable.type != VT::kArray) Fail(iter_node->pos, std::string("cannot loop over a ") + TypeName(iterable) + " (expected a list or a mapping)");
    std::vector<Value> items;
    for (const Value& item : *iterable.arr) {
      if (var.kind == K::kTuple) {
        if (item.type != VT::kArray) Fail(var.pos, std::string("cannot unpack a ") + TypeName(item) + " into loop variables");
        if (item.arr->size() != var.a.size())
          Fail(var.pos, std::string("too ") + (var.a.size() > item.arr->size() ? "few" : "many") + " items to unpack");
      }
      if (test != nullptr) {
        auto loop_scope = std::make_shared<Env>();
        loop_scope->parent = scope;
        Bind(var, item, *loop_scope, var.pos);
        if (!Truthy(Eval(*test, loop_scope))) continue;
      }
      items.push_back(item);
    }
    bool none = true;
    for (size_t i = 0; i < items.size(); ++i) {
      if (++steps_ > ChatTemplate::kMaxSteps) Fail(n.pos, "rendering took more than " + std::to_string(ChatTemplate::kMaxSteps) + " steps (a runaway loop?)");
      auto loop = std::make_shared<ObjectData>();
      const double len = static_cast<double>(items.size()), idx = static_cast<double>(i);
      loop->entries = {{"index", Int(idx + 1)}, {"index0", Int(idx)}, {"revindex", Int(len - idx)},
                       {"revindex0", Int(len - idx - 1)}, {"first", Bool(i == 0)}, {"last", Bool(i + 1 == items.size())},
                       {"length", Int(len)}, {"previtem", i > 0 ? items[i - 1] : Undefined()},
                       {"nextitem", i + 1 < items.size() ? items[i + 1] : Undefined()}};
      scope->vars["loop"] = Object(std::move(loop));
      Bind(var, items[i], *scope, var.pos);
      const size_t mark = out.size();
      try {
        RenderBlock(n.body, scope, out);
      } catch (const ContinueSignal&) {
        out.resize(mark);  // the reference drops an iteration's output on continue/break
        continue;
      } catch (const BreakSignal&) {
        out.resize(mark);
        break;
      }
      none = false;
    }
    if (none) RenderBlock(n.alt, scope, out);
  }

  void ExecSet(const Node& n, const std::shared_ptr<Env>& env) {
    Value rhs;
    if (n.a.size() > 1) {
      rhs = Eval(*n.a[1], env);
    } else {
      std::string inner;
      RenderBlock(n.body, env, inner);
      rhs = Str(std::move(inner));
    }
    const Node& target = *n.a[0];
    if (target.kind == K::kIdent) {
      env->vars[target.str] = std::move(rhs);
    } else if (target.kind == K::kTuple) {
      if (rhs.type != VT::kArray) Fail(n.pos, std::string("cannot unpack a ") + TypeName(rhs) + " in '{% set %}'");
      if (rhs.arr->size() != target.a.size())
        Fail(n.pos, std::string("too ") + (target.a.size() > rhs.arr->size() ? "few" : "many") + " items to unpack in '{% set %}'");
      for (size_t i = 0; i < target.a.size(); ++i) env->vars[target.a[i]->str] = (*rhs.arr)[i];
    } else {
      const Value object = Eval(*target.a[0], env);
      if (object.type != VT::kNamespace) Fail(target.pos, std::string("cannot assign an attribute of a ") + TypeName(object) + " (only of a namespace())");
      if (rhs.has_namespace) Fail(target.pos, "storing a namespace inside a namespace is not supported");
      if (rhs.depth + 1 > ChatTemplate::kMaxNesting * 2) Fail(target.pos, "a value nested too deeply");
      object.obj->Set(target.a[1]->str, std::move(rhs));
    }
  }

  void DefineMacro(const Node& n, const std::shared_ptr<Env>& env) {
    auto f = std::make_shared<Function>();
    f->kind = Function::kMacro;
    f->name = n.str;
    f->macro = &n;
    f->env = env;
    env->vars[n.str] = Func(std::move(f));
  }

  // Positional arguments, then the keyword arguments as one trailing kwargs mapping (the
  // reference's calling convention).
  std::vector<Value> EvalArgs(const std::vector<NodePtr>& args, const std::shared_ptr<Env>& env) {
    std::vector<Value> out;
    std::shared_ptr<ObjectData> kwargs;
    for (const NodePtr& a : args) {
      if (a->kind == K::kKwArg) continue;
      out.push_back(Eval(*a, env));
    }
    for (const NodePtr& a : args) {
      if (a->kind != K::kKwArg) continue;
      if (!kwargs) kwargs = std::make_shared<ObjectData>();
      if (kwargs->Find(a->str) != nullptr) Fail(a->pos, "keyword argument '" + a->str + "' given twice");
      kwargs->entries.emplace_back(a->str, Eval(*a->a[0], env));
    }
    if (kwargs) {
      Value kw = Object(std::move(kwargs));
      kw.is_kwargs = true;
      out.push_back(std::move(kw));
    }
    return out;
  }
  static std::pair<std::vector<Value>, std::shared_ptr<ObjectData>> SplitKwargs(std::vector<Value> args) {
    std::shared_ptr<ObjectData> kw = std::make_shared<ObjectData>();
    if (!args.empty() && args.back().is_kwargs) {
      kw = args.back().obj;
      args.pop_back();
    }
    return {std::move(args), kw};
  }

  Value Call(const Value& fn, std::vector<Value> args, size_t pos) {
    if (fn.type != VT::kFunction) Fail(pos, std::string("cannot call a ") + TypeName(fn) + " (not a function)");
    const Function& f = *fn.fn;
    switch (f.kind) {
      case Function::kNamespace: {
        auto split1 = SplitKwargs(std::move(args));
        auto& positional = split1.first;
        auto& kwargs = split1.second;
        if (positional.size() > 1) Fail(pos, "namespace() takes at most one positional argument");
        auto data = std::make_shared<ObjectData>();
        if (positional.size() == 1) {
          const Value& src = positional[0];
          if (src.type == VT::kObject) {
            for (const auto& [k, v] : src.obj->entries) data->Set(k, v);
          } else if (src.type == VT::kArray) {
            for (const Value& pair : *src.arr) {
              if (pair.type != VT::kArray || pair.arr->size() != 2 || (*pair.arr)[0].type != VT::kString)
                Fail(pos, "namespace() expects a mapping or a list of [name, value] pairs");
              data->Set(*(*pair.arr)[0].str, (*pair.arr)[1]);
            }
          } else {
            Fail(pos, std::string("namespace() cannot take a ") + TypeName(src));
          }
        }
        for (const auto& [k, v] : kwargs->entries) data->Set(k, v);
        for (const auto& [k, v] : data->entries)
          if (v.has_namespace) Fail(pos, "storing a namespace inside a namespace is not supported");
        return Object(std::move(data), VT::kNamespace);
      }
      case Function::kRaise: {
        std::string message = args.empty() ? "undefined" : (args[0].type == VT::kString ? *args[0].str : Display(args[0], pos));
        Fail(pos, "the template raised an exception: " + message);
      }
      case Function::kRange: {
        for (const Value& a : args)
          if (!IsNumber(a)) Fail(pos, "range() takes numbers");
        if (args.empty() || args.size() > 3) Fail(pos, "range() takes one to three numbers");
        double start = 0, stop, step = 1;
        if (args.size() == 1) {
          stop = args[0].num;
        } else {
          start = args[0].num;
          stop = args[1].num;
          if (args.size() == 3) step = args[2].num;
        }
        if (step == 0) Fail(pos, "range() step must not be zero");
        std::vector<Value> out;
        for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
          if (out.size() >= 1'000'000) Fail(pos, "range() of more than 1000000 numbers");
          out.push_back(std::floor(i) == i ? Int(i) : Float(i));
        }
        return Array(std::move(out));
      }
      case Function::kMethod: return CallMethod(f.receiver, f.name, std::move(args), pos);
      case Function::kMacro: {
        auto scope = std::make_shared<Env>();
        scope->parent = f.env.lock();
        if (!scope->parent) Fail(pos, "macro '" + f.name + "' called after the scope it was defined in ended");
        auto split2 = SplitKwargs(std::move(args));
        auto& positional = split2.first;
        auto& kwargs = split2.second;
        std::map<std::string, Value> remaining;
        for (const auto& [k, v] : kwargs->entries) remaining[k] = v;
        std::vector<std::pair<std::string, const Node*>> defaults;
        const Node& m = *f.macro;
        for (size_t i = 0; i < m.a.size(); ++i) {
          const Node& p = *m.a[i];
          std::optional<Value> v;
          if (i < positional.size()) v = positional[i];
          auto it = remaining.find(p.str);
          if (!v && it != remaining.end()) {
            v = it->second;
            remaining.erase(it);
          }
          if (!v && p.kind == K::kKwArg) defaults.emplace_back(p.str, p.a[0].get());
          scope->vars[p.str] = v ? *v : Undefined();
        }
        if (!remaining.empty()) Fail(pos, "macro '" + m.str + "' takes no keyword argument '" + remaining.begin()->first + "'");
        if (positional.size() > m.a.size())
          Fail(pos, "macro '" + m.str + "' takes at most " + std::to_string(m.a.size()) + " argument(s)");
        for (const auto& [name, node] : defaults) scope->vars[name] = Eval(*node, scope);
        std::string out;
        RenderBlock(m.body, scope, out);
        return Str(std::move(out));
      }
    }
    Fail(pos, "cannot call this value");
  }

  static bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
  static bool EndsWith(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

  Value CallMethod(const Value& self, const std::string& name, std::vector<Value> args, size_t pos) {
    if (self.type == VT::kString) {
      const std::string& s = *self.str;
      if (name == "upper" || name == "lower") {
        if (!IsAscii(s)) Fail(pos, name + "() of non-ASCII text is not supported");
        return Str(name == "upper" ? AsciiUpper(s) : AsciiLower(s));
      }
      if (name == "strip") return Str(std::string(Trim(s)));  // the reference ignores strip's argument
      if (name == "lstrip") return Str(std::string(TrimStart(s)));
      if (name == "rstrip") return Str(std::string(TrimEnd(s)));
      if (name == "title") {
        std::string out = s;
        for (size_t i = 0; i < out.size(); ++i)
          if (IsWordChar(out[i]) && (i == 0 || !IsWordChar(s[i - 1])) && out[i] >= 'a' && out[i] <= 'z') out[i] = static_cast<char>(out[i] - 32);
        return Str(std::move(out));
      }
      if (name == "capitalize") {
        if (s.empty()) return Str("");
        if (static_cast<unsigned char>(s[0]) >= 0x80) Fail(pos, "capitalize() of text starting with a non-ASCII character is not supported");
        return Str(AsciiUpper(s.substr(0, 1)) + s.substr(1));
      }
      if (name == "startswith" || name == "endswith") {
        if (args.empty()) Fail(pos, name + "() requires an argument");
        const bool starts = name == "startswith";
        auto test = [&](const Value& p) {
          if (p.type != VT::kString) Fail(pos, name + "() takes a string or a tuple of strings");
          return starts ? StartsWith(s, *p.str) : EndsWith(s, *p.str);
        };
        if (args[0].type == VT::kString) return Bool(test(args[0]));
        if (args[0].type == VT::kArray) {
          for (const Value& p : *args[0].arr)
            if (test(p)) return Bool(true);
          return Bool(false);
        }
        Fail(pos, name + "() takes a string or a tuple of strings");
      }
      if (name == "split") {
        const Value sep = args.size() > 0 ? args[0] : Null();
        if (sep.type != VT::kString && sep.type != VT::kNull) Fail(pos, "split(): the separator must be a string or none");
        const Value maxsplit = args.size() > 1 ? args[1] : Int(-1);
        if (maxsplit.type != VT::kInt) Fail(pos, "split(): maxsplit must be an integer");
        std::vector<Value> parts;
        if (sep.type == VT::kNull) {
          const std::string_view text = TrimStart(s);
          size_t i = 0;
          while (i < text.size()) {
            size_t n;
            while (i < text.size() && (n = SpaceLenAt(text, i)) > 0) i += n;
            if (i >= text.size()) break;
            size_t j = i;
            while (j < text.size() && SpaceLenAt(text, j) == 0) {
              size_t len;
              DecodeAt(text, j, &len);
              j += len;
            }
            if (maxsplit.num >= 0 && static_cast<double>(parts.size()) >= maxsplit.num) {
              parts.push_back(Str(std::string(text.substr(i))));
              break;
            }
            parts.push_back(Str(std::string(text.substr(i, j - i))));
            i = j;
          }
        } else {
          const std::string& d = *sep.str;
          if (d.empty()) Fail(pos, "split(): empty separator");
          std::vector<std::string> pieces;
          size_t start = 0;
          while (true) {
            const size_t at = s.find(d, start);
            if (at == std::string::npos) break;
            pieces.push_back(s.substr(start, at - start));
            start = at + d.size();
          }
          pieces.push_back(s.substr(start));
          if (maxsplit.num >= 0 && static_cast<double>(pieces.size()) > maxsplit.num) {
            const size_t keep = static_cast<size_t>(maxsplit.num);
            std::string rest;
            for (size_t i = keep; i < pieces.size(); ++i) rest += (i > keep ? d : "") + pieces[i];
            pieces.resize(keep);
            pieces.push_back(std::move(rest));
          }
          for (std::string& p : pieces) parts.push_back(Str(std::move(p)));
        }
        return Array(std::move(parts));
      }
      if (name == "replace") {
        if (args.size() < 2) Fail(pos, "replace() requires two arguments");
        if (args[0].type != VT::kString || args[1].type != VT::kString) Fail(pos, "replace() arguments must be strings");
        Value count = Null();
        if (args.size() > 2) {
          if (args[2].is_kwargs) {
            const Value* c = args[2].obj->Find("count");
            if (c != nullptr) count = *c;
          } else {
            count = args[2];
          }
        }
        if (count.type != VT::kInt && count.type != VT::kNull) Fail(pos, "replace(): count must be an integer or none");
        return Str(Replace(s, *args[0].str, *args[1].str, count.type == VT::kInt ? count.num : -1, pos));
      }
      Fail(pos, "strings have no method '" + name + "()'");
    }
    if (self.type == VT::kObject) {
      if (name == "get") {
        if (args.empty() || args[0].type != VT::kString) Fail(pos, "get(): the key must be a string");
        const Value* v = self.obj->Find(*args[0].str);
        if (v != nullptr) return *v;
        return args.size() > 1 ? args[1] : Null();
      }
      if (name == "items") return Items(self);
      if (name == "keys") {
        std::vector<Value> keys;
        for (const auto& [k, v] : self.obj->entries) keys.push_back(Str(k));
        return Array(std::move(keys));
      }
      if (name == "values") {
        std::vector<Value> values;
        for (const auto& [k, v] : self.obj->entries) values.push_back(v);
        return Array(std::move(values));
      }
      if (name == "dictsort") return DictSort(self, std::move(args), pos);
      Fail(pos, "mappings have no method '" + name + "()'");
    }
    Fail(pos, std::string("a ") + TypeName(self) + " has no method '" + name + "()'");
  }

  static std::string Replace(const std::string& s, const std::string& from, const std::string& to, double count, size_t pos) {
    if (count == 0) return s;
    double remaining = count < 0 ? std::numeric_limits<double>::infinity() : count;
    std::string out;
    if (from.empty()) {
      // Insert between code points (and at both ends).
      for (size_t i = 0; i <= s.size();) {
        if (remaining > 0) {
          out += to;
          --remaining;
        }
        if (i == s.size()) break;
        size_t len;
        DecodeAt(s, i, &len);
        out.append(s, i, len);
        i += len;
        if (out.size() > ChatTemplate::kMaxOutputBytes) Fail(pos, "replace(): result too long");
      }
      return out;
    }
    size_t start = 0;
    while (remaining > 0) {
      const size_t at = s.find(from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += to;
      start = at + from.size();
      --remaining;
      if (out.size() > ChatTemplate::kMaxOutputBytes) Fail(pos, "replace(): result too long");
    }
    out.append(s, start, std::string::npos);
    return out;
  }

  static Value Items(const Value& self) {
    std::vector<Value> items;
    for (const auto& [k, v] : self.obj->entries) items.push_back(Array({Str(k), v}));
    return Array(std::move(items));
  }

  Value DictSort(const Value& self, std::vector<Value> args, size_t pos) {
    auto split3 = SplitKwargs(std::move(args));
    auto& positional = split3.first;
    auto& kwargs = split3.second;
    auto arg = [&](size_t i, const char* key, Value def) {
      if (i < positional.size()) return positional[i];
      const Value* v = kwargs->Find(key);
      return v != nullptr ? *v : def;
    };
    const Value case_sensitive = arg(0, "case_sensitive", Bool(false));
    const Value by = arg(1, "by", Str("key"));
    const Value reverse = arg(2, "reverse", Bool(false));
    if (case_sensitive.type != VT::kBool || reverse.type != VT::kBool) Fail(pos, "dictsort(): case_sensitive and reverse must be booleans");
    if (by.type != VT::kString || (*by.str != "key" && *by.str != "value")) Fail(pos, "dictsort(): by must be 'key' or 'value'");
    std::vector<Value> items = *Items(self).arr;
    const size_t index = *by.str == "key" ? 0 : 1;
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const int c = CompareValues((*a.arr)[index], (*b.arr)[index], case_sensitive.b, pos);
      return reverse.b ? c > 0 : c < 0;
    });
    return Array(std::move(items));
  }

  static Value AttributePath(const Value& item, const std::string& path) {
    Value v = item;
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (IsAttrContainer(v)) {
        const Value* x = v.obj->Find(part);
        v = x != nullptr ? *x : Undefined();
      } else if (v.type == VT::kArray) {
        // parseInt: leading digits
        size_t k = 0;
        while (k < part.size() && IsDigit(part[k])) ++k;
        if (k == 0 || k > 9) return Undefined();
        const size_t idx = std::stoul(part.substr(0, k));
        if (idx >= v.arr->size()) return Undefined();
        v = (*v.arr)[idx];
      } else {
        return Undefined();
      }
      if (dot == std::string::npos) return v;
      start = dot + 1;
    }
  }

  bool RunTest(const std::string& name, const Value& v, size_t pos) {
    if (name == "boolean") return v.type == VT::kBool;
    if (name == "callable") return v.type == VT::kFunction;
    if (name == "odd" || name == "even") {
      if (v.type != VT::kInt) Fail(pos, "the test '" + name + "' needs an integer, got " + TypeName(v));
      const bool odd = std::fmod(v.num, 2) != 0;
      return name == "odd" ? odd : !odd;
    }
    if (name == "false") return v.type == VT::kBool && !v.b;
    if (name == "true") return v.type == VT::kBool && v.b;
    if (name == "none") return v.type == VT::kNull;
    if (name == "string") return v.type == VT::kString;
    if (name == "number") return IsNumber(v);
    if (name == "integer") return v.type == VT::kInt;
    if (name == "iterable") return (v.type == VT::kArray && !v.is_tuple) || v.type == VT::kString;
    if (name == "mapping") return v.type == VT::kObject;
    if (name == "sequence") return v.type == VT::kArray || v.type == VT::kObject || v.type == VT::kString;
    if (name == "lower" || name == "upper") {
      if (v.type != VT::kString) return false;
      if (!IsAscii(*v.str)) Fail(pos, "the test '" + name + "' on non-ASCII text is not supported");
      return *v.str == (name == "lower" ? AsciiLower(*v.str) : AsciiUpper(*v.str));
    }
    if (name == "defined") return v.type != VT::kUndefined;
    if (name == "undefined") return v.type == VT::kUndefined;
    Fail(pos, "unknown test '" + name + "'");
  }

  Value ApplyFilter(const Value& operand, const Node& f, const std::shared_ptr<Env>& env) {
    const std::string& name = f.str;
    const size_t pos = f.pos;
    auto cannot = [&]() -> Value {
      Fail(pos, "the filter '" + name + (f.flag ? "()" : "") + "' cannot be applied to a " + TypeName(operand));
    };
    if (!f.flag) {
      if (name == "safe") return operand;
      if (name == "tojson") {
        std::string out;
        ToJson(out, operand, JsonOptions{}, 0, pos);
        return Str(std::move(out));
      }
      if (operand.type == VT::kArray) {
        const std::vector<Value>& a = *operand.arr;
        if (name == "list") return operand;
        if (name == "first" || name == "last") {
          if (a.empty()) Fail(pos, "the filter '" + name + "' of an empty list");
          return name == "first" ? a.front() : a.back();
        }
        if (name == "length") return Int(static_cast<double>(a.size()));
        if (name == "reverse") return Array(std::vector<Value>(a.rbegin(), a.rend()));
        if (name == "sort") return SortArray(a, false, false, std::nullopt, pos);
        if (name == "join") return Str(JoinValues(a, "", pos));
        if (name == "string") return Str(Display(operand, pos));
        if (name == "unique") {
          std::vector<Value> out;
          for (const Value& x : a) {
            bool seen = false;
            for (const Value& y : out) seen = seen || StrictEquals(x, y);
            if (!seen) out.push_back(x);
          }
          return Array(std::move(out));
        }
        return cannot();
      }
      if (operand.type == VT::kString) {
        const std::string& s = *operand.str;
        if (name == "length") return Int(Utf16Length(s));
        if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") return CallMethod(operand, name, {}, pos);
        if (name == "trim") return Str(std::string(Trim(s)));
        if (name == "indent") return Str(Indent(s, "    ", false, false));
        if (name == "join" || name == "string") return operand;
        if (name == "int" || name == "float") return StringToNumber(s, name == "int", name == "int" ? Int(0) : Float(0));
        return cannot();
      }
      if (IsNumber(operand)) {
        if (name == "abs") return operand.type == VT::kInt ? Int(std::fabs(operand.num)) : Float(std::fabs(operand.num));
        if (name == "int") return Int(std::trunc(operand.num) + 0.0);
        if (name == "float") return Float(operand.num);
        if (name == "string") return Str(Display(operand, pos));
        return cannot();
      }
      if (operand.type == VT::kObject) {
        if (name == "items") return Items(operand);
        if (name == "length") return Int(static_cast<double>(operand.obj->entries.size()));
        if (name == "keys" || name == "values" || name == "dictsort") return CallMethod(operand, name, {}, pos);
        return cannot();
      }
      if (operand.type == VT::kBool) {
        if (name == "bool") return operand;
        if (name == "int") return Int(operand.b ? 1 : 0);
        if (name == "float") return Float(operand.b ? 1 : 0);
        if (name == "string") return Str(operand.b ? "true" : "false");
        return cannot();
      }
      return cannot();
    }
    // Call form: name(args).
    if (name == "tojson") {
      auto split4 = SplitKwargs(EvalArgs(f.body, env));
      auto& kwargs = split4.second;  // positional arguments are ignored, as by the reference
      JsonOptions o;
      if (const Value* v = kwargs->Find("indent")) {
        if (v->type != VT::kInt && v->type != VT::kNull) Fail(pos, "tojson(): indent must be an integer");
        if (v->type == VT::kInt) {
          if (v->num < 0 || v->num > 64) Fail(pos, "tojson(): indent must be between 0 and 64");
          o.indent = static_cast<int>(v->num);
        }
      }
      if (const Value* v = kwargs->Find("ensure_ascii")) {
        if (v->type != VT::kBool) Fail(pos, "tojson(): ensure_ascii must be a boolean");
        o.ensure_ascii = v->b;
      }
      if (const Value* v = kwargs->Find("sort_keys")) {
        if (v->type != VT::kBool) Fail(pos, "tojson(): sort_keys must be a boolean");
        if (v->b) Fail(pos, "tojson(sort_keys=true) is not supported (the reference sorts by locale)");
      }
      if (const Value* v = kwargs->Find("separators")) {
        if (v->type == VT::kArray) {
          if (v->arr->size() != 2 || (*v->arr)[0].type != VT::kString || (*v->arr)[1].type != VT::kString)
            Fail(pos, "tojson(): separators must be two strings");
          o.separators = std::make_pair(*(*v->arr)[0].str, *(*v->arr)[1].str);
        } else if (v->type != VT::kNull) {
          Fail(pos, "tojson(): separators must be two strings");
        }
      }
      std::string out;
      ToJson(out, operand, o, 0, pos);
      return Str(std::move(out));
    }
    if (name == "join") {
      std::vector<Value> items;
      if (operand.type == VT::kString) {
        for (std::string_view c : CodePoints(*operand.str)) items.push_back(Str(std::string(c)));
      } else if (operand.type == VT::kArray) {
        items = *operand.arr;
      } else {
        return cannot();
      }
      auto split5 = SplitKwargs(EvalArgs(f.body, env));
      auto& positional = split5.first;
      auto& kwargs = split5.second;
      Value sep = !positional.empty() ? positional[0] : Str("");
      if (positional.empty())
        if (const Value* v = kwargs->Find("separator")) sep = *v;
      if (sep.type != VT::kString) Fail(pos, "join(): the separator must be a string");
      return Str(JoinValues(items, *sep.str, pos));
    }
    if (name == "int" || name == "float") {
      auto split6 = SplitKwargs(EvalArgs(f.body, env));
      auto& positional = split6.first;
      auto& kwargs = split6.second;
      Value def = !positional.empty() ? positional[0] : (name == "int" ? Int(0) : Float(0));
      if (positional.empty())
        if (const Value* v = kwargs->Find("default")) def = *v;
      if (operand.type == VT::kString) return StringToNumber(*operand.str, name == "int", def);
      if (IsNumber(operand)) return name == "int" ? Int(std::trunc(operand.num) + 0.0) : Float(operand.num);
      if (operand.type == VT::kBool) return name == "int" ? Int(operand.b ? 1 : 0) : Float(operand.b ? 1 : 0);
      return cannot();
    }
    if (name == "default") {
      auto split7 = SplitKwargs(EvalArgs(f.body, env));
      auto& positional = split7.first;
      auto& kwargs = split7.second;
      const Value def = !positional.empty() ? positional[0] : Str("");
      Value boolean = positional.size() > 1 ? positional[1] : Bool(false);
      if (positional.size() <= 1)
        if (const Value* v = kwargs->Find("boolean")) boolean = *v;
      if (boolean.type != VT::kBool) Fail(pos, "default(): the second argument must be a boolean");
      if (operand.type == VT::kUndefined || (boolean.b && !Truthy(operand))) return def;
      return operand;
    }
    if (operand.type == VT::kArray) {
      const std::vector<Value>& a = *operand.arr;
      if (name == "sort") {
        auto split8 = SplitKwargs(EvalArgs(f.body, env));
        auto& positional = split8.first;
        auto& kwargs = split8.second;
        auto arg = [&](size_t i, const char* key, Value def) {
          if (i < positional.size()) return positional[i];
          const Value* v = kwargs->Find(key);
          return v != nullptr ? *v : def;
        };
        const Value reverse = arg(0, "reverse", Bool(false));
        const Value case_sensitive = arg(1, "case_sensitive", Bool(false));
        const Value attribute = arg(2, "attribute", Null());
        if (reverse.type != VT::kBool || case_sensitive.type != VT::kBool) Fail(pos, "sort(): reverse and case_sensitive must be booleans");
        std::optional<std::string> attr;
        if (attribute.type == VT::kString) attr = *attribute.str;
        else if (attribute.type == VT::kInt) attr = JsNumber(attribute.num);
        else if (attribute.type != VT::kNull) Fail(pos, "sort(): attribute must be a string, an integer or none");
        return SortArray(a, reverse.b, case_sensitive.b, attr, pos);
      }
      if (name == "selectattr" || name == "rejectattr") {
        const bool select = name == "selectattr";
        for (const Value& item : a)
          if (!IsAttrContainer(item)) Fail(pos, name + "() can only be applied to a list of mappings");
        for (const NodePtr& arg : f.body)
          if (arg->kind != K::kStr) Fail(arg->pos, name + "(): arguments must be string literals");
        if (f.body.empty()) Fail(pos, name + "() needs an attribute name");
        if (f.body.size() > 1) {
          const std::string& test = f.body[1]->str;
          if (test == "equalto" || test == "eq" || test == "==") {
            if (f.body.size() < 3) Fail(pos, name + "(): the test '" + test + "' needs a value");
          } else if (KnownTests().count(test) == 0) {
            Fail(f.body[1]->pos, name + "(): unknown test '" + test + "'");
          }
        }
        std::vector<Value> out;
        for (const Value& item : a) {
          const Value* v = item.obj->Find(f.body[0]->str);
          bool result = false;
          if (v != nullptr) {
            if (f.body.size() == 1) {
              result = Truthy(*v);
            } else {
              const std::string& test = f.body[1]->str;
              if (test == "equalto" || test == "eq" || test == "==") result = StrictEquals(*v, Str(f.body[2]->str));
              else result = RunTest(test, *v, pos);
            }
          }
          if (result == select) out.push_back(item);
        }
        return Array(std::move(out));
      }
      if (name == "map") {
        auto split9 = SplitKwargs(EvalArgs(f.body, env));
        auto& kwargs = split9.second;  // positional arguments are ignored, as by the reference
        const Value* attr = kwargs->Find("attribute");
        if (attr == nullptr) Fail(pos, "map() is supported only with attribute=...");
        if (attr->type != VT::kString) Fail(pos, "map(): attribute must be a string");
        const Value* def = kwargs->Find("default");
        std::vector<Value> out;
        for (const Value& item : a) {
          if (!IsAttrContainer(item)) Fail(pos, "map(): the list's items must be mappings");
          Value v = AttributePath(item, *attr->str);
          out.push_back(v.type == VT::kUndefined && def != nullptr ? *def : v);
        }
        return Array(std::move(out));
      }
      return cannot();
    }
    if (operand.type == VT::kString) {
      if (name == "indent") {
        auto split10 = SplitKwargs(EvalArgs(f.body, env));
        auto& positional = split10.first;
        auto& kwargs = split10.second;
        auto arg = [&](size_t i, const char* key, Value def) {
          if (i < positional.size()) return positional[i];
          const Value* v = kwargs->Find(key);
          return v != nullptr ? *v : def;
        };
        const Value width = arg(0, "width", Int(4));
        const Value first = arg(1, "first", Bool(false));
        const Value blank = arg(2, "blank", Bool(false));
        std::string prefix;
        if (width.type == VT::kString) prefix = *width.str;
        else if (width.type == VT::kInt) prefix = std::string(static_cast<size_t>(std::clamp(width.num, 0.0, 1024.0)), ' ');
        else Fail(pos, "indent(): width must be an integer or a string");
        return Str(Indent(*operand.str, prefix, Truthy(first), Truthy(blank)));
      }
      if (name == "replace") {
        std::vector<Value> args = EvalArgs(f.body, env);
        if (args.empty() || !args.back().is_kwargs) {
          Value kw = Object(std::make_shared<ObjectData>());
          kw.is_kwargs = true;
          args.push_back(std::move(kw));
        }
        return CallMethod(operand, "replace", std::move(args), pos);
      }
      return cannot();
    }
    if (operand.type == VT::kObject && (name == "items" || name == "keys" || name == "values" || name == "dictsort"))
      return CallMethod(operand, name, EvalArgs(f.body, env), pos);
    return cannot();
  }

  static Value StringToNumber(const std::string& s, bool integer, const Value& def) {
    // parseInt(s, 10) / parseFloat(s): leading whitespace, a sign, the longest numeric prefix.
    const std::string_view t = TrimStart(s);
    size_t i = 0;
    std::string num;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) num += t[i++];
    size_t digits = 0;
    while (i < t.size() && IsDigit(t[i])) num += t[i++], ++digits;
    if (integer) {
      if (digits == 0) return def;
      return Int(std::strtod(num.c_str(), nullptr) + 0.0);
    }
    if (digits == 0 && t.substr(i, 8) == "Infinity") return Float(num == "-" ? -INFINITY : INFINITY);
    size_t frac = 0;
    if (i < t.size() && t[i] == '.') {
      num += '.';
      ++i;
      while (i < t.size() && IsDigit(t[i])) num += t[i++], ++frac;
    }
    if (digits + frac == 0) return def;
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
      size_t k = i + 1;
      std::string e = "e";
      if (k < t.size() && (t[k] == '+' || t[k] == '-')) e += t[k++];
      size_t ed = 0;
      while (k < t.size() && IsDigit(t[k])) e += t[k++], ++ed;
      if (ed > 0) num += e;
    }
    return Float(std::strtod(num.c_str(), nullptr));
  }

  static std::string Indent(const std::string& s, const std::string& prefix, bool first, bool blank) {
    std::string out;
    size_t start = 0, line = 0;
    while (true) {
      const size_t nl = s.find('\n', start);
      const std::string part = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if (line > 0) out += '\n';
      if ((line == 0 && !first) || (part.empty() && !blank)) out += part;
      else out += prefix + part;
      if (out.size() > ChatTemplate::kMaxOutputBytes) Fail(kNoPos, "indent(): result too long");
      if (nl == std::string::npos) break;
      start = nl + 1;
      ++line;
    }
    return out;
  }

  // Array.prototype.join over the values' JavaScript values.
  static std::string JoinValues(const std::vector<Value>& items, const std::string& sep, size_t pos) {
    std::string out;
    bool first = true;
    for (const Value& x : items) {
      if (!first) out += sep;
      first = false;
      if (x.type == VT::kUndefined || x.type == VT::kNull) continue;
      if (x.type == VT::kArray || x.type == VT::kObject || x.type == VT::kNamespace || x.type == VT::kFunction)
        Fail(pos, std::string("join: cannot join a ") + TypeName(x));
      out += RawString(x, pos);
      if (out.size() > ChatTemplate::kMaxOutputBytes) Fail(pos, "join: result too long");
    }
    return out;
  }

  static Value SortArray(const std::vector<Value>& a, bool reverse, bool case_sensitive, const std::optional<std::string>& attr, size_t pos) {
    std::vector<Value> items = a;
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const Value xv = attr ? AttributePath(x, *attr) : x;
      const Value yv = attr ? AttributePath(y, *attr) : y;
      const int c = CompareValues(xv, yv, case_sensitive, pos);
      return reverse ? c > 0 : c < 0;
    });
    return Array(std::move(items));
  }

  Value EvalMember(const Node& n, const std::shared_ptr<Env>& env) {
    const Value object = Eval(*n.a[0], env);
    const Node& p = *n.a[1];
    Value prop;
    if (n.flag) {
      if (p.kind == K::kSlice) return EvalSlice(object, p, env);
      prop = Eval(p, env);
    } else if (p.kind == K::kInt) {
      prop = Int(p.num);
    } else {
      prop = Str(p.str);
    }
    if (IsAttrContainer(object)) {
      if (prop.type != VT::kString) Fail(n.pos, std::string("a ") + TypeName(object) + " cannot be indexed by a " + TypeName(prop));
      const Value* v = object.obj->Find(*prop.str);
      if (v != nullptr) return *v;
      if (object.type == VT::kObject && KnownMethods().count(*prop.str) > 0 &&
          (*prop.str == "get" || *prop.str == "items" || *prop.str == "keys" || *prop.str == "values" || *prop.str == "dictsort"))
        return Method(object, *prop.str);
      return Undefined();
    }
    if (object.type == VT::kArray || object.type == VT::kString) {
      if (prop.type == VT::kInt) {
        if (object.type == VT::kArray) {
          const double size = static_cast<double>(object.arr->size());
          const double idx = prop.num < 0 ? size + prop.num : prop.num;
          if (idx < 0 || idx >= size) return Undefined();
          return (*object.arr)[static_cast<size_t>(idx)];
        }
        return StringAt(*object.str, prop.num, n.pos);
      }
      if (prop.type == VT::kString) {
        const std::string& name = *prop.str;
        if (name == "length") return Int(object.type == VT::kArray ? static_cast<double>(object.arr->size()) : Utf16Length(*object.str));
        if (object.type == VT::kString) {
          static const std::set<std::string> kStringMethods = {"upper", "lower", "strip", "title", "capitalize", "rstrip",
                                                               "lstrip", "startswith", "endswith", "split", "replace"};
          if (kStringMethods.count(name) > 0) return Method(object, name);
        }
        return Undefined();
      }
      Fail(n.pos, std::string("a ") + TypeName(object) + " cannot be indexed by a " + TypeName(prop));
    }
    if (prop.type != VT::kString) Fail(n.pos, std::string("a ") + TypeName(object) + " cannot be indexed by a " + TypeName(prop));
    return Undefined();
  }

  static Value Method(const Value& self, const std::string& name) {
    auto f = std::make_shared<Function>();
    f->kind = Function::kMethod;
    f->name = name;
    f->receiver = self;
    return Func(std::move(f));
  }

  // String.prototype.at: a UTF-16 code unit; one that splits a character is refused.
  static Value StringAt(const std::string& s, double index, size_t pos) {
    const double len = Utf16Length(s);
    const double idx = index < 0 ? len + index : index;
    if (idx < 0 || idx >= len) return Undefined();
    double unit = 0;
    for (size_t i = 0; i < s.size();) {
      size_t l;
      const uint32_t c = DecodeAt(s, i, &l);
      const double w = c >= 0x10000 ? 2 : 1;
      if (idx < unit + w) {
        if (w == 2) Fail(pos, "indexing a string inside a character outside the Basic Multilingual Plane is not supported");
        return Str(s.substr(i, l));
      }
      unit += w;
      i += l;
    }
    return Undefined();
  }

  Value EvalSlice(const Value& object, const Node& s, const std::shared_ptr<Env>& env) {
    if (object.type != VT::kArray && object.type != VT::kString) Fail(s.pos, std::string("cannot slice a ") + TypeName(object));
    std::optional<double> part[3];
    for (int i = 0; i < 3; ++i) {
      const Value v = s.a[i]->kind == K::kNone ? Undefined() : Eval(*s.a[i], env);
      if (v.type == VT::kInt) part[i] = v.num;
      else if (v.type != VT::kUndefined) Fail(s.pos, "slice bounds must be integers");
    }
    const double step = part[2] ? *part[2] : 1;
    if (object.type == VT::kArray) {
      std::vector<Value> out;
      for (size_t i : SliceIndices(object.arr->size(), part[0], part[1], step, s.pos)) out.push_back((*object.arr)[i]);
      return Array(std::move(out));
    }
    const std::vector<std::string_view> cps = CodePoints(*object.str);
    std::string out;
    for (size_t i : SliceIndices(cps.size(), part[0], part[1], step, s.pos)) out.append(cps[i]);
    return Str(std::move(out));
  }

  Value EvalBinary(const Node& n, const std::shared_ptr<Env>& env) {
    const std::string& op = n.str;
    const Value left = Eval(*n.a[0], env);
    if (op == "and") return Truthy(left) ? Eval(*n.a[1], env) : left;
    if (op == "or") return Truthy(left) ? left : Eval(*n.a[1], env);
    const Value right = Eval(*n.a[1], env);
    if (op == "==") return Bool(LooseEquals(left, right, n.pos));
    if (op == "!=") return Bool(!LooseEquals(left, right, n.pos));
    const size_t pos = n.pos;
    if (IsNumber(left) && IsNumber(right) && op != "~" && op != "**") {
      const double a = left.num, b = right.num;
      const bool is_float = left.type == VT::kFloat || right.type == VT::kFloat;
      auto num = [&](double r) { return is_float ? Float(r) : Int(r); };
      if (op == "+") return num(a + b);
      if (op == "-") return num(a - b);
      if (op == "*") return num(a * b);
      if (op == "/") return Float(a / b);
      if (op == "//") return num(std::floor(a / b));
      if (op == "%") return num(std::fmod(a, b));
      if (op == "<") return Bool(a < b);
      if (op == ">") return Bool(a > b);
      if (op == ">=") return Bool(a >= b);
      if (op == "<=") return Bool(a <= b);
    } else if (left.type == VT::kUndefined || right.type == VT::kUndefined) {
      if (right.type == VT::kUndefined && (op == "in" || op == "not in")) return Bool(op == "not in");
      if (op == "~" && left.type != VT::kNull && right.type != VT::kNull) {
        const std::string l = left.type == VT::kUndefined ? "" : RawString(left, pos);
        const std::string r = right.type == VT::kUndefined ? "" : RawString(right, pos);
        return Str(l + r);
      }
      Fail(pos, "cannot apply '" + op + "' to an undefined value (" + TypeName(left) + " " + op + " " + TypeName(right) + ")");
    } else if (left.type == VT::kNull || right.type == VT::kNull) {
      Fail(pos, "cannot apply '" + op + "' to none");
    } else if (op == "~") {
      std::string l = RawString(left, pos);
      const std::string r = RawString(right, pos);
      if (l.size() + r.size() > ChatTemplate::kMaxOutputBytes) Fail(pos, "a string grew beyond the size limit");
      return Str(l + r);
    } else if (op == "**" && (IsNumber(left) || left.type == VT::kBool) && (IsNumber(right) || right.type == VT::kBool)) {
      const double a = left.type == VT::kBool ? (left.b ? 1 : 0) : left.num;
      const double b = right.type == VT::kBool ? (right.b ? 1 : 0) : right.num;
      if (a == 0 && b < 0) Fail(pos, "0.0 cannot be raised to a negative power");
      const double r = std::pow(a, b);
      if (!std::isfinite(r)) Fail(pos, "exponentiation result is not a finite number");
      return left.type == VT::kFloat || right.type == VT::kFloat || b < 0 ? Float(r) : Int(r);
    } else if (left.type == VT::kArray && right.type == VT::kArray) {
      if (op == "+") {
        std::vector<Value> all = *left.arr;
        all.insert(all.end(), right.arr->begin(), right.arr->end());
        return Array(std::move(all));
      }
    } else if (right.type == VT::kArray) {
      if (op == "in" || op == "not in") {
        bool member = false;
        for (const Value& x : *right.arr) member = member || StrictEquals(x, left);
        return Bool(op == "in" ? member : !member);
      }
    }
    if ((left.type == VT::kString || right.type == VT::kString) && op == "+") {
      std::string l = RawString(left, pos);
      const std::string r = RawString(right, pos);
      if (l.size() + r.size() > ChatTemplate::kMaxOutputBytes) Fail(pos, "a string grew beyond the size limit");
      return Str(l + r);
    }
    if (left.type == VT::kString && right.type == VT::kString && (op == "in" || op == "not in")) {
      const bool in = right.str->find(*left.str) != std::string::npos;
      return Bool(op == "in" ? in : !in);
    }
    if (left.type == VT::kString && right.type == VT::kObject && (op == "in" || op == "not in")) {
      const bool in = right.obj->Find(*left.str) != nullptr;
      return Bool(op == "in" ? in : !in);
    }
    Fail(pos, "the operator '" + op + "' is not defined between a " + TypeName(left) + " and a " + TypeName(right));
  }

  Value Eval(const Node& n, const std::shared_ptr<Env>& env) {
    DepthGuard guard(this, n.pos);
    switch (n.kind) {
      case K::kIdent: {
        const Value* v = env->Lookup(n.str);
        return v != nullptr ? *v : Undefined();
      }
      case K::kInt: return Int(n.num);
      case K::kFloat: return Float(n.num);
      case K::kStr:
      case K::kText: return Str(n.str);
      case K::kNone: return Undefined();
      case K::kBinary: return EvalBinary(n, env);
      case K::kMember: return EvalMember(n, env);
      case K::kCall: {
        std::vector<Value> args = EvalArgs(n.body, env);
        const Value fn = Eval(*n.a[0], env);
        return Call(fn, std::move(args), n.pos);
      }
      case K::kFilter: return ApplyFilter(Eval(*n.a[0], env), n, env);
      case K::kTest: {
        const bool r = RunTest(n.str, Eval(*n.a[0], env), n.pos);
        return Bool(n.flag ? !r : r);
      }
      case K::kTernary: return Truthy(Eval(*n.a[0], env)) ? Eval(*n.a[1], env) : Eval(*n.a[2], env);
      case K::kSelect: return Truthy(Eval(*n.a[1], env)) ? Eval(*n.a[0], env) : Undefined();
      case K::kUnary: {
        const Value v = Eval(*n.a[0], env);
        if (n.str == "not") return Bool(!Truthy(v));
        if (IsNumber(v) || v.type == VT::kBool) {
          const double x = v.type == VT::kBool ? (v.b ? 1 : 0) : v.num;
          const double r = n.str == "-" ? -x : x;
          return v.type == VT::kFloat ? Float(r) : Int(r);
        }
        Fail(n.pos, "unary '" + n.str + "' cannot be applied to a " + TypeName(v));
      }
      case K::kArray:
      case K::kTuple: {
        std::vector<Value> items;
        for (const NodePtr& x : n.a) items.push_back(Eval(*x, env));
        return Array(std::move(items), n.kind == K::kTuple);
      }
      case K::kObject: {
        auto data = std::make_shared<ObjectData>();
        for (size_t i = 0; i + 1 < n.a.size(); i += 2) {
          const Value key = Eval(*n.a[i], env);
          if (key.type != VT::kString) Fail(n.a[i]->pos, std::string("mapping keys must be strings, got a ") + TypeName(key));
          data->Set(*key.str, Eval(*n.a[i + 1], env));
        }
        return Object(std::move(data));
      }
      case K::kIf: {
        std::string out;
        RenderIf(n, env, out);
        return Str(std::move(out));
      }
      case K::kFor: {
        std::string out;
        RenderFor(n, env, out);
        return Str(std::move(out));
      }
      default: Fail(n.pos, "this construct cannot be used as a value");
    }
  }

  int depth_ = 0;
  long steps_ = 0;
};

std::string LineColumn(std::string_view source, size_t pos) {
  if (pos == kNoPos) return "";
  pos = std::min(pos, source.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return ", line " + std::to_string(line) + ", column " + std::to_string(col);
}

}  // namespace

}  // namespace chat_template_internal

namespace cti = chat_template_internal;

namespace chat_template_internal {
// Program plus its source (for line numbers in render errors).
struct ProgramWithSource : Program {
  std::string source;
};
}  // namespace chat_template_internal

StatusOr<ChatTemplate> ChatTemplate::Compile(std::string_view source) {
  if (source.size() > kMaxSourceBytes)
    return InvalidArgument("chat template: " + std::to_string(source.size()) + " bytes, more than the limit of " + std::to_string(kMaxSourceBytes));
  if (!IsValidUtf8(source)) return InvalidArgument("chat template: not valid UTF-8");
  auto program = std::make_shared<cti::ProgramWithSource>();
  program->source = std::string(source);
  try {
    const cti::Preprocessed pre = cti::Preprocess(source);
    std::vector<cti::Token> tokens = cti::Lexer(pre).Run();
    program->body = cti::Parser(std::move(tokens), source.size()).Run();
    std::set<std::string> macros;
    cti::CollectMacros(program->body, macros);
    for (const cti::NodePtr& n : program->body) cti::Check(n.get(), macros, 0, false);
  } catch (const cti::TemplateError& e) {
    return InvalidArgument("chat template" + cti::LineColumn(source, e.pos) + ": " + e.message);
  }
  ChatTemplate t;
  t.program_ = std::move(program);
  return t;
}

namespace {
template <typename Json>
StatusOr<std::string> RenderImpl(const std::shared_ptr<const cti::Program>& program, const Json& variables) {
  const auto& with_source = static_cast<const cti::ProgramWithSource&>(*program);
  if (!variables.is_object()) return InvalidArgument("chat template: the variables must be a JSON object");
  try {
    cti::g_alloc_budget = ChatTemplate::kMaxAllocBytes;
    auto global = std::make_shared<cti::Env>();
    auto fn = [](cti::Function::Kind kind, const char* name) {
      auto f = std::make_shared<cti::Function>();
      f->kind = kind;
      f->name = name;
      return cti::Func(std::move(f));
    };
    global->vars["namespace"] = fn(cti::Function::kNamespace, "namespace");
    global->vars["raise_exception"] = fn(cti::Function::kRaise, "raise_exception");
    global->vars["range"] = fn(cti::Function::kRange, "range");
    for (const char* t : {"true", "True"}) global->vars[t] = cti::Bool(true);
    for (const char* f : {"false", "False"}) global->vars[f] = cti::Bool(false);
    for (const char* n : {"none", "None"}) global->vars[n] = cti::Null();
    for (auto it = variables.begin(); it != variables.end(); ++it) {
      if (global->vars.count(it.key()) > 0 || it.key() == "strftime_now")
        return InvalidArgument("chat template: the variable '" + it.key() + "' is a built-in name and cannot be set");
      global->vars[it.key()] = cti::FromJson(it.value(), 0);
    }
    cti::g_alloc_budget = ChatTemplate::kMaxAllocBytes;
    cti::Interpreter interpreter;
    return interpreter.Run(*program, global);
  } catch (const cti::TemplateError& e) {
    return InvalidArgument("chat template" + cti::LineColumn(with_source.source, e.pos) + ": " + e.message);
  } catch (const cti::BreakSignal&) {
    return InvalidArgument("chat template: '{% break %}' outside a loop");
  } catch (const cti::ContinueSignal&) {
    return InvalidArgument("chat template: '{% continue %}' outside a loop");
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("chat template: out of memory while rendering");
  }
}
}  // namespace

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& variables) const {
  if (!program_) return FailedPrecondition("chat template: not compiled");
  return RenderImpl(program_, variables);
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& variables) const {
  if (!program_) return FailedPrecondition("chat template: not compiled");
  return RenderImpl(program_, variables);
}

StatusOr<ChatTemplateSource> LoadChatTemplateSource(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = (std::filesystem::path(path) / "tokenizer_config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFile(file, "chat template", ChatTemplate::kMaxSourceBytes * 64));
  ChatTemplateSource out;
  out.defaults = nlohmann::ordered_json::object();
  const bool is_config = std::filesystem::path(file).extension() == ".json";
  if (!is_config) {
    out.text = std::move(text);
    return out;
  }
  ASSIGN_OR_RETURN(nlohmann::json checked, ParseJson(text, file));
  (void)checked;
  const nlohmann::ordered_json config = nlohmann::ordered_json::parse(text);
  if (!config.is_object()) return InvalidArgument(file + ": not a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end()) return InvalidArgument(file + ": has no \"chat_template\"");
  if (it->is_string()) {
    out.text = it->get<std::string>();
  } else if (it->is_array()) {
    bool found = false;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["template"].is_string())
        return InvalidArgument(file + ": \"chat_template\" list entries must be {\"name\", \"template\"} objects");
      if (entry["name"] == "default") {
        out.text = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) return InvalidArgument(file + ": \"chat_template\" list has no template named \"default\"");
  } else {
    return InvalidArgument(file + ": \"chat_template\" must be a string or a list of named templates");
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto t = config.find(key);
    if (t == config.end()) continue;
    if (t->is_string()) out.defaults[key] = *t;
    else if (t->is_object() && t->contains("content") && (*t)["content"].is_string()) out.defaults[key] = (*t)["content"];
  }
  return out;
}

}  // namespace tediserve::engine
