#pragma once
// Counters described once. A struct of uint64_t counters (rocev2::EngineCounters,
// droced::WorkerCounters, net::NeighborCounters...) gets one table next to it: for each counter
// its name, where it lives and one line saying what it counts. Everything that shows or sums
// counters is generated from the tables: droced's JSON (`droce counters --json`, `droce status
// --json`), the text `droce counters` prints from it, the sums over cores, and any exporter
// (a Prometheus HELP line is the help). Adding a counter is one line in the struct and one in
// its table; a counter in the struct but not in its table fails to compile (covers()).
//
// Example, next to the struct:
//
//   inline constexpr core::Counter<YieldCounters> kYieldCounters[] = {
//       {"yields", &YieldCounters::yields, "times the CPU was handed to the peer"},
//       {"yields_crowded", &YieldCounters::crowded, "yields in which another task ran"},
//   };
//   static_assert(core::covers(kYieldCounters));
//
// Control path: nothing here is meant for a per-packet loop (the data path only increments
// the struct's members).

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace droce::core {

template <class S>
struct Counter {
  const char* name;         ///< snake_case: the JSON key and the text label (a group may prefix it)
  uint64_t S::*member;      ///< where the count lives
  const char* help;         ///< one line: what it counts
};

/// True when `table` names every counter of S exactly once: as many entries as S has
/// uint64_t's (its size less `other_bytes`, what S holds that is no counter of the table, e.g.
/// an array by reason, or nested structs with tables of their own), no member twice, no name
/// twice, no empty name or help. For a static_assert next to the table.
template <class S, size_t N>
constexpr bool covers(const Counter<S> (&table)[N], size_t other_bytes = 0) {
  if (N * sizeof(uint64_t) + other_bytes != sizeof(S)) return false;
  for (size_t i = 0; i < N; ++i) {
    const Counter<S>& c = table[i];
    if (c.member == nullptr || c.name == nullptr || c.help == nullptr) return false;
    if (std::string_view(c.name).empty() || std::string_view(c.help).empty()) return false;
    for (size_t k = 0; k < i; ++k)
      if (table[k].member == c.member || std::string_view(table[k].name) == c.name) return false;
  }
  return true;
}

/// Adds every counter of `from` into *into.
template <class S, size_t N>
constexpr void add_counters(const Counter<S> (&table)[N], const S& from, S* into) {
  for (const Counter<S>& c : table) into->*c.member += from.*c.member;
}

/// The entry called `name`, found at compile time: a name that is not in the table does not
/// compile. For views that show a few counters of a struct (a row of `droce cores`).
template <class S, size_t N>
consteval Counter<S> counter_named(const Counter<S> (&table)[N], std::string_view name) {
  for (const Counter<S>& c : table)
    if (name == c.name) return c;
  throw "counter_named: no counter of that name in the table";
}

}  // namespace droce::core
