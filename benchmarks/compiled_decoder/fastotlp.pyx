# cython: language_level=3, boundscheck=False, wraparound=False
# A measured option for issue 23, not the agent's decoder: OTLP ExportTraceServiceRequest wire
# bytes -> (span tuple, resource attributes), reading every length against its enclosing
# message before touching the bytes. Events, links, scopes and the agent's checks (ids,
# truncation, vector dimensions) are left out; benchmarks/compiled_decoder.py measures it.
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcpy
from libc.stdint cimport uint64_t, int64_t

cdef inline uint64_t varint(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end) except? 0xFFFFFFFFFFFFFFFF:
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char c
    while True:
        if pos[0] >= end:
            raise ValueError("truncated varint")
        c = b[pos[0]]
        pos[0] += 1
        result |= (<uint64_t>(c & 0x7F)) << shift
        if c < 0x80:
            return result
        shift += 7
        if shift >= 64:
            raise ValueError("varint too long")

cdef inline Py_ssize_t length(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end) except -1:
    cdef uint64_t n = varint(b, pos, end)
    if n > <uint64_t>(end - pos[0]):
        raise ValueError("length past the end of its message")
    return n

cdef inline Py_ssize_t skip(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, int wt) except -1:
    cdef Py_ssize_t n
    if wt == 0:
        varint(b, &pos, end)
    elif wt == 1:
        pos += 8
    elif wt == 2:
        n = length(b, &pos, end)
        pos += n
    elif wt == 5:
        pos += 4
    else:
        raise ValueError("bad wire type")
    if pos > end:
        raise ValueError("truncated field")
    return pos

cdef inline double read_double(const unsigned char* b, Py_ssize_t pos):
    cdef double d
    memcpy(&d, b + pos, 8)
    return d

cdef inline uint64_t read_fixed64(const unsigned char* b, Py_ssize_t pos):
    cdef uint64_t v
    memcpy(&v, b + pos, 8)
    return v

cdef object any_value(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end):
    cdef uint64_t key
    cdef Py_ssize_t n
    cdef int field, wt
    cdef object value = None
    while pos < end:
        key = varint(b, &pos, end)
        field = <int>(key >> 3); wt = <int>(key & 7)
        if field == 1 and wt == 2:
            n = length(b, &pos, end)
            value = PyUnicode_DecodeUTF8(<const char*>(b + pos), n, NULL)
            pos += n
        elif field == 2 and wt == 0:
            value = varint(b, &pos, end) != 0
        elif field == 3 and wt == 0:
            value = <int64_t>varint(b, &pos, end)
        elif field == 4 and wt == 1:
            if end - pos < 8:
                raise ValueError("truncated double")
            value = read_double(b, pos); pos += 8
        elif field == 5 and wt == 2:
            n = length(b, &pos, end)
            value = field_one(b, pos, pos + n, None); pos += n
        elif field == 6 and wt == 2:
            n = length(b, &pos, end)
            value = field_one(b, pos, pos + n, {}); pos += n
        elif field == 7 and wt == 2:
            n = length(b, &pos, end)
            value = PyBytes_FromStringAndSize(<const char*>(b + pos), n); pos += n
        else:
            pos = skip(b, pos, end, wt)
    return value

cdef object field_one(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, dict pairs):
    # The repeated field 1 of ArrayValue (AnyValues: a list; pairs None), KeyValueList and Resource
    # (KeyValues: filled into pairs, which spans already decoded may share when the resource comes last)
    cdef list items = []
    cdef uint64_t key
    cdef Py_ssize_t n
    while pos < end:
        key = varint(b, &pos, end)
        if key == 0x0a:
            n = length(b, &pos, end)
            if pairs is not None:
                one_kv(b, pos, pos + n, pairs)
            else:
                items.append(any_value(b, pos, pos + n))
            pos += n
        else:
            pos = skip(b, pos, end, <int>(key & 7))
    return items if pairs is None else pairs

