// The extension module jaxbatch._core and the one place where core errors
// become Python exceptions.
#include <nanobind/stl/string.h>

#include <exception>

#include "bindings.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/base/threads.h"

namespace jaxbatch::bindings {

nb::dlpack::dtype ToDLPack(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return nb::dtype<bool>();
    case DType::kInt8:
      return nb::dtype<int8_t>();
    case DType::kInt16:
      return nb::dtype<int16_t>();
    case DType::kInt32:
      return nb::dtype<int32_t>();
    case DType::kInt64:
      return nb::dtype<int64_t>();
    case DType::kUInt8:
      return nb::dtype<uint8_t>();
    case DType::kUInt16:
      return nb::dtype<uint16_t>();
    case DType::kUInt32:
      return nb::dtype<uint32_t>();
    case DType::kUInt64:
      return nb::dtype<uint64_t>();
    case DType::kFloat16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kBFloat16:
      return nb::dtype<uint16_t>();
    case DType::kFloat32:
      return nb::dtype<float>();
    case DType::kFloat64:
      return nb::dtype<double>();
  }
  return nb::dtype<uint8_t>();
}

nb::ndarray<nb::numpy> WrapArray(void* data, DType dtype, const std::vector<int64_t>& shape,
                                 std::shared_ptr<void> owner) {
  auto* holder = new std::shared_ptr<void>(std::move(owner));
  nb::capsule capsule(holder,
                      [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return nb::ndarray<nb::numpy>(data, dims.size(), dims.data(), capsule, nullptr, ToDLPack(dtype));
}

nb::list ArrayList(std::vector<Array>& arrays) {
  nb::list out;
  for (Array& a : arrays) {
    out.append(nb::make_tuple(a.name, std::string(DTypeName(a.dtype)),
                              WrapArray(a.data, a.dtype, a.shape, std::move(a.owner))));
  }
  return out;
}

std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> ShapeToPython(const BatchShape& shape) {
  return {shape.rows, shape.length, shape.segments, shape.edges, shape.width};
}

Int64Array ToNumpy(std::vector<int64_t> values) {
  auto* owned = new std::vector<int64_t>(std::move(values));
  nb::capsule capsule(owned,
                      [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
  const size_t n = owned->size();
  return Int64Array(owned->data(), {n}, capsule);
}

}  // namespace jaxbatch::bindings

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  m.doc() = "jaxbatch's C++ engine. Use the jaxbatch package, not this module.";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const jaxbatch::InvalidArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const jaxbatch::OutOfRangeError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const jaxbatch::IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const jaxbatch::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  m.attr("MAX_THREADS") = jaxbatch::kMaxThreads;
  jaxbatch::bindings::BindData(m);
  jaxbatch::bindings::BindPlan(m);
  jaxbatch::bindings::BindCollate(m);
  jaxbatch::bindings::BindLoad(m);
  jaxbatch::bindings::BindJob(m);
  jaxbatch::bindings::BindKernels(m);
}
