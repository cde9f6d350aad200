#include "actors/policy/ledger/usage_record.hpp"

namespace tether::ledger {

void usage_totals::add(const usage_record& r) {
  requests += 1;
  estimated_requests += r.estimated ? 1 : 0;
  prompt += r.prompt;
  completion += r.completion;
  cached += r.cached;
  waste += r.waste;
  spend_nanousd += r.spend_nanousd;
}

void usage_totals::add(const usage_totals& t) {
  requests += t.requests;
  estimated_requests += t.estimated_requests;
  prompt += t.prompt;
  completion += t.completion;
  cached += t.cached;
  waste += t.waste;
  spend_nanousd += t.spend_nanousd;
}

}  // namespace tether::ledger
