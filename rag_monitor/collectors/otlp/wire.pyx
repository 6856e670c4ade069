# cython: language_level=3, boundscheck=False, wraparound=False
"""OTLP protobuf bytes read straight into the agent's ``Span`` objects: the compiled decoder.

The pure-Python path (upb, then ``ProtoDecoder``) builds a wrapper object for every KeyValue and
AnyValue before the agent reads it: that was a quarter of the agent's CPU at production rate.
This reads the wire format once, into the same spans, counts and rejection reasons
(tests/collectors/test_wire.py compares both on valid, random and malformed bodies):

- every length is checked against its enclosing message before a byte is read, and nesting
  stops where upb's does (``MAX_DEPTH``): a malformed body raises ``ValueError``, never over-reads;
- strings are strict UTF-8, as upb's are; unknown fields and wrong wire types are skipped;
- protobuf's merge rules hold: the last scalar wins, a singular message sent twice merges, a
  oneof keeps its last member (an array or kvlist sent twice is one array, one kvlist), and what
  a replaced member counted (truncations, refused vectors) is taken back.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t

from rag_monitor.collectors.otlp.spans import Scope, Span, SpanEvent, SpanLink

include "wire_format.pxi"

cdef bytes _ZERO_SPAN_ID = bytes(8)

# AnyValue's oneof members (common.proto), by field number.
cdef enum:
    NO_VALUE = 0
    STRING_VALUE = 1
    BOOL_VALUE = 2
    INT_VALUE = 3
    DOUBLE_VALUE = 4
    ARRAY_VALUE = 5
    KVLIST_VALUE = 6
    BYTES_VALUE = 7


cdef inline bint valid_id(bytes value, Py_ssize_t size):
    """``checks.valid_id``: ``size`` bytes, not all zero."""
    cdef const unsigned char* p = value
    cdef Py_ssize_t i
    if len(value) != size:
        return False
    for i in range(size):
        if p[i]:
            return True
    return False


cdef class _Decoder:
    cdef object checks
    cdef object vector_ok
    cdef Py_ssize_t max_chars
    cdef long truncated
    cdef long rejected_embeddings
    cdef int which
    """The oneof member the last ``any_value`` call ended on."""

    def __cinit__(self, checks):
        self.checks = checks
        self.vector_ok = checks.vector_ok
        self.max_chars = checks.max_chars

    cdef object text(self, object value):
        """A string attribute value, cut to ``max_chars`` code points (counted)."""
        if len(value) > self.max_chars:
            self.truncated += 1
            return value[:self.max_chars]
        return value

    cdef object any_value(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth,
                          object value, int which, long truncated0, long rejected0):
        """An AnyValue merged onto (``value``, ``which``), as protobuf merges a message sent twice.
        A string comes back whole (the caller cuts the final one); ``self.which`` says what it is.
        ``truncated0``, ``rejected0``: the counts when ``value`` began; a member that replaces
        another takes back what the replaced one counted (``ProtoDecoder`` never saw it)."""
        cdef uint64_t key
        cdef Py_ssize_t n
        cdef int field, wt
        cdef double number
        cdef list items
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            field = <int>(key >> 3)
            wt = <int>(key & 7)
            if wt == 2 and (field == STRING_VALUE or ARRAY_VALUE <= field <= BYTES_VALUE):
                n = length(b, &pos, end)
                if field != which:  # a new member, not an array or kvlist merged (strings count at the end)
                    self.truncated, self.rejected_embeddings = truncated0, rejected0
                if field == STRING_VALUE:
                    value = utf8(b, pos, n)
                elif field == ARRAY_VALUE:
                    items = self.field_one(b, pos, pos + n, depth + 1, None)
                    if which == ARRAY_VALUE:
                        (<list>value).extend(items)
                    else:
                        value = items
                elif field == KVLIST_VALUE:
                    if which != KVLIST_VALUE:
                        value = {}
                    self.field_one(b, pos, pos + n, depth + 1, value)
                else:
                    value = raw(b, pos, n)
                which = field
                pos += n
            elif wt == 0 and (field == BOOL_VALUE or field == INT_VALUE):
                self.truncated, self.rejected_embeddings = truncated0, rejected0
                if field == BOOL_VALUE:
                    value = varint(b, &pos, end) != 0
                else:
                    value = <int64_t>varint(b, &pos, end)
                which = field
            elif wt == 1 and field == DOUBLE_VALUE:
                self.truncated, self.rejected_embeddings = truncated0, rejected0
                read8(b, &pos, end, &number)
                value = number
                which = field
            else:
                pos = skip(b, pos, end, key, depth)
        self.which = which
        return value

    cdef object field_one(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth, dict pairs):
        """The repeated field 1 of an ArrayValue (``pairs`` None: its AnyValues, as a list, strings
        cut, no vector check, as ``ProtoDecoder._value``), or of a KeyValueList or Resource (its
        KeyValues, into ``pairs``)."""
        cdef list items = []
        cdef uint64_t key
        cdef Py_ssize_t n
        cdef object value
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            if key == 0x0A:
                n = length(b, &pos, end)
                if pairs is not None:
                    self.key_value(b, pos, pos + n, pairs, depth + 1)
                else:
                    value = self.any_value(b, pos, pos + n, depth + 1, None, NO_VALUE, self.truncated, self.rejected_embeddings)
                    items.append(self.text(value) if self.which == STRING_VALUE else value)
                pos += n
            else:
                pos = skip(b, pos, end, key, depth)
        return items if pairs is None else pairs

    cdef int key_value(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, dict out, int depth) except -1:
        """One KeyValue into ``out``; an embedding vector that fails ``checks.vector_ok`` is dropped."""
        cdef uint64_t key
        cdef Py_ssize_t n
        cdef object name = ""
        cdef object value = None
        cdef int which = NO_VALUE
        cdef long truncated0 = self.truncated, rejected0 = self.rejected_embeddings
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            if key == 0x0A:
                n = length(b, &pos, end)
                name = utf8(b, pos, n)
                pos += n
            elif key == 0x12:
                n = length(b, &pos, end)
                value = self.any_value(b, pos, pos + n, depth + 1, value, which, truncated0, rejected0)
                which = self.which
                pos += n
            else:
                pos = skip(b, pos, end, key, depth)
        if which == STRING_VALUE:
            value = self.text(value)
        elif which == ARRAY_VALUE and value and type((<list>value)[0]) is float and not self.vector_ok(name, value):
            out.pop(name, None)  # as ProtoDecoder: assigned, then deleted
            self.rejected_embeddings += 1
            return 0
        out[name] = value
        return 0

    cdef object event(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth):
        cdef uint64_t key, time_ns = 0
        cdef Py_ssize_t n
        cdef object name = ""
        cdef dict attrs = {}
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            if key == 0x09:
                read8(b, &pos, end, &time_ns)
            elif key == 0x12:
                n = length(b, &pos, end)
                name = utf8(b, pos, n)
                pos += n
            elif key == 0x1A:
                n = length(b, &pos, end)
                self.key_value(b, pos, pos + n, attrs, depth + 1)
                pos += n
            else:
                pos = skip(b, pos, end, key, depth)
        return SpanEvent(name, time_ns, attrs)

    cdef object link(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth):
        """A SpanLink, or None for one without valid ids (what it counted is taken back)."""
        cdef uint64_t key
        cdef Py_ssize_t n
        cdef bytes trace_id = b"", span_id = b""
        cdef dict attrs = {}
        cdef long truncated = self.truncated, rejected = self.rejected_embeddings
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            if key & 7 == 2 and 1 <= key >> 3 <= 4:
                n = length(b, &pos, end)
                if key == 0x0A:
                    trace_id = raw(b, pos, n)
                elif key == 0x12:
                    span_id = raw(b, pos, n)
                elif key == 0x1A:
                    utf8(b, pos, n)  # trace_state: checked as upb checks every string
                else:
                    self.key_value(b, pos, pos + n, attrs, depth + 1)
                pos += n
            else:
                pos = skip(b, pos, end, key, depth)
        if valid_id(trace_id, 16) and valid_id(span_id, 8):
            return SpanLink(trace_id.hex(), span_id.hex(), attrs)
        self.truncated, self.rejected_embeddings = truncated, rejected
        return None

    cdef object span(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth, dict resource):
        """A Span, or None for one rejected for its ids (the reason recorded, what it counted taken back)."""
        cdef uint64_t key, start_ns = 0, end_ns = 0
        cdef Py_ssize_t n, m, p, e
        cdef int field, wt
        cdef bytes trace_id = b"", span_id = b"", parent = b""
        cdef object name = "", message = "", item
        cdef int32_t kind = 0, code = 0
        cdef dict attrs = {}
        cdef list events = [], links = []
        cdef long truncated = self.truncated, rejected = self.rejected_embeddings
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            field = <int>(key >> 3)
            wt = <int>(key & 7)
            if wt == 2 and field <= 15 and field not in (6, 7, 8, 10, 12, 14):
                n = length(b, &pos, end)
                if field == 9:
                    self.key_value(b, pos, pos + n, attrs, depth + 1)
                elif field == 1:
                    trace_id = raw(b, pos, n)
                elif field == 2:
                    span_id = raw(b, pos, n)
                elif field == 4:
                    parent = raw(b, pos, n)
                elif field == 5:
                    name = utf8(b, pos, n)
                elif field == 3:
                    utf8(b, pos, n)  # trace_state
                elif field == 11:
                    events.append(self.event(b, pos, pos + n, depth + 1))
                elif field == 13:
                    item = self.link(b, pos, pos + n, depth + 1)
                    if item is not None:
                        links.append(item)
                else:  # 15, status: message 2, code 3
                    if depth + 1 > _MAX_DEPTH:
                        raise ValueError("messages nested too deep")
                    p, e = pos, pos + n
                    while p < e:
                        key = tag(b, &p, e)
                        if key == 0x12:
                            m = length(b, &p, e)
                            message = utf8(b, p, m)
                            p += m
                        elif key == 0x18:
                            code = <int32_t>varint(b, &p, e)
                        else:
                            p = skip(b, p, e, key, depth + 1)
                pos += n
            elif wt == 1 and (field == 7 or field == 8):
                if field == 7:
                    read8(b, &pos, end, &start_ns)
                else:
                    read8(b, &pos, end, &end_ns)
            elif wt == 0 and field == 6:
                kind = <int32_t>varint(b, &pos, end)
            else:
                pos = skip(b, pos, end, key, depth)
        # ProtoDecoder's checks, in its order, with its messages.
        if not valid_id(trace_id, 16):
            reason = f"span {name!r}: trace id must be 16 non-zero bytes, got {len(trace_id)}"
        elif not valid_id(span_id, 8):
            reason = f"span {name!r}: span id must be 8 non-zero bytes, got {len(span_id)}"
        elif parent and len(parent) != 8:
            reason = f"span {name!r}: parent span id must be 8 bytes, got {len(parent)}"
        else:
            span = Span(trace_id.hex(), span_id.hex(), parent.hex() if parent and parent != _ZERO_SPAN_ID else None,
                        name, kind, start_ns, end_ns, code, message, attrs, resource)
            if events:
                span.events = events
            if links:
                span.links = links
            return span
        self.checks._reject(reason)
        self.truncated, self.rejected_embeddings = truncated, rejected
        return None

    cdef int scope_spans(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth, dict resource,
                         list out) except -1:
        cdef uint64_t key
        cdef Py_ssize_t n, m, p, e, first = len(out)
        cdef object name = "", version = "", span
        cdef dict attrs = {}
        cdef bint has_scope = False
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            if key == 0x12:
                n = length(b, &pos, end)
                span = self.span(b, pos, pos + n, depth + 1, resource)
                if span is not None:
                    out.append(span)
                pos += n
            elif key == 0x0A:  # the InstrumentationScope: name 1, version 2, attributes 3
                n = length(b, &pos, end)
                has_scope = True
                if depth + 1 > _MAX_DEPTH:
                    raise ValueError("messages nested too deep")
                p, e = pos, pos + n
                while p < e:
                    key = tag(b, &p, e)
                    if key == 0x0A or key == 0x12 or key == 0x1A:
                        m = length(b, &p, e)
                        if key == 0x0A:
                            name = utf8(b, p, m)
                        elif key == 0x12:
                            version = utf8(b, p, m)
                        else:
                            self.key_value(b, p, p + m, attrs, depth + 2)
                        p += m
                    else:
                        p = skip(b, p, e, key, depth + 1)
                pos += n
            elif key == 0x1A:
                n = length(b, &pos, end)
                utf8(b, pos, n)  # schema_url
                pos += n
            else:
                pos = skip(b, pos, end, key, depth)
        if has_scope:
            scope = Scope(name, version, attrs)
            for span in out[first:]:
                span.scope = scope
        return 0

    cdef int resource_spans(self, const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int depth, list out) except -1:
        cdef uint64_t key
        cdef Py_ssize_t n
        cdef dict resource = {}  # shared by its spans: a resource sent after them still reaches them
        if depth > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while pos < end:
            key = tag(b, &pos, end)
            if key == 0x12:
                n = length(b, &pos, end)
                self.scope_spans(b, pos, pos + n, depth + 1, resource, out)
                pos += n
            elif key == 0x0A:  # the Resource: its attributes are field 1, as a KeyValueList's
                n = length(b, &pos, end)
                self.field_one(b, pos, pos + n, depth + 1, resource)
                pos += n
            elif key == 0x1A:
                n = length(b, &pos, end)
                utf8(b, pos, n)  # schema_url
                pos += n
            else:
                pos = skip(b, pos, end, key, depth)
        return 0

    cdef object request(self, bytes data):
        cdef const unsigned char* b = data
        cdef Py_ssize_t pos = 0, end = len(data), n
        cdef uint64_t key
        result = self.checks.result
        cdef list spans = result.spans
        while pos < end:
            key = tag(b, &pos, end)
            if key == 0x0A:
                n = length(b, &pos, end)
                self.resource_spans(b, pos, pos + n, 2, spans)
                pos += n
            else:
                pos = skip(b, pos, end, key, 1)
        result.truncated_attributes += self.truncated
        result.rejected_embeddings += self.rejected_embeddings
        return result


def decode(bytes data, checks):
    """``ExportTraceServiceRequest`` bytes -> ``checks.result`` (a ``DecodeResult``), as
    ``ProtoDecoder(limits).decode(parsed request)`` gives. ``checks`` is a fresh ``SpanChecks``.
    Raises ``ValueError`` (``UnicodeDecodeError`` among them) for bytes upb would not parse."""
    return _Decoder(checks).request(data)
