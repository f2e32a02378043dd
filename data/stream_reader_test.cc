// Tests of the streaming readers: input_files, line_source, shuffle_buffer,
// record_stream and example_stream, on files the tests write.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "data/criteo.h"
#include "data/example_stream.h"
#include "data/input_files.h"
#include "data/libsvm.h"
#include "data/line_source.h"
#include "data/record_stream.h"
#include "data/shuffle_buffer.h"
#include "gtest/gtest.h"

namespace pst::data {
namespace {

namespace fs = std::filesystem;

// A directory under the test temp dir, unique to this process and test,
// removed with its files when the object goes out of scope.
class TempDir {
 public:
  TempDir() {
    const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        (fs::path(testing::TempDir()) / absl::StrCat("stream_reader_test_", getpid(), "_",
                                                     info->test_suite_name(), "_", info->name()))
            .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Path(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

void WriteGz(const std::string& path, const std::string& content) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  if (!content.empty()) {
    ASSERT_EQ(gzwrite(gz, content.data(), static_cast<unsigned>(content.size())),
              static_cast<int>(content.size()));
  }
  ASSERT_EQ(gzclose(gz), Z_OK);
}

// The lines of `content` as a reader must see them: split at '\n', without
// the empty text after a final '\n'.
std::vector<std::string> LinesOf(const std::string& content) {
  std::vector<std::string> lines = absl::StrSplit(content, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// Lines of varied lengths, so that byte ranges cut them at varied places.
std::string MakeContent(const std::string& tag, int lines, bool trailing_newline = true) {
  std::string content;
  for (int i = 0; i < lines; ++i) {
    absl::StrAppend(&content, tag, "-", i, std::string(static_cast<size_t>((i * 7) % 13), 'x'));
    if (i + 1 < lines || trailing_newline) content += '\n';
  }
  return content;
}

StreamOptions Plain(int64_t num_epochs = 1) {
  StreamOptions options;
  options.buffer_size = 4;
  options.num_epochs = num_epochs;
  return options;
}

// Everything a stream hands out, as "text" strings.
std::vector<std::string> Drain(RecordStream* stream, int64_t limit = -1) {
  std::vector<std::string> out;
  Record record;
  while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
    absl::StatusOr<bool> got = stream->Next(&record);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || !*got) break;
    EXPECT_LE(stream->buffer().size(), stream->buffer().capacity());
    out.push_back(record.text);
  }
  return out;
}

std::vector<std::string> ReadShare(const std::vector<std::string>& files, int worker, int workers,
                                   const StreamOptions& options = Plain()) {
  absl::StatusOr<InputShare> share = InputShareOf(files, worker, workers);
  EXPECT_TRUE(share.ok()) << share.status();
  if (!share.ok()) return {};
  absl::StatusOr<std::unique_ptr<RecordStream>> stream =
      RecordStream::Open(*std::move(share), options);
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return {};
  return Drain(stream->get());
}

// Every line of `expected` is read by exactly one of `workers` workers.
void ExpectEachLineOnce(const std::vector<std::string>& files, int workers,
                        std::vector<std::string> expected) {
  std::vector<std::string> all;
  for (int w = 0; w < workers; ++w) {
    const std::vector<std::string> mine = ReadShare(files, w, workers);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected) << "workers=" << workers << " files=" << absl::StrJoin(files, ",");
}

TEST(InputFilesTest, ListInputFiles_FileDirGlobList_SortedAndDeduplicated) {
  TempDir dir;
  fs::create_directories(dir.Path("d"));
  WriteFile(dir.Path("d/b.txt"), "b\n");
  WriteFile(dir.Path("d/a.txt"), "a\n");
  WriteFile(dir.Path("d/.hidden"), "h\n");
  WriteFile(dir.Path("c.gz"), "");
  WriteFile(dir.Path("e.txt"), "e\n");
  absl::StatusOr<std::vector<std::string>> files = ListInputFiles(SplitInputSpec(absl::StrCat(
      dir.Path("e.txt"), ",", dir.Path("d"), ",", dir.Path("*.gz"), ",", dir.Path("d/a.txt"))));
  ASSERT_TRUE(files.ok()) << files.status();
  const std::vector<std::string> want = {dir.Path("c.gz"), dir.Path("d/a.txt"), dir.Path("d/b.txt"),
                                         dir.Path("e.txt")};
  EXPECT_EQ(*files, want);
}

TEST(InputFilesTest, ListInputFiles_MissingFile_NotFoundNamingIt) {
  TempDir dir;
  absl::StatusOr<std::vector<std::string>> files = ListInputFiles({dir.Path("nope.txt")});
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(files.status().message(), dir.Path("nope.txt"))) << files.status();
}

TEST(InputFilesTest, ListInputFiles_EmptyGlobOrDirectory_NotFoundNamingIt) {
  TempDir dir;
  absl::StatusOr<std::vector<std::string>> files = ListInputFiles({dir.Path("part-*")});
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(files.status().message(), dir.Path("part-*"))) << files.status();
  files = ListInputFiles({dir.path()});
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(files.status().message(), dir.path())) << files.status();
  EXPECT_EQ(ListInputFiles({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InputFilesTest, InputShareOf_ManyFiles_EveryWthFileWhole) {
  const std::vector<std::string> files = {"a", "b", "c", "d", "e"};
  absl::StatusOr<InputShare> share = InputShareOf(files, 1, 2);
  ASSERT_TRUE(share.ok()) << share.status();
  ASSERT_EQ(share->pieces.size(), 2u);
  EXPECT_EQ(share->pieces[0].path, "b");
  EXPECT_EQ(share->pieces[1].path, "d");
  EXPECT_EQ(share->pieces[0].begin, 0);
  EXPECT_EQ(share->pieces[0].end, -1);
  EXPECT_EQ(InputShareOf(files, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputShareOf(files, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SharesTest, OneFile_ByteRanges_EachLineReadOnce) {
  TempDir dir;
  const std::vector<std::string> contents = {"",
                                             "\n",
                                             "a",
                                             "a\n",
                                             "a\nb",
                                             "\n\n\n",
                                             "ab\n\ncd\n",
                                             "x\ny\nz",
                                             MakeContent("l", 50),
                                             MakeContent("m", 37, /*trailing_newline=*/false)};
  for (size_t c = 0; c < contents.size(); ++c) {
    const std::string path = dir.Path(absl::StrCat("f", c, ".txt"));
    WriteFile(path, contents[c]);
    for (int workers : {1, 2, 3, 4, 7}) {
      ExpectEachLineOnce({path}, workers, LinesOf(contents[c]));
    }
  }
}

TEST(SharesTest, OneFile_ByteRanges_ConcatenateToTheFileInOrder) {
  TempDir dir;
  const std::string content = MakeContent("l", 200);
  WriteFile(dir.Path("f.txt"), content);
  for (int workers : {2, 3}) {
    std::vector<std::string> all;
    for (int w = 0; w < workers; ++w) {
      const std::vector<std::string> mine = ReadShare({dir.Path("f.txt")}, w, workers);
      EXPECT_FALSE(mine.empty());
      all.insert(all.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(all, LinesOf(content));
  }
}

TEST(SharesTest, DirectoryAndGlob_EachLineReadOnce) {
  TempDir dir;
  fs::create_directories(dir.Path("d"));
  std::vector<std::string> expected;
  for (int f = 0; f < 5; ++f) {
    const std::string content = MakeContent(absl::StrCat("f", f), 10 + f, f % 2 == 0);
    WriteFile(dir.Path(absl::StrCat("d/part-", f)), content);
    for (const std::string& line : LinesOf(content)) expected.push_back(line);
  }
  for (const std::string& item : {dir.Path("d"), dir.Path("d/part-*")}) {
    absl::StatusOr<std::vector<std::string>> files = ListInputFiles({item});
    ASSERT_TRUE(files.ok()) << files.status();
    ASSERT_EQ(files->size(), 5u);
    for (int workers : {1, 2, 3}) ExpectEachLineOnce(*files, workers, expected);
  }
}

TEST(SharesTest, GzFiles_OneOrMany_EachLineReadOnce) {
  TempDir dir;
  std::vector<std::string> expected;
  std::vector<std::string> files;
  for (int f = 0; f < 4; ++f) {
    const std::string content = MakeContent(absl::StrCat("g", f), 30, f != 1);
    files.push_back(dir.Path(absl::StrCat("part-", f, ".gz")));
    WriteGz(files.back(), content);
    for (const std::string& line : LinesOf(content)) expected.push_back(line);
  }
  for (int workers : {1, 2, 3}) ExpectEachLineOnce(files, workers, expected);
  // One .gz file: every worker decompresses it and keeps lines i % W.
  for (int workers : {1, 2, 3}) {
    ExpectEachLineOnce({files[0]}, workers, LinesOf(MakeContent("g0", 30)));
    const int last = workers - 1;
    const std::vector<std::string> mine = ReadShare({files[0]}, last, workers);
    const std::vector<std::string> all = LinesOf(MakeContent("g0", 30));
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(mine[i], all[static_cast<size_t>(last) + i * static_cast<size_t>(workers)]);
    }
  }
}

TEST(SharesTest, MixedPlainAndGz_FewerFilesThanWorkers_EachLineReadOnce) {
  TempDir dir;
  const std::string a = MakeContent("a", 40);
  const std::string b = MakeContent("b", 25, false);
  WriteFile(dir.Path("a.txt"), a);
  WriteGz(dir.Path("b.gz"), b);
  std::vector<std::string> expected = LinesOf(a);
  for (const std::string& line : LinesOf(b)) expected.push_back(line);
  ExpectEachLineOnce({dir.Path("a.txt"), dir.Path("b.gz")}, 3, expected);
}

// Reads every prefix of the stream, saves the position, reopens there and
// checks that the rest is what the original stream hands out.
void ExpectExactResume(const InputShare& share, const StreamOptions& options) {
  absl::StatusOr<std::unique_ptr<RecordStream>> full = RecordStream::Open(share, options);
  ASSERT_TRUE(full.ok()) << full.status();
  const std::vector<std::string> all = Drain(full->get());
  for (size_t k = 0; k <= all.size(); ++k) {
    absl::StatusOr<std::unique_ptr<RecordStream>> first = RecordStream::Open(share, options);
    ASSERT_TRUE(first.ok()) << first.status();
    const std::vector<std::string> head = Drain(first->get(), static_cast<int64_t>(k));
    ASSERT_EQ(head.size(), k);
    const std::string saved = (*first)->position().ToString();
    absl::StatusOr<Position> at = Position::Parse(saved);
    ASSERT_TRUE(at.ok()) << at.status();
    EXPECT_EQ(at->ToString(), saved);
    absl::StatusOr<std::unique_ptr<RecordStream>> resumed = RecordStream::Open(share, options, *at);
    ASSERT_TRUE(resumed.ok()) << resumed.status() << " at " << saved;
    const std::vector<std::string> rest = Drain(resumed->get());
    const std::vector<std::string> want(all.begin() + static_cast<std::ptrdiff_t>(k), all.end());
    ASSERT_EQ(rest, want) << "k=" << k << " position=" << saved;
    // The original goes on the same way.
    EXPECT_EQ(Drain(first->get()), want) << "k=" << k;
  }
}

TEST(RecordStreamTest, Position_ResumeAnywhere_YieldsExactlyTheRest) {
  TempDir dir;
  WriteFile(dir.Path("a.txt"), MakeContent("a", 9));
  WriteGz(dir.Path("b.gz"), MakeContent("b", 7, false));
  WriteFile(dir.Path("c.txt"), "");
  WriteFile(dir.Path("d.txt"), MakeContent("d", 6, false));
  const std::vector<std::string> files = {dir.Path("a.txt"), dir.Path("b.gz"), dir.Path("c.txt"),
                                          dir.Path("d.txt")};
  for (bool shuffle : {false, true}) {
    for (int64_t buffer : {1, 4, 7, 100}) {
      StreamOptions options;
      options.shuffle = shuffle;
      options.buffer_size = buffer;
      options.seed = 42;
      options.num_epochs = 2;  // across an epoch boundary
      SCOPED_TRACE(absl::StrCat("shuffle=", shuffle, " buffer=", buffer));
      // Whole files (across file boundaries), then byte ranges and strided
      // gzip lines.
      for (int workers : {1, 3, 5}) {
        for (int w = 0; w < workers; w += 2) {
          absl::StatusOr<InputShare> share = InputShareOf(files, w, workers);
          ASSERT_TRUE(share.ok()) << share.status();
          SCOPED_TRACE(absl::StrCat("worker ", w, " of ", workers));
          ExpectExactResume(*share, options);
        }
      }
    }
  }
}

TEST(RecordStreamTest, Shuffle_SameSeed_SameOrder_OtherSeedOrEpoch_OtherOrder) {
  TempDir dir;
  const std::string content = MakeContent("s", 100);
  WriteFile(dir.Path("s.txt"), content);
  StreamOptions options;
  options.shuffle = true;
  options.buffer_size = 32;
  options.seed = 7;
  options.num_epochs = 2;
  const std::vector<std::string> one = ReadShare({dir.Path("s.txt")}, 0, 1, options);
  const std::vector<std::string> two = ReadShare({dir.Path("s.txt")}, 0, 1, options);
  ASSERT_EQ(one.size(), 200u);
  EXPECT_EQ(one, two);
  const std::vector<std::string> epoch0(one.begin(), one.begin() + 100);
  const std::vector<std::string> epoch1(one.begin() + 100, one.end());
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(epoch0, LinesOf(content));
  std::vector<std::string> sorted0 = epoch0;
  std::vector<std::string> sorted1 = epoch1;
  std::vector<std::string> want = LinesOf(content);
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(sorted0, want);
  EXPECT_EQ(sorted1, want);
  options.seed = 8;
  EXPECT_NE(ReadShare({dir.Path("s.txt")}, 0, 1, options), one);
}

TEST(RecordStreamTest, Buffer_NeverHoldsMoreThanBufferSize) {
  TempDir dir;
  WriteFile(dir.Path("s.txt"), MakeContent("s", 1000));
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("s.txt")}, 0, 1);
  ASSERT_TRUE(share.ok());
  StreamOptions options;
  options.shuffle = true;
  options.buffer_size = 16;
  absl::StatusOr<std::unique_ptr<RecordStream>> stream = RecordStream::Open(*share, options);
  ASSERT_TRUE(stream.ok());
  Record record;
  int64_t n = 0;
  while (true) {
    absl::StatusOr<bool> got = (*stream)->Next(&record);
    ASSERT_TRUE(got.ok());
    if (!*got) break;
    ++n;
    ASSERT_LE((*stream)->buffer().size(), 16);
  }
  EXPECT_EQ(n, 1000);
}

TEST(RecordStreamTest, Epochs_ForeverOnEmptyInput_Ends) {
  TempDir dir;
  WriteFile(dir.Path("e.txt"), "");
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("e.txt")}, 0, 1);
  ASSERT_TRUE(share.ok());
  absl::StatusOr<std::unique_ptr<RecordStream>> stream = RecordStream::Open(*share, Plain(0));
  ASSERT_TRUE(stream.ok());
  EXPECT_TRUE(Drain(stream->get()).empty());
}

TEST(RecordStreamTest, Epochs_ReadOnForever_WrapsWithEpochInPosition) {
  TempDir dir;
  WriteFile(dir.Path("e.txt"), "a\nb\nc\n");
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("e.txt")}, 0, 1);
  ASSERT_TRUE(share.ok());
  absl::StatusOr<std::unique_ptr<RecordStream>> stream = RecordStream::Open(*share, Plain(0));
  ASSERT_TRUE(stream.ok());
  const std::vector<std::string> got = Drain(stream->get(), 10);
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c", "a", "b", "c", "a", "b", "c", "a"}));
  EXPECT_EQ((*stream)->position().epoch, 3);
}

TEST(ShuffleBufferTest, Shuffle_IsASeededPermutation_WithinCapacity) {
  auto order = [](uint64_t seed) {
    ShuffleBuffer buffer(10);
    for (int i = 0; i < 10; ++i) {
      Record* slot = buffer.Add();
      slot->text = absl::StrCat(i);
      slot->line = i;
    }
    EXPECT_TRUE(buffer.full());
    buffer.Shuffle(seed);
    std::vector<int64_t> lines;
    Record record;
    while (buffer.Take(&record)) {
      EXPECT_EQ(record.text, absl::StrCat(record.line));
      lines.push_back(record.line);
    }
    EXPECT_TRUE(buffer.drained());
    EXPECT_EQ(buffer.taken(), 10);
    return lines;
  };
  const std::vector<int64_t> a = order(1);
  EXPECT_EQ(a, order(1));
  EXPECT_NE(a, order(2));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(LineSourceTest, Next_ReportsOffsets_AndReopensAtThem) {
  TempDir dir;
  WriteFile(dir.Path("f.txt"), "ab\n\ncde\r\nf");
  FilePiece piece;
  piece.path = dir.Path("f.txt");
  absl::StatusOr<std::unique_ptr<LineSource>> source = LineSource::Open(piece);
  ASSERT_TRUE(source.ok()) << source.status();
  std::string text;
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"ab", 0}, {"", 3}, {"cde\r", 4}, {"f", 9}};
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(*(*source)->Next(&text));
    EXPECT_EQ(text, want[i].first);
    EXPECT_EQ((*source)->line_offset(), want[i].second);
    EXPECT_EQ((*source)->line_index(), static_cast<int64_t>(i));
    if (i == 1) {
      absl::StatusOr<std::unique_ptr<LineSource>> reopened =
          LineSource::Open(piece, (*source)->next_offset(), (*source)->next_line());
      ASSERT_TRUE(reopened.ok());
      std::string next;
      ASSERT_TRUE(*(*reopened)->Next(&next));
      EXPECT_EQ(next, "cde\r");
      EXPECT_EQ((*reopened)->line_index(), 2);
    }
  }
  EXPECT_FALSE(*(*source)->Next(&text));
  EXPECT_EQ((*source)->next_offset(), 10);
  // A range from byte 4 owns the lines that start at 4 and 9; from byte 5,
  // only the one at 9.
  piece.begin = 4;
  source = LineSource::Open(piece);
  ASSERT_TRUE(source.ok());
  ASSERT_TRUE(*(*source)->Next(&text));
  EXPECT_EQ((*source)->line_offset(), 4);
  EXPECT_EQ(LineSource::FileLineNumber(piece, 9, 1), 4);
  piece.begin = 5;
  source = LineSource::Open(piece);
  ASSERT_TRUE(source.ok());
  ASSERT_TRUE(*(*source)->Next(&text));
  EXPECT_EQ(text, "f");
  EXPECT_FALSE(*(*source)->Next(&text));
}

