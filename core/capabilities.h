#pragma once
// Whether a process holds a capability, from its /proc/<pid>/status (the CapEff line).
// droced asks it of a client before letting it use what the kernel keeps for privileged
// programs (a controlled Q_Key, IBA 10.2.5); droce-selftest asks it of itself to know which
// answer to expect.

#include <sys/types.h>

#include <string_view>

namespace droce::core {

inline constexpr int kCapNetRaw = 13;  ///< CAP_NET_RAW (linux/capability.h)

/// Parses the text of a /proc/<pid>/status: true when its CapEff mask has bit `cap`.
/// False when the line is missing or malformed.
bool status_has_capability(std::string_view status, int cap);

/// The same for a live process (/proc/<pid>/status); false when it cannot be read.
bool process_has_capability(pid_t pid, int cap);

}  // namespace droce::core
