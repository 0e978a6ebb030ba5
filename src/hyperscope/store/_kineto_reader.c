/* Kineto / Chrome-trace events -> typed columns, in one pass over a chunk's bytes.
 *
 * The input is a chunk as the streaming reader cuts it: complete event objects separated by commas
 * and any JSON whitespace. The output is Arrow buffers (values, validity bitmaps, offsets) for the
 * columns of the event schema that come from the source; kind, rank, node and memcpy_kind are
 * computed afterwards in SQL over these columns.
 *
 * The rows must be the ones DuckDB's SQL transform (store/_sql.py) gives. This reader therefore
 * accepts only what it can reproduce exactly, and gives up on the whole chunk (returns a negative
 * code) on anything else: an unknown or duplicate key, a pid that is not an integer, a time with an
 * exponent, an integer beyond int64, a lone surrogate, ... The caller then takes the DuckDB path,
 * which accepts or refuses the chunk as before, with its errors. So this file never decides
 * whether an event is valid; it only decides whether it may answer for the chunk. What it accepts
 * is also safe for DuckDB's lenient reader (store/_validate.fast_path_safe): no number beyond
 * int64 or with a three-digit exponent, no NaN, no trailing comma, no string or boolean time; so
 * that check is only made for the chunks it gives back.
 *
 * args are written back as DuckDB (yyjson) writes them: minified, keys in source order, strings
 * re-escaped ("\/" -> "/", \uXXXX -> UTF-8, control characters as \n or \u001F), doubles in their
 * shortest round-trip digits (decimal notation for 1e-6 <= |v| < 1e21, else 1e21 / 1.5e-7).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_INT = 0, T_DOUBLE = 1, T_STR = 2, T_LIST = 3 };
enum { BAIL = -1, BAIL_SPACE = -2, BAIL_COUNT = -3 };

typedef struct {
    int32_t type;
    int32_t keylen;
    const char *key;      /* args key (typed columns only) */
    void *values;         /* int64 / double values; list: child int64 values */
    int32_t *offsets;     /* strings and lists: n + 1 offsets */
    char *data;           /* strings: bytes */
    uint8_t *valid;       /* Arrow validity bitmap */
    int64_t cap;          /* bytes in data / int64 slots in a list's values */
    int64_t used;         /* out: bytes or values written */
} column;

/* fixed columns, in this order, then the typed args columns */
enum { C_PH, C_CAT, C_NAME, C_PID, C_TID, C_TS, C_DUR, C_ID, C_ARGS, C_EXTRA, C_FIXED };

typedef struct {
    const char *p, *end;
} cursor;

#define MAX_DEPTH 256
#define MAX_KEYS 128

static const char PHASES[] = "BEXiICbneSTpFstfPONDMVvRc()";

static void set_valid(uint8_t *bits, int64_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }

static void ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

/* ---- output buffer ---- */
typedef struct {
    char *p, *end;
} out;

#define PUT(o, ch)                                  \
    do {                                            \
        if ((o)->p >= (o)->end) return BAIL_SPACE;  \
        *(o)->p++ = (ch);                           \
    } while (0)

static int put_bytes(out *o, const char *s, int64_t n) {
    if (o->end - o->p < n) return BAIL_SPACE;
    memcpy(o->p, s, (size_t)n);
    o->p += n;
    return 0;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_hex4(const char *p, const char *end, uint32_t *v) {
    if (end - p < 4) return BAIL;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return BAIL;
        r = r * 16 + (uint32_t)h;
    }
    *v = r;
    return 0;
}

/* length of a valid UTF-8 sequence starting at p (first byte >= 0x80), 0 when invalid (also used
 * by _json_values.c, compiled into the same library) */
int hs_utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char b = p[0];
    int n;
    uint32_t cp;
    if (b >= 0xC2 && b <= 0xDF) n = 2, cp = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF) n = 3, cp = b & 0x0F;
    else if (b >= 0xF0 && b <= 0xF4) n = 4, cp = b & 0x07;
    else return 0;
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return n;
}