TEST(PositionTest, Parse_RoundTripAndGarbage) {
  Position p{3, 1, 4096, 17, 5, 0xfedcba9876543210ull};
  absl::StatusOr<Position> q = Position::Parse(p.ToString());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, p);
  for (const char* bad : {"", "1:2:3:4:5", "1:2:3:4:5:6:7", "a:0:0:0:0:0", "0:0:-2:0:0:0",
                          "-1:0:0:0:0:0", "0:0:0:0:0:-1"}) {
    EXPECT_EQ(Position::Parse(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(RecordStreamTest, Open_PositionPastItsBlock_InvalidArgument) {
  TempDir dir;
  WriteFile(dir.Path("e.txt"), "a\nb\nc\n");
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("e.txt")}, 0, 1);
  ASSERT_TRUE(share.ok());
  EXPECT_EQ(RecordStream::Open(*share, Plain(), Position{0, 0, 0, 0, 9}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RecordStream::Open(*share, Plain(), Position{0, 3, 0, 0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RecordStreamTest, Open_PositionOfAnotherShareOrSeed_FailedPrecondition) {
  TempDir dir;
  WriteFile(dir.Path("e.txt"), MakeContent("e", 20));
  absl::StatusOr<InputShare> mine = InputShareOf({dir.Path("e.txt")}, 0, 2);
  absl::StatusOr<InputShare> other = InputShareOf({dir.Path("e.txt")}, 1, 2);
  ASSERT_TRUE(mine.ok() && other.ok());
  StreamOptions options = Plain();
  options.shuffle = true;
  options.seed = 5;
  absl::StatusOr<std::unique_ptr<RecordStream>> stream = RecordStream::Open(*mine, options);
  ASSERT_TRUE(stream.ok());
  Drain(stream->get(), 3);
  const Position at = (*stream)->position();
  EXPECT_NE(at.reader, 0u);
  EXPECT_TRUE(RecordStream::Open(*mine, options, at).ok());
  EXPECT_EQ(RecordStream::Open(*other, options, at).status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.seed = 6;
  EXPECT_EQ(RecordStream::Open(*mine, options, at).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

absl::Status FirstError(const std::vector<std::string>& files, int worker, int workers) {
  absl::StatusOr<InputShare> share = InputShareOf(files, worker, workers);
  if (!share.ok()) return share.status();
  absl::StatusOr<std::unique_ptr<RecordStream>> stream = RecordStream::Open(*share, Plain());
  if (!stream.ok()) return stream.status();
  Record record;
  while (true) {
    absl::StatusOr<bool> got = (*stream)->Next(&record);
    if (!got.ok()) return got.status();
    if (!*got) return absl::OkStatus();
  }
}

TEST(LineSourceTest, CorruptOrTruncatedGz_DataLossNamingTheFile) {
  TempDir dir;
  const std::string content = MakeContent("z", 5000);
  WriteGz(dir.Path("good.gz"), content);
  std::ifstream in(dir.Path("good.gz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  WriteFile(dir.Path("truncated.gz"), bytes.substr(0, bytes.size() / 2));
  std::string corrupt = bytes;
  for (size_t i = 20; i < corrupt.size() - 10; i += 7) corrupt[i] = static_cast<char>(~corrupt[i]);
  WriteFile(dir.Path("corrupt.gz"), corrupt);
  WriteFile(dir.Path("plain.gz"), "not gzip\n");
  for (const char* name : {"truncated.gz", "corrupt.gz", "plain.gz"}) {
    const absl::Status status = FirstError({dir.Path(name)}, 0, 1);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << name << ": " << status;
    EXPECT_TRUE(absl::StrContains(status.message(), dir.Path(name))) << status;
  }
  EXPECT_TRUE(FirstError({dir.Path("good.gz")}, 0, 1).ok());
}

TEST(LineSourceTest, FileRemovedAfterListing_ErrorNamingTheFile) {
  TempDir dir;
  WriteFile(dir.Path("gone.txt"), "a\n");
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("gone.txt")}, 0, 1);
  ASSERT_TRUE(share.ok());
  fs::remove(dir.Path("gone.txt"));
  absl::StatusOr<std::unique_ptr<RecordStream>> stream = RecordStream::Open(*share, Plain());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(stream.status().message(), dir.Path("gone.txt")));
}

std::string CriteoLine(int label, int seed) {
  std::vector<std::string> cols = {absl::StrCat(label)};
  for (int j = 0; j < kCriteoDense; ++j) cols.push_back(j % 5 == 0 ? "" : absl::StrCat(seed + j));
  for (int f = 0; f < kCriteoFields; ++f) cols.push_back(absl::StrCat(absl::Hex(seed * 31 + f)));
  return absl::StrJoin(cols, "\t");
}

TEST(CtrExampleStreamTest, NextBatch_OneWorkerNoShuffle_SameAsReadCriteo) {
  TempDir dir;
  SyntheticCriteoConfig config;
  config.rows = 300;
  config.vocab_per_field = 50;
  ASSERT_TRUE(WriteSyntheticCriteo(dir.Path("c.tsv"), config).ok());
  CtrFeatureConfig features;
  features.buckets_per_field = 1000;
  absl::StatusOr<CtrDataset> want = ReadCriteo(dir.Path("c.tsv"), features);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("c.tsv")}, 0, 1);
  ASSERT_TRUE(share.ok());
  absl::StatusOr<std::unique_ptr<CtrExampleStream>> stream =
      CtrExampleStream::Open(*share, Plain(), features);
  ASSERT_TRUE(stream.ok()) << stream.status();
  CtrDataset got;
  while (true) {
    absl::StatusOr<int64_t> n = (*stream)->NextBatch(64, &got);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
  }
  EXPECT_EQ(got.size, want->size);
  EXPECT_EQ(got.labels, want->labels);
  EXPECT_EQ(got.dense, want->dense);
  EXPECT_EQ(got.ids, want->ids);
}

TEST(CtrExampleStreamTest, NextBatch_BadLineInLaterRange_InvalidArgumentNamingFileAndLine) {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&content, CriteoLine(i % 2, i), "\n");
  absl::StrAppend(&content, "2\tbad\n");  // line 41, in the last worker's range
  for (int i = 0; i < 3; ++i) absl::StrAppend(&content, CriteoLine(1, i), "\n");
  WriteFile(dir.Path("c.tsv"), content);
  CtrFeatureConfig features;
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("c.tsv")}, 1, 2);
  ASSERT_TRUE(share.ok());
  absl::StatusOr<std::unique_ptr<CtrExampleStream>> stream =
      CtrExampleStream::Open(*share, Plain(), features);
  ASSERT_TRUE(stream.ok()) << stream.status();
  CtrDataset got;
  absl::Status status;
  while (status.ok()) {
    absl::StatusOr<int64_t> n = (*stream)->NextBatch(3, &got);
    status = n.status();
    if (status.ok() && *n == 0) break;
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat(dir.Path("c.tsv"), ":41: ")))
      << status;
  EXPECT_EQ(got.size, static_cast<int64_t>(got.labels.size()));
  EXPECT_EQ(got.ids.size(), got.labels.size() * kCriteoFields);
}

TEST(LibsvmExampleStreamTest, NextBatch_TwoWorkers_TogetherSameAsReadLibsvm) {
  TempDir dir;
  SyntheticLibsvmConfig config;
  config.rows = 500;
  config.features = 100;
  config.nnz = 5;
  ASSERT_TRUE(WriteSyntheticLibsvm(dir.Path("l.svm"), config).ok());
  // A comment line and a blank line in the middle: read, but no examples.
  {
    std::ifstream in(dir.Path("l.svm"));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t mid = text.find('\n', text.size() / 3) + 1;
    text.insert(mid, "# a comment\n\n");
    WriteFile(dir.Path("l.svm"), text);
  }
  LibsvmFeatureConfig features;
  features.buckets = 64;
  absl::StatusOr<LibsvmDataset> want = ReadLibsvm(dir.Path("l.svm"), features);
  ASSERT_TRUE(want.ok()) << want.status();
  LibsvmDataset got;
  for (int w = 0; w < 2; ++w) {
    absl::StatusOr<InputShare> share = InputShareOf({dir.Path("l.svm")}, w, 2);
    ASSERT_TRUE(share.ok());
    absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> stream =
        LibsvmExampleStream::Open(*share, Plain(), features);
    ASSERT_TRUE(stream.ok()) << stream.status();
    while (true) {
      absl::StatusOr<int64_t> n = (*stream)->NextBatch(50, &got);
      ASSERT_TRUE(n.ok()) << n.status();
      if (*n == 0) break;
      EXPECT_LE(*n, 50);
    }
  }
  EXPECT_EQ(got.size, want->size);
  EXPECT_EQ(got.offsets, want->offsets);
  EXPECT_EQ(got.ids, want->ids);
  EXPECT_EQ(got.values, want->values);
  EXPECT_EQ(got.labels, want->labels);
}

TEST(LibsvmExampleStreamTest, NextBatch_ResumeAtPosition_SameBatches) {
  TempDir dir;
  SyntheticLibsvmConfig config;
  config.rows = 120;
  config.features = 50;
  config.nnz = 3;
  ASSERT_TRUE(WriteSyntheticLibsvm(dir.Path("l.svm"), config).ok());
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("l.svm")}, 0, 1);
  ASSERT_TRUE(share.ok());
  StreamOptions options;
  options.shuffle = true;
  options.buffer_size = 25;
  options.seed = 3;
  options.num_epochs = 2;
  LibsvmFeatureConfig features;
  auto open = [&](const Position& at) {
    absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> s =
        LibsvmExampleStream::Open(*share, options, features, at);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  };
  std::unique_ptr<LibsvmExampleStream> original = open(Position());
  LibsvmDataset head;
  ASSERT_EQ(*original->NextBatch(110, &head), 110);  // into the second block of epoch 0
  const std::string saved = original->position().ToString();
  std::unique_ptr<LibsvmExampleStream> resumed = open(*Position::Parse(saved));
  LibsvmDataset a;
  LibsvmDataset b;
  ASSERT_EQ(*original->NextBatch(1000, &a), 130);  // the rest, across the epoch boundary
  ASSERT_EQ(*resumed->NextBatch(1000, &b), 130);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.labels, b.labels);
}

