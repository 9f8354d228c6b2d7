#pragma once
#include <chrono>
#include <functional>
#include <string>

namespace lockstep::io::h5 {

/// Runs `work` in a forked child and waits for it at most `timeout`. Returns when it succeeded;
/// IOError with its error's message when it threw, and IOError naming `source` when it died by
/// a signal or ran out of time (then it is killed). `work` must only compute (the child exits
/// without flushing or returning anything but an error message).
void probe_in_child(const std::function<void()>& work, const std::string& source, std::chrono::seconds timeout);

}  // namespace lockstep::io::h5
