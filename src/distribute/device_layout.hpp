#pragma once
// Private to src/distribute: what device_layout.cpp (the strategies' device layouts) shares with
// strategy.cpp.
namespace lockstep::distribute {

/// MirroredOptions::shard_optimizer_update, unless $LOCKSTEP_SHARD_UPDATE is 0 (strategy.cpp).
bool shard_update_wanted(bool option);

}  // namespace lockstep::distribute