TEST(LibsvmExampleStreamTest, NextBatch_OnlyCommentsReadForever_ReturnsZero) {
  TempDir dir;
  WriteFile(dir.Path("c.svm"), "# nothing\n\n  # here\n");
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("c.svm")}, 0, 1);
  ASSERT_TRUE(share.ok());
  absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> stream =
      LibsvmExampleStream::Open(*share, Plain(/*num_epochs=*/0), LibsvmFeatureConfig());
  ASSERT_TRUE(stream.ok());
  LibsvmDataset got;
  absl::StatusOr<int64_t> n = (*stream)->NextBatch(10, &got);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0);
}

TEST(LibsvmExampleStreamTest, NextBatch_BadLineInGz_InvalidArgumentNamingFileAndLine) {
  TempDir dir;
  WriteGz(dir.Path("l.svm.gz"), "1 3:1\n0 4:1\n# c\n1 5:x\n");
  absl::StatusOr<InputShare> share = InputShareOf({dir.Path("l.svm.gz")}, 0, 1);
  ASSERT_TRUE(share.ok());
  absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> stream =
      LibsvmExampleStream::Open(*share, Plain(), LibsvmFeatureConfig());
  ASSERT_TRUE(stream.ok());
  LibsvmDataset got;
  absl::StatusOr<int64_t> n = (*stream)->NextBatch(10, &got);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(n.status().message(), absl::StrCat(dir.Path("l.svm.gz"), ":4: ")))
      << n.status();
  EXPECT_EQ(got.size, 0);
  EXPECT_EQ(got.offsets, std::vector<int64_t>{0});
}

}  // namespace
}  // namespace pst::data
