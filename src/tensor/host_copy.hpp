#pragma once
// Labels checked without reading the device: integer batches that the input path copied from
// host memory keep those host bytes beside their device copy, for checked_labels to read.
#include <cstdint>
#include <memory>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::detail {

/// The input path copied `host` into `device_copy` (the whole of its memory): for an integer
/// tensor on a device, those host bytes are kept beside it, so that labels in it are checked on
/// the host (checked_labels) until the tensor layer writes to it in place (forget_host_copy).
/// Only for host memory nothing writes to afterwards (a batch gathered for the copy). A CPU
/// tensor given as both is its own host copy (a kept index constant: its checks are remembered).
void remember_host_copy(const Tensor& device_copy, const Tensor& host);
/// The host bytes of `t` while they are still its values (kept alive while the pointer is held);
/// else null. `inside_below`, when given, gets the L of a scan that found every value of its
/// memory inside [0, L) (note_host_copy_scanned), else 0: a check against a limit >= L passes.
std::shared_ptr<const void> host_copy_of(const Tensor& t, std::int64_t* inside_below = nullptr);
/// `t`'s host bytes were scanned against [0, limit) (counted: host_copy_scans) and found `inside`
/// or not. Remembered when `t` is all of its memory (a kept index constant, a batch, not a
/// slice), until the memory is written (forget_host_copy), so that it is scanned once, not at
/// each op that takes it.
void note_host_copy_scanned(const Tensor& t, std::int64_t limit, bool inside);
/// Scans of host bytes so far (every thread).
std::uint64_t host_copy_scans();
/// `to` (a copy of all of `from`'s memory) keeps `from`'s host bytes, if it has them.
void share_host_copy(const Tensor& from, const Tensor& to);
/// `t`'s memory is about to be written in place: its host bytes no longer hold.
void forget_host_copy(const Tensor& t);

}  // namespace lockstep::detail
