// Shared declarations of the nanobind bindings. Bindings translate between
// Python and the core and hold no logic a C++ user would need.
#ifndef JAXBATCH_BINDINGS_BINDINGS_H_
#define JAXBATCH_BINDINGS_BINDINGS_H_

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "jaxbatch/collate/collator.h"
#include "jaxbatch/data/dtype.h"
#include "jaxbatch/plan/batch_plan.h"

namespace jaxbatch::bindings {

namespace nb = nanobind;

using Int64Array = nb::ndarray<nb::numpy, const int64_t, nb::ndim<1>>;
using ByteInput = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Int64Input = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void BindData(nb::module_& m);
void BindPlan(nb::module_& m);
void BindCollate(nb::module_& m);
void BindLoad(nb::module_& m);
void BindJob(nb::module_& m);
void BindKernels(nb::module_& m);

// The DLPack dtype numpy understands for `dtype`; bfloat16 travels as
// uint16 and the Python layer views it as ml_dtypes.bfloat16.
nb::dlpack::dtype ToDLPack(DType dtype);

// A numpy array over `data` that keeps `owner` alive, with no copy.
nb::ndarray<nb::numpy> WrapArray(void* data, DType dtype, const std::vector<int64_t>& shape,
                                 std::shared_ptr<void> owner);

// A collated batch as Python reads it: (name, dtype name, numpy array) per
// array, each array owning its C++ buffer (bfloat16 arrives as uint16, see
// ToDLPack). Moves the arrays' owners out of `arrays`.
nb::list ArrayList(std::vector<Array>& arrays);

// A BatchShape as Python reads it: (rows, length, segments, edges, width),
// what BatchShape.from_core takes.
std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> ShapeToPython(const BatchShape& shape);

// A numpy int64 array that takes ownership of `values`.
Int64Array ToNumpy(std::vector<int64_t> values);

}  // namespace jaxbatch::bindings

namespace nanobind::detail {

// A Python int (or bool) becomes an exact int64, or uint64 above int64's
// range; a Python float a double. Anything else, or an int outside both
// ranges, does not convert (the Python layer checks and names the column
// first).
template <>
struct type_caster<jaxbatch::Scalar> {
  NB_TYPE_CASTER(jaxbatch::Scalar, const_name("int | float"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    PyObject* o = src.ptr();
    if (PyFloat_Check(o)) {
      value = jaxbatch::Scalar(PyFloat_AsDouble(o));
      return true;
    }
    if (!PyLong_Check(o)) return false;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow == 0 && !(v == -1 && PyErr_Occurred())) {
      value = jaxbatch::Scalar(static_cast<int64_t>(v));
      return true;
    }
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(o);
      if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
        value = jaxbatch::Scalar(static_cast<uint64_t>(u));
        return true;
      }
    }
    PyErr_Clear();
    return false;
  }

  static handle from_cpp(const jaxbatch::Scalar& scalar, rv_policy, cleanup_list*) noexcept {
    return std::visit(
        [](auto v) -> handle {
          if constexpr (std::is_same_v<decltype(v), double>) return PyFloat_FromDouble(v);
          if constexpr (std::is_same_v<decltype(v), int64_t>) return PyLong_FromLongLong(v);
          if constexpr (std::is_same_v<decltype(v), uint64_t>) {
            return PyLong_FromUnsignedLongLong(v);
          }
        },
        scalar.value());
  }
};

}  // namespace nanobind::detail

#endif  // JAXBATCH_BINDINGS_BINDINGS_H_
