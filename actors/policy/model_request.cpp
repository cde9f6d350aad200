#include "actors/policy/model_request.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <optional>

namespace tether {
namespace {

struct span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

class scanner {
 public:
  explicit scanner(std::string_view text) : s_(text) {}

  void skip_ws() {
    while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // A JSON string token starting at pos_ (which must be '"').
  std::optional<span> string_token() {
    skip_ws();
    if (pos_ >= s_.size() || s_[pos_] != '"') return std::nullopt;
    span sp{pos_, 0};
    ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '\\') {
        ++pos_;
      } else if (c == '"') {
        sp.end = pos_;
        return sp;
      }
    }
    return std::nullopt;
  }
  // Any JSON value; the text is already validated, so only nesting and strings matter.
  std::optional<span> value() {
    skip_ws();
    if (pos_ >= s_.size()) return std::nullopt;
    span sp{pos_, 0};
    if (s_[pos_] == '"') return string_token();
    int depth = 0;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '"') {
        if (!string_token()) return std::nullopt;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (depth == 0) break;
        --depth;
        if (depth == 0) {
          ++pos_;
          break;
        }
      }
      if (depth == 0 && (c == ',' || is_ws(c))) break;
      ++pos_;
    }
    sp.end = pos_;
    return sp;
  }
  std::string_view text(span sp) const { return s_.substr(sp.begin, sp.end - sp.begin); }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
};

// The value spans of the top-level keys named "model" (escapes in the key decoded): the first
// one and how many there are. No allocation: it runs twice per request.
struct model_spans {
  span first;
  std::size_t count = 0;
  void push_back(span sp) {
    if (count++ == 0) first = sp;
  }
};

model_spans model_value_spans(std::string_view body) {
  model_spans found;
  scanner sc{body};
  if (!sc.eat('{')) return found;
  if (sc.eat('}')) return found;
  do {
    auto key = sc.string_token();
    if (!key || !sc.eat(':')) return found;
    auto val = sc.value();
    if (!val) return found;
    auto key_text = sc.text(*key);
    bool is_model = key_text == "\"model\"";
    if (!is_model && key_text.find('\\') != std::string_view::npos) {
      boost::system::error_code ec;
      auto decoded = boost::json::parse(key_text, ec);
      is_model = !ec && decoded.is_string() && decoded.as_string() == "model";
    }
    if (is_model) found.push_back(*val);
  } while (sc.eat(','));
  return found;
}

}  // namespace

std::variant<model_request_info, body_error> inspect_model_request(std::string_view body,
                                                                   std::uint32_t max_depth) {
  if (body.empty()) return body_error{"request body is empty; a JSON object is required"};
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::system::error_code ec;
  // A chat request's DOM fits here; a larger one continues on the heap.
  unsigned char arena[4096];
  boost::json::monotonic_resource mr(arena, sizeof arena);
  auto doc = boost::json::parse(body, ec, &mr, opts);
  if (ec) {
    if (ec == boost::json::error::too_deep) {
      return body_error{"request JSON is nested deeper than " + std::to_string(max_depth)};
    }
    return body_error{"request body is not valid JSON (" + ec.message() + ")"};
  }
  if (!doc.is_object()) return body_error{"request body must be a JSON object"};
  if (model_value_spans(body).count > 1) {
    return body_error{"request body has more than one `model` key"};
  }
  const auto& obj = doc.as_object();
  auto it = obj.find("model");
  if (it == obj.end()) return body_error{"`model` is required"};
  if (!it->value().is_string()) return body_error{"`model` must be a string"};
  model_request_info info;
  info.model = std::string(it->value().as_string());
  if (auto s = obj.find("stream"); s != obj.end()) {
    if (s->value().is_bool()) {
      info.stream = s->value().as_bool();
    } else if (!s->value().is_null()) {
      return body_error{"`stream` must be a boolean"};
    }
  }
  return info;
}

std::string rewrite_model(std::string_view body, std::string_view new_model) {
  const auto spans = model_value_spans(body);
  if (spans.count != 1) return std::string(body);
  // A name without characters JSON escapes (the usual case) is quoted as it is.
  const bool plain = std::none_of(new_model.begin(), new_model.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
  std::string replacement;
  if (!plain) replacement = boost::json::serialize(boost::json::value(new_model));
  std::string out;
  out.reserve(body.size() + new_model.size() + replacement.size() + 2);
  out.append(body.substr(0, spans.first.begin));
  if (plain) {
    out += '"';
    out.append(new_model);
    out += '"';
  } else {
    out.append(replacement);
  }
  out.append(body.substr(spans.first.end));
  return out;
}

}  // namespace tether
