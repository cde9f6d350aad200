// The parser of a caller's request: Beast's basic_parser, keeping the head as tether hands it on
// (a header_list with lower-case names, in wire order) with the counts the framing checks need,
// and the body in a string as Beast's string_body does. Beast's request_parser<string_body> kept
// the head in basic_fields, which allocates an element per header field, only
// for downstream_session to copy them into a header_list. net/-internal: it exposes Beast.
#pragma once

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "net/header_text.hpp"
#include "net/http_types.hpp"
#include "net/scanning_parser.hpp"

namespace tether::net {

class downstream_request_parser final : public scanning_parser<true> {
 public:
  // Valid once the head is done (is_header_done()).
  boost::beast::http::verb method() const { return method_; }
  const std::string& method_string() const { return method_string_; }  // as received
  std::string& target() { return target_; }
  int version() const { return version_; }                                // 10 or 11
  std::size_t content_lengths() const { return content_lengths_; }        // Content-Length fields
  std::size_t transfer_encodings() const { return transfer_encodings_; }  // Transfer-Encoding
  // The first Expect field asks for 100-continue.
  bool expects_continue() const {
    const auto* expect = find_header(headers_, "expect");
    return expect != nullptr && iequals_ascii(*expect, "100-continue");
  }
  std::string& body() { return body_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  using field = boost::beast::http::field;

  void on_request_impl(boost::beast::http::verb method, string_view method_string,
                       string_view target, int version, error_code&) override {
    method_ = method;
    method_string_.assign(method_string.data(), method_string.size());
    target_.assign(target.data(), target.size());
    version_ = version;
    // One allocation for a usual request's fields, not one per doubling (curl sends a few,
    // the OpenAI SDK about a dozen). A scanned head brings its own.
    if (!scanning()) headers_.reserve(16);
  }
  // Only ever called for responses.
  void on_response_impl(int, string_view, int, error_code& ec) override {
    ec = boost::beast::http::error::bad_version;
  }
  void on_field_impl(field name, string_view name_string, string_view value, error_code&) override {
    if (name == field::content_length) ++content_lengths_;
    if (name == field::transfer_encoding) ++transfer_encodings_;
    if (scanning()) return;  // the framing fields of a scanned head: kept already
    headers_.push_back({to_lower_ascii({name_string.data(), name_string.size()}),
                        std::string(value.data(), value.size())});
  }
  void on_header_impl(error_code&) override {}
  // As string_body: the declared length reserved (the body limit has bounded it already).
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code& ec) override {
    if (!length) return;
    if (*length > body_.max_size()) {
      ec = boost::beast::http::error::buffer_overflow;
      return;
    }
    body_.reserve(static_cast<std::size_t>(*length));
  }
  std::size_t on_body_impl(string_view bytes, error_code& ec) override { return append(bytes, ec); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view bytes, error_code& ec) override {
    return append(bytes, ec);
  }
  void on_finish_impl(error_code&) override {}

  std::size_t append(string_view bytes, error_code& ec) {
    if (bytes.size() > body_.max_size() - body_.size()) {
      ec = boost::beast::http::error::buffer_overflow;
      return 0;
    }
    body_.append(bytes.data(), bytes.size());
    return bytes.size();
  }

  boost::beast::http::verb method_ = boost::beast::http::verb::unknown;
  std::string method_string_;
  std::string target_;
  int version_ = 0;
  std::size_t content_lengths_ = 0;
  std::size_t transfer_encodings_ = 0;
  std::string body_;
};

}  // namespace tether::net
