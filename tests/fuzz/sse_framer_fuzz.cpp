// The SSE framer (net/sse_framer.hpp), fed in pieces the input chooses. Invariants: the events
// are, concatenated, a prefix of the input and the buffered tail is the rest; the same events
// come out whatever the chunking; each event is one whole event on its own; none exceeds the
// limit; and make_error_event always makes exactly one event, named or not.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/sse_framer.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using tether::net::sse_framer;

// A feed's events one by one. Its text is exactly those events back to back, and it marks where
// each but the last ends.
std::vector<std::string> list(const tether::net::sse_events& batch) {
  std::vector<std::string> out;
  std::string joined;
  std::size_t last_end = 0;
  for (std::size_t end : batch.ends) {
    TETHER_FUZZ_CHECK(end > last_end && end < batch.text.size());
    last_end = end;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    out.emplace_back(batch[i]);
    joined += out.back();
  }
  TETHER_FUZZ_CHECK(joined == batch.text);
  return out;
}

struct run_result {
  std::vector<std::string> events;
  bool overflowed = false;
  std::size_t buffered = 0;
};

// Feeds `input` cut at `cuts` (piece lengths, cycled), then finish().
run_result run(std::string_view input, std::size_t max_event,
               const std::vector<std::size_t>& cuts) {
  sse_framer framer{max_event};
  run_result r;
  std::size_t at = 0, k = 0;
  while (at < input.size()) {
    const std::size_t n =
        cuts.empty() ? input.size() : std::min(cuts[k++ % cuts.size()], input.size() - at);
    for (auto& e : list(framer.feed(std::string(input.substr(at, n)))))
      r.events.push_back(std::move(e));
    at += n;
  }
  for (auto& e : list(framer.finish())) r.events.push_back(std::move(e));
  r.overflowed = framer.overflowed();
  r.buffered = framer.buffered();
  TETHER_FUZZ_CHECK(framer.has_partial() == (r.buffered > 0));
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // Byte 0: the event limit (small, so overflow is reached); byte 1: how many cut lengths
  // follow (each one byte, 1..256); the rest is the stream.
  const std::size_t max_event = 1 + data[0] * 4;
  const std::size_t ncuts = std::min<std::size_t>(data[1] % 8, size - 2);
  std::vector<std::size_t> cuts;
  for (std::size_t i = 0; i < ncuts; ++i) cuts.push_back(1 + data[2 + i]);
  const std::string_view input(reinterpret_cast<const char*>(data) + 2 + ncuts, size - 2 - ncuts);

  const auto whole = run(input, max_event, {});
  const auto pieces = run(input, max_event, cuts);
  const auto bytes = run(input, max_event, {1});

  for (const auto* r : {&whole, &pieces, &bytes}) {
    std::string joined;
    for (const auto& e : r->events) {
      TETHER_FUZZ_CHECK(!e.empty());
      TETHER_FUZZ_CHECK(e.size() <= max_event);
      joined += e;
    }
    TETHER_FUZZ_CHECK(input.substr(0, joined.size()) == joined);
    if (!r->overflowed) TETHER_FUZZ_CHECK(joined.size() + r->buffered == input.size());
    // Chunking does not change what comes out.
    TETHER_FUZZ_CHECK(r->events == whole.events);
    TETHER_FUZZ_CHECK(r->overflowed == whole.overflowed);
  }
  // An event is whole on its own: framed again, it comes out as itself.
  for (const auto& e : whole.events) {
    sse_framer again{max_event};
    auto out = list(again.feed(e));
    for (auto& f : list(again.finish())) out.push_back(std::move(f));
    TETHER_FUZZ_CHECK(out.size() == 1 && out[0] == e);
    TETHER_FUZZ_CHECK(!again.has_partial());
    (void)sse_framer::is_done_event(e);
  }
  // The gateway's own error event is one event whatever text it carries.
  const auto error_event = tether::net::make_error_event(input);
  sse_framer check{error_event.size()};
  auto out = list(check.feed(error_event));
  for (auto& f : list(check.finish())) out.push_back(std::move(f));
  TETHER_FUZZ_CHECK(out.size() == 1 && out[0] == error_event);
  // And so is the named one the Responses surface ends with.
  const auto named = tether::net::make_error_event(input, "error");
  sse_framer named_check{named.size()};
  auto named_out = list(named_check.feed(named));
  for (auto& f : list(named_check.finish())) named_out.push_back(std::move(f));
  TETHER_FUZZ_CHECK(named_out.size() == 1 && named_out[0] == named);
  return 0;
}