static int put_utf8(out *o, uint32_t cp) {
    if (cp < 0x80) PUT(o, (char)cp);
    else if (cp < 0x800) {
        PUT(o, (char)(0xC0 | (cp >> 6)));
        PUT(o, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        PUT(o, (char)(0xE0 | (cp >> 12)));
        PUT(o, (char)(0x80 | ((cp >> 6) & 0x3F)));
        PUT(o, (char)(0x80 | (cp & 0x3F)));
    } else {
        PUT(o, (char)(0xF0 | (cp >> 18)));
        PUT(o, (char)(0x80 | ((cp >> 12) & 0x3F)));
        PUT(o, (char)(0x80 | ((cp >> 6) & 0x3F)));
        PUT(o, (char)(0x80 | (cp & 0x3F)));
    }
    return 0;
}

/* A JSON string at c->p (the opening quote). escaped=0: its value, decoded (refusing NUL);
 * escaped=1: the string as yyjson writes it, quotes included. */
static int string(cursor *c, out *o, int escaped) {
    const char *p = c->p + 1, *end = c->end;
    if (escaped) PUT(o, '"');
    for (;;) {
        const char *run = p;
        while (p < end && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p > run && put_bytes(o, run, p - run)) return BAIL_SPACE;
        if (p >= end) return BAIL;
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') break;
        if (ch < 0x20) return BAIL;
        if (ch >= 0x80) {
            int n = hs_utf8_len((const unsigned char *)p, (const unsigned char *)end);
            if (!n || put_bytes(o, p, n)) return BAIL;
            p += n;
            continue;
        }
        /* a backslash */
        if (p + 1 >= end) return BAIL;
        char e = p[1];
        uint32_t cp;
        p += 2;
        switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (read_hex4(p, end, &cp)) return BAIL;
                p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return BAIL; /* lone low surrogate */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_hex4(p + 2, end, &lo)) return BAIL;
                    if (lo < 0xDC00 || lo > 0xDFFF) return BAIL;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
                break;
            default: return BAIL;
        }
        if (!escaped) {
            if (cp == 0) return BAIL;
            if (put_utf8(o, cp)) return BAIL_SPACE;
        } else if (cp == '"' || cp == '\\') {
            PUT(o, '\\');
            PUT(o, (char)cp);
        } else if (cp < 0x20) {
            static const char hex[] = "0123456789ABCDEF";
            char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
            int n = 2;
            switch (cp) {
                case '\b': esc[1] = 'b'; break;
                case '\f': esc[1] = 'f'; break;
                case '\n': esc[1] = 'n'; break;
                case '\r': esc[1] = 'r'; break;
                case '\t': esc[1] = 't'; break;
                default:
                    memcpy(esc + 1, "u00", 3);
                    esc[4] = hex[cp >> 4];
                    esc[5] = hex[cp & 15];
                    n = 6;
            }
            if (put_bytes(o, esc, n)) return BAIL_SPACE;
        } else if (put_utf8(o, cp)) return BAIL_SPACE;
    }
    if (escaped) PUT(o, '"');
    c->p = p + 1;
    return 0;
}

/* A JSON number's extent; *is_int says whether it has neither fraction nor exponent. */
static int number_span(cursor *c, const char **start, int64_t *len, int *is_int) {
    const char *p = c->p, *end = c->end;
    *start = p;
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end || *p < '0' || *p > '9') return BAIL;
    if (*p == '0') p++;
    else while (p < end && *p >= '0' && *p <= '9') p++;
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return BAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        /* three exponent digits may overflow or underflow a double, which the exact path refuses
         * (the same rule as _validate.fast_path_safe) */
        if (p == digits || p - digits > 2) return BAIL;
    }
    *len = p - *start;
    c->p = p;
    return 0;
}

/* An integer's text as int64; BAIL beyond int64 and for "-0" (DuckDB's types differ there). */
static int parse_int(const char *s, int64_t n, int64_t *v) {
    int neg = s[0] == '-';
    const char *p = s + neg, *end = s + n;
    uint64_t r = 0;
    if (end - p > 19) return BAIL;
    for (; p < end; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (r > (UINT64_MAX - d) / 10) return BAIL;
        r = r * 10 + d;
    }
    if (neg) {
        if (r == 0 || r > (uint64_t)INT64_MAX + 1) return BAIL;
        *v = (int64_t)(0 - r);
    } else {
        if (r > (uint64_t)INT64_MAX) return BAIL;
        *v = (int64_t)r;
    }
    return 0;
}

static int parse_double(const char *s, int64_t n, double *v) {
    char buf[64];
    if (n >= (int64_t)sizeof buf) return BAIL;
    memcpy(buf, s, (size_t)n);
    buf[n] = 0;
    char *e;
    *v = strtod(buf, &e);
    return e == buf + n ? 0 : BAIL;
}

