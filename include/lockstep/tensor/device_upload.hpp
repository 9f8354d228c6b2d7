#pragma once
// Host tensors copied to the current context's device ahead of their use: TF's
// prefetch_to_device, as fit uses it for the next batch. Three moments, so that the copy runs
// beside the step that is running instead of before the next one:
// - the constructor takes the device memory and marks the device's work queued so far (the
//   memory may have been used by it: the copy runs after it);
// - start() copies from the host on the device's copy stream, beside the work queued between the
//   two (the step), through pinned staging memory, so the host does not wait (a caller that
//   writes its data into the staging memory itself, stage(), saves the host a copy); the
//   tensors share one block and one copy where a block holds them all;
// - take() makes the work queued from then on wait for the copy, and hands the device tensors out.
// On a device whose work runs in order on the host (CPU), nothing is reserved or copied: take()
// returns the host tensors themselves (or, given buffers, copies into them).
#include <memory>
#include <vector>

#include "lockstep/core/shape.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

class DeviceUpload {
 public:
  /// Nothing reserved (reserve() reserves).
  DeviceUpload();
  /// Device memory for tensors of these shapes and dtypes, on the current context's device.
  DeviceUpload(std::vector<Shape> shapes, std::vector<DType> dtypes);
  /// As `*this = DeviceUpload(shapes, dtypes)`, keeping this upload's host memory (its state and
  /// vectors, which an input path that uploads a batch per step would otherwise allocate again):
  /// what it reserved and did not hand out is given back first, as its destructor does. One that
  /// throws (no device memory) leaves nothing reserved, as DeviceUpload().
  void reserve(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes);
  /// Into `buffers`, tensors on the current context's device that the caller keeps (a captured
  /// step's fixed inputs): start() copies into them, take() hands them back. The device's work
  /// queued so far may still read them: the copy waits for it.
  explicit DeviceUpload(std::vector<Tensor> buffers);
  /// A copy never taken is waited for by the device's later work (its memory may then be reused).
  ~DeviceUpload();
  DeviceUpload(DeviceUpload&&) noexcept;
  DeviceUpload& operator=(DeviceUpload&&) noexcept;
  DeviceUpload(const DeviceUpload&) = delete;
  DeviceUpload& operator=(const DeviceUpload&) = delete;

  /// Host memory for tensor i that start() copies from without a copy on the host (a pinned
  /// staging block on a GPU), as a host tensor of its shape and dtype for the caller to fill and
  /// pass to start() as tensor i. Undefined where there is none (a CPU device, no block to be
  /// lent, an empty tensor): the caller passes a host tensor of its own. The memory is the
  /// upload's: not to be written after start() or the upload's end, nor read after start().
  Tensor stage(std::size_t i);
  /// Starts copying `host` (host tensors of the constructor's shapes and dtypes, in order). The
  /// host tensors may be changed or freed as soon as it returns. Once only.
  void start(const std::vector<Tensor>& host);
  bool started() const;
  /// The tensors on the device (after start()); the device's work queued from now on waits for
  /// the copy. Once only, on a thread whose current context is the constructor's.
  std::vector<Tensor> take();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace lockstep
