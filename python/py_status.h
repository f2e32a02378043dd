// What the parts of pstrain._pstrain share: absl errors as Python
// exceptions (InvalidArgument/OutOfRange -> ValueError, NotFound ->
// LookupError, Unavailable/DeadlineExceeded -> ConnectionError, anything
// else -> RuntimeError, each with the status's message), and the
// registration of the parts defined in other files.
#ifndef PST_PYTHON_PY_STATUS_H_
#define PST_PYTHON_PY_STATUS_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pst::python {

[[noreturn]] inline void Raise(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw pybind11::value_error(message);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_LookupError, message.c_str());
      throw pybind11::error_already_set();
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      PyErr_SetString(PyExc_ConnectionError, message.c_str());
      throw pybind11::error_already_set();
    default:
      throw std::runtime_error(message);
  }
}

template <typename T>
T ValueOrRaise(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return *std::move(value);
}

// evaluator_module.cc: _pstrain.EvaluatorSession and _pstrain.export_checkpoint.
void RegisterEvaluator(pybind11::module_& m);
// Adds Stream (python/stream_module.cc) to the module.
void RegisterStream(pybind11::module_& m);

}  // namespace pst::python

#endif  // PST_PYTHON_PY_STATUS_H_
