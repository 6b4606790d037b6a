/*
 * Protobuf <-> JSON-shaped dicts for the declared kinds, in C.
 *
 * The encoder (encode) walks each struct's encode list (``_Plan.enc``) the same
 * way and falls back the same way: any value it does not take exactly as the
 * reference would (a float in an integer field, a number as a quantity, ...)
 * raises Fallback and the reference encodes the object or names the error.
 *
 * Why: a 2 KB pod is ~200 wire fields; any Python loop costs 0.2-0.4 us a field,
 * so the pure-Python decoder (apiserver_min.api.protobuf) cannot come near
 * orjson's JSON decode. This module walks the same decode tables
 * (``_Plan.dec``: tag -> (op, json name, kind, sub)) in C.
 *
 * Contract with apiserver_min/api/protobuf.py (the reference):
 *  - on input the reference accepts, the result is the reference's result;
 *  - on anything else -- malformed or truncated bytes, a known field with the
 *    wrong wire type, a varint beyond 64 bits, a time outside years 1..9999,
 *    values of rare kinds (bytes, durations, raw JSON, wrapped lists), nesting
 *    deeper than MAX_DEPTH -- it either calls the reference's own Python helper
 *    for that one value or raises ``Fallback``, and the caller runs the
 *    reference on the whole message, which raises its error naming the field.
 *  So this module is never the one that decides an input is invalid; it only
 *  has to be right on what it accepts, which the tests check against the
 *  reference on every declared kind and on mutated bytes.
 *
 * Every read is bounded by the end of the enclosing message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Value kinds and decode operations: the same numbers as protobuf.py
 * (checked at import against the KINDS/OPS tuples exported below). */
enum { K_STR, K_I32, K_I64, K_BOOL, K_NUM, K_BYTES, K_TIME, K_MICRO, K_DUR, K_QTY, K_IOS, K_OPAQUE,
       K_STRUCT, K_WRAPPED, K_COUNT };
enum { OP_STR, OP_STR_KEEP, OP_STRUCT, OP_STRUCT_KEEP, OP_LIST_STR, OP_LIST_LD, OP_MAP_STR, OP_MAP,
       OP_VARINT, OP_VARINT_KEEP, OP_LD, OP_LD_KEEP, OP_INLINE, OP_PACKED, OP_LIST_VARINT, OP_FIXED,
       OP_FIXED_KEEP, OP_LIST_FIXED, OP_COUNT };

#define MAX_DEPTH 64
#define SMALL_TAGS 1024 /* direct look-up for field numbers < 128 */

typedef struct PlanObject PlanObject;

typedef struct {
    uint32_t tag;
    uint8_t op, kind;
    uint16_t slot;  /* the first entry with the same JSON name (packed and unpacked lists share one) */
    PyObject *name; /* str */
    PyObject *sub;  /* what the Python helpers take as ``sub`` */
    PlanObject *csub; /* the compiled struct for K_STRUCT values and inline structs */
} Entry;

struct PlanObject {
    PyObject_HEAD
    Entry *ents;
    Py_ssize_t n;
    uint32_t *numbers; /* field numbers the struct declares (wrong wire type -> Fallback) */
    Py_ssize_t nnumbers;
    int16_t small[SMALL_TAGS];
    int ready;
    Py_ssize_t hint; /* the most keys a dict of this struct got */
    struct EncEntry *encs; /* the encode list, in field-number order */
    Py_ssize_t nenc;
    int enc_ready;
};

enum { M_ONE, M_LIST, M_MAP, M_INLINE };

typedef struct EncEntry {
    PyObject *name;   /* JSON name ("" for an inline struct) */
    uint8_t mode, kind, wt, taglen;
    uint8_t tag[5];
    PyObject *absent; /* bytes written for a missing non-pointer value, or NULL */
    PyObject *sub;    /* what the Python helpers take as ``sub`` */
    PlanObject *csub; /* the compiled struct for struct values and inline structs */
} EncEntry;

static PyObject *Fallback;  /* the exception that sends the caller to the reference */
static PyObject *ld_cb;     /* protobuf._decode_ld(buf, pos, end, kind, sub) */
static PyObject *payload_cb; /* protobuf._payload(kind, sub, value) -> bytes */
static PyObject *time_cb;    /* protobuf._time_seconds_nanos(text) -> (seconds, nanos) */
static PyObject *entry_cb;  /* protobuf._decode_entry(buf, pos, end, kind, sub) -> (k, v) */
static PyObject *zeros[K_COUNT]; /* protobuf._ZERO_JSON per kind (None where None) */
static PyObject *str_zero;  /* "0": a quantity without its string field */

static PyTypeObject PlanType;

typedef struct {
    const uint8_t *b;
    PyObject *bufobj; /* the bytes object, for the Python helpers */
    int depth;
} Ctx;

static void *fallback(void) {
    if (!PyErr_Occurred())
        PyErr_SetNone(Fallback);
    return NULL;
}

static int fail(void) {
    fallback();
    return -1;
}

/* A varint of at most 64 bits within [pos, end). */
static inline int read_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out) {
    Py_ssize_t p = *pos;
    if (p >= end)
        return -1;
    uint8_t c = b[p++];
    if (c < 0x80) {
        *out = c;
        *pos = p;
        return 0;
    }
    uint64_t v = c & 0x7F;
    int shift = 7;
    for (;;) {
        if (p >= end)
            return -1;
        c = b[p++];
        if (shift == 63 && c > 1)
            return -1; /* beyond 64 bits: the reference handles it */
        v |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80)
            break;
        shift += 7;
        if (shift > 63)
            return -1;
    }
    *out = v;
    *pos = p;
    return 0;
}

static inline int read_len(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t *e) {
    uint64_t n;
    if (read_varint(b, pos, end, &n) < 0)
        return -1;
    if (n > (uint64_t)(end - *pos))
        return -1;
    *e = *pos + (Py_ssize_t)n;
    return 0;
}

static inline PyObject *decode_str(const uint8_t *b, Py_ssize_t p, Py_ssize_t e) {
    Py_ssize_t n = e - p;
    const uint8_t *s = b + p;
    uint8_t any = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        any |= s[i];
    if (any < 0x80) { /* ASCII, the usual case: no UTF-8 decoding needed */
        PyObject *str = PyUnicode_New(n, 127);
        if (str != NULL)
            memcpy(PyUnicode_DATA(str), s, n);
        return str;
    }
    return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
}

/* A new dict for a struct, presized from the largest one of that struct seen so far. */
static inline PyObject *new_struct_dict(PlanObject *plan) {
    return plan->hint > 5 ? _PyDict_NewPresized(plan->hint) : PyDict_New();
}