/* A double as yyjson writes it: shortest round-trip digits; decimal notation (with ".0" for whole
 * numbers) when 1e-6 <= |v| < 1e21, else d[.ddd]e[-]x. */
static int put_double(out *o, double v) {
    char buf[40], digits[20];
    int nd = 0, exp10 = 0;
    if (v != v || v - v != 0) return BAIL;
    if (v == 0) {
        if (1 / v < 0) return put_bytes(o, "-0.0", 4);
        return put_bytes(o, "0.0", 3);
    }
    for (int prec = 0; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    char *p = buf;
    if (*p == '-') {
        PUT(o, '-');
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (exp10 >= -6 && exp10 < 21) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) PUT(o, i < nd ? digits[i] : '0');
            PUT(o, '.');
            if (nd > exp10 + 1) {
                if (put_bytes(o, digits + exp10 + 1, nd - exp10 - 1)) return BAIL_SPACE;
            } else PUT(o, '0');
        } else {
            PUT(o, '0');
            PUT(o, '.');
            for (int i = 0; i < -exp10 - 1; i++) PUT(o, '0');
            if (put_bytes(o, digits, nd)) return BAIL_SPACE;
        }
        return 0;
    }
    PUT(o, digits[0]);
    if (nd > 1) {
        PUT(o, '.');
        if (put_bytes(o, digits + 1, nd - 1)) return BAIL_SPACE;
    }
    int n = snprintf(buf, sizeof buf, "e%d", exp10);
    return put_bytes(o, buf, n);
}

/* Any JSON value, written as yyjson writes it. */
static int value(cursor *c, out *o, int depth) {
    if (depth > MAX_DEPTH || c->p >= c->end) return BAIL;
    char ch = *c->p;
    int rc;
    if (ch == '"') return string(c, o, 1);
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        PUT(o, ch);
        c->p++;
        ws(c);
        if (c->p < c->end && *c->p == close) {
            c->p++;
            PUT(o, close);
            return 0;
        }
        for (int first = 1;; first = 0) {
            if (!first) PUT(o, ',');
            if (ch == '{') {
                if (c->p >= c->end || *c->p != '"') return BAIL;
                if ((rc = string(c, o, 1))) return rc;
                ws(c);
                if (c->p >= c->end || *c->p != ':') return BAIL;
                c->p++;
                ws(c);
                PUT(o, ':');
            }
            if ((rc = value(c, o, depth + 1))) return rc;
            ws(c);
            if (c->p >= c->end) return BAIL;
            if (*c->p == close) {
                c->p++;
                PUT(o, close);
                return 0;
            }
            if (*c->p != ',') return BAIL;
            c->p++;
            ws(c);
        }
    }
    if (ch == 't' || ch == 'f' || ch == 'n') {
        const char *w = ch == 't' ? "true" : ch == 'f' ? "false" : "null";
        int64_t n = (int64_t)strlen(w);
        if (c->end - c->p < n || memcmp(c->p, w, (size_t)n)) return BAIL;
        c->p += n;
        return put_bytes(o, w, n);
    }
    const char *s;
    int64_t n, iv;
    int is_int;
    double d;
    if ((rc = number_span(c, &s, &n, &is_int))) return rc;
    if (is_int) return parse_int(s, n, &iv) ? BAIL : put_bytes(o, s, n);
    if (parse_double(s, n, &d)) return BAIL;
    return put_double(o, d);
}

/* A JSON string skipped (only its extent matters: it is decoded again when written). */
static int skip_string(cursor *c) {
    const char *p = c->p + 1;
    while (p < c->end && *p != '"') p += *p == '\\' ? 2 : 1;
    if (p >= c->end) return BAIL;
    c->p = p + 1;
    return 0;
}

/* Exact integer nanoseconds from a non-negative decimal of microseconds (DuckDB's DECIMAL(38,3):
 * the fourth decimal rounds half away from zero). */
