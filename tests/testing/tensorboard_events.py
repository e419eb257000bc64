#!/usr/bin/env python3
"""Reads TensorBoard event files (events.out.tfevents.*) without TensorBoard or protobuf.

An independent check of common/tensorboard_writer.cc for the tests: its own CRC-32C and its
own protobuf wire-format decoder, sharing no code with the writer. Pure Python 3, standard
library only.

A file is a sequence of TFRecords:
    uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes |
    `length` bytes of data | uint32 masked CRC-32C of the data
where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32). Each record's data
is a tensorboard.Event:
    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
              SummaryMetadata metadata = 9; }
    SummaryMetadata { PluginData plugin_data = 1; }   PluginData { string plugin_name = 1; }
    TensorProto { DataType dtype = 1; repeated bytes string_val = 8; }   (DT_STRING = 7)
A Value with metadata.plugin_data.plugin_name "text" and a DT_STRING tensor is a text
summary (TensorBoard's text plugin; its text is string_val[0], UTF-8). Other fields are
skipped; any other Value (histograms, other tensors, ...) is ignored.

Contract:
  * A CRC that does not match, a record whose data is not a well-formed Event, or a length
    field that fails its CRC raises EventFileError naming the file and the record's byte
    offset.
  * A file that ends inside a record (fewer bytes left than the record needs, its length
    CRC good where it could be read) is a file still being written: reading stops there and
    the file is reported as truncated at that offset, as TensorBoard tolerates.

Use:
    read_events(PATH)  PATH a file, or a directory whose events.out.tfevents.* files are one run
    read_logdir(ROOT)  every directory below ROOT holding event files, as {run: Events}

    python3 tensorboard_events.py PATH           per run, per tag: count, first and last step
    python3 tensorboard_events.py --dump PATH    one tab-separated line per fact, for tests:
        file    RUN  FILE  FILE_VERSION  RECORDS
        scalar  RUN  TAG   STEP  VALUE  WALL_TIME     (VALUE, WALL_TIME as Python repr)
        text    RUN  TAG   STEP  HEX                   (the text's UTF-8 bytes in lowercase hex)
        truncated  RUN  FILE  OFFSET  REASON
Exit status 0; 1 with "tensorboard_events.py: error: ..." on stderr; 2 for a usage error.
"""

import os
import struct
import sys

EVENTS_FILE_MARKER = "tfevents"


class EventFileError(Exception):
    """A corrupt or undecodable record; the message names the file and byte offset."""


# --- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) -------------------------------

def _make_crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _make_crc_table()


def crc32c(data):
    """CRC-32C of bytes `data`; crc32c(b"123456789") == 0xE3069283."""
    c = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# --- protobuf wire format ----------------------------------------------------------------

class _DecodeError(Exception):
    pass