static PyObject *varint_value(uint64_t v, int kind) {
    if (kind == K_BOOL)
        return PyBool_FromLong(v != 0);
    if (kind == K_I32)
        return PyLong_FromLong((long)(int32_t)(uint32_t)v);
    return PyLong_FromLongLong((long long)(int64_t)v);
}

static PyObject *double_value(const uint8_t *b, Py_ssize_t p, int *truthy) {
    double d;
    memcpy(&d, b + p, 8); /* little-endian hosts only: checked at import */
    if (isfinite(d) && d == floor(d) && fabs(d) < 1e15) {
        long long i = (long long)d;
        *truthy = i != 0;
        return PyLong_FromLongLong(i);
    }
    *truthy = d != 0.0 || isnan(d);
    return PyFloat_FromDouble(d);
}

/* Skip an undeclared field; a declared number with another wire type, field 0
 * and groups are errors the reference reports. */
static int skip_field(PlanObject *plan, const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t tag) {
    uint64_t number = tag >> 3;
    int wt = (int)(tag & 7);
    if (number == 0)
        return -1;
    for (Py_ssize_t i = 0; i < plan->nnumbers; i++)
        if (plan->numbers[i] == number)
            return -1;
    uint64_t v;
    Py_ssize_t e;
    switch (wt) {
    case 0:
        return read_varint(b, pos, end, &v);
    case 1:
        if (end - *pos < 8)
            return -1;
        *pos += 8;
        return 0;
    case 2:
        if (read_len(b, pos, end, &e) < 0)
            return -1;
        *pos = e;
        return 0;
    case 5:
        if (end - *pos < 4)
            return -1;
        *pos += 4;
        return 0;
    default:
        return -1;
    }
}

