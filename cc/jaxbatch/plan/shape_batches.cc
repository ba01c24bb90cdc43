#include "jaxbatch/plan/shape_batches.h"

#include <vector>

namespace jaxbatch {

void AddShapeBatches(std::span<const BatchShape> shapes, std::span<const int64_t> ids,
                     std::span<const int64_t> shape_of, Remainder remainder, int64_t rows_multiple,
                     PlanBuilder& builder) {
  std::vector<std::vector<int64_t>> pending(shapes.size());
  auto flush = [&](size_t s, int64_t rows) {
    BatchShape shape = shapes[s];
    shape.rows = rows;
    builder.BeginBatch(shape);
    for (const int64_t& id : pending[s]) builder.AddRow(std::span<const int64_t>(&id, 1));
    builder.EndBatch();
    pending[s].clear();
  };
  for (size_t p = 0; p < ids.size(); ++p) {
    if (shape_of[p] < 0) continue;
    const auto s = static_cast<size_t>(shape_of[p]);
    pending[s].push_back(ids[p]);
    if (static_cast<int64_t>(pending[s].size()) == shapes[s].rows) flush(s, shapes[s].rows);
  }
  for (size_t s = 0; s < pending.size(); ++s) {
    if (pending[s].empty()) continue;
    const auto count = static_cast<int64_t>(pending[s].size());
    switch (remainder) {
      case Remainder::kPad:
        flush(s, shapes[s].rows);
        break;
      case Remainder::kKeep:  // rounded up to rows_multiple: at most a full batch
        flush(s, (count + rows_multiple - 1) / rows_multiple * rows_multiple);
        break;
      case Remainder::kDrop:
        for (int64_t id : pending[s]) builder.Drop(id);
        pending[s].clear();
        break;
    }
  }
}

}  // namespace jaxbatch
