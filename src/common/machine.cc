#include "common/machine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tediserve {

std::uint64_t UsableMemoryBytes() {
  std::uint64_t limit = 0;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    limit = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  }
  for (const int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit rl{};
    if (::getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      const auto cur = static_cast<std::uint64_t>(rl.rlim_cur);
      limit = limit == 0 ? cur : std::min(limit, cur);
    }
  }
  return limit == 0 ? std::uint64_t{1} << 30 : limit;
}

std::string FormatBytes(std::uint64_t bytes) {
  char buf[48];
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1u << 30));
  } else if (bytes >= (std::uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1u << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

}  // namespace tediserve
