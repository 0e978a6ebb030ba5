/* JSON text as the compiled reader reads and writes it (included by _kineto_reader.c only).
 *
 * Strings decoded or re-escaped as yyjson writes them, numbers' extents, integers exact to int64,
 * doubles in their shortest round-trip digits, any value written back minified: what the reader
 * needs of JSON itself, apart from the events and their columns. Every function gives up (BAIL) on
 * what it cannot reproduce exactly as DuckDB's path would, and BAIL_SPACE when its output buffer
 * is full; the caller then gives the chunk back (see _kineto_reader.c).
 *
 * Static functions in a header, so that the reader's hot calls (a string per field) still inline.
 */
#ifndef HS_JSON_TEXT_H
#define HS_JSON_TEXT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "_json_plain.h"

enum { BAIL = -1, BAIL_SPACE = -2, BAIL_COUNT = -3 };

typedef struct {
    const char *p, *end;
} cursor;

#define MAX_DEPTH 256

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
        p = hs_plain_run(p, end);
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

#endif
