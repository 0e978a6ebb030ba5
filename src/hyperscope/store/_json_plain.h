/* The run of "plain" string bytes at p: printable ASCII other than the quote and the backslash,
 * which a JSON string holds as they are. Most of a trace's bytes are inside strings (names, args
 * keys), so both of the import's scanners (_json_values.c, _json_text.h) find where a run ends
 * eight bytes at a time, then byte by byte within the last eight. */
#ifndef HS_JSON_PLAIN_H
#define HS_JSON_PLAIN_H
#include <stdint.h>
#include <string.h>

static inline int hs_plain(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

static inline const char *hs_plain_run(const char *p, const char *end) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t x, q, b;
        memcpy(&x, p, 8);
        q = x ^ (ones * '"');
        b = x ^ (ones * '\\');
        /* any byte zero in q or b, any byte below 0x20, or any byte with its high bit */
        if ((((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x) | x) & highs) break;
        p += 8;
    }
    while (p < end && hs_plain((unsigned char)*p)) p++;
    return p;
}
#endif