def _varint(buf, pos):
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise _DecodeError("varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _DecodeError("varint longer than 10 bytes")


def _fields(buf):
    """Yields (field_number, wire_type, value): int for varints, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _DecodeError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise _DecodeError("fixed64 field %d runs past the end" % number)
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise _DecodeError("length-delimited field %d runs past the end" % number)
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            if pos + 4 > len(buf):
                raise _DecodeError("fixed32 field %d runs past the end" % number)
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise _DecodeError("unsupported wire type %d (field %d)" % (wire, number))
        yield number, wire, value


def _expect(number, wire, want):
    if wire != want:
        raise _DecodeError("field %d has wire type %d, expected %d" % (number, wire, want))


DT_STRING = 7


def _plugin_name(buf):
    """metadata.plugin_data.plugin_name of a SummaryMetadata, or None."""
    name = None
    for number, wire, value in _fields(buf):
        if number == 1:
            _expect(number, wire, 2)
            for n, w, v in _fields(value):
                if n == 1:
                    _expect(n, w, 2)
                    name = v.decode("utf-8")
    return name


def _string_tensor(buf):
    """string_val[0] of a DT_STRING TensorProto (bytes), or None."""
    dtype, values = 0, []
    for number, wire, value in _fields(buf):
        if number == 1:
            _expect(number, wire, 0)
            dtype = value
        elif number == 8:
            _expect(number, wire, 2)
            values.append(value)
    return values[0] if dtype == DT_STRING and len(values) == 1 else None


def _decode_value(buf):
    """(tag, simple_value or None, text or None)."""
    tag, simple, plugin, text = None, None, None, None
    for number, wire, value in _fields(buf):
        if number == 1:
            _expect(number, wire, 2)
            tag = value.decode("utf-8")
        elif number == 2:
            _expect(number, wire, 5)
            simple = struct.unpack("<f", value)[0]
        elif number == 8:
            _expect(number, wire, 2)
            text = _string_tensor(value)
        elif number == 9:
            _expect(number, wire, 2)
            plugin = _plugin_name(value)
    return tag, simple, text.decode("utf-8") if plugin == "text" and text is not None else None


def decode_event(buf):
    """A dict: wall_time (float), step (int), file_version (str or None), values, a list
    of (tag, simple_value) from its summary, and texts, a list of (tag, text)."""
    event = {"wall_time": 0.0, "step": 0, "file_version": None, "values": [], "texts": []}
    for number, wire, value in _fields(buf):
        if number == 1:
            _expect(number, wire, 1)
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            _expect(number, wire, 0)
            event["step"] = value - (1 << 64) if value >= (1 << 63) else value
        elif number == 3:
            _expect(number, wire, 2)
            event["file_version"] = value.decode("utf-8")
        elif number == 5:
            _expect(number, wire, 2)
            for n, w, v in _fields(value):
                if n == 1:
                    _expect(n, w, 2)
                    tag, simple, text = _decode_value(v)
                    if tag is not None and simple is not None:
                        event["values"].append((tag, simple))
                    if tag is not None and text is not None:
                        event["texts"].append((tag, text))
    return event


# --- files and runs ----------------------------------------------------------------------

def read_records(path):
    """Yields (offset, data) for every whole record of the file at `path`, then, when the
    file ends inside a record, one (offset, None, reason). Raises EventFileError on a bad CRC."""
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    while pos < len(blob):
        left = len(blob) - pos
        if left < 12:
            yield pos, None, "%d bytes left, a record header needs 12" % left
            return
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if masked_crc32c(header) != length_crc:
            raise EventFileError("%s: record at byte offset %d: length CRC mismatch "
                                 "(stored 0x%08x, computed 0x%08x)"
                                 % (path, pos, length_crc, masked_crc32c(header)))
        if left < 12 + length + 4:
            yield pos, None, "record of %d data bytes, only %d bytes left" % (length, left - 12)
            return
        data = blob[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if masked_crc32c(data) != data_crc:
            raise EventFileError("%s: record at byte offset %d: data CRC mismatch "
                                 "(stored 0x%08x, computed 0x%08x)"
                                 % (path, pos, data_crc, masked_crc32c(data)))
        yield pos, data, None
        pos += 16 + length


class Events:
    """What one run (a file, or the event files of one directory) holds.

    scalars:       {tag: [(step, value, wall_time), ...]} in file order, files by name
    texts:         {tag: [(step, text, wall_time), ...]} likewise (text summaries)
    file_versions: {file: file_version or None}
    records:       {file: whole records read}
    truncated:     [(file, offset, reason)] for files that end inside a record
    """

    def __init__(self):
        self.scalars = {}
        self.texts = {}
        self.file_versions = {}
        self.records = {}
        self.truncated = []

    @property
    def file_version(self):
        """The file_version when every file has the same one, else None."""
        versions = set(self.file_versions.values())
        return versions.pop() if len(versions) == 1 else None

    def add_file(self, path):
        self.file_versions.setdefault(path, None)
        self.records[path] = 0
        for item in read_records(path):
            offset, data = item[0], item[1]
            if data is None:
                self.truncated.append((path, offset, item[2]))
                return
            try:
                event = decode_event(data)
            except (_DecodeError, UnicodeDecodeError) as e:
                raise EventFileError("%s: record at byte offset %d: not a tensorboard.Event: %s"
                                     % (path, offset, e))
            self.records[path] += 1
            if event["file_version"] is not None:
                if self.records[path] != 1:
                    raise EventFileError("%s: record at byte offset %d: file_version past the "
                                         "first record" % (path, offset))
                self.file_versions[path] = event["file_version"]
            for tag, value in event["values"]:
                self.scalars.setdefault(tag, []).append((event["step"], value, event["wall_time"]))
            for tag, text in event["texts"]:
                self.texts.setdefault(tag, []).append((event["step"], text, event["wall_time"]))


def _is_events_file(name):
    return EVENTS_FILE_MARKER in name and not name.startswith(".")


def read_events(path):
    """Events of the file `path`, or of the event files directly in the directory `path`."""
    events = Events()
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if _is_events_file(n) and os.path.isfile(os.path.join(path, n)))
        for name in names:
            events.add_file(os.path.join(path, name))
    else:
        events.add_file(path)
    return events


def read_logdir(root):
    """{run: Events} for `root` and every directory below it (links not followed) that holds
    event files; run is the directory relative to root ("." for root itself)."""
    runs = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if any(_is_events_file(n) for n in filenames):
            runs[os.path.relpath(dirpath, root)] = read_events(dirpath)
    return runs


def _runs_of(path):
    if os.path.isdir(path):
        return read_logdir(path)
    return {os.path.basename(path): read_events(path)}


def _dump(runs, out):
    for run, events in sorted(runs.items()):
        for path, version in sorted(events.file_versions.items()):
            out.write("file\t%s\t%s\t%s\t%d\n" % (run, path, version, events.records[path]))
        for tag in sorted(events.scalars):
            for step, value, wall in events.scalars[tag]:
                out.write("scalar\t%s\t%s\t%d\t%r\t%r\n" % (run, tag, step, value, wall))
        for tag in sorted(events.texts):
            for step, text, _ in events.texts[tag]:
                out.write("text\t%s\t%s\t%d\t%s\n" % (run, tag, step, text.encode("utf-8").hex()))
        for path, offset, reason in events.truncated:
            out.write("truncated\t%s\t%s\t%d\t%s\n" % (run, path, offset, reason))


def _summary(runs, out):
    if not runs:
        out.write("no event files\n")
    for run, events in sorted(runs.items()):
        out.write("%s: %d file(s), file_version %s\n"
                  % (run, len(events.file_versions), events.file_version))
        for tag in sorted(events.scalars):
            points = events.scalars[tag]
            out.write("  %-32s %6d points, steps %d..%d\n"
                      % (tag, len(points), points[0][0], points[-1][0]))
        for tag in sorted(events.texts):
            points = events.texts[tag]
            out.write("  %-32s %6d texts,  steps %d..%d\n"
                      % (tag, len(points), points[0][0], points[-1][0]))
        for path, offset, reason in events.truncated:
            out.write("  truncated: %s at byte offset %d (%s)\n" % (path, offset, reason))


def main(argv):
    args = argv[1:]
    dump = "--dump" in args
    args = [a for a in args if a != "--dump"]
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: tensorboard_events.py [--dump] FILE_OR_DIR\n")
        return 2
    try:
        if not os.path.exists(args[0]):
            raise EventFileError("%s: no such file or directory" % args[0])
        runs = _runs_of(args[0])
    except (EventFileError, OSError) as e:
        sys.stderr.write("tensorboard_events.py: error: %s\n" % e)
        return 1
    (_dump if dump else _summary)(runs, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