static int micros_to_ns(const char *s, int64_t n, int64_t *ns) {
    const char *p = s, *end = s + n;
    uint64_t whole = 0;
    if (p < end && *p == '-') {
        /* negative times are refused by the SQL path; only -0 and -0.000 pass there */
        return BAIL;
    }
    for (; p < end && *p != '.'; p++) {
        if (*p < '0' || *p > '9' || whole > 9223372036854775ULL) return BAIL;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    uint64_t frac = 0;
    int nf = 0, up = 0;
    if (p < end) {
        for (p++; p < end; p++, nf++) {
            if (*p < '0' || *p > '9') return BAIL;
            if (nf < 3) frac = frac * 10 + (uint64_t)(*p - '0');
            else if (nf == 3) up = *p >= '5';
        }
    }
    for (; nf < 3; nf++) frac *= 10;
    if (whole > 9223372036854775ULL) return BAIL;
    uint64_t r = whole * 1000 + frac + (uint64_t)up;
    if (r > (uint64_t)INT64_MAX) return BAIL;
    *ns = (int64_t)r;
    return 0;
}

static int str_col(column *col, int64_t row, cursor *c, int escaped) {
    out o = {col->data + col->used, col->data + col->cap};
    int rc = string(c, &o, escaped);
    if (rc) return rc;
    col->used = o.p - col->data;
    if (col->used > INT32_MAX) return BAIL_SPACE;
    col->offsets[row + 1] = (int32_t)col->used;
    set_valid(col->valid, row);
    return 0;
}

/* One typed args value, when it is of the column's type; 1 when it is not (it stays in args). */
static int typed(column *col, int64_t row, cursor *c) {
    const char *s;
    int64_t n, iv;
    int is_int, rc;
    char ch = *c->p;
    cursor save = *c;
    switch (col->type) {
        case T_STR:
            if (ch != '"') return 1;
            return str_col(col, row, c, 0);
        case T_INT:
        case T_DOUBLE:
            if (ch != '-' && (ch < '0' || ch > '9')) return 1;
            if ((rc = number_span(c, &s, &n, &is_int))) return rc;
            if (col->type == T_INT) {
                if (!is_int) {
                    *c = save;
                    return 1;
                }
                if (parse_int(s, n, &iv)) return BAIL;
                ((int64_t *)col->values)[row] = iv;
            } else {
                if (is_int) {
                    *c = save;
                    return 1;
                }
                if (parse_double(s, n, &((double *)col->values)[row])) return BAIL;
            }
            set_valid(col->valid, row);
            return 0;
        case T_LIST: {
            if (ch != '[') return 1;
            int64_t at = col->used;
            c->p++;
            ws(c);
            if (c->p < c->end && *c->p == ']') c->p++;
            else
                for (;;) {
                    if (c->p >= c->end || (*c->p != '-' && (*c->p < '0' || *c->p > '9'))) {
                        *c = save;
                        return 1;
                    }
                    if ((rc = number_span(c, &s, &n, &is_int))) return rc;
                    if (!is_int) {
                        *c = save;
                        return 1;
                    }
                    if (parse_int(s, n, &iv)) return BAIL;
                    if (at >= col->cap) return BAIL_SPACE;
                    ((int64_t *)col->values)[at++] = iv;
                    ws(c);
                    if (c->p < c->end && *c->p == ']') {
                        c->p++;
                        break;
                    }
                    if (c->p >= c->end || *c->p != ',') return BAIL;
                    c->p++;
                    ws(c);
                }
            col->used = at;
            if (at > INT32_MAX) return BAIL_SPACE;
            col->offsets[row + 1] = (int32_t)at;
            set_valid(col->valid, row);
            return 0;
        }
    }
    return BAIL;
}

static int args(column *cols, int ncols, int64_t row, cursor *c) {
    column *a = &cols[C_ARGS];
    out o = {a->data + a->used, a->data + a->cap};
    out keybuf;
    char keys[4096];
    const char *kstart[MAX_KEYS];
    int klen[MAX_KEYS], nk = 0, rc, wrote = 0;
    c->p++;
    ws(c);
    PUT(&o, '{');
    keybuf.p = keys;
    keybuf.end = keys + sizeof keys;
    if (c->p < c->end && *c->p == '}') c->p++;
    else
        for (;;) {
            if (c->p >= c->end || *c->p != '"' || nk >= MAX_KEYS) return BAIL;
            const char *kp = keybuf.p;
            cursor kc = *c;
            if ((rc = string(c, &keybuf, 0))) return BAIL;
            int kl = (int)(keybuf.p - kp);
            for (int i = 0; i < nk; i++)
                if (klen[i] == kl && !memcmp(kstart[i], kp, (size_t)kl)) return BAIL; /* duplicate */
            kstart[nk] = kp, klen[nk++] = kl;
            ws(c);
            if (c->p >= c->end || *c->p != ':') return BAIL;
            c->p++;
            ws(c);
            if (c->p >= c->end) return BAIL;
            int kept = 1;
            for (int i = C_FIXED; i < ncols; i++) {
                if (cols[i].keylen == kl && !memcmp(cols[i].key, kp, (size_t)kl)) {
                    rc = typed(&cols[i], row, c);
                    if (rc < 0) return rc;
                    kept = rc;
                    break;
                }
            }
            if (kept) {
                if (wrote++) PUT(&o, ',');
                if ((rc = string(&kc, &o, 1))) return rc;
                PUT(&o, ':');
                if ((rc = value(c, &o, 1))) return rc;
            }
            ws(c);
            if (c->p >= c->end) return BAIL;
            if (*c->p == '}') {
                c->p++;
                break;
            }
            if (*c->p != ',') return BAIL;
            c->p++;
            ws(c);
        }
    PUT(&o, '}');
    a->used = o.p - a->data;
    if (a->used > INT32_MAX) return BAIL_SPACE;
    a->offsets[row + 1] = (int32_t)a->used;
    set_valid(a->valid, row);
    return 0;
}

enum { K_PH = 1, K_CAT = 2, K_NAME = 4, K_PID = 8, K_TID = 16, K_TS = 32, K_DUR = 64, K_ID = 128,
       K_BP = 256, K_S = 512, K_ARGS = 1024 };

static int key_of(const char *k, int64_t n) {
    switch (n) {
        case 1: return *k == 's' ? K_S : 0;
        case 2:
            if (!memcmp(k, "ph", 2)) return K_PH;
            if (!memcmp(k, "ts", 2)) return K_TS;
            if (!memcmp(k, "id", 2)) return K_ID;
            if (!memcmp(k, "bp", 2)) return K_BP;
            return 0;
        case 3:
            if (!memcmp(k, "cat", 3)) return K_CAT;
            if (!memcmp(k, "pid", 3)) return K_PID;
            if (!memcmp(k, "tid", 3)) return K_TID;
            if (!memcmp(k, "dur", 3)) return K_DUR;
            return 0;
        case 4:
            if (!memcmp(k, "name", 4)) return K_NAME;
            if (!memcmp(k, "args", 4)) return K_ARGS;
            return 0;
    }
    return 0;
}

static int int_field(column *col, int64_t row, cursor *c) {
    const char *s;
    int64_t n, v;
    int is_int, rc;
    if (c->p >= c->end || (*c->p != '-' && (*c->p < '0' || *c->p > '9'))) return BAIL;
    if ((rc = number_span(c, &s, &n, &is_int))) return rc;
    if (!is_int || parse_int(s, n, &v)) return BAIL;
    ((int64_t *)col->values)[row] = v;
    set_valid(col->valid, row);
    return 0;
}

static int time_field(column *col, int64_t row, cursor *c) {
    const char *s;
    int64_t n, v;
    int is_int, rc;
    if (c->p >= c->end || (*c->p != '-' && (*c->p < '0' || *c->p > '9'))) return BAIL;
    if ((rc = number_span(c, &s, &n, &is_int))) return rc;
    for (int64_t i = 0; i < n; i++)
        if (s[i] == 'e' || s[i] == 'E') return BAIL;
    if (micros_to_ns(s, n, &v)) return BAIL;
    ((int64_t *)col->values)[row] = v;
    set_valid(col->valid, row);
    return 0;
}

static int event(column *cols, int ncols, int64_t row, cursor *c) {
    int seen = 0, rc;
    /* string values of pid, tid, id, bp, s: kept in extra, in this order */
    const char *extra[5] = {NULL, NULL, NULL, NULL, NULL};
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') return BAIL; /* no ph */
    for (;;) {
        if (c->p >= c->end || *c->p != '"') return BAIL;
        const char *k = c->p + 1, *q = k;
        while (q < c->end && *q != '"' && *q != '\\') q++;
        if (q >= c->end || *q != '"') return BAIL;
        int key = key_of(k, q - k);
        if (!key || (seen & key)) return BAIL; /* unknown or duplicate: the SQL path decides */
        seen |= key;
        c->p = q + 1;
        ws(c);
        if (c->p >= c->end || *c->p != ':') return BAIL;
        c->p++;
        ws(c);
        if (c->p >= c->end) return BAIL;
        switch (key) {
            case K_PH:
            case K_CAT:
            case K_NAME:
                if (*c->p != '"') return BAIL;
                if ((rc = str_col(&cols[key == K_PH ? C_PH : key == K_CAT ? C_CAT : C_NAME], row, c, 0))) return rc;
                break;
            case K_PID:
            case K_TID:
            case K_ID:
                if (*c->p == '"') {
                    extra[key == K_PID ? 0 : key == K_TID ? 1 : 2] = c->p;
                    if ((rc = skip_string(c))) return rc;
                } else if ((rc = int_field(&cols[key == K_PID ? C_PID : key == K_TID ? C_TID : C_ID], row, c)))
                    return rc;
                break;
            case K_TS: if ((rc = time_field(&cols[C_TS], row, c))) return rc; break;
            case K_DUR: if ((rc = time_field(&cols[C_DUR], row, c))) return rc; break;
            case K_BP:
            case K_S:
                if (*c->p != '"') return BAIL;
                extra[key == K_BP ? 3 : 4] = c->p;
                if ((rc = skip_string(c))) return rc;
                break;
            case K_ARGS:
                if (*c->p != '{') return BAIL;
                if ((rc = args(cols, ncols, row, c))) return rc;
                break;
        }
        ws(c);
        if (c->p >= c->end) return BAIL;
        if (*c->p == '}') {
            c->p++;
            break;
        }
        if (*c->p != ',') return BAIL;
        c->p++;
        ws(c);
    }
    /* what invalid_rows() refuses: the SQL path names it */
    if (!(seen & K_PH)) return BAIL;
    column *ph = &cols[C_PH];
    int32_t p0 = ph->offsets[row], p1 = ph->offsets[row + 1];
    if (p1 - p0 != 1 || !strchr(PHASES, ph->data[p0])) return BAIL;
    char phase = ph->data[p0];
    if (phase == 'X' && (!(seen & K_NAME) || !(seen & K_DUR))) return BAIL;
    if (phase != 'M' && !(seen & K_TS)) return BAIL;
    if ((seen & K_TS) && (seen & K_DUR)) {
        int64_t ts = ((int64_t *)cols[C_TS].values)[row], dur = ((int64_t *)cols[C_DUR].values)[row];
        if (ts > INT64_MAX - dur) return BAIL;
    }
    if (extra[0] || extra[1] || extra[2] || extra[3] || extra[4]) {
        /* as json_merge_patch('{}', json_object('pid', ..., 's', s)) writes it */
        static const char *names[5] = {"\"pid\":", "\"tid\":", "\"id\":", "\"bp\":", "\"s\":"};
        column *x = &cols[C_EXTRA];
        out o = {x->data + x->used, x->data + x->cap};
        int wrote = 0;
        PUT(&o, '{');
        for (int i = 0; i < 5; i++) {
            if (!extra[i]) continue;
            if (wrote++) PUT(&o, ',');
            if (put_bytes(&o, names[i], (int64_t)strlen(names[i]))) return BAIL_SPACE;
            cursor vc = {extra[i], c->end};
            if ((rc = string(&vc, &o, 1))) return rc;
        }
        PUT(&o, '}');
        x->used = o.p - x->data;
        if (x->used > INT32_MAX) return BAIL_SPACE;
        x->offsets[row + 1] = (int32_t)x->used;
        set_valid(x->valid, row);
    }
    return 0;
}

static __thread int64_t given_back_at;

/* Where the last call on this thread gave its chunk back (a byte offset): for diagnostics. */
int64_t hs_given_back_at(void) { return given_back_at; }

/* Fill the columns from n events of text; returns n, or a negative code (give the chunk to SQL). */
int64_t hs_read_events(const char *text, int64_t len, int64_t n, column *cols, int ncols) {
    cursor c = {text, text + len};
    int64_t row = 0;
    int rc;
    ws(&c);
    while (c.p < c.end) {
        if (row >= n) return BAIL_COUNT;
        for (int i = 0; i < ncols; i++)
            if (cols[i].offsets) cols[i].offsets[row + 1] = cols[i].offsets[row];
        if (*c.p != '{') return BAIL;
        if ((rc = event(cols, ncols, row, &c))) {
            given_back_at = c.p - text;
            return rc;
        }
        row++;
        ws(&c);
        if (c.p >= c.end) break;
        if (*c.p != ',') return BAIL;
        c.p++;
        ws(&c);
        if (c.p >= c.end) return BAIL;
    }
    return row == n ? row : BAIL_COUNT;
}
