// Owned snapshots of the caller's arrays for the native packers.
//
// The packers validate their inputs while holding the GIL and then release it to do the work.
// Reading the caller's NumPy buffers after the release would let another thread change offsets
// between the check and the use (a check-then-use race: out-of-bounds reads). So every input is
// first copied into memory the packer owns, the copy is validated, and only the copy is read
// later. The copy costs one memcpy per input, small next to the packing, which copies every
// token anyway.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace thresher_owned {

namespace py = pybind11;

// A 1-D array's elements, copied while the GIL is held. `what` names the argument in errors.
template <typename T>
std::vector<T> snapshot(const py::array_t<T, py::array::c_style | py::array::forcecast>& a, const char* what) {
  if (a.ndim() != 1) throw py::value_error(std::string(what) + " must be 1-D");
  const T* p = a.data();
  return std::vector<T>(p, p + a.shape(0));
}

}  // namespace thresher_owned