static inline void put_digits(char *o, int64_t v, int width) {
    for (int i = width - 1; i >= 0; i--) {
        o[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* seconds since the epoch -> "YYYY-MM-DDTHH:MM:SSZ" (years 1..9999, else Fallback). */
static PyObject *format_seconds(int64_t s, int micros) {
    if (s < -62135596800LL || s > 253402300799LL)
        return fallback();
    int64_t days = s / 86400, rem = s % 86400;
    if (rem < 0) {
        rem += 86400;
        days -= 1;
    }
    /* civil_from_days (proleptic Gregorian) */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    if (m <= 2)
        y += 1;
    int len = micros < 0 ? 20 : 27;
    PyObject *str = PyUnicode_New(len, 127);
    if (str == NULL)
        return NULL;
    char *o = (char *)PyUnicode_DATA(str);
    put_digits(o, y, 4);
    o[4] = '-';
    put_digits(o + 5, m, 2);
    o[7] = '-';
    put_digits(o + 8, d, 2);
    o[10] = 'T';
    put_digits(o + 11, rem / 3600, 2);
    o[13] = ':';
    put_digits(o + 14, rem % 3600 / 60, 2);
    o[16] = ':';
    put_digits(o + 17, rem % 60, 2);
    if (micros >= 0) {
        o[19] = '.';
        put_digits(o + 20, micros, 6);
    }
    o[len - 1] = 'Z';
    return str;
}

static int decode_struct(Ctx *c, PlanObject *plan, Py_ssize_t pos, Py_ssize_t end, PyObject *out, int fresh);

/* One length-delimited value [p, e) of ``kind`` as JSON (new reference; Py_None for the zero time). */
static PyObject *decode_ld(Ctx *c, const Entry *ent, Py_ssize_t p, Py_ssize_t e) {
    const uint8_t *b = c->b;
    uint64_t t;
    switch (ent->kind) {
    case K_STR:
        return decode_str(b, p, e);
    case K_STRUCT: {
        if (ent->csub == NULL)
            return fallback();
        PyObject *d = new_struct_dict(ent->csub);
        if (d == NULL)
            return NULL;
        if (p < e && decode_struct(c, ent->csub, p, e, d, 1) < 0) {
            Py_DECREF(d);
            return NULL;
        }
        return d;
    }
    case K_TIME:
    case K_MICRO: {
        if (p == e)
            Py_RETURN_NONE;
        uint64_t seconds = 0, nanos = 0;
        while (p < e) {
            if (read_varint(b, &p, e, &t) < 0)
                return fallback();
            if (t == 0x08) {
                if (read_varint(b, &p, e, &seconds) < 0)
                    return fallback();
            } else if (t == 0x10) {
                if (read_varint(b, &p, e, &nanos) < 0)
                    return fallback();
            } else {
                return fallback();
            }
        }
        if (ent->kind == K_TIME)
            return format_seconds((int64_t)seconds, -1);
        /* Python: (int32(nanos) // 1000) % 1_000_000, floor semantics */
        int64_t n = (int32_t)(uint32_t)nanos;
        int64_t q = n / 1000;
        if ((n % 1000 != 0) && (n < 0))
            q -= 1;
        int64_t r = q % 1000000;
        if (r < 0)
            r += 1000000;
        return format_seconds((int64_t)seconds, (int)r);
    }
    case K_QTY: {
        PyObject *s = NULL;
        while (p < e) {
            Py_ssize_t se;
            if (read_varint(b, &p, e, &t) < 0 || t != 0x0A || read_len(b, &p, e, &se) < 0) {
                Py_XDECREF(s);
                return fallback();
            }
            Py_XDECREF(s);
            s = decode_str(b, p, se);
            if (s == NULL)
                return NULL;
            p = se;
        }
        if (s == NULL) {
            Py_INCREF(str_zero);
            s = str_zero;
        }
        return s;
    }
    case K_IOS: {
        uint64_t typ = 0, ival = 0;
        PyObject *sval = NULL;
        while (p < e) {
            if (read_varint(b, &p, e, &t) < 0)
                goto ios_fail;
            if (t == 0x08) {
                if (read_varint(b, &p, e, &typ) < 0)
                    goto ios_fail;
            } else if (t == 0x10) {
                if (read_varint(b, &p, e, &ival) < 0)
                    goto ios_fail;
            } else if (t == 0x1A) {
                Py_ssize_t se;
                if (read_len(b, &p, e, &se) < 0)
                    goto ios_fail;
                Py_XDECREF(sval);
                sval = decode_str(b, p, se);
                if (sval == NULL)
                    return NULL;
                p = se;
            } else {
                goto ios_fail;
            }
        }
        if (typ == 1) {
            if (sval == NULL)
                return PyUnicode_FromStringAndSize("", 0);
            return sval;
        }
        Py_XDECREF(sval);
        return PyLong_FromLong((long)(int32_t)(uint32_t)ival);
    ios_fail:
        Py_XDECREF(sval);
        return fallback();
    }
    default:
        /* bytes, durations, raw JSON, wrapped lists: the reference's helper */
        return PyObject_CallFunction(ld_cb, "OnniO", c->bufobj, p, e, (int)ent->kind, ent->sub);
    }
}

static int c_ld_kind(int kind) {
    return kind == K_STR || kind == K_STRUCT || kind == K_TIME || kind == K_MICRO || kind == K_QTY ||
           kind == K_IOS;
}

/* One map entry [p, e) into dict m. */
static int decode_entry(Ctx *c, const Entry *ent, Py_ssize_t p, Py_ssize_t e, PyObject *m) {
    const uint8_t *b = c->b;
    int kind = ent->kind;
    int varint_kind = kind == K_I32 || kind == K_I64 || kind == K_BOOL;
    if (!c_ld_kind(kind) && !varint_kind) {
        PyObject *kv = PyObject_CallFunction(entry_cb, "OnniO", c->bufobj, p, e, kind, ent->sub);
        if (kv == NULL)
            return -1;
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
            Py_DECREF(kv);
            return fail();
        }
        int r = PyDict_SetItem(m, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1));
        Py_DECREF(kv);
        return r;
    }
    PyObject *key = NULL, *val = NULL;
    uint64_t t;
    while (p < e) {
        if (read_varint(b, &p, e, &t) < 0)
            goto bad;
        if (t == 0x0A) {
            Py_ssize_t se;
            if (read_len(b, &p, e, &se) < 0)
                goto bad;
            Py_XDECREF(key);
            key = decode_str(b, p, se);
            if (key == NULL)
                goto err;
            p = se;
        } else if (t == 0x12 && !varint_kind) {
            Py_ssize_t se;
            if (read_len(b, &p, e, &se) < 0)
                goto bad;
            Py_XDECREF(val);
            val = decode_ld(c, ent, p, se);
            if (val == NULL)
                goto err;
            if (val == Py_None)
                Py_CLEAR(val);
            p = se;
        } else if (t == 0x10 && varint_kind) {
            uint64_t v;
            if (read_varint(b, &p, e, &v) < 0)
                goto bad;
            Py_XDECREF(val);
            val = varint_value(v, kind);
            if (val == NULL)
                goto err;
        } else {
            goto bad;
        }
    }
    if (key == NULL) {
        key = PyUnicode_FromStringAndSize("", 0);
        if (key == NULL)
            goto err;
    }
    if (val == NULL) {
        if (kind == K_STRUCT)
            val = PyDict_New();
        else {
            val = zeros[kind];
            Py_XINCREF(val);
        }
        if (val == NULL)
            goto bad;
    }
    int r = PyDict_SetItem(m, key, val);
    Py_DECREF(key);
    Py_DECREF(val);
    return r;
bad:
    fallback();
err:
    Py_XDECREF(key);
    Py_XDECREF(val);
    return -1;
}

static inline const Entry *lookup(PlanObject *plan, uint64_t tag) {
    if (tag < SMALL_TAGS) {
        int16_t i = plan->small[tag];
        return i < 0 ? NULL : &plan->ents[i];
    }
    for (Py_ssize_t i = 0; i < plan->n; i++)
        if (plan->ents[i].tag == tag)
            return &plan->ents[i];
    return NULL;
}

/* True when ``ent``'s field cannot be in ``out`` yet (a fresh dict, first occurrence); marks it met. */
static inline int first_time(int fresh, uint64_t *seen, PlanObject *plan, const Entry *ent) {
    Py_ssize_t i = ent->slot;
    if (!fresh || i >= 64)
        return 0;
    uint64_t bit = (uint64_t)1 << i;
    if (*seen & bit)
        return 0;
    *seen |= bit;
    return 1;
}

/* out.get(name) as a list (created when missing); borrowed; NULL with Fallback if it is something else. */
static PyObject *list_at(PyObject *out, PyObject *name, int absent) {
    PyObject *lst = absent ? NULL : PyDict_GetItemWithError(out, name);
    if (lst == NULL) {
        if (PyErr_Occurred())
            return NULL;
        lst = PyList_New(0);
        if (lst == NULL)
            return NULL;
        int r = PyDict_SetItem(out, name, lst);
        Py_DECREF(lst);
        return r < 0 ? NULL : lst;
    }
    if (!PyList_CheckExact(lst))
        return fallback();
    return lst;
}

static PyObject *dict_at(PyObject *out, PyObject *name, int absent) {
    PyObject *m = absent ? NULL : PyDict_GetItemWithError(out, name);
    if (m == NULL) {
        if (PyErr_Occurred())
            return NULL;
        m = PyDict_New();
        if (m == NULL)
            return NULL;
        int r = PyDict_SetItem(out, name, m);
        Py_DECREF(m);
        return r < 0 ? NULL : m;
    }
    if (!PyDict_CheckExact(m))
        return fallback();
    return m;
}

static inline int append_new(PyObject *lst, PyObject *v) {
    if (v == NULL)
        return -1;
    int r = PyList_Append(lst, v);
    Py_DECREF(v);
    return r;
}

static inline int set_new(PyObject *out, PyObject *name, PyObject *v) {
    if (v == NULL)
        return -1;
    int r = PyDict_SetItem(out, name, v);
    Py_DECREF(v);
    return r;
}

/* Decodes [pos, end) as ``plan``'s struct into ``out``. ``fresh``: ``out`` holds none of
 * the struct's fields yet, so a field's first occurrence needs no look-up of ``out``. */
static int decode_struct(Ctx *c, PlanObject *plan, Py_ssize_t pos, Py_ssize_t end, PyObject *out, int fresh) {
    const uint8_t *b = c->b;
    uint64_t seen = 0; /* entries (index < 64) met so far in a fresh dict */
    if (!plan->ready || ++c->depth > MAX_DEPTH)
        return fail();
    while (pos < end) {
        uint64_t tag;
        if (read_varint(b, &pos, end, &tag) < 0)
            return fail();
        const Entry *ent = lookup(plan, tag);
        if (ent == NULL) {
            if (skip_field(plan, b, &pos, end, tag) < 0)
                return fail();
            continue;
        }
        PyObject *name = ent->name;
        int op = ent->op;
        if ((tag & 7) == 2) {
            Py_ssize_t e;
            if (read_len(b, &pos, end, &e) < 0)
                return fail();
            switch (op) {
            case OP_STR:
                if (e == pos)
                    break; /* an empty non-pointer string */
                /* fall through */
            case OP_STR_KEEP:
                if (set_new(out, name, decode_str(b, pos, e)) < 0)
                    return -1;
                break;
            case OP_STRUCT:
            case OP_STRUCT_KEEP: {
                if (ent->csub == NULL)
                    return fail();
                PyObject *d = first_time(fresh, &seen, plan, ent) ? NULL : PyDict_GetItemWithError(out, name);
                int merge = d != NULL && PyDict_CheckExact(d);
                if (merge) {
                    Py_INCREF(d);
                } else {
                    if (d == NULL && PyErr_Occurred())
                        return -1;
                    d = new_struct_dict(ent->csub);
                    if (d == NULL)
                        return -1;
                }
                if (e > pos && decode_struct(c, ent->csub, pos, e, d, !merge) < 0) {
                    Py_DECREF(d);
                    return -1;
                }
                if (PyDict_GET_SIZE(d) || op == OP_STRUCT_KEEP) {
                    if (PyDict_SetItem(out, name, d) < 0) {
                        Py_DECREF(d);
                        return -1;
                    }
                }
                Py_DECREF(d);
                break;
            }
            case OP_LIST_STR: {
                PyObject *lst = list_at(out, name, first_time(fresh, &seen, plan, ent));
                if (lst == NULL || append_new(lst, decode_str(b, pos, e)) < 0)
                    return -1;
                break;
            }
            case OP_LIST_LD: {
                PyObject *lst = list_at(out, name, first_time(fresh, &seen, plan, ent));
                if (lst == NULL || append_new(lst, decode_ld(c, ent, pos, e)) < 0)
                    return -1;
                break;
            }
            case OP_MAP_STR:
            case OP_MAP: {
                PyObject *m = dict_at(out, name, first_time(fresh, &seen, plan, ent));
                if (m == NULL || decode_entry(c, ent, pos, e, m) < 0)
                    return -1;
                break;
            }
            case OP_INLINE:
                if (ent->csub == NULL)
                    return fail();
                if (decode_struct(c, ent->csub, pos, e, out, 0) < 0)
                    return -1;
                break;
            case OP_LD:
            case OP_LD_KEEP: {
                PyObject *v = decode_ld(c, ent, pos, e);
                if (v == NULL)
                    return -1;
                int store = v != Py_None;
                if (store && op == OP_LD && zeros[ent->kind] != Py_None) {
                    store = PyObject_RichCompareBool(v, zeros[ent->kind], Py_NE);
                    if (store < 0) {
                        Py_DECREF(v);
                        return -1;
                    }
                }
                int r = store ? PyDict_SetItem(out, name, v) : 0;
                Py_DECREF(v);
                if (r < 0)
                    return -1;
                break;
            }
            case OP_PACKED: {
                PyObject *lst = list_at(out, name, first_time(fresh, &seen, plan, ent));
                if (lst == NULL)
                    return -1;
                Py_ssize_t p = pos;
                while (p < e) {
                    uint64_t v;
                    if (read_varint(b, &p, e, &v) < 0)
                        return fail();
                    if (append_new(lst, varint_value(v, ent->kind)) < 0)
                        return -1;
                }
                break;
            }
            default:
                return fail();
            }
            pos = e;
        } else if (op == OP_VARINT || op == OP_VARINT_KEEP || op == OP_LIST_VARINT) {
            uint64_t v;
            if (read_varint(b, &pos, end, &v) < 0)
                return fail();
            if (op == OP_LIST_VARINT) {
                PyObject *lst = list_at(out, name, first_time(fresh, &seen, plan, ent));
                if (lst == NULL || append_new(lst, varint_value(v, ent->kind)) < 0)
                    return -1;
            } else if (op == OP_VARINT_KEEP || (ent->kind == K_BOOL ? v != 0 : (ent->kind == K_I32 ? (uint32_t)v != 0 : v != 0))) {
                if (set_new(out, name, varint_value(v, ent->kind)) < 0)
                    return -1;
            }
        } else if (op == OP_FIXED || op == OP_FIXED_KEEP || op == OP_LIST_FIXED) {
            if (end - pos < 8)
                return fail();
            int truthy;
            PyObject *v = double_value(b, pos, &truthy);
            pos += 8;
            if (v == NULL)
                return -1;
            if (op == OP_LIST_FIXED) {
                PyObject *lst = list_at(out, name, first_time(fresh, &seen, plan, ent));
                if (lst == NULL) {
                    Py_DECREF(v);
                    return -1;
                }
                if (append_new(lst, v) < 0)
                    return -1;
            } else if (truthy || op == OP_FIXED_KEEP) {
                if (set_new(out, name, v) < 0)
                    return -1;
            } else {
                Py_DECREF(v);
            }
        } else {
            return fail();
        }
    }
    c->depth--;
    if (PyDict_GET_SIZE(out) > plan->hint)
        plan->hint = PyDict_GET_SIZE(out) < 64 ? PyDict_GET_SIZE(out) : 64;
    return 0;
}

/* --- the Plan type ---------------------------------------------------------------------------- */

static void plan_clear_entries(PlanObject *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Py_XDECREF(self->ents[i].name);
        Py_XDECREF(self->ents[i].sub);
        Py_XDECREF((PyObject *)self->ents[i].csub);
    }
    PyMem_Free(self->ents);
    PyMem_Free(self->numbers);
    self->ents = NULL;
    self->numbers = NULL;
    self->n = self->nnumbers = 0;
    self->ready = 0;
}

