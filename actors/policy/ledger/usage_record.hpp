// What one request used (contract: "The ledger"), and the sum of many such records. `prompt`
// counts every prompt token, `cached` the part of them the upstream read from its prompt cache;
// `waste` is what the engine generated after the caller left, until its work ended: generated for
// nobody, so counted apart from `completion`, which is what the caller received. A record is
// `estimated` when the upstream reported no usage and tether counted what it relayed.
#pragma once

#include <cstdint>

namespace tether::ledger {

struct usage_record {
  std::uint64_t prompt = 0;
  std::uint64_t completion = 0;
  std::uint64_t cached = 0;
  std::uint64_t waste = 0;
  bool estimated = false;
  // What the tokens cost at the model's prices when the request ended (spend_of), in billionths
  // of a dollar: integers add exactly, so a day's sum does not depend on the order of its records.
  std::uint64_t spend_nanousd = 0;
  bool operator==(const usage_record&) const = default;
};

struct usage_totals {
  std::uint64_t requests = 0;
  std::uint64_t estimated_requests = 0;
  std::uint64_t prompt = 0;
  std::uint64_t completion = 0;
  std::uint64_t cached = 0;
  std::uint64_t waste = 0;
  std::uint64_t spend_nanousd = 0;

  void add(const usage_record& r);
  void add(const usage_totals& t);
  // What a token budget counts: what the key sent and received. Waste is not the key's: the
  // caller left and tether stopped the work as soon as it could.
  std::uint64_t billed_tokens() const { return prompt + completion; }
  bool operator==(const usage_totals&) const = default;
};

}  // namespace tether::ledger
