#include "lockstep/io/event_file_reader.hpp"

#include "io/proto/event.pb.h"  // generated into the build tree
#include "lockstep/core/error.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/tfrecord.hpp"

namespace lockstep::io {

std::vector<EventRecord> read_event_file(const std::string& path) {
  std::vector<EventRecord> out;
  const std::vector<std::string> records = parse_tfrecords(read_file(path), path);
  for (std::size_t i = 0; i < records.size(); ++i) {
    tbproto::Event e;
    if (!e.ParseFromString(records[i]))
      throw IOError("TensorBoard event file '" + path + "': record " + std::to_string(i) + " is not an Event");
    EventRecord r;
    r.wall_time = e.wall_time();
    r.step = e.step();
    if (e.has_file_version()) r.file_version = e.file_version();
    if (e.has_summary()) {
      for (const auto& v : e.summary().value()) {
        EventValue ev;
        ev.tag = v.tag();
        ev.plugin_name = v.metadata().plugin_data().plugin_name();
        if (v.has_simple_value()) {
          ev.kind = EventValue::Kind::kScalar;
          ev.scalar = v.simple_value();
        } else if (v.has_histo()) {
          ev.kind = EventValue::Kind::kHistogram;
          const auto& h = v.histo();
          ev.histogram = {h.min(), h.max(), h.num(), h.sum(), h.sum_squares(),
                          {h.bucket_limit().begin(), h.bucket_limit().end()},
                          {h.bucket().begin(), h.bucket().end()}};
        } else if (v.has_tensor() && ev.plugin_name == "text" && v.tensor().string_val_size() > 0) {
          ev.kind = EventValue::Kind::kText;
          ev.text = v.tensor().string_val(0);
        }
        r.values.push_back(std::move(ev));
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace lockstep::io