static void plan_clear_encs(PlanObject *self) {
    for (Py_ssize_t i = 0; i < self->nenc; i++) {
        Py_XDECREF(self->encs[i].name);
        Py_XDECREF(self->encs[i].absent);
        Py_XDECREF(self->encs[i].sub);
        Py_XDECREF((PyObject *)self->encs[i].csub);
    }
    PyMem_Free(self->encs);
    self->encs = NULL;
    self->nenc = 0;
    self->enc_ready = 0;
}

static void plan_dealloc(PlanObject *self) {
    plan_clear_entries(self);
    plan_clear_encs(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    for (int i = 0; i < SMALL_TAGS; i++)
        self->small[i] = -1;
    return (PyObject *)self;
}

PyDoc_STRVAR(plan_set_doc,
             "set(entries, numbers): entries are (tag, op, name, kind, sub, plan-or-None) tuples; "
             "numbers the struct's declared field numbers.");

static PyObject *plan_set(PlanObject *self, PyObject *args) {
    PyObject *entries, *numbers;
    if (!PyArg_ParseTuple(args, "O!O!:set", &PyList_Type, &entries, &PyTuple_Type, &numbers))
        return NULL;
    plan_clear_entries(self);
    for (int i = 0; i < SMALL_TAGS; i++)
        self->small[i] = -1;
    Py_ssize_t n = PyList_GET_SIZE(entries), nn = PyTuple_GET_SIZE(numbers);
    if (n > 30000) {
        PyErr_SetString(PyExc_ValueError, "too many fields");
        return NULL;
    }
    self->ents = PyMem_Calloc(n ? n : 1, sizeof(Entry));
    self->numbers = PyMem_Calloc(nn ? nn : 1, sizeof(uint32_t));
    if (self->ents == NULL || self->numbers == NULL) {
        PyMem_Free(self->ents);
        PyMem_Free(self->numbers);
        self->ents = NULL;
        self->numbers = NULL;
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(numbers, i));
        if (v == (unsigned long)-1 && PyErr_Occurred())
            goto error;
        self->numbers[i] = (uint32_t)v;
        self->nnumbers = i + 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(entries, i);
        unsigned long tag;
        int op, kind;
        PyObject *name, *sub, *csub;
        if (!PyArg_ParseTuple(t, "kiUiOO:entry", &tag, &op, &name, &kind, &sub, &csub))
            goto error;
        if (op < 0 || op >= OP_COUNT || kind < 0 || kind >= K_COUNT || tag > 0xFFFFFFFFul) {
            PyErr_SetString(PyExc_ValueError, "entry out of range");
            goto error;
        }
        if (csub != Py_None && !PyObject_TypeCheck(csub, &PlanType)) {
            PyErr_SetString(PyExc_TypeError, "sub-plan must be a Plan or None");
            goto error;
        }
        Entry *ent = &self->ents[i];
        ent->tag = (uint32_t)tag;
        ent->op = (uint8_t)op;
        ent->kind = (uint8_t)kind;
        Py_INCREF(name);
        ent->name = name;
        Py_INCREF(sub);
        ent->sub = sub;
        if (csub != Py_None) {
            Py_INCREF(csub);
            ent->csub = (PlanObject *)csub;
        }
        ent->slot = (uint16_t)i;
        for (Py_ssize_t j = 0; j < i; j++) {
            int eq = PyUnicode_Compare(self->ents[j].name, name);
            if (eq == -1 && PyErr_Occurred())
                goto error;
            if (eq == 0) {
                ent->slot = self->ents[j].slot;
                break;
            }
        }
        self->n = i + 1;
        if (tag < SMALL_TAGS)
            self->small[tag] = (int16_t)i;
    }
    self->ready = 1;
    Py_RETURN_NONE;
error:
    plan_clear_entries(self);
    return NULL;
}

