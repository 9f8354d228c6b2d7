#pragma once
// Device-side error marks (PyTorch's device-side asserts, without killing the context): a kernel
// that checks values where they live (mark_outside: labels and indices with no host bytes) writes
// the first one it found wrong into its context's mark instead of making the host wait for its
// answer; the host reads the marks where it waits for the device anyway (a copy to the host) and
// raises what one holds (tensor layer: detail::raise_marked_errors). The mark of a context is
// host memory the device writes (mapped and pinned on a GPU: reading it after a wait costs no
// copy), at one address for the context's life, so a captured step's replays write the same place.
#include <cstdint>
#include <optional>

#include "backend/kernels.hpp"

namespace lockstep::backend {

/// The error mark of `ctx` (a device context; the CPU checks at once and has none): made on first
/// use, cleared, kept until the context is destroyed.
ErrorMark* error_mark(ComputeContext& ctx);
/// The number a mark's `site` holds for `what` (an op's name: a string that lives as long as the
/// process), and back.
std::int64_t error_site(const char* what);
const char* error_site_name(std::int64_t site);

/// The first set mark of any context, copied out and cleared (one thread takes each); none when
/// no mark is set. Call after the host waited for the device whose errors it raises: a mark set
/// later is taken at a later read.
std::optional<ErrorMark> take_error_mark();

/// `ctx` is being destroyed: its mark, cleared, goes back for another context.
void release_error_mark(const ComputeContext& ctx);

}  // namespace lockstep::backend
