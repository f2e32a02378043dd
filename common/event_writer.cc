#include "common/event_writer.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "proto/tensorboard.pb.h"

namespace pst::common {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected
    table[i] = c;
  }
  return table;
}

void PutLittleEndian(uint64_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLittleEndian(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t MaskedCrc32c(const void* data, size_t size) {
  const uint32_t crc = Crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.",
                                        absl::ToUnixSeconds(absl::Now()), ".", host);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("cannot create the event file ", path));
  std::unique_ptr<EventWriter> writer(new EventWriter(path, std::move(out)));
  tensorboard::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  event.set_file_version("brain.Event:2");
  absl::Status written = writer->WriteRecord(event.SerializeAsString());
  if (written.ok()) written = writer->Flush();
  if (!written.ok()) return written;
  return writer;
}

absl::Status EventWriter::AddScalars(int64_t step,
                                     const std::vector<std::pair<std::string, float>>& scalars,
                                     absl::Time wall_time) {
  tensorboard::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(wall_time - absl::UnixEpoch()));
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  return WriteRecord(event.SerializeAsString());
}

absl::Status EventWriter::Flush() {
  out_.flush();
  if (!out_) return absl::InternalError(absl::StrCat("cannot write the event file ", path_));
  return absl::OkStatus();
}

absl::Status EventWriter::WriteRecord(const std::string& data) {
  char header[12];
  PutLittleEndian(data.size(), 8, header);
  PutLittleEndian(MaskedCrc32c(header, 8), 4, header + 8);
  char footer[4];
  PutLittleEndian(MaskedCrc32c(data.data(), data.size()), 4, footer);
  out_.write(header, sizeof(header));
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  out_.write(footer, sizeof(footer));
  if (!out_) return absl::InternalError(absl::StrCat("cannot write the event file ", path_));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadRecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < content.size()) {
    if (content.size() - offset < 12) {
      return absl::DataLossError(absl::StrCat(path, ": truncated record header at byte ", offset));
    }
    const char* header = content.data() + offset;
    const uint64_t length = GetLittleEndian(header, 8);
    if (static_cast<uint32_t>(GetLittleEndian(header + 8, 4)) != MaskedCrc32c(header, 8)) {
      return absl::DataLossError(absl::StrCat(path, ": bad length CRC at byte ", offset));
    }
    if (length > content.size() - offset - 12 || content.size() - offset - 12 - length < 4) {
      return absl::DataLossError(absl::StrCat(path, ": truncated record at byte ", offset));
    }
    std::string data = content.substr(offset + 12, length);
    const uint32_t crc = static_cast<uint32_t>(GetLittleEndian(header + 12 + length, 4));
    if (crc != MaskedCrc32c(data.data(), data.size())) {
      return absl::DataLossError(absl::StrCat(path, ": bad data CRC in the record at byte ", offset));
    }
    records.push_back(std::move(data));
    offset += 12 + length + 4;
  }
  return records;
}

}  // namespace pst::common
