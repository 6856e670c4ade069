# The protobuf wire format, checked (included by wire.pyx): every read stays inside the bounds it
# is given, and a malformed or too deeply nested message raises ValueError where upb refuses it.
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

MAX_DEPTH = 101
"""Messages nested in one body, the request included: upb's limit, as the Python runtime sets it."""
cdef int _MAX_DEPTH = MAX_DEPTH


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
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


cdef inline uint64_t tag(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end) except 0:
    """A field's key; field number 0 and keys past 32 bits are malformed (upb refuses both)."""
    cdef uint64_t key = varint(b, pos, end)
    if key >> 32 or key >> 3 == 0:
        raise ValueError(f"invalid field key {key}")
    return key


cdef inline Py_ssize_t length(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end) except -1:
    cdef uint64_t n = varint(b, pos, end)
    if n > <uint64_t>(end - pos[0]):
        raise ValueError("length past the end of its message")
    return <Py_ssize_t>n


cdef inline int read8(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end, void* out) except -1:
    """A 64-bit field (fixed64 or double) into ``out``: little-endian on the wire, as on the host (setup.py)."""
    if end - pos[0] < 8:
        raise ValueError("truncated 64-bit field")
    memcpy(out, b + pos[0], 8)
    pos[0] += 8
    return 0


cdef inline object utf8(const unsigned char* b, Py_ssize_t pos, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(<const char*>(b + pos), n, NULL)


cdef inline bytes raw(const unsigned char* b, Py_ssize_t pos, Py_ssize_t n):
    return PyBytes_FromStringAndSize(<const char*>(b + pos), n)


cdef Py_ssize_t skip(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, uint64_t key, int depth) except -1:
    """Past an unknown field (or a known one with another wire type, which protobuf treats so)."""
    cdef int wt = <int>(key & 7)
    cdef Py_ssize_t n
    cdef uint64_t inner
    if wt == 0:
        varint(b, &pos, end)
    elif wt == 1 or wt == 5:
        n = 8 if wt == 1 else 4
        if end - pos < n:
            raise ValueError("truncated fixed-width field")
        pos += n
    elif wt == 2:
        n = length(b, &pos, end)
        pos += n
    elif wt == 3:  # a group (proto2): its fields up to the end-group key of the same number
        if depth + 1 > _MAX_DEPTH:
            raise ValueError("messages nested too deep")
        while True:
            if pos >= end:
                raise ValueError("unterminated group")
            inner = tag(b, &pos, end)
            if inner & 7 == 4:
                if inner >> 3 != key >> 3:
                    raise ValueError("group ends with another field's key")
                break
            pos = skip(b, pos, end, inner, depth + 1)
    else:
        raise ValueError(f"invalid wire type {wt}")
    return pos
