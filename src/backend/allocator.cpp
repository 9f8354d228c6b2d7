#include "backend/allocator.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "lockstep/core/error.hpp"

namespace lockstep::backend {

std::string bytes_and_units(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " bytes";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.1f %s)", static_cast<unsigned long long>(bytes), v, units[u]);
  return buf;
}

namespace {
// Blocks this large (a dataset's arrays) go on 2 MiB pages where the kernel offers transparent
// huge pages on request (madvise mode, Debian's default): a batch gathered from shuffled rows of
// the 188 MB MNIST array otherwise takes a TLB miss per row (4 KiB pages cover 12 MB of it at a
// time), which made the gather a sixth of an MLP step. Activations, read in order, gain nothing
// measurable from it, and 2 MiB-aligned blocks would all share their low 21 address bits (cache
// sets); with the threshold at 4 MiB the convnet measured no better and possibly worse, so only
// blocks of 64 MiB and more get it.
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kHugeFrom = std::size_t{64} << 20;

// Blocks from 16 KiB up start at one of 8 offsets in a page ("colours" 512 bytes apart), in turn.
// glibc serves large blocks with mmap, page-aligned, so a variable, its Adam moments and its
// gradient all started at the same offset in their pages: the four streams of the update then
// fell in the same cache sets, and Adam over 100K parameters on a pool of 2 threads took 24 us
// instead of 15 (AMD EPYC VM). Colouring is the classic cure (Bonwick's slab allocator). The
// system block's address is kept just before the block, for the free.
constexpr std::size_t kColourFrom = std::size_t{16} << 10;
constexpr std::size_t kColourStep = 512;
constexpr std::size_t kColours = 8;
constexpr std::size_t kHeader = 64;  // keeps the block 64-byte aligned
bool coloured(std::size_t cls) { return cls >= kColourFrom && cls < kHugeFrom; }
}  // namespace

void* HostMemory::allocate(std::size_t cls, const char**) {
  if (coloured(cls)) {
    static std::atomic<std::size_t> next{0};
    const std::size_t colour = next.fetch_add(1, std::memory_order_relaxed) % kColours;
    char* raw = static_cast<char*>(std::aligned_alloc(64, cls + kHeader + (kColours - 1) * kColourStep));
    if (!raw) return nullptr;
    char* p = raw + kHeader + colour * kColourStep;
    reinterpret_cast<char**>(p)[-1] = raw;
    return p;
  }
  if (cls < kHugeFrom) return std::aligned_alloc(64, cls);
  // size_class's classes above 64 bytes are multiples of a quarter of a power of two, so every
  // class from 4 MiB up is a multiple of 2 MiB, as aligned_alloc needs.
  static_assert(kHugeFrom >= 2 * kHugePage);
  void* p = std::aligned_alloc(kHugePage, cls);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p) (void)madvise(p, cls, MADV_HUGEPAGE);  // advice only: without THP the block is as before
#endif
  return p;
}

void HostMemory::free(void* block, std::size_t cls) {
  std::free(coloured(cls) ? static_cast<char**>(block)[-1] : block);
}

std::size_t HostMemory::size_class(std::size_t nbytes) {
  if (nbytes <= 64) return 64;
  // Round up to a quarter of the next power of two: at most 25% waste, few classes.
  std::size_t p = 64;
  while (p < nbytes) p <<= 1;
  const std::size_t q = p >> 2;
  std::size_t c = p >> 1;
  while (c < nbytes) c += q;
  // aligned_alloc needs a multiple of the alignment.
  return (c + 63) & ~static_cast<std::size_t>(63);
}

// "cannot allocate 3136000000000 bytes (2.9 TiB) of host memory": the size asked, plainly.
std::string HostMemory::out_of_memory(const OutOfMemory& e) const {
  return "cannot allocate " + bytes_and_units(e.asked) + " of host memory: out of memory";
}

}  // namespace lockstep::backend