PyDoc_STRVAR(plan_set_enc_doc,
             "set_enc(entries): the encode list, (name, mode, kind, sub, tag bytes, absent bytes-or-None, "
             "plan-or-None) tuples in field-number order.");

static PyObject *plan_set_enc(PlanObject *self, PyObject *args) {
    PyObject *entries;
    if (!PyArg_ParseTuple(args, "O!:set_enc", &PyList_Type, &entries))
        return NULL;
    plan_clear_encs(self);
    Py_ssize_t n = PyList_GET_SIZE(entries);
    self->encs = PyMem_Calloc(n ? n : 1, sizeof(EncEntry));
    if (self->encs == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *sub, *tag, *absent, *csub;
        int mode, kind;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(entries, i), "UiiOSOO:enc entry", &name, &mode, &kind, &sub, &tag,
                              &absent, &csub))
            goto error;
        if (mode < M_ONE || mode > M_INLINE || kind < 0 || kind >= K_COUNT || PyBytes_GET_SIZE(tag) < 1 ||
            PyBytes_GET_SIZE(tag) > 5 || (absent != Py_None && !PyBytes_Check(absent)) ||
            (csub != Py_None && !PyObject_TypeCheck(csub, &PlanType))) {
            PyErr_SetString(PyExc_ValueError, "bad encode entry");
            goto error;
        }
        EncEntry *e = &self->encs[i];
        e->mode = (uint8_t)mode;
        e->kind = (uint8_t)kind;
        e->wt = (kind == K_I32 || kind == K_I64 || kind == K_BOOL) ? 0 : kind == K_NUM ? 1 : 2;
        e->taglen = (uint8_t)PyBytes_GET_SIZE(tag);
        memcpy(e->tag, PyBytes_AS_STRING(tag), e->taglen);
        Py_INCREF(name);
        e->name = name;
        Py_INCREF(sub);
        e->sub = sub;
        if (absent != Py_None) {
            Py_INCREF(absent);
            e->absent = absent;
        }
        if (csub != Py_None) {
            Py_INCREF(csub);
            e->csub = (PlanObject *)csub;
        }
        self->nenc = i + 1;
    }
    self->enc_ready = 1;
    Py_RETURN_NONE;
error:
    plan_clear_encs(self);
    return NULL;
}

static PyMethodDef plan_methods[] = {
    {"set", (PyCFunction)plan_set, METH_VARARGS, plan_set_doc},
    {"set_enc", (PyCFunction)plan_set_enc, METH_VARARGS, plan_set_enc_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "apiserver_min.api._pbfast.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A struct's decode table, compiled.",
    .tp_methods = plan_methods,
    .tp_new = plan_new,
};


/* --- encoding ---------------------------------------------------------------------------------- */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    int depth;
} Buf;

