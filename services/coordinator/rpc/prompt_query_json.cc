#include "services/coordinator/rpc/prompt_query_json.h"

#include <charconv>
#include <limits>

#include "fmt/format.h"

namespace kvtier::coordinator {
namespace {

constexpr int kMaxDepth = 64;

// A cursor over the text; every method reports the first error it meets, at its byte.
class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  Status Fail(std::string_view what) const {
    return InvalidArgumentError(fmt::format("{} at byte {}", what, pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }
  // Consumes `c` (after whitespace) when it is next.
  bool Take(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Status Expect(char c, std::string_view what) {
    return Take(c) ? Status::Ok() : Fail(fmt::format("expected {}", what));
  }
  bool TakeLiteral(std::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool NextIs(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  Status String(std::string& out) {
    out.clear();
    if (!Take('"')) return Fail("expected a string");
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return Fail("a control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      KVTIER_RETURN_IF_ERROR(Escape(out));
    }
    return Fail("an unterminated string");
  }

  // A whole number of JSON's integer form (no sign, fraction or exponent) up to `max`.
  Status Whole(uint64_t max, uint64_t& out) {
    SkipSpace();
    const size_t start = pos_;
    const auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), out);
    const size_t digits = static_cast<size_t>(end - (text_.data() + start));
    const bool leading_zero = digits > 1 && text_[start] == '0';
    if (ec == std::errc() && !leading_zero && out <= max && !NumberGoesOn(start + digits)) {
      pos_ = start + digits;
      return Status::Ok();
    }
    return Fail(fmt::format("expected a whole number in [0, {}]", max));
  }

  // Skips one value of any kind, checking its grammar.
  Status SkipValue(int depth) {
    if (depth > kMaxDepth) return Fail("values nested too deep");
    SkipSpace();
    if (pos_ == text_.size()) return Fail("expected a value");
    const char c = text_[pos_];
    if (c == '"') {
      std::string ignored;
      return String(ignored);
    }
    if (c == '{' || c == '[') return SkipContainer(depth);
    if (TakeLiteral("true") || TakeLiteral("false") || TakeLiteral("null")) return Status::Ok();
    return SkipNumber();
  }

 private:
  bool NumberGoesOn(size_t at) const {
    return at < text_.size() && (text_[at] == '.' || text_[at] == 'e' || text_[at] == 'E' ||
                                 (text_[at] >= '0' && text_[at] <= '9'));
  }

  Status Escape(std::string& out) {
    if (pos_ == text_.size()) return Fail("an unterminated escape");
    const char e = text_[pos_++];
    switch (e) {
      case '"': out.push_back('"'); return Status::Ok();
      case '\\': out.push_back('\\'); return Status::Ok();
      case '/': out.push_back('/'); return Status::Ok();
      case 'b': out.push_back('\b'); return Status::Ok();
      case 'f': out.push_back('\f'); return Status::Ok();
      case 'n': out.push_back('\n'); return Status::Ok();
      case 'r': out.push_back('\r'); return Status::Ok();
      case 't': out.push_back('\t'); return Status::Ok();
      case 'u': break;
      default: return Fail("an unknown escape in a string");
    }
    uint32_t code = 0;
    KVTIER_RETURN_IF_ERROR(Hex4(code));
    if (code >= 0xDC00 && code <= 0xDFFF) return Fail("a lone low surrogate in a string");
    if (code >= 0xD800 && code <= 0xDBFF) {
      uint32_t low = 0;
      if (text_.substr(pos_, 2) != "\\u") return Fail("a lone high surrogate in a string");
      pos_ += 2;
      KVTIER_RETURN_IF_ERROR(Hex4(low));
      if (low < 0xDC00 || low > 0xDFFF) return Fail("a lone high surrogate in a string");
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(code, out);
    return Status::Ok();
  }

  Status Hex4(uint32_t& code) {
    if (pos_ + 4 > text_.size()) return Fail("a short \\u escape");
    const auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, code, 16);
    if (ec != std::errc() || end != text_.data() + pos_ + 4) return Fail("a bad \\u escape");
    pos_ += 4;
    return Status::Ok();
  }

  static void AppendUtf8(uint32_t code, std::string& out) {
    if (code < 0x80) {
      out.push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (code >> 6)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (code >> 12)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (code >> 18)));
      out.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  Status SkipContainer(int depth) {
    const bool object = text_[pos_++] == '{';
    const char close = object ? '}' : ']';
    if (Take(close)) return Status::Ok();
    do {
      if (object) {
        std::string key;
        KVTIER_RETURN_IF_ERROR(String(key));
        KVTIER_RETURN_IF_ERROR(Expect(':', "':'"));
      }
      KVTIER_RETURN_IF_ERROR(SkipValue(depth + 1));
    } while (Take(','));
    return Expect(close, object ? "',' or '}'" : "',' or ']'");
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  Status SkipNumber() {
    const auto digits = [&] {
      const size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - start;
    };
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    const size_t start = pos_;
    const size_t whole = digits();
    if (whole == 0 || (whole > 1 && text_[start] == '0')) return Fail("expected a value");
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Fail("a number with no digits after '.'");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Fail("a number with no exponent digits");
    }
    return Status::Ok();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

Status WholeList(JsonReader& in, std::string_view name, std::vector<uint32_t>& out) {
  out.clear();
  KVTIER_RETURN_IF_ERROR(in.Expect('[', fmt::format("{}: an array", name)));
  if (in.Take(']')) return Status::Ok();
  do {
    uint64_t v = 0;
    const Status s = in.Whole(std::numeric_limits<uint32_t>::max(), v);
    if (!s.ok()) return s.WithContext(fmt::format("{}[{}]", name, out.size()));
    out.push_back(static_cast<uint32_t>(v));
  } while (in.Take(','));
  return in.Expect(']', fmt::format("{}: ',' or ']'", name));
}

Status StringList(JsonReader& in, std::string_view name, std::vector<std::string>& out) {
  out.clear();
  KVTIER_RETURN_IF_ERROR(in.Expect('[', fmt::format("{}: an array", name)));
  if (in.Take(']')) return Status::Ok();
  do {
    std::string s;
    const Status status = in.String(s);
    if (!status.ok()) return status.WithContext(fmt::format("{}[{}]", name, out.size()));
    out.push_back(std::move(s));
  } while (in.Take(','));
  return in.Expect(']', fmt::format("{}: ',' or ']'", name));
}

Status LoraId(JsonReader& in, uint64_t& out) {
  if (!in.NextIs('"')) return in.Whole(std::numeric_limits<uint64_t>::max(), out);
  std::string digits;
  KVTIER_RETURN_IF_ERROR(in.String(digits));
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
    return in.Fail("expected a whole number (or a string of digits) of 64 bits");
  return Status::Ok();
}

// One member's value into `q`; unknown names are skipped.
Status Member(JsonReader& in, const std::string& name, PromptQuery& q) {
  if (in.TakeLiteral("null")) {  // as absent
    if (name == "tokens") q.tokens.clear();
    if (name == "candidates") q.candidates.clear();
    if (name == "candidate_active_blocks") q.candidate_active_blocks.clear();
    if (name == "cache_salt") q.cache_salt.clear();
    if (name == "lora_name") q.lora_name.clear();
    if (name == "model") q.model.clear();
    if (name == "lora_id") q.lora_id = 0;
    return Status::Ok();
  }
  if (name == "tokens") return WholeList(in, name, q.tokens);
  if (name == "candidate_active_blocks") return WholeList(in, name, q.candidate_active_blocks);
  if (name == "candidates") return StringList(in, name, q.candidates);
  if (name == "lora_id") return LoraId(in, q.lora_id).WithContext("lora_id");
  if (name == "cache_salt") return in.String(q.cache_salt).WithContext("cache_salt");
  if (name == "lora_name") return in.String(q.lora_name).WithContext("lora_name");
  if (name == "model") return in.String(q.model).WithContext("model");
  return in.SkipValue(1);
}

void AppendString(std::string_view s, std::string& out) {
  out.push_back('"');
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

template <typename List, typename Append>
void AppendList(std::string_view name, const List& list, Append append, std::string& out) {
  out += fmt::format(",\"{}\":[", name);
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out.push_back(',');
    append(list[i]);
  }
  out.push_back(']');
}

}  // namespace

Result<PromptQuery> ParsePromptQuery(std::string_view json) {
  JsonReader in(json);
  PromptQuery q;
  KVTIER_RETURN_IF_ERROR(in.Expect('{', "a JSON object"));
  if (!in.Take('}')) {
    do {
      std::string name;
      KVTIER_RETURN_IF_ERROR(in.String(name).WithContext("a member's name"));
      KVTIER_RETURN_IF_ERROR(in.Expect(':', "':'"));
      KVTIER_RETURN_IF_ERROR(Member(in, name, q));
    } while (in.Take(','));
    KVTIER_RETURN_IF_ERROR(in.Expect('}', "',' or '}'"));
  }
  if (!in.AtEnd()) return in.Fail("text after the object");
  return q;
}

std::string PromptQueryJson(const PromptQuery& q) {
  std::string out = "{\"lora_id\":" + std::to_string(q.lora_id);
  AppendList("tokens", q.tokens, [&](uint32_t t) { out += std::to_string(t); }, out);
  for (const auto& [name, value] : {std::pair<std::string_view, const std::string*>{"cache_salt", &q.cache_salt},
                                    {"lora_name", &q.lora_name},
                                    {"model", &q.model}}) {
    out += fmt::format(",\"{}\":", name);
    AppendString(*value, out);
  }
  AppendList("candidates", q.candidates, [&](const std::string& c) { AppendString(c, out); }, out);
  AppendList("candidate_active_blocks", q.candidate_active_blocks,
             [&](uint32_t b) { out += std::to_string(b); }, out);
  out.push_back('}');
  return out;
}

}  // namespace kvtier::coordinator
