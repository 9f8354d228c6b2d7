// cache() and cache(path): the first complete pass records, later passes replay.
//
// Cache file layout (little-endian, as the host writes it; a file from another byte order
// fails the magic check and is rebuilt):
//   header  "LSTPCACH" | u32 version | u64 hash of the description | u32 n | n bytes: description
//   records per element: u32 components; per component: u8 dtype, u8 rank, i64 dims[rank], data
//   footer  u64 elements | u64 record bytes | u64 checksum of the record bytes | "LSTPEND1"
// A file is used only when all of it agrees: header, footer, size and checksum.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "data/fingerprint.hpp"
#include "data/nodes.hpp"

namespace lockstep::data::detail {

namespace {

// --- memory -------------------------------------------------------------------------------

class MemoryCacheNode;

class MemoryCacheState {
 public:
  std::mutex mu;
  std::shared_ptr<const std::vector<Element>> complete;  // set once a pass has run to the end
  bool recording = false;                                 // a pass is recording now
};

class ReplayIterator final : public Iterator {
 public:
  explicit ReplayIterator(std::shared_ptr<const std::vector<Element>> elements) : elements_(std::move(elements)) {}
  std::optional<Element> next() override {
    if (next_ >= elements_->size()) return std::nullopt;
    return (*elements_)[next_++];
  }

 private:
  std::shared_ptr<const std::vector<Element>> elements_;
  std::size_t next_ = 0;
};

class RecordIterator final : public Iterator {
 public:
  RecordIterator(std::unique_ptr<Iterator> input, std::shared_ptr<MemoryCacheState> state)
      : input_(std::move(input)), state_(std::move(state)) {}
  ~RecordIterator() override {
    if (!input_) return;
    std::lock_guard<std::mutex> lock(state_->mu);  // abandoned midway: let another pass record
    state_->recording = false;
  }
  std::optional<Element> next() override {
    if (!input_) return std::nullopt;
    std::optional<Element> e;
    try {
      e = input_->next();
    } catch (...) {
      abandon();
      throw;
    }
    if (e) {
      recorded_.push_back(*e);
      return e;
    }
    input_.reset();
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->complete = std::make_shared<const std::vector<Element>>(std::move(recorded_));
    state_->recording = false;
    return std::nullopt;
  }

 private:
  void abandon() {
    input_.reset();
    recorded_.clear();
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->recording = false;
  }
  std::unique_ptr<Iterator> input_;  // null once done
  std::shared_ptr<MemoryCacheState> state_;
  std::vector<Element> recorded_;
};

class MemoryCacheNode final : public DatasetNode {
 public:
  explicit MemoryCacheNode(NodePtr input) : input_(std::move(input)), state_(std::make_shared<MemoryCacheState>()) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->complete) return std::make_unique<ReplayIterator>(state_->complete);
      if (!state_->recording) {
        state_->recording = true;
        return std::make_unique<RecordIterator>(input_->make_iterator(), state_);
      }
    }
    // Another pass is recording: this one reads upstream without recording.
    return input_->make_iterator();
  }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override { return "cache"; }
  std::string fingerprint_part() const override { return "cache"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::shared_ptr<MemoryCacheState> state_;
};

// --- file ---------------------------------------------------------------------------------

