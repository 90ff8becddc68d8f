#include "chat/jinja_lexer.h"

#include <utf8proc.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

#include "chat/pystr.h"
#include "core/error.h"

namespace dfl::jinja {

void throw_syntax_error(int line, const std::string& msg) {
  throw Error(str("template syntax error (line ", line, "): ", msg));
}

namespace {

int count_newlines(const std::string& s, size_t b, size_t e) {
  int n = 0;
  for (size_t i = b; i < e; ++i) n += s[i] == '\n';
  return n;
}

// Decodes one code point at pos (U+FFFD and length 1 for a bad byte).
char32_t cp_at(const std::string& s, size_t pos, size_t* len) {
  utf8proc_int32_t cp;
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()) + pos,
                            static_cast<utf8proc_ssize_t>(s.size() - pos), &cp);
  if (n <= 0) {
    *len = 1;
    return 0xFFFD;
  }
  *len = static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

// Regex \s* from pos (Python unicode whitespace).
size_t skip_space(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    size_t len;
    if (!py_isspace(cp_at(s, pos, &len))) break;
    pos += len;
  }
  return pos;
}

bool all_space(const std::string& s, size_t b) { return skip_space(s, b) == s.size(); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's "unicode-escape" decoding of a string literal body.
std::string unescape(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    auto hex = [&](int n) -> char32_t {
      char32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (i + 1 >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + 1])))
          throw_syntax_error(line, "truncated \\xXX escape in string literal");
        char h = body[++i];
        v = v * 16 + static_cast<char32_t>(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        utf8_append(out, hex(2));
        break;
      case 'u':
        utf8_append(out, hex(4));
        break;
      case 'U': {
        char32_t v = hex(8);
        if (v > 0x10FFFF) throw_syntax_error(line, "illegal Unicode character in string literal");
        utf8_append(out, v);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          utf8_append(out, v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

const char* const kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
const char kOps1[] = "+-/*%~[](){}><=.:|,;";

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& opt) : s_(std::move(src)), opt_(opt) {}

  std::vector<Token> run() {
    bool line_starting = true;
    size_t pos = 0;
    while (pos < s_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(s_.substr(pos), pos);
        break;
      }
      char kind = s_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      std::string text = s_.substr(pos, tag - pos);
      if (sign == '-') {
        text = py_strip(text, std::nullopt, false, true);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text, l_pos))
          text.resize(l_pos);
      }
      emit_data(text, pos);
      line_ += count_newlines(s_, pos, tag);
      size_t body = tag + 2 + (sign ? 1 : 0);
      size_t end;
      if (kind == '#') {
        end = lex_comment(body);
      } else if (kind == '%' && is_raw(body, &end)) {
        end = lex_raw(end);
      } else {
        end = lex_tag(tag, body, kind == '%');
      }
      line_starting = end > 0 && s_[end - 1] == '\n';
      pos = end;
    }
    Token eof;
    eof.kind = TokKind::kEof;
    eof.line = line_;
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  size_t find_tag(size_t pos) const {
    for (size_t i = s_.find('{', pos); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit_data(const std::string& text, size_t) {
    if (text.empty()) return;
    Token t;
    t.kind = TokKind::kData;
    t.text = text;
    t.line = line_;
    toks_.push_back(std::move(t));
  }

  void push(TokKind kind, std::string text, int line) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line;
    toks_.push_back(std::move(t));
  }

  // After a block/comment close: "+" keeps, "-" eats \s*, plain eats one "\n" with trim_blocks.
  size_t after_close(size_t close_end, char sign, bool trims) {
    size_t end = close_end;
    if (sign == '-') {
      end = skip_space(s_, end);
    } else if (sign != '+' && trims && opt_.trim_blocks && end < s_.size() && s_[end] == '\n') {
      ++end;
    }
    line_ += count_newlines(s_, close_end, end);
    return end;
  }

  size_t lex_comment(size_t body) {
    size_t q = s_.find("#}", body);
    if (q == std::string::npos) throw_syntax_error(line_, "Missing end of comment tag");
    char sign = q > body && (s_[q - 1] == '-' || s_[q - 1] == '+') ? s_[q - 1] : '\0';
    line_ += count_newlines(s_, body, q + 2);
    return after_close(q + 2, sign, true);
  }

  // {%[-+]?\s*raw\s*(-%}|%})  — `body` is just after the sign; *end is set past the tag.
  bool is_raw(size_t body, size_t* end) {
    size_t p = skip_space(s_, body);
    if (s_.compare(p, 3, "raw") != 0) return false;
    p = skip_space(s_, p + 3);
    if (s_.compare(p, 3, "-%}") == 0) {
      line_ += count_newlines(s_, body, p);
      *end = skip_space(s_, p + 3);
      line_ += count_newlines(s_, p, *end);
      return true;
    }
    if (s_.compare(p, 2, "%}") == 0) {
      line_ += count_newlines(s_, body, p);
      *end = p + 2;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t pos) {
    for (size_t i = s_.find("{%", pos); i != std::string::npos; i = s_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p++] : '\0';
      p = skip_space(s_, p);
      if (s_.compare(p, 6, "endraw") != 0) continue;
      p = skip_space(s_, p + 6);
      char csign = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p] : '\0';
      if (s_.compare(p + (csign ? 1 : 0), 2, "%}") != 0) continue;
      std::string text = s_.substr(pos, i - pos);
      if (sign == '-') {
        text = py_strip(text, std::nullopt, false, true);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        if (l_pos != std::string::npos && all_space(text, l_pos + 1)) text.resize(l_pos + 1);
      }
      emit_data(text, pos);
      line_ += count_newlines(s_, pos, p);
      return after_close(p + (csign ? 1 : 0) + 2, csign, true);
    }
    throw_syntax_error(line_, "Missing end of raw directive");
  }

  size_t lex_tag(size_t tag, size_t pos, bool block) {
    push(block ? TokKind::kBlockBegin : TokKind::kVarBegin, block ? "{%" : "{{", line_);
    std::vector<char> balance;
    while (true) {
      if (pos >= s_.size()) throw_syntax_error(line_, "unexpected end of template, tag not closed");
      if (balance.empty()) {
        const char* close = block ? "%}" : "}}";
        char sign = s_[pos];
        if ((sign == '-' || (sign == '+' && block)) && s_.compare(pos + 1, 2, close) == 0) {
          push(block ? TokKind::kBlockEnd : TokKind::kVarEnd, close, line_);
          return after_close(pos + 3, sign, block);
        }
        if (s_.compare(pos, 2, close) == 0) {
          push(block ? TokKind::kBlockEnd : TokKind::kVarEnd, close, line_);
          return after_close(pos + 2, '\0', block);
        }
      }
      char c = s_[pos];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        line_ += c == '\n';
        ++pos;
      } else if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        size_t e = pos;
        while (e < s_.size() && is_name_char(s_[e])) ++e;
        push(TokKind::kName, s_.substr(pos, e - pos), line_);
        pos = e;
      } else if (c == '\'' || c == '"') {
        size_t e = pos + 1;
        while (e < s_.size() && s_[e] != c) e += s_[e] == '\\' ? 2 : 1;
        if (e >= s_.size()) throw_syntax_error(line_, "unterminated string literal");
        int start_line = line_;
        std::string body = s_.substr(pos + 1, e - pos - 1);
        line_ += count_newlines(s_, pos, e);
        push(TokKind::kString, unescape(body, start_line), start_line);
        pos = e + 1;
      } else {
        std::string op;
        for (const char* o : kOps2)
          if (s_.compare(pos, 2, o) == 0) op = o;
        if (op.empty() && std::strchr(kOps1, c) && c != '\0') op = std::string(1, c);
        if (op.empty()) throw_syntax_error(line_, str("unexpected char '", c, "'"));
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) throw_syntax_error(line_, str("unexpected '", op, "'"));
          if (balance.back() != op[0])
            throw_syntax_error(line_,
                               str("unexpected '", op, "', expected '", balance.back(), "'"));
          balance.pop_back();
        }
        push(TokKind::kOp, op, line_);
        pos += op.size();
      }
    }
    (void)tag;
  }

  // Digits with optional "_" separators, as jinja2's integer_re/float_re.
  size_t digits(size_t pos) const {
    size_t e = pos;
    while (e < s_.size() && (is_digit(s_[e]) ||
                             (s_[e] == '_' && e + 1 < s_.size() && is_digit(s_[e + 1]) && e > pos)))
      ++e;
    return e;
  }

  size_t lex_number(size_t pos) {
    // 0x / 0o / 0b integers (with "_" separators).
    if (s_[pos] == '0' && pos + 2 < s_.size() && std::strchr("xXoObB", s_[pos + 1])) {
      char k = static_cast<char>(std::tolower(s_[pos + 1]));
      int base = k == 'x' ? 16 : (k == 'o' ? 8 : 2);
      auto ok = [&](char c) {
        int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
                : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                              : 99;
        return d < base;
      };
      size_t e = pos + 2;
      std::string digits_only;
      while (e < s_.size() && (ok(s_[e]) || (s_[e] == '_' && e + 1 < s_.size() && ok(s_[e + 1])))) {
        if (s_[e] != '_') digits_only += s_[e];
        ++e;
      }
      if (!digits_only.empty()) {
        Token t;
        t.kind = TokKind::kInt;
        t.line = line_;
        t.text = s_.substr(pos, e - pos);
        errno = 0;
        t.ival = static_cast<int64_t>(std::strtoll(digits_only.c_str(), nullptr, base));
        if (errno == ERANGE) throw_syntax_error(line_, "integer literal too large");
        toks_.push_back(std::move(t));
        return e;
      }
    }
    bool after_dot = pos > 0 && s_[pos - 1] == '.';
    size_t e = digits(pos);
    bool is_float = false;
    size_t fe = e;
    if (!after_dot) {
      if (fe + 1 < s_.size() && s_[fe] == '.' && is_digit(s_[fe + 1])) {
        fe = digits(fe + 1);
        is_float = true;
      }
      if (fe < s_.size() && (s_[fe] == 'e' || s_[fe] == 'E')) {
        size_t x = fe + 1;
        if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
        if (x < s_.size() && is_digit(s_[x])) {
          fe = digits(x);
          is_float = true;
        }
      }
    }
    std::string text;
    size_t end = is_float ? fe : e;
    for (size_t i = pos; i < end; ++i)
      if (s_[i] != '_') text += s_[i];
    Token t;
    t.line = line_;
    t.text = text;
    if (is_float) {
      t.kind = TokKind::kFloat;
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokKind::kInt;
      errno = 0;
      t.ival = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) throw_syntax_error(line_, "integer literal too large");
    }
    toks_.push_back(std::move(t));
    return end;
  }

  std::string s_;
  LexOptions opt_;
  std::vector<Token> toks_;
  int line_ = 1;
};

std::string normalize_source(const std::string& src, bool keep_trailing_newline) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexOptions& opt) {
  return Lexer(normalize_source(source, opt.keep_trailing_newline), opt).run();
}

}  // namespace dfl::jinja
