/* How many complete JSON values a run of bytes holds: what the streaming reader asks of every
 * place it may cut a trace (store/_tracefile.py, TraceFile._events_in).
 *
 * The text is values separated by commas and JSON whitespace, as inside a JSON array. The answer
 * must be the one msgspec gives when it decodes "[" + text + "]" as a list of raw values, which
 * was a fifth of an import's time (the list of 50,000 raw values per 16 MB built and freed only
 * to be counted). So this counts only what it is sure of: strict RFC 8259 values, strings of valid
 * UTF-8 and escapes, no escaped surrogate, nesting at most MAX_NEST. On anything else it says
 * UNSURE and the caller asks msgspec, which accepts or refuses (and names the error) as before.
 */
#include <stdint.h>

#include "_json_plain.h"

#define UNSURE (-2)
#define MAX_NEST 128

typedef struct {
    const unsigned char *p, *end;
} span;

static void skip_ws(span *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static int is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* in _kineto_reader.c: a UTF-8 sequence's length at p (its first byte >= 0x80), 0 when invalid */
int hs_utf8_len(const unsigned char *p, const unsigned char *end);

/* the string at s->p (its opening quote); 0 on success */
static int string(span *s) {
    s->p++;
    while (s->p < s->end) {
        s->p = (const unsigned char *)hs_plain_run((const char *)s->p, (const char *)s->end);
        if (s->p >= s->end) break;
        unsigned char c = *s->p;
        if (c == '"') {
            s->p++;
            return 0;
        }
        if (c < 0x20) return UNSURE;
        if (c == '\\') {
            if (s->end - s->p < 2) return UNSURE;
            unsigned char e = s->p[1];
            if (e == 'u') {
                if (s->end - s->p < 6) return UNSURE;
                for (int i = 2; i < 6; i++)
                    if (!is_hex(s->p[i])) return UNSURE;
                unsigned char d1 = s->p[2] | 0x20, d2 = s->p[3] | 0x20; /* lower case */
                if (d1 == 'd' && (d2 == '8' || d2 == '9' || (d2 >= 'a' && d2 <= 'f')))
                    return UNSURE; /* D800-DFFF: a surrogate, paired or not; msgspec decides */
                s->p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                s->p += 2;
            } else {
                return UNSURE;
            }
        } else if (c >= 0x80) {
            int n = hs_utf8_len(s->p, s->end);
            if (n == 0) return UNSURE;
            s->p += n;
        } else {
            s->p++;
        }
    }
    return UNSURE; /* ends inside the string */
}

static int digits(span *s) {
    const unsigned char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
    return s->p > start ? 0 : UNSURE;
}

static int number(span *s) {
    if (*s->p == '-') s->p++;
    if (s->p >= s->end) return UNSURE;
    if (*s->p == '0') s->p++;
    else if (digits(s) != 0) return UNSURE;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (digits(s) != 0) return UNSURE;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (digits(s) != 0) return UNSURE;
    }
    return 0;
}

static int literal(span *s, const char *word, int n) {
    if (s->end - s->p < n) return UNSURE;
    for (int i = 0; i < n; i++)
        if (s->p[i] != (unsigned char)word[i]) return UNSURE;
    s->p += n;
    return 0;
}

static int value(span *s, int depth);

/* an object or an array at s->p */
static int container(span *s, int depth) {
    unsigned char close = *s->p == '{' ? '}' : ']';
    int object = close == '}';
    if (depth >= MAX_NEST) return UNSURE;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    for (;;) {
        if (object) {
            if (s->p >= s->end || *s->p != '"' || string(s) != 0) return UNSURE;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':') return UNSURE;
            s->p++;
            skip_ws(s);
        }
        if (value(s, depth + 1) != 0) return UNSURE;
        skip_ws(s);
        if (s->p >= s->end) return UNSURE;
        if (*s->p == close) {
            s->p++;
            return 0;
        }
        if (*s->p != ',') return UNSURE;
        s->p++;
        skip_ws(s);
    }
}

static int value(span *s, int depth) {
    if (s->p >= s->end) return UNSURE;
    switch (*s->p) {
        case '{':
        case '[':
            return container(s, depth);
        case '"':
            return string(s);
        case 't':
            return literal(s, "true", 4);
        case 'f':
            return literal(s, "false", 5);
        case 'n':
            return literal(s, "null", 4);
        default:
            if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) return number(s);
            return UNSURE;
    }
}

/* The values in text[0..n): their count, with the longest one's bytes in *largest; UNSURE when
 * the text is not surely that (the caller then asks msgspec). */
int64_t hs_count_values(const char *text, int64_t n, int64_t *largest) {
    span s = {(const unsigned char *)text, (const unsigned char *)text + n};
    int64_t count = 0, most = 0;
    skip_ws(&s);
    if (s.p == s.end) {
        *largest = 0;
        return 0;
    }
    for (;;) {
        const unsigned char *start = s.p;
        if (value(&s, 0) != 0) return UNSURE;
        if (s.p - start > most) most = s.p - start;
        count++;
        skip_ws(&s);
        if (s.p == s.end) break;
        if (*s.p != ',') return UNSURE;
        s.p++;
        skip_ws(&s);
    }
    *largest = most;
    return count;
}
