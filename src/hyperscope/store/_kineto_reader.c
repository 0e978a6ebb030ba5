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

#include "_json_text.h"

enum { T_INT = 0, T_DOUBLE = 1, T_STR = 2, T_LIST = 3 };

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

#define MAX_KEYS 128

static const char PHASES[] = "BEXiICbneSTpFstfPONDMVvRc()";

static void set_valid(uint8_t *bits, int64_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }

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