static int buf_grow(Buf *b, Py_ssize_t need) {
    if (b->len + need <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + need)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_grow(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int put_uvarint(Buf *b, uint64_t v) {
    if (buf_grow(b, 10) < 0)
        return -1;
    while (v >= 0x80) {
        b->p[b->len++] = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    b->p[b->len++] = (char)v;
    return 0;
}

static inline int uvarint_len(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Length-delimited body: reserve one byte, write the body with ``fn``, then fix the length. */
#define LD_BEGIN(b, start)                                                                                   \
    do {                                                                                                     \
        if (buf_grow((b), 1) < 0)                                                                            \
            return -1;                                                                                       \
        (b)->len++;                                                                                          \
        (start) = (b)->len;                                                                                  \
    } while (0)

static int ld_end(Buf *b, Py_ssize_t start) {
    uint64_t n = (uint64_t)(b->len - start);
    int vl = uvarint_len(n);
    if (vl > 1) {
        if (buf_grow(b, vl - 1) < 0)
            return -1;
        memmove(b->p + start + vl - 1, b->p + start, (size_t)n);
        b->len += vl - 1;
    }
    char *o = b->p + start - 1;
    while (n >= 0x80) {
        *o++ = (char)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *o = (char)n;
    return 0;
}

static int put_str(Buf *b, PyObject *v) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(v, &n);
    if (s == NULL)
        return -1;
    if (put_uvarint(b, (uint64_t)n) < 0)
        return -1;
    return put(b, s, n);
}

static int encode_struct(Buf *b, PlanObject *plan, PyObject *obj);

/* The int an int32/int64 field holds (exact ints in range only). */
static int int_value(PyObject *v, int kind, int64_t *out) {
    if (!PyLong_CheckExact(v))
        return fail();
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()))
        return fail();
    if (kind == K_I32 && (x < INT32_MIN || x > INT32_MAX))
        return fail();
    *out = x;
    return 0;
}

/* A value's payload: the varint or 8 bytes, or a length-delimited body with its length. */
static int encode_value(Buf *b, const EncEntry *e, PyObject *v) {
    Py_ssize_t start;
    switch (e->kind) {
    case K_STR:
        if (!PyUnicode_CheckExact(v))
            return fail();
        return put_str(b, v);
    case K_STRUCT:
        if (!PyDict_CheckExact(v) || e->csub == NULL)
            return fail();
        LD_BEGIN(b, start);
        if (encode_struct(b, e->csub, v) < 0)
            return -1;
        return ld_end(b, start);
    case K_I32:
    case K_I64: {
        int64_t x;
        if (int_value(v, e->kind, &x) < 0)
            return -1;
        return put_uvarint(b, (uint64_t)x);
    }
    case K_BOOL:
        if (v != Py_True && v != Py_False)
            return fail();
        return put(b, v == Py_True ? "\x01" : "\x00", 1);
    case K_NUM: {
        double d;
        if (PyFloat_CheckExact(v))
            d = PyFloat_AS_DOUBLE(v);
        else if (PyLong_CheckExact(v)) {
            d = PyLong_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred())
                return fail();
        } else
            return fail();
        return put(b, &d, 8); /* little-endian hosts only: checked at import */
    }
    case K_TIME:
    case K_MICRO: {
        if (!PyUnicode_CheckExact(v))
            return fail();
        PyObject *sn = PyObject_CallOneArg(time_cb, v);
        if (sn == NULL)
            return -1;
        long long sec = 0, nanos = 0;
        if (!PyTuple_Check(sn) || PyTuple_GET_SIZE(sn) != 2) {
            Py_DECREF(sn);
            return fail();
        }
        sec = PyLong_AsLongLong(PyTuple_GET_ITEM(sn, 0));
        nanos = PyLong_AsLongLong(PyTuple_GET_ITEM(sn, 1));
        Py_DECREF(sn);
        if (PyErr_Occurred())
            return fail();
        nanos = e->kind == K_MICRO ? (nanos / 1000) * 1000 : 0; /* 0 <= nanos < 1e9 */
        LD_BEGIN(b, start);
        if (put(b, "\x08", 1) < 0 || put_uvarint(b, (uint64_t)(int64_t)sec) < 0 || put(b, "\x10", 1) < 0 ||
            put_uvarint(b, (uint64_t)(int64_t)nanos) < 0)
            return -1;
        return ld_end(b, start);
    }
    case K_QTY:
        if (!PyUnicode_CheckExact(v))
            return fail(); /* numbers: the reference formats them */
        LD_BEGIN(b, start);
        if (put(b, "\x0a", 1) < 0 || put_str(b, v) < 0)
            return -1;
        return ld_end(b, start);
    case K_IOS:
        LD_BEGIN(b, start);
        if (PyLong_CheckExact(v)) {
            int64_t x;
            if (int_value(v, K_I32, &x) < 0 || put(b, "\x08\x00\x10", 3) < 0 || put_uvarint(b, (uint64_t)x) < 0 ||
                put(b, "\x1a\x00", 2) < 0)
                return -1;
        } else if (PyUnicode_CheckExact(v)) {
            if (put(b, "\x08\x01\x10\x00\x1a", 5) < 0 || put_str(b, v) < 0)
                return -1;
        } else {
            return fail();
        }
        return ld_end(b, start);
    default: { /* bytes, durations, raw JSON, wrapped lists: the reference's helper */
        PyObject *r = PyObject_CallFunction(payload_cb, "iOO", (int)e->kind, e->sub, v);
        if (r == NULL)
            return -1;
        if (!PyBytes_Check(r)) {
            Py_DECREF(r);
            return fail();
        }
        int rc = put_uvarint(b, (uint64_t)PyBytes_GET_SIZE(r));
        if (rc == 0)
            rc = put(b, PyBytes_AS_STRING(r), PyBytes_GET_SIZE(r));
        Py_DECREF(r);
        return rc;
    }
    }
}

static int encode_struct(Buf *b, PlanObject *plan, PyObject *obj) {
    if (!plan->enc_ready || ++b->depth > MAX_DEPTH)
        return fail();
    for (Py_ssize_t i = 0; i < plan->nenc; i++) {
        const EncEntry *e = &plan->encs[i];
        Py_ssize_t start;
        if (e->mode == M_INLINE) {
            if (e->csub == NULL || put(b, e->tag, e->taglen) < 0)
                return fail();
            LD_BEGIN(b, start);
            if (encode_struct(b, e->csub, obj) < 0 || ld_end(b, start) < 0)
                return -1;
            continue;
        }
        PyObject *v = PyDict_GetItemWithError(obj, e->name);
        if (v == NULL && PyErr_Occurred())
            return -1;
        if (v == NULL || v == Py_None) {
            if (e->absent != NULL && put(b, PyBytes_AS_STRING(e->absent), PyBytes_GET_SIZE(e->absent)) < 0)
                return -1;
            continue;
        }
        if (e->mode == M_ONE) {
            if (put(b, e->tag, e->taglen) < 0 || encode_value(b, e, v) < 0)
                return -1;
        } else if (e->mode == M_LIST) {
            if (!PyList_CheckExact(v))
                return fail();
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(v); j++) {
                PyObject *item = PyList_GET_ITEM(v, j);
                if (item == Py_None)
                    return fail();
                Py_INCREF(item);
                int rc = put(b, e->tag, e->taglen) < 0 ? -1 : encode_value(b, e, item);
                Py_DECREF(item);
                if (rc < 0)
                    return -1;
            }
        } else { /* M_MAP: entries sorted by key */
            if (!PyDict_CheckExact(v))
                return fail();
            PyObject *keys = PyDict_Keys(v);
            if (keys == NULL)
                return -1;
            if (PyList_Sort(keys) < 0) {
                Py_DECREF(keys);
                return fail();
            }
            uint8_t vtag = (uint8_t)((2 << 3) | e->wt);
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(keys); j++) {
                PyObject *k = PyList_GET_ITEM(keys, j);
                PyObject *item = PyUnicode_CheckExact(k) ? PyDict_GetItemWithError(v, k) : NULL;
                if (item == NULL) {
                    Py_DECREF(keys);
                    return fail();
                }
                Py_INCREF(item);
                int rc = put(b, e->tag, e->taglen);
                if (rc == 0) {
                    LD_BEGIN(b, start);
                    rc = put(b, "\x0a", 1);
                    if (rc == 0)
                        rc = put_str(b, k);
                    if (rc == 0 && item != Py_None) {
                        rc = put(b, &vtag, 1);
                        if (rc == 0)
                            rc = encode_value(b, e, item);
                    }
                    if (rc == 0)
                        rc = ld_end(b, start);
                }
                Py_DECREF(item);
                if (rc < 0) {
                    Py_DECREF(keys);
                    return -1;
                }
            }
            Py_DECREF(keys);
        }
    }
    b->depth--;
    return 0;
}

