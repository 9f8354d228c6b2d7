#pragma once
// Device-side error marks (PyTorch's device-side asserts, without killing the context): a kernel
// that checks values where they live (mark_outside: labels and indices with no host bytes) writes
// the first one it found wrong into its context's mark instead of making the host wait for its
// answer; the host reads the marks where it waits for the device anyway (a copy to the host) and
// raises what one holds (tensor layer: detail::raise_marked_errors). The mark of a context is
// host memory the device writes (mapped and pinned on a GPU: reading it after a wait costs no
// copy), at one address for the context's life, so a captured step's replays write the same place.
//
// Which marks a read raises: those of the work it depends on. A replica's context while a step
// runs has its own mark (ComputeContext::set_own_marks, set by the strategy around the step): a
// read on it raises that mark alone (its thread waited for its own work), and no other read
// takes it, so one replica never raises another's error. A read anywhere else (the driver
// between steps, reading what the step's meeting combined from every replica) raises the marks
// of every context that is not in a step: the step then fails with its first replica's error.
#include <cstdint>
#include <optional>
#include <string>

#include "backend/kernels.hpp"

namespace lockstep::backend {

/// The error mark of `ctx` (a device context; the CPU checks at once and has none): made on first
/// use, cleared, kept until the context is destroyed. Costs one load once made.
ErrorMark* error_mark(ComputeContext& ctx);
/// The number a mark's `site` holds for `what` (an op's name: a string that lives as long as the
/// process), and back. Without a lock: a pointer compare per site seen (a handful).
std::int64_t error_site(const char* what);
const char* error_site_name(std::int64_t site);

/// The error a check raises, on the host or from a mark: "<what>: label V at index I is outside
/// [0, L)".
std::string outside_message(const char* what, std::int64_t value, std::int64_t index, std::int64_t limit);

/// A read's marks (above): the first set one, copied out, and how many more were set; each
/// cleared (one thread takes each, and a step fails once). None when none is set. Call after the
/// host waited for the device on `reader` (the context the read ran on); a mark set later is
/// taken at a later read.
struct TakenMarks {
  ErrorMark first;
  int more = 0;
};
std::optional<TakenMarks> take_error_marks(const ComputeContext& reader);

/// `ctx` is being destroyed: its mark, cleared, goes back for another context once the work queued
/// on `ctx` is done (the host waits for it: DeviceKindBackend::wait_for_queue), so that a check
/// still running never sets the mark of the context that takes it next. Where the host cannot wait
/// (the queue is being captured, the device failed or is gone), the mark is never handed out
/// again. A mark still set after the wait (a check whose error no read raised) is written to
/// stderr, never lost, never thrown.
void release_error_mark(ComputeContext& ctx);

}  // namespace lockstep::backend