cdef int one_kv(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, dict out) except -1:
    cdef uint64_t key
    cdef Py_ssize_t n
    cdef object k = None, v = None
    while pos < end:
        key = varint(b, &pos, end)
        if key == 0x0a:
            n = length(b, &pos, end)
            k = PyUnicode_DecodeUTF8(<const char*>(b + pos), n, NULL); pos += n
        elif key == 0x12:
            n = length(b, &pos, end)
            v = any_value(b, pos, pos + n); pos += n
        else:
            pos = skip(b, pos, end, <int>(key & 7))
    out[k if k is not None else ""] = v
    return 0

cdef tuple span(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end):
    cdef uint64_t key
    cdef Py_ssize_t n, n2
    cdef int field, wt
    cdef bytes trace_id = b"", span_id = b"", parent = b""
    cdef object name = ""
    cdef int64_t kind = 0
    cdef uint64_t start = 0, stop = 0
    cdef dict attrs = {}
    cdef int64_t code = 0
    cdef object message = ""
    cdef Py_ssize_t p2, e2
    while pos < end:
        key = varint(b, &pos, end)
        field = <int>(key >> 3); wt = <int>(key & 7)
        if wt == 2:
            n = length(b, &pos, end)
            if field == 9:
                one_kv(b, pos, pos + n, attrs)
            elif field == 1:
                trace_id = PyBytes_FromStringAndSize(<const char*>(b + pos), n)
            elif field == 2:
                span_id = PyBytes_FromStringAndSize(<const char*>(b + pos), n)
            elif field == 4:
                parent = PyBytes_FromStringAndSize(<const char*>(b + pos), n)
            elif field == 5:
                name = PyUnicode_DecodeUTF8(<const char*>(b + pos), n, NULL)
            elif field == 15:
                p2 = pos; e2 = pos + n
                while p2 < e2:
                    key = varint(b, &p2, e2)
                    if key == 0x12:
                        n2 = length(b, &p2, e2)
                        message = PyUnicode_DecodeUTF8(<const char*>(b + p2), n2, NULL); p2 += n2
                    elif key == 0x18:
                        code = <int64_t>varint(b, &p2, e2)
                    else:
                        p2 = skip(b, p2, e2, <int>(key & 7))
            pos += n
        elif (field == 7 or field == 8) and wt == 1:
            if end - pos < 8:
                raise ValueError("truncated timestamp")
            if field == 7:
                start = read_fixed64(b, pos)
            else:
                stop = read_fixed64(b, pos)
            pos += 8
        elif field == 6 and wt == 0:
            kind = <int64_t>varint(b, &pos, end)
        else:
            pos = skip(b, pos, end, wt)
    return (trace_id, span_id, parent, name, kind, start, stop, code, message, attrs)

def decode(bytes data):
    cdef const unsigned char* b = <const unsigned char*>data
    cdef Py_ssize_t pos = 0, end = len(data), rpos, rend, spos, send, n
    cdef uint64_t key
    cdef list out = []
    cdef dict resource
    while pos < end:
        key = varint(b, &pos, end)
        if key != 0x0a:
            pos = skip(b, pos, end, <int>(key & 7)); continue
        n = length(b, &pos, end)
        rpos = pos; rend = pos + n; pos = rend
        resource = {}
        while rpos < rend:
            key = varint(b, &rpos, rend)
            if key == 0x0a:  # resource: its attributes are field 1, laid out as a KeyValueList's values
                n = length(b, &rpos, rend)
                field_one(b, rpos, rpos + n, resource); rpos += n
            elif key == 0x12:  # scope_spans
                n = length(b, &rpos, rend)
                spos = rpos; send = rpos + n; rpos = send
                while spos < send:
                    key = varint(b, &spos, send)
                    if key == 0x12:
                        n = length(b, &spos, send)
                        out.append((span(b, spos, spos + n), resource)); spos += n
                    else:
                        spos = skip(b, spos, send, <int>(key & 7))
            else:
                rpos = skip(b, rpos, rend, <int>(key & 7))
    return out
