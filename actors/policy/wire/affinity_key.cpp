#include "actors/policy/wire/affinity_key.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include "actors/policy/routing/prefix_ring.hpp"
#include "actors/policy/wire/json_scanner.hpp"

namespace tether {
namespace {

// Seeds keep a caller's key from ever naming the same position as some prompt's hash.
constexpr std::uint64_t caller_key_seed = 0x6361636865ULL;  // "cache"
constexpr std::uint64_t prefix_seed = 0x707265666978ULL;    // "prefix"

constexpr char field_end = '\x1f';
constexpr char record_end = '\x1e';

// What a member of the prompt holds.
enum class prompt_part {
  system,    // one "system" record: a string, or text blocks
  messages,  // a list of {role, content}; a bare string is a "user" record
  prompt,    // a string, or a list of strings: a "user" record each
};

// Appends the canonical records of one prompt member to `out`, up to `limit` bytes, and stops
// the parser (by failing it) as soon as `out` is full: the rest of the member is never read.
class canonical_reader {
 public:
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

  canonical_reader(std::string* out, std::size_t limit, prompt_part part)
      : out_(out), limit_(limit), part_(part) {}

  bool full() const { return out_->size() >= limit_; }

  bool on_document_begin(boost::json::error_code&) { return true; }
  bool on_document_end(boost::json::error_code& ec) {
    if (part_ == prompt_part::system && has_text_) emit("system");
    return go_on(ec);
  }
  bool on_object_begin(boost::json::error_code&) {
    if (part_ == prompt_part::messages && depth_ == 1) {
      role_.clear();
      text_.clear();
      has_text_ = false;
    }
    ++depth_;
    return true;
  }
  bool on_object_end(std::size_t, boost::json::error_code& ec) {
    --depth_;
    // Its keys are no longer any string's: a list's item at the depth they were read at (a
    // stray list among the messages, say) is not that member's value.
    key_depth_ = no_key;
    if (part_ == prompt_part::messages && depth_ == 1 && !role_.empty()) emit(role_);
    return go_on(ec);
  }
  bool on_array_begin(boost::json::error_code&) {
    if (depth_ == 0) in_list_ = true;
    if (part_ == prompt_part::messages && in_list_ && depth_ == 2 && key_depth_ == 2 &&
        key_ == member::content)
      in_content_list_ = true;
    ++depth_;
    return true;
  }
  bool on_array_end(std::size_t, boost::json::error_code&) {
    --depth_;
    if (depth_ == 2) in_content_list_ = false;
    return true;
  }
  bool on_key_part(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    key_part(s);
    return true;
  }
  bool on_key(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    key_part(s);
    const std::string_view key{key_buf_, std::min(key_size_, sizeof(key_buf_))};
    key_ = key_size_ > sizeof(key_buf_) ? member::other
           : key == "role"              ? member::role
           : key == "content"           ? member::content
           : key == "text"              ? member::text
                                        : member::other;
    key_depth_ = depth_;
    key_size_ = 0;
    return true;
  }
  bool on_string_part(boost::json::string_view s, std::size_t, boost::json::error_code& ec) {
    return string_part(s, false, ec);
  }
  bool on_string(boost::json::string_view s, std::size_t, boost::json::error_code& ec) {
    return string_part(s, true, ec);
  }
  bool on_number_part(boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_int64(std::int64_t, boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_uint64(std::uint64_t, boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_double(double, boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_bool(bool, boost::json::error_code&) { return true; }
  bool on_null(boost::json::error_code&) { return true; }
  bool on_comment_part(boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_comment(boost::json::string_view, boost::json::error_code&) { return true; }

 private:
  // Which string is text, by where it is: `depth_` containers are open around it; a member's
  // value is at the depth its key was read at.
  enum class kind { none, text, role, whole_record };
  enum class member { other, role, content, text };
  // Only within the list (the member's value an array), and in a message only within its
  // `content` list: a `text` or `role` member elsewhere (in an object for a system prompt, in
  // a message's other lists) is no text of the prompt.
  kind kind_of_string() const {
    const bool is_member = key_depth_ == depth_;
    switch (part_) {
      case prompt_part::system:
        // "…", ["…"], [{"type":"text","text":"…"}]
        if (depth_ <= 1 && !is_member) return kind::text;
        return in_list_ && depth_ == 2 && is_member && key_ == member::text ? kind::text
                                                                            : kind::none;
      case prompt_part::prompt:
        return depth_ <= 1 && !is_member ? kind::whole_record : kind::none;
      case prompt_part::messages:
        if (depth_ == 0) return kind::whole_record;  // responses' input as a string
        if (!in_list_) return kind::none;
        if (depth_ == 2 && is_member && key_ == member::role) return kind::role;
        if (depth_ == 2 && is_member && key_ == member::content) return kind::text;
        if (!in_content_list_) return kind::none;
        if (depth_ == 3 && !is_member) return kind::text;  // content as a list of strings
        return depth_ == 4 && is_member && key_ == member::text ? kind::text : kind::none;
    }
    return kind::none;
  }

  bool string_part(boost::json::string_view s, bool last, boost::json::error_code& ec) {
    if (!in_string_) {
      in_string_ = true;
      string_kind_ = kind_of_string();
    }
    // Never more of a string than the prefix could still take.
    const auto room = limit_ - std::min(limit_, out_->size());
    switch (string_kind_) {
      case kind::none:
        break;
      case kind::role:
        role_.append(s.data(), std::min(s.size(), room - std::min(room, role_.size())));
        break;
      case kind::text:
      case kind::whole_record:
        text_.append(s.data(), std::min(s.size(), room - std::min(room, text_.size())));
        has_text_ = true;
        // The record already fills the prefix: the rest of this text, and all after it, is
        // not read.
        if (string_kind_ == kind::text && text_.size() >= room) {
          if (part_ == prompt_part::system) emit("system");
          if (part_ == prompt_part::messages && !role_.empty()) emit(role_);
          if (full()) return go_on(ec);
        }
        break;
    }
    if (!last) return true;
    in_string_ = false;
    if (string_kind_ == kind::whole_record) {
      emit("user");
      return go_on(ec);
    }
    return true;
  }

  void emit(std::string_view role) {
    out_->append(role);
    out_->push_back(field_end);
    out_->append(text_);
    out_->push_back(record_end);
    if (out_->size() > limit_) out_->resize(limit_);
    text_.clear();
    has_text_ = false;
  }

  // Fails the parse once the prefix is complete: what follows is not read.
  bool go_on(boost::json::error_code& ec) {
    if (!full()) return true;
    ec = boost::json::error::exception;  // any error stops the parser; this one means "done"
    return false;
  }

  void key_part(boost::json::string_view s) {
    if (key_size_ + s.size() <= sizeof(key_buf_))
      std::copy(s.begin(), s.end(), key_buf_ + key_size_);
    key_size_ += s.size();
  }

  std::string* out_;
  std::size_t limit_;
  prompt_part part_;
  std::size_t depth_ = 0;
  char key_buf_[8] = {};  // sizeof "content"
  std::size_t key_size_ = 0;
  member key_ = member::other;
  static constexpr std::size_t no_key = static_cast<std::size_t>(-1);
  std::size_t key_depth_ = no_key;
  bool in_list_ = false;          // the member's value is an array
  bool in_content_list_ = false;  // within a message's `content` array
  bool in_string_ = false;
  kind string_kind_ = kind::none;
  std::string role_;
  std::string text_;
  bool has_text_ = false;
};

// The bytes of `value` the parser read.
std::size_t read_part(std::string_view value, prompt_part part, std::string& out,
                      std::size_t limit) {
  if (out.size() >= limit) return 0;
  // The body passed the gateway's own depth limit (server.max_json_depth) when it was
  // inspected: a limit of the parser's own (32 by default) would cut the prompt short at a
  // deeply nested member and lose the records after it.
  boost::json::parse_options options;
  options.max_depth = static_cast<std::size_t>(-1);
  boost::json::basic_parser<canonical_reader> parser{options, &out, limit, part};
  // Fed in pieces, so that a string longer than the prefix reaches the reader in parts and the
  // parse stops within a piece of where the prefix is complete.
  constexpr std::size_t piece = 1024;
  boost::system::error_code ec;
  std::size_t read = 0;
  while (read < value.size() && !ec) {
    const auto n = std::min(piece, value.size() - read);
    read += parser.write_some(read + n < value.size(), value.data() + read, n, ec);
  }
  return read;
}

// The top-level members that hold the prompt, on the surface: the system part first.
struct prompt_members {
  std::optional<json_scan::span> system;
  std::optional<json_scan::span> list;
  prompt_part list_part = prompt_part::messages;
  std::optional<json_scan::span> cache_key;
};

prompt_members find_members(surface where, std::string_view body) {
  std::string_view system_name;
  std::string_view list_name;
  prompt_members found;
  switch (where) {
    case surface::chat:
      list_name = "messages";
      break;
    case surface::completions:
      list_name = "prompt";
      found.list_part = prompt_part::prompt;
      break;
    case surface::embeddings:
      list_name = "input";
      found.list_part = prompt_part::prompt;
      break;
    case surface::responses:
      system_name = "instructions";
      list_name = "input";
      break;
    case surface::messages:
    case surface::count_tokens:
      system_name = "system";
      list_name = "messages";
      break;
  }
  json_scan::scanner sc{body};
  if (!sc.eat('{') || sc.eat('}')) return found;
  do {
    auto key = sc.string_token();
    if (!key || !sc.eat(':')) return found;
    auto val = sc.value();
    if (!val) return found;
    const auto key_text = sc.text(*key);
    // A repeated key's last value counts, as in the document.
    if (json_scan::key_is(key_text, list_name)) {
      found.list = *val;
    } else if (!system_name.empty() && json_scan::key_is(key_text, system_name)) {
      found.system = *val;
    } else if (json_scan::key_is(key_text, "prompt_cache_key")) {
      found.cache_key = *val;
    }
  } while (sc.eat(','));
  return found;
}

// The canonical prefix: the system part first, wherever it stands in the body.
std::string read_prompt(const prompt_members& members, std::string_view body,
                        std::size_t prefix_bytes, std::size_t* parsed) {
  std::string out;
  std::size_t read = 0;
  for (const auto& [value, part] : {std::pair{members.system, prompt_part::system},
                                    std::pair{members.list, members.list_part}}) {
    if (value)
      read +=
          read_part(body.substr(value->begin, value->end - value->begin), part, out, prefix_bytes);
  }
  if (parsed != nullptr) *parsed = read;
  return out;
}

}  // namespace

std::string canonical_prefix(surface where, std::string_view body, std::uint32_t prefix_bytes,
                             std::size_t* parsed) {
  return read_prompt(find_members(where, body), body, prefix_bytes, parsed);
}

std::optional<std::uint64_t> affinity_key(surface where, std::string_view body,
                                          const std::string* session_header,
                                          std::uint32_t prefix_bytes) {
  const auto members = find_members(where, body);
  if (members.cache_key) {
    boost::system::error_code ec;
    const auto value = boost::json::parse(
        body.substr(members.cache_key->begin, members.cache_key->end - members.cache_key->begin),
        ec);
    if (!ec && value.is_string() && !value.as_string().empty()) {
      const auto& s = value.as_string();
      return hash_bytes({s.data(), s.size()}, caller_key_seed);
    }
  }
  if (session_header != nullptr && !session_header->empty())
    return hash_bytes(*session_header, caller_key_seed);
  const auto prefix = read_prompt(members, body, prefix_bytes, nullptr);
  if (prefix.empty()) return std::nullopt;
  return hash_bytes(prefix, prefix_seed);
}

}  // namespace tether
