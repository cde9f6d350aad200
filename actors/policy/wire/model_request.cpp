#include "actors/policy/wire/model_request.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <initializer_list>
#include <optional>

#include "actors/policy/wire/fingerprint.hpp"
#include "actors/policy/wire/json_members.hpp"
#include "actors/policy/wire/json_scanner.hpp"

namespace tether {
namespace {

using json_scan::key_is;
using json_scan::scanner;
using json_scan::span;

// The value spans of the top-level keys named "model" (escapes in the key decoded): the first
// one and how many there are. No allocation: rewrite_model runs it for every attempt.
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

// What inspect_model_request needs, gathered while Boost.JSON's own parser validates the body
// (the validator boost::json::parse runs), with no document built: building a chat request's
// DOM was most of the cost of reading the body. The top-level members are told apart by
// their decoded keys, as the document's would be; a repeated key's last value counts, as the
// document keeps it.
//
// With Fingerprint, the same events also make the body's fingerprint: every token as parsed
// (keys, strings, number texts, literals, brackets) but those of the top-level `stream`,
// `stream_options` and `client_metadata` members, which a client's retry may change (Claude Code
// re-sends a cut stream without one; Codex CLI writes its client_metadata's keys in another order
// on each round of its retries). Without it the class is what it was: the plain request pays for
// nothing.
template <bool Fingerprint>
class body_facts
    : public json_members<body_facts<Fingerprint>, 21> {  // sizeof "max_completion_tokens"
  using base = json_members<body_facts<Fingerprint>, 21>;

 public:
  enum class value_kind { object, string, boolean_true, boolean_false, null, other };

  bool root_is_object = false;
  std::size_t models = 0;  // top-level "model" keys
  bool model_is_string = false;
  std::string model;
  std::optional<value_kind> stream;  // the last top-level "stream" value
  // The last value of each output-limit key, when it is a non-negative integer.
  std::optional<std::uint64_t> output_limits[3];

  std::uint64_t fingerprint_value() const { return print_.value(); }

  bool on_object_begin(boost::json::error_code&) {
    token('{');
    return open(value_kind::object);
  }
  bool on_object_end(std::size_t, boost::json::error_code&) {
    end_token('}');
    return close();
  }
  bool on_array_begin(boost::json::error_code&) {
    token('[');
    return open(value_kind::other);
  }
  bool on_array_end(std::size_t, boost::json::error_code&) {
    end_token(']');
    return close();
  }
  bool on_key_part(boost::json::string_view s, std::size_t n, boost::json::error_code& ec) {
    if constexpr (Fingerprint) key_text(s);
    return base::on_key_part(s, n, ec);
  }
  bool on_key(boost::json::string_view s, std::size_t n, boost::json::error_code& ec) {
    if constexpr (Fingerprint) key_text(s);
    base::on_key(s, n, ec);  // a top-level key: on_member says which member it begins
    if constexpr (Fingerprint) {
      if (!skipping()) print_ = key_print_;
      key_started_ = false;
    }
    return true;
  }
  void on_member(std::string_view key) {
    member_ = key == "model"                   ? member::model
              : key == "stream"                ? member::stream
              : key == "max_tokens"            ? member::max_tokens
              : key == "max_completion_tokens" ? member::max_completion_tokens
              : key == "max_output_tokens"     ? member::max_output_tokens
                                               : member::other;
    if (member_ == member::model) ++models;
    if constexpr (Fingerprint)
      skip_member_ =
          member_ == member::stream || key == "stream_options" || key == "client_metadata";
  }
  bool on_string_part(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    string_part(s);
    return true;
  }
  bool on_string(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    string_part(s);
    in_string_ = false;
    return true;
  }
  bool on_number_part(boost::json::string_view s, boost::json::error_code&) {
    text(s);
    return true;
  }
  bool on_int64(std::int64_t n, boost::json::string_view s, boost::json::error_code&) {
    number_end(s);
    value(value_kind::other);
    if (n >= 0) output_limit(static_cast<std::uint64_t>(n));
    return true;
  }
  bool on_uint64(std::uint64_t n, boost::json::string_view s, boost::json::error_code&) {
    number_end(s);
    value(value_kind::other);
    output_limit(n);
    return true;
  }
  bool on_double(double, boost::json::string_view s, boost::json::error_code&) {
    number_end(s);
    return value(value_kind::other);
  }
  bool on_bool(bool b, boost::json::error_code&) {
    token(b ? 't' : 'f');
    return value(b ? value_kind::boolean_true : value_kind::boolean_false);
  }
  bool on_null(boost::json::error_code&) {
    token('n');
    return value(value_kind::null);
  }

 private:
  enum class member { other, model, stream, max_tokens, max_completion_tokens, max_output_tokens };

  using base::depth;
  using base::enter;
  using base::leave;

  void output_limit(std::uint64_t n) {
    if (depth() == 1 && is_output_limit(member_)) output_limits[limit_index(member_)] = n;
  }
  static bool is_output_limit(member m) {
    return m == member::max_tokens || m == member::max_completion_tokens ||
           m == member::max_output_tokens;
  }
  static std::size_t limit_index(member m) {
    return static_cast<std::size_t>(m) - static_cast<std::size_t>(member::max_tokens);
  }

  // A value starts at the current depth: the document itself at 0, a top-level member's at 1.
  bool value(value_kind kind) {
    if (depth() == 0) root_is_object = kind == value_kind::object;
    if (depth() != 1) return true;
    if (member_ == member::model) {
      model_is_string = kind == value_kind::string;
      model.clear();  // a string's parts follow
    } else if (member_ == member::stream) {
      stream = kind;
    } else if (is_output_limit(member_)) {
      output_limits[limit_index(member_)].reset();  // an integer sets it again (on_int64)
    }
    return true;
  }
  bool open(value_kind kind) {
    value(kind);
    enter();
    return true;
  }
  bool close() {
    leave();
    return true;
  }
  void string_part(boost::json::string_view s) {
    if (!in_string_) {
      in_string_ = true;
      token('s');
      value(value_kind::string);
    }
    text(s);
    if (depth() == 1 && member_ == member::model) model.append(s.data(), s.size());
  }

  // The fingerprint's side. Inside a skipped member's value (depth ≥ 1 while its key was the
  // last top-level one) nothing is taken; the document's own brackets always are.
  bool skipping() const { return skip_member_ && depth() >= 1; }
  void token(char t) {
    if constexpr (Fingerprint) {
      if (!skipping()) print_.tag(static_cast<unsigned char>(t));
    }
  }
  void end_token(char t) {
    if constexpr (Fingerprint) {
      // At depth 1 the document's own object (or array) ends, after its last member.
      if (depth() == 1 || !skipping()) print_.tag(static_cast<unsigned char>(t));
    }
  }
  void text(boost::json::string_view s) {
    if constexpr (Fingerprint) {
      if (!skipping()) print_.add({s.data(), s.size()});
    }
  }
  void number_end(boost::json::string_view s) {
    text(s);
    token('#');
  }
  // A key's parts, taken into a copy until on_key knows whether its member is skipped.
  void key_text(boost::json::string_view s) {
    if (!key_started_) {
      key_print_ = print_;
      key_print_.tag('k');
      key_started_ = true;
    }
    key_print_.add({s.data(), s.size()});
  }

  member member_ = member::other;
  bool in_string_ = false;
  bool skip_member_ = false;
  bool key_started_ = false;
  fingerprint print_;
  fingerprint key_print_;
};

}  // namespace

namespace {

template <bool Fingerprint>
std::variant<model_request_info, body_error> inspect(std::string_view body,
                                                     std::uint32_t max_depth) {
  if (body.empty()) return body_error{"request body is empty; a JSON object is required"};
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::json::basic_parser<body_facts<Fingerprint>> parser{opts};
  boost::system::error_code ec;
  const auto used = parser.write_some(false, body.data(), body.size(), ec);
  if (!ec && used < body.size()) ec = boost::json::error::extra_data;  // as boost::json::parse
  if (ec) {
    if (ec == boost::json::error::too_deep) {
      return body_error{"request JSON is nested deeper than " + std::to_string(max_depth)};
    }
    return body_error{"request body is not valid JSON (" + ec.message() + ")"};
  }
  auto& facts = parser.handler();
  if (!facts.root_is_object) return body_error{"request body must be a JSON object"};
  if (facts.models > 1) return body_error{"request body has more than one `model` key"};
  if (facts.models == 0) return body_error{"`model` is required"};
  if (!facts.model_is_string) return body_error{"`model` must be a string"};
  model_request_info info;
  info.model = std::move(facts.model);
  if (facts.stream) {
    using kind = typename body_facts<Fingerprint>::value_kind;
    if (*facts.stream == kind::boolean_true || *facts.stream == kind::boolean_false) {
      info.stream = *facts.stream == kind::boolean_true;
    } else if (*facts.stream != kind::null) {
      return body_error{"`stream` must be a boolean"};
    }
  }
  for (const auto& limit : facts.output_limits) {
    if (limit && (!info.max_output_tokens || *limit > *info.max_output_tokens))
      info.max_output_tokens = limit;
  }
  if constexpr (Fingerprint) info.body_fingerprint = facts.fingerprint_value();
  return info;
}

}  // namespace

std::variant<model_request_info, body_error> inspect_model_request(std::string_view body,
                                                                   std::uint32_t max_depth,
                                                                   bool fingerprint_body) {
  return fingerprint_body ? inspect<true>(body, max_depth) : inspect<false>(body, max_depth);
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

namespace {

// The body's top-level members but those named in `drop`, their bytes as the caller wrote them,
// joined by commas (no braces); nullopt when the body is not a JSON object.
std::optional<std::string> members_except(std::string_view body,
                                          std::initializer_list<std::string_view> drop) {
  std::string out;
  out.reserve(body.size());
  scanner sc{body};
  if (!sc.eat('{')) return std::nullopt;
  if (sc.eat('}')) return out;
  do {
    auto key = sc.string_token();
    if (!key || !sc.eat(':')) return std::nullopt;
    auto val = sc.value();
    if (!val) return std::nullopt;
    const auto key_text = sc.text(*key);
    if (std::any_of(drop.begin(), drop.end(),
                    [&](std::string_view name) { return key_is(key_text, name); }))
      continue;
    if (!out.empty()) out += ',';
    out.append(body.substr(key->begin, val->end - key->begin));
  } while (sc.eat(','));
  return out;
}

}  // namespace

std::string ask_for_stream(std::string_view body, bool with_usage) {
  auto kept = members_except(body, {"stream", "stream_options"});
  if (!kept) return std::string(body);
  std::string out{with_usage ? R"({"stream":true,"stream_options":{"include_usage":true})"
                             : R"({"stream":true)"};
  out.reserve(out.size() + kept->size() + 2);
  if (!kept->empty()) out += ',';
  out += *kept;
  out += '}';
  return out;
}

std::string with_rid(std::string_view body, std::string_view rid) {
  auto kept = members_except(body, {"rid"});
  if (!kept) return std::string(body);
  std::string out{"{"};
  out.reserve(kept->size() + rid.size() + 12);
  out += *kept;
  if (!kept->empty()) out += ',';
  out += "\"rid\":\"";
  out.append(rid);
  out += "\"}";
  return out;
}

}  // namespace tether
