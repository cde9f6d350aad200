// A record of the ejections a cluster's nodes report (by upstream name, since every node names the
// same upstreams), so that whoever arrives while one runs learns it at once instead of spending
// its own failed attempts to find out. The budget host keeps one for the nodes that join; each
// node's budget link keeps a copy of the host's news for a health actor that subscribes after it
// came. Time is plain steady nanoseconds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tether {

class health_bulletin {
 public:
  struct notice {
    std::string upstream;
    std::int32_t reason = 0;  // an ejection_reason, as it crosses the middleman
    std::int64_t remaining_ms = 0;
  };

  // An ejection for `duration_ms` from `now_ns`; a shorter one than a running one changes
  // nothing (the host keeps the longest word it has).
  void post(const std::string& upstream, std::int32_t reason, std::int64_t duration_ms,
            std::int64_t now_ns);

  // The ejections still running at `now_ns`, with what is left of each; ended ones are dropped.
  std::vector<notice> running(std::int64_t now_ns);

  std::size_t size() const { return ends_.size(); }

 private:
  struct entry {
    std::int32_t reason = 0;
    std::int64_t until_ns = 0;
  };
  std::map<std::string, entry> ends_;
};

}  // namespace tether
