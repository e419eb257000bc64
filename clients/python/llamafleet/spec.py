"""Job specs from what a Python caller has: a JobSpec message, a dict, or a YAML/JSON file.

The rules are the CLI's (jobspec/yaml_merge.cc), so a file means the same thing to both:
field names as in job.proto (or their camelCase JSON names), unknown fields rejected with
a "did you mean" hint, enum values by name in any case ("full_shard") or by number,
numbers and booleans given as YAML scalars or Python values, null = the field's default,
YAML anchors and aliases refused. A file holds one spec, several YAML documents ("---")
or a list of specs. Defaults are not applied and rules not checked here: the coordinator
does both (dry_run=True shows the effective spec).

Every problem is reported at once, as InvalidArgument with one FieldViolation per field;
paths carry the prefix the coordinator uses ("spec.", "jobs[2].spec."), so a client-side
and a server-side violation of the same field read alike.
"""

import math
import os
from typing import Any, List, Mapping, Sequence, Tuple, Union

import yaml
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message

from llamafleet.errors import FieldViolation, InvalidArgument
from llamafleet.v1 import job_pb2

SpecLike = Union[job_pb2.JobSpec, Mapping[str, Any], str, os.PathLike]

_FD = _descriptor.FieldDescriptor
_INT_RANGES = {
    _FD.CPPTYPE_INT32: (-(1 << 31), (1 << 31) - 1, "an integer (32-bit)"),
    _FD.CPPTYPE_INT64: (-(1 << 63), (1 << 63) - 1, "an integer"),
    _FD.CPPTYPE_UINT32: (0, (1 << 32) - 1, "a non-negative integer (32-bit)"),
    _FD.CPPTYPE_UINT64: (0, (1 << 64) - 1, "a non-negative integer"),
}


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps every plain scalar a string except null (as yaml-cpp reads
    them: the field's type decides, so `lr: 1e-4` is a number and `team: yes` a string),
    and refuses keys given twice."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise yaml.MarkedYAMLError(None, None, "'%s' given more than once" % key, key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag == "tag:yaml.org,2002:null"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    return prev[len(b)]


def _unknown_field(descriptor, key: str) -> str:
    best, best_distance = "", 3
    for field in descriptor.fields:
        distance = _edit_distance(key, field.name)
        if distance < best_distance:
            best, best_distance = field.name, distance
    return "unknown field (did you mean %s?)" % best if best else "unknown field"


def _describe(value) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "null"
    return "'%s'" % (value,)


class _Merger:
    """Fills a message from plain values, collecting (path, what) problems."""

    def __init__(self):
        self.problems: List[Tuple[str, str]] = []

    def problem(self, path: str, what: str):
        self.problems.append((path, what))

    def message(self, value, path: str, msg: _message.Message):
        if value is None:
            return
        if isinstance(value, _message.Message):
            if value.DESCRIPTOR.full_name != msg.DESCRIPTOR.full_name:
                return self.problem(path, "expected %s, got %s" % (msg.DESCRIPTOR.name, value.DESCRIPTOR.name))
            msg.MergeFrom(value)
            return
        if not isinstance(value, Mapping):
            return self.problem(path, "expected a mapping, got " + _describe(value))
        descriptor = msg.DESCRIPTOR
        for key, item in value.items():
            field_path = "%s.%s" % (path, key) if path else str(key)
            if not isinstance(key, str):
                self.problem(path, "keys must be plain names")
                continue
            field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
            if field is None:
                self.problem(field_path, _unknown_field(descriptor, key))
                continue
            if item is None:
                msg.ClearField(field.name)
            elif field.message_type is not None and field.message_type.GetOptions().map_entry:
                self.map(item, field_path, field, msg)
            elif field.label == _FD.LABEL_REPEATED:
                self.repeated(item, field_path, field, msg)
            elif field.message_type is not None:
                self.message(item, field_path, getattr(msg, field.name))
            elif not self.switch_with_mode(item, field_path, field, msg):
                ok, v = self.scalar(item, field_path, field)
                if ok:
                    setattr(msg, field.name, v)

    def switch_with_mode(self, value, path, field, msg) -> bool:
        """A bool switch with an enum companion `<switch>_mode` (fsdp.activation_checkpointing)
        also takes the companion's value names, with or without their prefix ("selective" for
        AC_SELECTIVE), as the coordinator's reader does: the companion is set and the switch
        becomes false for a name ending in NONE, true otherwise; true/false clear the
        companion. False when `field` has no companion."""
        mode = msg.DESCRIPTOR.fields_by_name.get(field.name + "_mode")
        if field.cpp_type != _FD.CPPTYPE_BOOL or mode is None or mode.cpp_type != _FD.CPPTYPE_ENUM:
            return False
        text = str(value).lower() if isinstance(value, (str, bool)) else None
        if text in ("true", "false"):
            setattr(msg, field.name, text == "true")
            msg.ClearField(mode.name)
            return True
        allowed = ["true", "false"]
        for v in mode.enum_type.values:
            if v.number == 0:
                continue
            name = v.name.lower()
            short = name.rsplit("_", 1)[-1]
            allowed.append(short)
            if text in (name, short):
                setattr(msg, mode.name, v.number)
                setattr(msg, field.name, not name.endswith("none"))
                return True
        self.problem(path, "expected %s, got '%s'" % (", ".join(allowed), value))
        return True

    def map(self, value, path, field, msg):
        if not isinstance(value, Mapping):
            return self.problem(path, "expected a mapping, got " + _describe(value))
        target = getattr(msg, field.name)
        target.clear()
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        for k, v in value.items():
            item_path = "%s.%s" % (path, k)
            ok_k, key = self.scalar(k, item_path, key_field)
            if value_field.message_type is not None:
                fields = value_field.message_type.fields
                if isinstance(v, (list, tuple)) and len(fields) == 1 and fields[0].label == _FD.LABEL_REPEATED:
                    v = {fields[0].name: v}  # a value that is only a list, written as that list
                if ok_k:
                    self.message(v, item_path, target[key])
                continue
            ok_v, val = self.scalar("" if v is None else v, item_path, value_field)
            if ok_k and ok_v:
                target[key] = val

    def repeated(self, value, path, field, msg):
        target = getattr(msg, field.name)
        del target[:]
        if not isinstance(value, (list, tuple)):
            return self.problem(path, "expected a list, got " + _describe(value))
        for i, item in enumerate(value):
            item_path = "%s[%d]" % (path, i)
            if field.message_type is not None:
                self.message(item, item_path, target.add())
            else:
                ok, v = self.scalar(item, item_path, field)
                if ok:
                    target.append(v)

    def scalar(self, value, path, field) -> Tuple[bool, Any]:
        """(True, the field's value) or (False, None) with the problem recorded."""
        if isinstance(value, (Mapping, list, tuple)) or value is None:
            self.problem(path, "expected a scalar value, got " + _describe(value))
            return False, None

        def bad(what):
            self.problem(path, "expected %s, got '%s'" % (what, value))
            return False, None

        t = field.cpp_type
        if t in _INT_RANGES:
            low, high, what = _INT_RANGES[t]
            if isinstance(value, bool) or isinstance(value, float):
                return bad(what)
            try:
                n = int(value.strip(), 10) if isinstance(value, str) else int(value)
            except (TypeError, ValueError):
                return bad(what)
            return (True, n) if low <= n <= high else bad(what)
        if t in (_FD.CPPTYPE_DOUBLE, _FD.CPPTYPE_FLOAT):
            if isinstance(value, bool):
                return bad("a finite number")
            try:
                x = float(value)
            except (TypeError, ValueError):
                return bad("a finite number")
            return (True, x) if math.isfinite(x) else bad("a finite number")
        if t == _FD.CPPTYPE_BOOL:
            if isinstance(value, bool):
                return True, value
            text = str(value).lower()
            return (True, text == "true") if text in ("true", "false") else bad("true or false")
        if t == _FD.CPPTYPE_STRING:
            if isinstance(value, bool):
                return True, "true" if value else "false"
            return (True, value) if isinstance(value, str) else (True, str(value))
        if t == _FD.CPPTYPE_ENUM:
            choices = [v for v in field.enum_type.values if v.number != 0]  # *_UNSPECIFIED is no choice
            for v in choices:
                if (isinstance(value, int) and not isinstance(value, bool) and v.number == value) or (
                        isinstance(value, str) and v.name.lower() == value.lower()):
                    return True, v.number
            self.problem(path, "unknown value '%s' (expected one of %s)" % (value, ", ".join(v.name for v in choices)))
            return False, None
        self.problem(path, "unsupported field type")
        return False, None


def _raise(problems: List[Tuple[str, str]]):
    violations = [FieldViolation(field, what) for field, what in problems]
    raise InvalidArgument("invalid job spec: " + "; ".join(str(v) for v in violations), violations)


def spec_from_value(value: Union[job_pb2.JobSpec, Mapping[str, Any]], prefix: str = "spec") -> job_pb2.JobSpec:
    """A JobSpec from a JobSpec (copied) or a dict. Raises InvalidArgument naming every bad
    field as `prefix`.path."""
    spec = job_pb2.JobSpec()
    merger = _Merger()
    merger.message(value, "", spec)
    if merger.problems:
        _raise([("%s.%s" % (prefix, p) if p else prefix, what) for p, what in merger.problems])
    return spec


def load_documents(text: str, source: str = "job file") -> List[Any]:
    """The specs of a job file's text as plain values: each YAML document is a spec or a
    list of specs; empty documents are skipped. Raises InvalidArgument naming the line of a
    syntax error, an anchor or an alias."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                mark = event.start_mark
                raise InvalidArgument(
                    "%s: line %d, column %d: YAML %s are not accepted in job files; write the values out" % (
                        source, mark.line + 1, mark.column + 1,
                        "aliases (*name)" if isinstance(event, yaml.AliasEvent) else "anchors (&name)"))
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = ": line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""
        raise InvalidArgument("cannot parse %s%s: %s" % (source, where, e.problem or e)) from None
    except yaml.YAMLError as e:
        raise InvalidArgument("cannot parse %s: %s" % (source, e)) from None
    specs = []
    for doc in documents:
        if doc is None:
            continue
        specs.extend(doc if isinstance(doc, list) else [doc])
    if not specs:
        raise InvalidArgument("%s contains no job spec" % source)
    return specs


def read_job_file(path: Union[str, os.PathLike]) -> List[Any]:
    """load_documents of the file at `path`; NotFound-like problems raise InvalidArgument
    naming the path."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InvalidArgument("cannot read %s: %s" % (os.fspath(path), e.strerror)) from None
    return load_documents(text, os.fspath(path))


def specs_of(value: Union[SpecLike, Sequence[SpecLike]], single: bool) -> List[job_pb2.JobSpec]:
    """Every JobSpec `value` stands for: a JobSpec, a dict, a file path, or (unless
    `single`) a list of those. With `single`, exactly one spec, prefixed "spec."; else each
    is prefixed "jobs[i].spec." as SubmitJobs names them."""
    if isinstance(value, (str, os.PathLike)):
        items = read_job_file(value)
    elif isinstance(value, (job_pb2.JobSpec, Mapping)):
        items = [value]
    elif not single and isinstance(value, (list, tuple)):
        items = []
        for v in value:
            items.extend(read_job_file(v) if isinstance(v, (str, os.PathLike)) else [v])
    else:
        raise InvalidArgument("spec must be a JobSpec, a dict or a job file path, got %s" % type(value).__name__)
    if single:
        if len(items) != 1:
            raise InvalidArgument("%s holds %d job specs; submit_many submits several" % (value, len(items)))
        return [spec_from_value(items[0])]
    if not items:
        raise InvalidArgument("jobs must contain at least one job")
    problems = []
    specs = []
    for i, item in enumerate(items):
        try:
            specs.append(spec_from_value(item, "jobs[%d].spec" % i))
        except InvalidArgument as e:
            problems.extend((v.field, v.description) for v in e.field_violations)
    if problems:
        _raise(problems)
    return specs
