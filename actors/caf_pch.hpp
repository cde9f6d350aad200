// Precompiled for actors/ only: CAF is ~2.5 s per translation unit without it.
#pragma once
#include <spdlog/spdlog.h>
#include <caf/all.hpp>
