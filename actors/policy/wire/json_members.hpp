// The common part of tether's Boost.JSON SAX handlers that read a few top-level members of one
// JSON text while Boost.JSON's own parser validates it, with no document built (a request body's
// model and limits, a response's usage counts): no limits of their own, comments and number
// parts ignored, container depth counted, and each top-level member's decoded key assembled
// from its parts, bounded to the longest key the handler knows.
#pragma once

#include <algorithm>
#include <boost/json/error.hpp>
#include <boost/json/string_view.hpp>
#include <cstddef>
#include <string_view>

namespace tether {

// Derived provides the value callbacks (on_object_begin … on_null) and
// `void on_member(std::string_view key)`, called for each key at depth 1; a key longer than
// KeyCapacity comes as an empty view (no key a handler looks for is empty). With NestedKeys,
// `void on_nested_member(std::string_view key)` is called likewise for each key at depth 2 (the
// members of a top-level member's object).
template <class Derived, std::size_t KeyCapacity, bool NestedKeys = false>
class json_members {
 public:
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

  bool on_document_begin(boost::json::error_code&) { return true; }
  bool on_document_end(boost::json::error_code&) { return true; }
  bool on_number_part(boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_comment_part(boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_comment(boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_key_part(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    key_part(s);
    return true;
  }
  bool on_key(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    key_part(s);
    const auto key =
        key_size_ <= KeyCapacity ? std::string_view{key_, key_size_} : std::string_view{};
    if (depth_ == 1) {
      static_cast<Derived*>(this)->on_member(key);
    } else if constexpr (NestedKeys) {
      if (depth_ == 2) static_cast<Derived*>(this)->on_nested_member(key);
    }
    key_size_ = 0;
    return true;
  }

 protected:
  // Containers open around the current value: 0 for the text's own value, 1 for a top-level
  // member's.
  std::size_t depth() const { return depth_; }
  void enter() { ++depth_; }
  void leave() { --depth_; }

 private:
  void key_part(boost::json::string_view s) {
    if (depth_ != 1 && !(NestedKeys && depth_ == 2)) return;
    // Only the few keys a handler looks for matter: a longer key is only counted, not kept.
    if (key_size_ + s.size() <= KeyCapacity) std::copy(s.begin(), s.end(), key_ + key_size_);
    key_size_ += s.size();
  }

  std::size_t depth_ = 0;
  char key_[KeyCapacity] = {};
  std::size_t key_size_ = 0;
};

}  // namespace tether
