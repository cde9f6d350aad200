// A request body held once and shared by everything that sends it: the request keeps the
// caller's bytes, and each attempt's upstream exchange writes them from that same buffer. A
// prompt of many kilobytes is then not copied per attempt (nor into the bytes of the wire).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace tether::net {

class shared_body {
 public:
  shared_body() = default;
  // Implicit: a body is its bytes, taken over (moved) once.
  shared_body(std::string bytes)  // NOLINT(google-explicit-constructor)
      : bytes_(std::make_shared<const std::string>(std::move(bytes))) {}
  shared_body(const char* bytes) : shared_body(std::string(bytes)) {}  // NOLINT

  std::string_view view() const { return bytes_ ? std::string_view{*bytes_} : std::string_view{}; }
  operator std::string_view() const { return view(); }  // NOLINT(google-explicit-conversion)
  std::size_t size() const { return bytes_ ? bytes_->size() : 0; }
  bool empty() const { return size() == 0; }

 private:
  std::shared_ptr<const std::string> bytes_;
};

}  // namespace tether::net