PyDoc_STRVAR(encode_doc,
             "encode(plan, obj): the struct message (no magic, no envelope) for the dict ``obj``; "
             "Fallback for anything the reference must decide (wrong types, out-of-range numbers, ...).");

static PyObject *m_encode(PyObject *mod, PyObject *args) {
    PlanObject *plan;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "O!O!:encode", &PlanType, &plan, &PyDict_Type, &obj))
        return NULL;
    if (payload_cb == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_pbfast.init() was not called");
        return NULL;
    }
    Buf b = {NULL, 0, 0, 0};
    if (encode_struct(&b, plan, obj) < 0) {
        PyMem_Free(b.p);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(b.p ? b.p : "", b.len);
    PyMem_Free(b.p);
    return out;
}

/* --- module functions ------------------------------------------------------------------------- */

PyDoc_STRVAR(decode_doc,
             "decode(plan, data, out): decodes the message ``data`` (bytes) into the dict ``out``; "
             "raises Fallback (or the Python helpers' errors) for anything the reference must decide.");

static PyObject *m_decode(PyObject *mod, PyObject *args) {
    PlanObject *plan;
    PyObject *data, *out;
    if (!PyArg_ParseTuple(args, "O!O!O!:decode", &PlanType, &plan, &PyBytes_Type, &data, &PyDict_Type, &out))
        return NULL;
    if (ld_cb == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_pbfast.init() was not called");
        return NULL;
    }
    Ctx c = {(const uint8_t *)PyBytes_AS_STRING(data), data, 0};
    if (decode_struct(&c, plan, 0, PyBytes_GET_SIZE(data), out, 1) < 0)
        return NULL;
    Py_INCREF(out);
    return out;
}

PyDoc_STRVAR(unknown_doc,
             "unknown(data): (apiVersion, kind, raw, contentEncoding, contentType) of enveloped bytes "
             "(magic already checked by the caller: parsing starts at offset 4); Fallback on anything odd.");

/* The envelope's spans: [0] apiVersion, [1] kind, [2] raw, [3] contentEncoding, [4] contentType
 * (each [start, end) in ``b``; empty when absent). -1 for anything unusual. */
enum { ENV_AV, ENV_KIND, ENV_RAW, ENV_CE, ENV_CT, ENV_SPANS };

static int parse_envelope(const uint8_t *b, Py_ssize_t end, Py_ssize_t spans[ENV_SPANS][2]) {
    Py_ssize_t pos = 4;
    memset(spans, 0, sizeof(Py_ssize_t) * 2 * ENV_SPANS);
    if (end < 4 || memcmp(b, "k8s\0", 4) != 0)
        return -1;
    while (pos < end) {
        uint64_t tag;
        Py_ssize_t e;
        if (read_varint(b, &pos, end, &tag) < 0 || (tag & 7) != 2 || read_len(b, &pos, end, &e) < 0)
            return -1;
        int field = (int)(tag >> 3);
        if (field == 1) {
            Py_ssize_t p = pos;
            while (p < e) {
                uint64_t t;
                Py_ssize_t se;
                if (read_varint(b, &p, e, &t) < 0 || (t != 0x0A && t != 0x12) || read_len(b, &p, e, &se) < 0)
                    return -1;
                spans[t == 0x0A ? ENV_AV : ENV_KIND][0] = p;
                spans[t == 0x0A ? ENV_AV : ENV_KIND][1] = se;
                p = se;
            }
        } else if (field >= 2 && field <= 4) {
            int i = field == 2 ? ENV_RAW : field == 3 ? ENV_CE : ENV_CT;
            spans[i][0] = pos;
            spans[i][1] = e;
        } else {
            return -1;
        }
        pos = e;
    }
    return 0;
}

static PyObject *m_unknown(PyObject *mod, PyObject *arg) {
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "bytes expected");
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(arg);
    Py_ssize_t spans[ENV_SPANS][2];
    if (parse_envelope(b, PyBytes_GET_SIZE(arg), spans) < 0)
        return fallback();
    static const int order[4] = {ENV_AV, ENV_KIND, ENV_CE, ENV_CT};
    PyObject *s[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        s[i] = decode_str(b, spans[order[i]][0], spans[order[i]][1]);
        if (s[i] == NULL) {
            for (int j = 0; j < i; j++)
                Py_DECREF(s[j]);
            PyErr_Clear();
            return fallback();
        }
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)b + spans[ENV_RAW][0],
                                              spans[ENV_RAW][1] - spans[ENV_RAW][0]);
    if (raw == NULL) {
        for (int j = 0; j < 4; j++)
            Py_DECREF(s[j]);
        return NULL;
    }
    return Py_BuildValue("(NNNNN)", s[0], s[1], raw, s[2], s[3]);
}

PyDoc_STRVAR(decode_object_doc,
             "decode_object(data, plans): enveloped bytes as a JSON object with apiVersion and kind, the "
             "message decoded by plans[(apiVersion, kind)]; None when the kind is not in ``plans``; "
             "Fallback for anything unusual (another content type or encoding, no kind, odd envelope).");

static PyObject *key_api_version, *key_kind;

#define TM_CACHE 8
typedef struct {
    PyObject *plans; /* the dict the plan was found in (held: its identity is the cache key) */
    PyObject *av, *kind;
    PlanObject *plan;
    Py_ssize_t av_len, len;
    uint8_t bytes[128];
} TypeMetaHit;
static TypeMetaHit tm_cache[TM_CACHE];
static int tm_next;