constexpr char kMagic[8] = {'L', 'S', 'T', 'P', 'C', 'A', 'C', 'H'};
constexpr char kEndMagic[8] = {'L', 'S', 'T', 'P', 'E', 'N', 'D', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kFooterBytes = 32;
constexpr std::size_t kMaxRank = 255;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

std::string header_bytes(const std::string& description) {
  Hasher h;
  h.update(description);
  const std::uint64_t hash = h.digest();
  const auto n = static_cast<std::uint32_t>(description.size());
  std::string out(kMagic, 8);
  out.append(reinterpret_cast<const char*>(&kVersion), 4);
  out.append(reinterpret_cast<const char*>(&hash), 8);
  out.append(reinterpret_cast<const char*>(&n), 4);
  return out + description;
}

struct Footer {
  std::uint64_t elements = 0, record_bytes = 0, checksum = 0;
};

// Reads and checks a cache file's frame; on success `f` is positioned at the first record.
// Returns nullopt for anything that makes the file unusable: missing, stale or damaged.
std::optional<Footer> open_valid(const std::string& path, const std::string& header, File& f, bool verify_checksum) {
  f.reset(std::fopen(path.c_str(), "rb"));
  if (!f) return std::nullopt;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size < header.size() + kFooterBytes) return std::nullopt;
  std::string got(header.size(), '\0');
  if (std::fread(got.data(), 1, got.size(), f.get()) != got.size() || got != header) return std::nullopt;
  unsigned char foot[kFooterBytes];
  if (std::fseek(f.get(), static_cast<long>(size - kFooterBytes), SEEK_SET) != 0 ||
      std::fread(foot, 1, kFooterBytes, f.get()) != kFooterBytes || std::memcmp(foot + 24, kEndMagic, 8) != 0) {
    return std::nullopt;
  }
  Footer footer;
  std::memcpy(&footer.elements, foot, 8);
  std::memcpy(&footer.record_bytes, foot + 8, 8);
  std::memcpy(&footer.checksum, foot + 16, 8);
  if (header.size() + footer.record_bytes + kFooterBytes != size) return std::nullopt;
  if (std::fseek(f.get(), static_cast<long>(header.size()), SEEK_SET) != 0) return std::nullopt;
  if (verify_checksum) {
    Hasher h;
    std::vector<char> buf(1 << 20);
    for (std::uint64_t left = footer.record_bytes; left > 0;) {
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
      if (std::fread(buf.data(), 1, chunk, f.get()) != chunk) return std::nullopt;
      h.update(buf.data(), chunk);
      left -= chunk;
    }
    if (h.digest() != footer.checksum) return std::nullopt;
    if (std::fseek(f.get(), static_cast<long>(header.size()), SEEK_SET) != 0) return std::nullopt;
  }
  return footer;
}

class FileReadIterator final : public Iterator {
 public:
  FileReadIterator(File f, std::string path, Footer footer)
      : f_(std::move(f)), path_(std::move(path)), left_(footer.elements), bytes_left_(footer.record_bytes) {}
  std::optional<Element> next() override {
    if (left_ == 0) return std::nullopt;
    --left_;
    std::uint32_t n = 0;
    read(&n, 4);
    Element e;
    for (std::uint32_t c = 0; c < n; ++c) {
      unsigned char meta[2];
      read(meta, 2);
      if (meta[0] > static_cast<unsigned char>(DType::kU8)) corrupt("bad dtype");
      std::vector<std::int64_t> dims(meta[1]);
      read(dims.data(), dims.size() * 8);
      for (auto d : dims) {
        if (d < 0 || static_cast<std::uint64_t>(d) > bytes_left_ + 1) corrupt("bad dimension");
      }
      Tensor t = Tensor::empty(Shape(std::move(dims)), static_cast<DType>(meta[0]));
      read(t.raw_data(), t.nbytes());
      e.push_back(std::move(t));
    }
    return e;
  }

 private:
  void read(void* dst, std::size_t n) {
    if (n > bytes_left_ || std::fread(dst, 1, n, f_.get()) != n) corrupt("records end early");
    bytes_left_ -= n;
  }
  [[noreturn]] void corrupt(const char* why) const {
    throw IOError("Dataset::cache: '" + path_ + "': corrupt cache file (" + why +
                  ") although its checksum matched when opened; was it changed while being read?");
  }
  File f_;
  std::string path_;
  std::uint64_t left_, bytes_left_;
};

