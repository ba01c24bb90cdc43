#include "jaxbatch/base/available_memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

#include "jaxbatch/base/checked.h"

namespace jaxbatch {
namespace {

// The whole (small) file, or nullopt when it cannot be read.
std::optional<std::string> ReadSmallFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The first unsigned decimal number in `text` after skipping blanks, if it fits int64.
std::optional<int64_t> Number(std::string_view text) {
  const size_t at = text.find_first_not_of(" \t");
  if (at == std::string_view::npos) return std::nullopt;
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data() + at, text.data() + text.size(), value);
  if (error != std::errc() || end == text.data() + at || value < 0) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int64_t> MemAvailableFromMeminfo(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  for (size_t line = 0; line < meminfo.size();) {
    const size_t end = std::min(meminfo.find('\n', line), meminfo.size());
    const std::string_view text = meminfo.substr(line, end - line);
    if (text.substr(0, kKey.size()) == kKey) {
      const std::optional<int64_t> kib = Number(text.substr(kKey.size()));
      if (!kib) return std::nullopt;
      return CheckedMul(*kib, 1024);  // "kB" is KiB
    }
    line = end + 1;
  }
  return std::nullopt;
}

std::optional<int64_t> CgroupRoom(std::string_view limit, std::string_view usage) {
  const std::optional<int64_t> max = Number(limit);  // "max": no limit
  const std::optional<int64_t> used = Number(usage);
  if (!max || !used) return std::nullopt;
  return std::max<int64_t>(*max - std::min(*used, *max), 0);
}

std::optional<int64_t> AvailableMemoryBytes() {
  std::optional<int64_t> room;
  if (const auto meminfo = ReadSmallFile("/proc/meminfo")) room = MemAvailableFromMeminfo(*meminfo);
  const char* const kCgroups[][2] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                     {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                      "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limit_path, usage_path] : kCgroups) {
    const auto limit = ReadSmallFile(limit_path);
    const auto usage = ReadSmallFile(usage_path);
    if (!limit || !usage) continue;
    if (const std::optional<int64_t> cgroup = CgroupRoom(*limit, *usage)) {
      room = room ? std::min(*room, *cgroup) : *cgroup;
    }
  }
  return room;
}

}  // namespace jaxbatch
