#include "jaxbatch/plan/order.h"

#include <numeric>

#include "jaxbatch/base/error.h"

namespace jaxbatch {

std::vector<int64_t> PlanIds(int64_t count, PlanOrder order, const char* who) {
  if (!order) {
    std::vector<int64_t> ids(static_cast<size_t>(count));
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  std::vector<uint8_t> seen(static_cast<size_t>(count), 0);
  for (size_t k = 0; k < order->size(); ++k) {
    const int64_t id = (*order)[k];
    if (id < 0 || id >= count) {
      throw OutOfRangeError(StrCat(who, ": order[", k, "] = ", id,
                                   " is not an example index; there are ", count, " examples"));
    }
    if (seen[static_cast<size_t>(id)]++) {
      throw InvalidArgumentError(StrCat(who, ": order[", k, "] = ", id,
                                        " lists that example a second time; each example may be "
                                        "planned once"));
    }
  }
  return {order->begin(), order->end()};
}

}  // namespace jaxbatch
