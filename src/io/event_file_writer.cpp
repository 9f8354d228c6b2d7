#include "lockstep/io/event_file_writer.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "io/proto/event.pb.h"  // generated into the build tree
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/histogram.hpp"
#include "lockstep/io/tfrecord.hpp"

namespace lockstep::io {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

tbproto::Event make_event(std::int64_t step) {
  tbproto::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  return e;
}
}  // namespace

EventFileWriter::EventFileWriter(const std::string& logdir) {
  make_directories(logdir);
  // Two writers started in the same second in one directory must not share a file.
  static std::atomic<int> counter{0};
  const auto secs = static_cast<std::int64_t>(now_seconds());
  path_ = (std::filesystem::path(logdir) / ("events.out.tfevents." + std::to_string(secs) + "." + host_name() + "." +
                                            std::to_string(::getpid()) + "." + std::to_string(counter++) + ".v2"))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr)
    throw IOError("cannot create TensorBoard event file '" + path_ + "' in log directory '" + logdir +
                  "': " + std::strerror(errno));
  tbproto::Event e = make_event(0);
  e.set_file_version("brain.Event:2");
  write_event(e.SerializeAsString());
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventFileWriter::write_event(const std::string& serialized_event) {
  LOCKSTEP_CHECK_T(IOError, file_ != nullptr, "TensorBoard event file '", path_, "' is closed");
  const std::string rec = frame_tfrecord(serialized_event);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    throw IOError("cannot write TensorBoard event file '" + path_ + "': " + std::strerror(errno));
}

void EventFileWriter::add_scalar(const std::string& tag, double value, std::int64_t step) {
  tbproto::Event e = make_event(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_event(e.SerializeAsString());
}

void EventFileWriter::add_histogram(const std::string& tag, const std::vector<float>& values, std::int64_t step) {
  const HistogramData h = make_histogram(values.data(), values.size());
  tbproto::Event e = make_event(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* p = v->mutable_histo();
  p->set_min(h.min);
  p->set_max(h.max);
  p->set_num(h.num);
  p->set_sum(h.sum);
  p->set_sum_squares(h.sum_squares);
  for (double l : h.bucket_limit) p->add_bucket_limit(l);
  for (double c : h.bucket) p->add_bucket(c);
  write_event(e.SerializeAsString());
}

void EventFileWriter::add_histogram(const std::string& tag, const Tensor& values, std::int64_t step) {
  const Tensor f = values.to(DType::kF32);
  add_histogram(tag, f.to_vector<float>(), step);
}

void EventFileWriter::add_text(const std::string& tag, const std::string& text, std::int64_t step) {
  tbproto::Event e = make_event(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  // The text plugin's PluginData content is a serialized TextPluginData{version: 0}: empty bytes.
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  v->mutable_metadata()->set_data_class(tbproto::DATA_CLASS_TENSOR);
  auto* t = v->mutable_tensor();
  t->set_dtype(tbproto::DT_STRING);
  t->mutable_tensor_shape();  // scalar: no dims
  t->add_string_val(text);
  write_event(e.SerializeAsString());
}

void EventFileWriter::flush() {
  if (file_ != nullptr && std::fflush(file_) != 0)
    throw IOError("cannot write TensorBoard event file '" + path_ + "': " + std::strerror(errno));
}

void EventFileWriter::close() {
  if (file_ == nullptr) return;
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) throw IOError("cannot close TensorBoard event file '" + path_ + "': " + std::strerror(errno));
}

}  // namespace lockstep::io