static PyObject *m_decode_object(PyObject *mod, PyObject *args) {
    PyObject *data, *plans;
    if (!PyArg_ParseTuple(args, "O!O!:decode_object", &PyBytes_Type, &data, &PyDict_Type, &plans))
        return NULL;
    if (ld_cb == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_pbfast.init() was not called");
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(data);
    Py_ssize_t spans[ENV_SPANS][2];
    if (parse_envelope(b, PyBytes_GET_SIZE(data), spans) < 0 || spans[ENV_CE][1] != spans[ENV_CE][0] ||
        spans[ENV_CT][1] != spans[ENV_CT][0])
        return fallback(); /* a content encoding or type: the caller decides */
    Py_ssize_t av0 = spans[ENV_AV][0], av1 = spans[ENV_AV][1], k0 = spans[ENV_KIND][0], k1 = spans[ENV_KIND][1];
    Py_ssize_t raw0 = spans[ENV_RAW][0], raw1 = spans[ENV_RAW][1];
    if (k1 == k0)
        return fallback();
    /* The typeMeta bytes of recent objects -> their strings and plan: most
     * bodies name one of a few kinds, so the look-up is a memcmp. */
    Py_ssize_t tm_len = (av1 - av0) + (k1 - k0);
    PyObject *av = NULL, *kind = NULL, *plan = NULL;
    if (av1 - av0 < 64 && k1 - k0 < 64) {
        for (int i = 0; i < TM_CACHE; i++) {
            TypeMetaHit *h = &tm_cache[i];
            if (h->plans == plans && h->av_len == av1 - av0 && h->len == tm_len &&
                memcmp(h->bytes, b + av0, av1 - av0) == 0 &&
                memcmp(h->bytes + h->av_len, b + k0, k1 - k0) == 0) {
                av = h->av;
                kind = h->kind;
                plan = (PyObject *)h->plan;
                Py_INCREF(av);
                Py_INCREF(kind);
                break;
            }
        }
    }
    if (plan != NULL)
        goto have_plan;
    av = decode_str(b, av0, av1);
    if (av == NULL) {
        PyErr_Clear();
        return fallback();
    }
    kind = decode_str(b, k0, k1);
    if (kind == NULL) {
        Py_DECREF(av);
        PyErr_Clear();
        return fallback();
    }
    PyObject *key = PyTuple_Pack(2, av, kind);
    plan = key ? PyDict_GetItemWithError(plans, key) : NULL;
    Py_XDECREF(key);
    if (plan == NULL || !PyObject_TypeCheck(plan, &PlanType)) {
        Py_DECREF(av);
        Py_DECREF(kind);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (av1 - av0 < 64 && k1 - k0 < 64) { /* remember it (round robin) */
        TypeMetaHit *h = &tm_cache[tm_next];
        tm_next = (tm_next + 1) % TM_CACHE;
        Py_XDECREF(h->av);
        Py_XDECREF(h->kind);
        Py_XDECREF((PyObject *)h->plan);
        Py_XDECREF(h->plans);
        Py_INCREF(av);
        Py_INCREF(kind);
        Py_INCREF(plan);
        Py_INCREF(plans);
        h->av = av;
        h->kind = kind;
        h->plan = (PlanObject *)plan;
        h->plans = plans;
        h->av_len = av1 - av0;
        h->len = tm_len;
        memcpy(h->bytes, b + av0, av1 - av0);
        memcpy(h->bytes + h->av_len, b + k0, k1 - k0);
    }
have_plan:;
    PlanObject *pl = (PlanObject *)plan;
    PyObject *out = _PyDict_NewPresized(pl->hint + 2);
    if (out == NULL || PyDict_SetItem(out, key_api_version, av) < 0 || PyDict_SetItem(out, key_kind, kind) < 0) {
        Py_XDECREF(out);
        Py_DECREF(av);
        Py_DECREF(kind);
        return NULL;
    }
    Py_DECREF(av);
    Py_DECREF(kind);
    Ctx c = {b, data, 0};
    if (decode_struct(&c, pl, raw0, raw1, out, 1) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

PyDoc_STRVAR(init_doc, "init(decode_ld, decode_entry, zeros, payload, time_seconds_nanos): the reference's "
                       "helpers and zero values per kind.");

static PyObject *m_init(PyObject *mod, PyObject *args) {
    PyObject *ld, *entry, *z, *payload, *tm;
    if (!PyArg_ParseTuple(args, "OOO!OO:init", &ld, &entry, &PyTuple_Type, &z, &payload, &tm))
        return NULL;
    Py_INCREF(payload);
    Py_XSETREF(payload_cb, payload);
    Py_INCREF(tm);
    Py_XSETREF(time_cb, tm);
    if (PyTuple_GET_SIZE(z) != K_COUNT) {
        PyErr_SetString(PyExc_ValueError, "one zero value per kind expected");
        return NULL;
    }
    Py_INCREF(ld);
    Py_XSETREF(ld_cb, ld);
    Py_INCREF(entry);
    Py_XSETREF(entry_cb, entry);
    for (int i = 0; i < K_COUNT; i++) {
        PyObject *v = PyTuple_GET_ITEM(z, i);
        Py_INCREF(v);
        Py_XSETREF(zeros[i], v);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"decode", m_decode, METH_VARARGS, decode_doc},
    {"encode", m_encode, METH_VARARGS, encode_doc},
    {"unknown", m_unknown, METH_O, unknown_doc},
    {"decode_object", m_decode_object, METH_VARARGS, decode_object_doc},
    {"init", m_init, METH_VARARGS, init_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_pbfast", "Protobuf decoding of the declared kinds in C (see the file's header).",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__pbfast(void) {
    uint16_t probe = 1;
    if (*(uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "_pbfast supports little-endian hosts only");
        return NULL;
    }
    if (PyType_Ready(&PlanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Fallback = PyErr_NewExceptionWithDoc("apiserver_min.api._pbfast.Fallback",
                                         "The reference decoder must decide this input.", NULL, NULL);
    str_zero = PyUnicode_InternFromString("0");
    key_api_version = PyUnicode_InternFromString("apiVersion");
    key_kind = PyUnicode_InternFromString("kind");
    if (Fallback == NULL || str_zero == NULL || key_api_version == NULL || key_kind == NULL)
        goto error;
    Py_INCREF(Fallback);
    if (PyModule_AddObject(m, "Fallback", Fallback) < 0)
        goto error;
    Py_INCREF(&PlanType);
    if (PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0)
        goto error;
    PyObject *kinds = Py_BuildValue("(iiiiiiiiiiiiii)", K_STR, K_I32, K_I64, K_BOOL, K_NUM, K_BYTES, K_TIME,
                                    K_MICRO, K_DUR, K_QTY, K_IOS, K_OPAQUE, K_STRUCT, K_WRAPPED);
    PyObject *ops = Py_BuildValue("(iiiiiiiiiiiiiiiiii)", OP_STR, OP_STR_KEEP, OP_STRUCT, OP_STRUCT_KEEP,
                                  OP_LIST_STR, OP_LIST_LD, OP_MAP_STR, OP_MAP, OP_VARINT, OP_VARINT_KEEP, OP_LD,
                                  OP_LD_KEEP, OP_INLINE, OP_PACKED, OP_LIST_VARINT, OP_FIXED, OP_FIXED_KEEP,
                                  OP_LIST_FIXED);
    if (kinds == NULL || ops == NULL || PyModule_AddObject(m, "KINDS", kinds) < 0 ||
        PyModule_AddObject(m, "OPS", ops) < 0)
        goto error;
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
