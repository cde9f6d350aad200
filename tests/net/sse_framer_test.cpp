#include "net/sse_framer.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tether::net {
namespace {

using events = std::vector<std::string>;

// What a feed returned, an event at a time; its text must be exactly those events back to back.
events list(const sse_events& batch) {
  events out;
  std::string joined;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    out.emplace_back(batch[i]);
    joined += out.back();
  }
  EXPECT_EQ(joined, batch.text);
  return out;
}

// Feeds `body` in the given slices, appends finish(), and returns everything emitted.
events feed_in_slices(sse_framer& framer, const std::string& body,
                      const std::vector<std::size_t>& cuts) {
  events out;
  std::size_t pos = 0;
  for (std::size_t cut : cuts) {
    for (auto& e : list(framer.feed(body.substr(pos, cut - pos)))) out.push_back(e);
    pos = cut;
  }
  for (auto& e : list(framer.feed(body.substr(pos)))) out.push_back(e);
  for (auto& e : list(framer.finish())) out.push_back(e);
  return out;
}

std::string join(const events& es) {
  std::string s;
  for (const auto& e : es) s += e;
  return s;
}

const std::string mixed_body =
    "data: {\"a\":1}\n\n"
    "event: x\r\ndata: {\"b\":2}\r\n\r\n"
    ": comment\rdata: c\r\r"
    "data: d\n\r\n"
    "data: e\r\n\n"
    "data: [DONE]\r\n\r\n";

const events mixed_expected = {
    "data: {\"a\":1}\n\n",    "event: x\r\ndata: {\"b\":2}\r\n\r\n",
    ": comment\rdata: c\r\r", "data: d\n\r\n",
    "data: e\r\n\n",          "data: [DONE]\r\n\r\n",
};

TEST(SseFramerTest, WholeBodyInOneFeedYieldsEachEventWithItsTerminator) {
  sse_framer framer;
  EXPECT_EQ(feed_in_slices(framer, mixed_body, {}), mixed_expected);
  EXPECT_FALSE(framer.has_partial());
  EXPECT_EQ(framer.buffered(), 0u);
}

TEST(SseFramerTest, SplitAtEveryByteOffsetYieldsSameEvents) {
  for (std::size_t cut = 0; cut <= mixed_body.size(); ++cut) {
    sse_framer framer;
    EXPECT_EQ(feed_in_slices(framer, mixed_body, {cut}), mixed_expected) << "cut at " << cut;
    EXPECT_FALSE(framer.has_partial()) << "cut at " << cut;
  }
}

TEST(SseFramerTest, SplitAtEveryPairOfOffsetsYieldsSameEvents) {
  for (std::size_t a = 0; a <= mixed_body.size(); ++a) {
    for (std::size_t b = a; b <= mixed_body.size(); ++b) {
      sse_framer framer;
      ASSERT_EQ(feed_in_slices(framer, mixed_body, {a, b}), mixed_expected)
          << "cuts at " << a << ", " << b;
    }
  }
}

TEST(SseFramerTest, OneByteAtATimeYieldsSameEvents) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < mixed_body.size(); ++i) cuts.push_back(i);
  sse_framer framer;
  EXPECT_EQ(feed_in_slices(framer, mixed_body, cuts), mixed_expected);
}

// The framing rule read off the whole body at once, a byte at a time: the reference the framer
// must match whatever the slices it is fed.
events reference_events(const std::string& body) {
  events out;
  std::size_t start = 0;
  bool at_line_start = true;
  std::size_t i = 0;
  while (i < body.size()) {
    const char c = body[i];
    if (c == '\n') {
      if (at_line_start) {
        out.push_back(body.substr(start, i + 1 - start));
        start = i + 1;
      }
      at_line_start = true;
      ++i;
    } else if (c == '\r') {
      const std::size_t end = i + 1 < body.size() && body[i + 1] == '\n' ? i + 2 : i + 1;
      if (at_line_start) {
        out.push_back(body.substr(start, end - start));
        start = end;
      }
      at_line_start = true;
      i = end;
    } else {
      at_line_start = false;
      ++i;
    }
  }
  return out;
}

// Random bodies of terminators and ordinary bytes, each fed in random slices: the events are the
// reference's (the ordinary bytes are skipped in runs, so a run cut anywhere must not matter).
TEST(SseFramerTest, RandomBodiesInRandomSlicesYieldTheReferenceEvents) {
  std::mt19937 rng{20261205};
  const std::string alphabet = "ab: \r\n\n";
  for (int round = 0; round < 3000; ++round) {
    std::string body;
    const auto length = std::uniform_int_distribution<std::size_t>{0, 80}(rng);
    for (std::size_t k = 0; k < length; ++k) {
      body += alphabet[std::uniform_int_distribution<std::size_t>{0, alphabet.size() - 1}(rng)];
    }
    std::vector<std::size_t> cuts;
    for (std::size_t k = 1; k < body.size(); ++k) {
      if (std::uniform_int_distribution<int>{0, 5}(rng) == 0) cuts.push_back(k);
    }
    sse_framer framer;
    EXPECT_EQ(feed_in_slices(framer, body, cuts), reference_events(body))
        << "round " << round << ", body of " << body.size() << " bytes";
  }
}

