// How many bytes this process may still allocate before the system (or its
// container) runs out: what a Loader without host_memory_limit checks its
// largest batch against, so a batch that cannot fit is refused, naming its
// bytes, instead of the process being killed for memory mid-run.
//
// Linux: /proc/meminfo's MemAvailable (free memory plus what the kernel can
// reclaim), lowered to a cgroup's limit less its usage (v2 memory.max and
// memory.current, or v1 memory.limit_in_bytes and memory.usage_in_bytes)
// when the process runs in one. Elsewhere, or when none can be read:
// nullopt, and no check is made.
//
// Example:
//   if (const auto free = AvailableMemoryBytes(); free && bytes > *free) throw ...;
#ifndef JAXBATCH_BASE_AVAILABLE_MEMORY_H_
#define JAXBATCH_BASE_AVAILABLE_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace jaxbatch {

std::optional<int64_t> AvailableMemoryBytes();

// The pieces, for tests: MemAvailable's bytes from /proc/meminfo's text,
// and a cgroup's room from its limit and usage files' texts ("max" or a
// number of bytes); nullopt for text that does not hold them.
std::optional<int64_t> MemAvailableFromMeminfo(std::string_view meminfo);
std::optional<int64_t> CgroupRoom(std::string_view limit, std::string_view usage);

}  // namespace jaxbatch

#endif  // JAXBATCH_BASE_AVAILABLE_MEMORY_H_
