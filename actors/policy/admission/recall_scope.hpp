// What a budget's recall covers: every slot a lessee holds (someone else waits, or the global cap
// is reached), or only its slots of one upstream or of one key (that cap is reached). Shared by
// the budget's slot_book, which decides a recall, and the lessee's lease_book, which obeys it.
#pragma once

#include <cstdint>

namespace tether {

enum class recall_scope : std::int32_t { all = 0, upstream = 1, key = 2 };

}  // namespace tether