TEST(SseFramerTest, CrlfSplitBetweenCrAndLfStaysInOneEvent) {
  sse_framer framer;
  EXPECT_TRUE(list(framer.feed("data: x\r\n\r")).empty());  // the final "\r" may be half of "\r\n"
  EXPECT_TRUE(framer.has_partial());
  EXPECT_EQ(list(framer.feed("\ndata: y")), events{"data: x\r\n\r\n"});
  EXPECT_EQ(framer.buffered(), std::string("data: y").size());
}

TEST(SseFramerTest, LoneCrTerminatorIsDecidedByTheNextByte) {
  sse_framer framer;
  EXPECT_TRUE(list(framer.feed("data: x\r\r")).empty());
  EXPECT_EQ(list(framer.feed("data: y\r\r")), events{"data: x\r\r"});
  EXPECT_EQ(list(framer.finish()), events{"data: y\r\r"});
  EXPECT_FALSE(framer.has_partial());
}

TEST(SseFramerTest, PartialTailStaysBufferedAndIsNotEmitted) {
  sse_framer framer;
  EXPECT_EQ(list(framer.feed("data: a\n\ndata: b\n")), events{"data: a\n\n"});
  EXPECT_TRUE(framer.has_partial());
  EXPECT_EQ(framer.buffered(), std::string("data: b\n").size());
  EXPECT_TRUE(
      list(framer.finish()).empty());  // unfinished, not held: finish does not invent an end
  EXPECT_TRUE(framer.has_partial());
  EXPECT_EQ(list(framer.feed("\n")), events{"data: b\n\n"});
  EXPECT_FALSE(framer.has_partial());
}

TEST(SseFramerTest, BytesAreRelayedUnchanged) {
  for (std::size_t cut = 0; cut <= mixed_body.size(); ++cut) {
    sse_framer framer;
    EXPECT_EQ(join(feed_in_slices(framer, mixed_body, {cut})), mixed_body);
  }
}

TEST(SseFramerTest, TailOverLimitOverflowsAndStopsEmitting) {
  sse_framer framer(16);
  EXPECT_EQ(list(framer.feed("data: a\n\ndata: 0123456789abcdef")), events{"data: a\n\n"});
  EXPECT_TRUE(framer.overflowed());
  EXPECT_EQ(framer.buffered(), 0u);  // memory released
  EXPECT_TRUE(list(framer.feed("\n\ndata: b\n\n")).empty());
  EXPECT_TRUE(list(framer.finish()).empty());
}

TEST(SseFramerTest, CompleteEventOverLimitOverflowsWhateverTheChunking) {
  const std::string body = "data: ok\n\ndata: far-too-long\n\ndata: next\n\n";
  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    sse_framer framer(12);
    EXPECT_EQ(feed_in_slices(framer, body, {cut}), events{"data: ok\n\n"}) << "cut at " << cut;
    EXPECT_TRUE(framer.overflowed()) << "cut at " << cut;
  }
}

TEST(SseFramerTest, EventExactlyAtLimitPasses) {
  sse_framer framer(10);
  EXPECT_EQ(list(framer.feed("data: ok\n\n")), events{"data: ok\n\n"});
  EXPECT_FALSE(framer.overflowed());
}

TEST(SseFramerTest, DoneEventIsRecognisedInItsSpellings) {
  EXPECT_TRUE(sse_framer::is_done_event("data: [DONE]\n\n"));
  EXPECT_TRUE(sse_framer::is_done_event("data:[DONE]\r\n\r\n"));
  EXPECT_TRUE(sse_framer::is_done_event(": keepalive\nevent: end\ndata: [DONE]\r\r"));
  EXPECT_FALSE(sse_framer::is_done_event("data: [DONE] \n\n"));
  EXPECT_FALSE(sse_framer::is_done_event("data: {\"x\":\"[DONE]\"}\n\n"));
  EXPECT_FALSE(sse_framer::is_done_event("data: [DONE]\ndata: more\n\n"));
  EXPECT_FALSE(sse_framer::is_done_event(": [DONE]\n\n"));
  EXPECT_FALSE(sse_framer::is_done_event("\n"));
}

TEST(SseFramerTest, ErrorEventIsOneCompleteEventCarryingTheJson) {
  const std::string json = R"({"error":{"code":"stream_interrupted"}})";
  const std::string event = make_error_event(json);
  EXPECT_EQ(event, "data: " + json + "\n\n");
  sse_framer framer;
  EXPECT_EQ(list(framer.feed(event)), events{event});
}

TEST(SseFramerTest, ErrorEventWithLineBreaksInJsonStaysOneEvent) {
  const std::string event = make_error_event("{\n\"a\":1\n}");
  EXPECT_EQ(event, "data: {\ndata: \"a\":1\ndata: }\n\n");
  sse_framer framer;
  EXPECT_EQ(list(framer.feed(event)).size(), 1u);
}

TEST(SseFramerTest, NamedErrorEventCarriesItsEventLineBeforeTheData) {
  const std::string json = R"({"type":"error","code":"stream_interrupted"})";
  const std::string event = make_error_event(json, "error");
  EXPECT_EQ(event, "event: error\ndata: " + json + "\n\n");
  sse_framer framer;
  EXPECT_EQ(list(framer.feed(event)), events{event});
  EXPECT_EQ(make_error_event("", "error"), "event: error\ndata: \n\n");
}

}  // namespace
}  // namespace tether::net