class FileWriteIterator final : public Iterator {
 public:
  FileWriteIterator(std::unique_ptr<Iterator> input, std::string path, const std::string& header)
      : input_(std::move(input)), path_(std::move(path)) {
    static std::atomic<std::uint64_t> counter{0};
    tmp_ = path_ + ".partial." + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1));
    f_.reset(std::fopen(tmp_.c_str(), "wb"));
    if (!f_) fail("cannot open '" + tmp_ + "' for writing: " + std::strerror(errno));
    write(header.data(), header.size(), false);
  }
  ~FileWriteIterator() override { discard(); }

  std::optional<Element> next() override {
    if (!input_) return std::nullopt;
    std::optional<Element> e;
    try {
      e = input_->next();
    } catch (...) {
      discard();
      throw;
    }
    if (!e) {
      finish();
      return std::nullopt;
    }
    const auto n = static_cast<std::uint32_t>(e->size());
    write(&n, 4, true);
    for (const auto& t : *e) {
      LOCKSTEP_CHECK(t.rank() <= kMaxRank, "Dataset::cache: '", path_, "': cannot store a tensor of rank ", t.rank());
      const unsigned char meta[2] = {static_cast<unsigned char>(t.dtype()), static_cast<unsigned char>(t.rank())};
      write(meta, 2, true);
      write(t.shape().dims().data(), t.rank() * 8, true);
      write(t.raw_data(), t.nbytes(), true);
    }
    ++elements_;
    return e;
  }

 private:
  void write(const void* data, std::size_t n, bool record) {
    if (n == 0) return;
    if (std::fwrite(data, 1, n, f_.get()) != n) fail(std::string("write failed: ") + std::strerror(errno));
    if (record) {
      hash_.update(data, n);
      record_bytes_ += n;
    }
  }
  void finish() {
    input_.reset();
    unsigned char foot[kFooterBytes];
    const std::uint64_t sum = hash_.digest();
    std::memcpy(foot, &elements_, 8);
    std::memcpy(foot + 8, &record_bytes_, 8);
    std::memcpy(foot + 16, &sum, 8);
    std::memcpy(foot + 24, kEndMagic, 8);
    write(foot, kFooterBytes, false);
    std::FILE* f = f_.release();
    const bool ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (std::fclose(f) != 0 || !ok) fail(std::string("write failed: ") + std::strerror(errno));
    // Atomic replace: a reader sees the old file or the new one, never half of one.
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail(std::string("rename failed: ") + std::strerror(errno));
    tmp_.clear();
  }
  void discard() {
    input_.reset();
    f_.reset();
    if (!tmp_.empty()) std::remove(tmp_.c_str());
    tmp_.clear();
  }
  [[noreturn]] void fail(const std::string& why) {
    discard();
    throw IOError("Dataset::cache: '" + path_ + "': " + why);
  }

  std::unique_ptr<Iterator> input_;  // null once done
  std::string path_, tmp_;
  File f_;
  Hasher hash_;
  std::uint64_t elements_ = 0, record_bytes_ = 0;
};

class FileCacheNode final : public DatasetNode {
 public:
  FileCacheNode(NodePtr input, std::string path) : input_(std::move(input)), path_(std::move(path)) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    std::string header;
    {
      // Once per node: describing hashes every source tensor, and the graph is immutable.
      std::lock_guard<std::mutex> lock(mu_);
      if (header_.empty()) header_ = header_bytes(pipeline_description(*input_));
      header = header_;
    }
    // The checksum is read through once per file version this node meets; later passes
    // trust a file whose size and modification time have not changed since.
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(path_, ec);
    const auto size = ec ? 0 : std::filesystem::file_size(path_, ec);
    bool verified;
    {
      std::lock_guard<std::mutex> lock(mu_);
      verified = !ec && verified_ && verified_mtime_ == mtime && verified_size_ == size;
    }
    File f;
    if (auto footer = open_valid(path_, header, f, !verified)) {
      if (!verified) {
        std::lock_guard<std::mutex> lock(mu_);
        verified_ = true;
        verified_mtime_ = mtime;
        verified_size_ = size;
      }
      return std::make_unique<FileReadIterator>(std::move(f), path_, *footer);
    }
    return std::make_unique<FileWriteIterator>(input_->make_iterator(), path_, header);
  }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override { return "cache(path='" + path_ + "')"; }
  std::string fingerprint_part() const override { return "cache"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::string path_;
  mutable std::mutex mu_;
  mutable std::string header_;
  mutable bool verified_ = false;
  mutable std::filesystem::file_time_type verified_mtime_;
  mutable std::uintmax_t verified_size_ = 0;
};

}  // namespace

NodePtr make_memory_cache_node(NodePtr input) { return std::make_shared<MemoryCacheNode>(std::move(input)); }

NodePtr make_file_cache_node(NodePtr input, std::string path) {
  LOCKSTEP_CHECK(!path.empty(), "Dataset::cache: the path is empty; use cache() for an in-memory cache");
  return std::make_shared<FileCacheNode>(std::move(input), std::move(path));
}

}  // namespace lockstep::data::detail
