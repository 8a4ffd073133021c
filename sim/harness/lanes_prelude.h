// The lanes model's types and helpers (sim/lanes_cpp.py puts this file at the head of every
// model it writes: docs/sim.md, "The lanes model").
//
// A signal of one bit is a mask M, lane l its bit l, so the tile's control logic runs as
// scalar instructions beside the vectors; a wider signal is a vector W (16 lanes of 32 bits)
// or D (16 lanes of 64 bits). Helpers move between the two: BIT (bit k of every lane as a
// mask), NZ (lanes not zero), EXPAND (a value in the lanes of a mask, 0 in the others), SEL
// (per lane: b where the mask is set, else a), CMPU/CMPS (an unsigned or signed comparison
// whose code is AVX-512's: 0 ==, 1 <, 2 <=, 4 !=, 5 >=, 6 >), PERM (lanes moved: the
// exchanges between tiles).
#pragma once
#include <cstdint>
#include <cstring>
#include "verilated.h"

typedef uint32_t W __attribute__((vector_size(64)));
typedef int32_t SW __attribute__((vector_size(64)));
typedef uint64_t D __attribute__((vector_size(128)));
typedef int64_t SD __attribute__((vector_size(128)));
typedef uint32_t M;
constexpr M ALL = 0xFFFFu;
#define TO_W(x) __builtin_convertvector((x), W)
#define TO_D(x) __builtin_convertvector((x), D)

// A memory is [words][16 lanes]; lane l reads word a[l] of its own column (0 past the end),
// and writes the bits of `e` from `d` where `e` is not 0.
#if defined(__AVX512F__)
#include <immintrin.h>
static const W IOTA = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
union Halves { D d; __m512i h[2]; };
static inline __m512i half(D x, int k) { Halves u; u.d = x; return u.h[k]; }
static inline D join(__m512i lo, __m512i hi) { Halves u; u.h[0] = lo; u.h[1] = hi; return u.d; }
static inline M pair(__mmask8 lo, __mmask8 hi) { return M(lo) | M(hi) << 8; }

static inline M BIT_W(W x, int k) {
    return _mm512_test_epi32_mask((__m512i)x, _mm512_set1_epi32(int(1u << k)));
}
static inline M BIT_D(D x, int k) {
    __m512i b = _mm512_set1_epi64((long long)(1ull << k));
    return pair(_mm512_test_epi64_mask(half(x, 0), b), _mm512_test_epi64_mask(half(x, 1), b));
}
static inline M NZ_W(W x) { return _mm512_test_epi32_mask((__m512i)x, (__m512i)x); }
static inline M NZ_D(D x) {
    return pair(_mm512_test_epi64_mask(half(x, 0), half(x, 0)),
                _mm512_test_epi64_mask(half(x, 1), half(x, 1)));
}
static inline W EXPAND_W(M m, uint32_t v) {
    return (W)_mm512_maskz_mov_epi32(__mmask16(m), _mm512_set1_epi32(int(v)));
}
static inline D EXPAND_D(M m, uint64_t v) {
    __m512i c = _mm512_set1_epi64((long long)v);
    return join(_mm512_maskz_mov_epi64(__mmask8(m), c), _mm512_maskz_mov_epi64(__mmask8(m >> 8), c));
}
static inline W SEL_W(M m, W a, W b) {
    return (W)_mm512_mask_blend_epi32(__mmask16(m), (__m512i)a, (__m512i)b);
}
static inline D SEL_D(M m, D a, D b) {
    return join(_mm512_mask_blend_epi64(__mmask8(m), half(a, 0), half(b, 0)),
                _mm512_mask_blend_epi64(__mmask8(m >> 8), half(a, 1), half(b, 1)));
}
template <int OP> static inline M CMPU_W(W a, W b) {
    return _mm512_cmp_epu32_mask((__m512i)a, (__m512i)b, OP);
}
template <int OP> static inline M CMPS_W(W a, W b) {
    return _mm512_cmp_epi32_mask((__m512i)a, (__m512i)b, OP);
}
template <int OP> static inline M CMPU_D(D a, D b) {
    return pair(_mm512_cmp_epu64_mask(half(a, 0), half(b, 0), OP),
                _mm512_cmp_epu64_mask(half(a, 1), half(b, 1), OP));
}
template <int OP> static inline M CMPS_D(D a, D b) {
    return pair(_mm512_cmp_epi64_mask(half(a, 0), half(b, 0), OP),
                _mm512_cmp_epi64_mask(half(a, 1), half(b, 1), OP));
}
static inline W PERM_W(W src, W idx) {
    return (W)_mm512_permutexvar_epi32((__m512i)idx, (__m512i)src);
}
static inline D PERM_D(D src, W idx) {
    __m512i lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256((__m512i)idx));
    __m512i hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64((__m512i)idx, 1));
    return join(_mm512_permutex2var_epi64(half(src, 0), lo, half(src, 1)),
                _mm512_permutex2var_epi64(half(src, 0), hi, half(src, 1)));
}

static inline __mmask16 lanes_in(W a, uint32_t size) {
    return _mm512_cmplt_epu32_mask((__m512i)a, _mm512_set1_epi32(int(size)));
}
static inline W read_words(const uint32_t *m, W a, uint32_t size) {
    return (W)_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes_in(a, size),
                                           (__m512i)(a * 16u + IOTA), m, 4);
}
static inline D read_words(const uint64_t *m, W a, uint32_t size) {
    __mmask16 ok = lanes_in(a, size);
    __m512i at = (__m512i)(a * 16u + IOTA);
    return join(_mm512_mask_i32gather_epi64(_mm512_setzero_si512(), __mmask8(ok),
                                            _mm512_castsi512_si256(at), m, 8),
                _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), __mmask8(ok >> 8),
                                            _mm512_extracti64x4_epi64(at, 1), m, 8));
}
static inline void write_words(uint32_t *m, W a, uint32_t size, W d, W e) {
    __mmask16 ok = lanes_in(a, size) & _mm512_test_epi32_mask((__m512i)e, (__m512i)e);
    if (!ok) return;                  // most cycles write few memories
    __m512i at = (__m512i)(a * 16u + IOTA);
    W old = (W)_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), ok, at, m, 4);
    _mm512_mask_i32scatter_epi32(m, ok, at, (__m512i)((old & ~e) | (d & e)), 4);
}
static inline void write_words(uint64_t *m, W a, uint32_t size, D d, D e) {
    __mmask16 ok = lanes_in(a, size) & __mmask16(NZ_D(e));
    if (!ok) return;
    __m512i at = (__m512i)(a * 16u + IOTA);
    for (int k = 0; k < 2; ++k) {
        __m256i part = k ? _mm512_extracti64x4_epi64(at, 1) : _mm512_castsi512_si256(at);
        __mmask8 some = __mmask8(ok >> (8 * k));
        __m512i old = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), some, part, m, 8);
        __m512i merged = _mm512_or_si512(_mm512_andnot_si512(half(e, k), old),
                                          _mm512_and_si512(half(d, k), half(e, k)));
        _mm512_mask_i32scatter_epi64(m, some, part, merged, 8);
    }
}
#else
template <class V> static inline M lanes_where(const V &x, int k) {
    M m = 0;
    for (int l = 0; l < 16; ++l) m |= M((x[l] >> k) & 1) << l;
    return m;
}
static inline M BIT_W(W x, int k) { return lanes_where(x, k); }
static inline M BIT_D(D x, int k) { return lanes_where(x, k); }
template <class V> static inline M nonzero(const V &x) {
    M m = 0;
    for (int l = 0; l < 16; ++l) m |= M(x[l] != 0) << l;
    return m;
}
static inline M NZ_W(W x) { return nonzero(x); }
static inline M NZ_D(D x) { return nonzero(x); }
template <class V, class E> static inline V expand(M m, E v) {
    V out;
    for (int l = 0; l < 16; ++l) out[l] = (m >> l) & 1 ? v : 0;
    return out;
}
static inline W EXPAND_W(M m, uint32_t v) { return expand<W>(m, v); }
static inline D EXPAND_D(M m, uint64_t v) { return expand<D>(m, v); }
template <class V> static inline V select(M m, const V &a, const V &b) {
    V out;
    for (int l = 0; l < 16; ++l) out[l] = (m >> l) & 1 ? b[l] : a[l];
    return out;
}
static inline W SEL_W(M m, W a, W b) { return select(m, a, b); }
static inline D SEL_D(M m, D a, D b) { return select(m, a, b); }
template <int OP, class T> static inline bool compare(T a, T b) {
    switch (OP) {
    case 0: return a == b;
    case 1: return a < b;
    case 2: return a <= b;
    case 4: return a != b;
    case 5: return a >= b;
    default: return a > b;
    }
}
template <int OP, class T, class V> static inline M compare_lanes(const V &a, const V &b) {
    M m = 0;
    for (int l = 0; l < 16; ++l) m |= M(compare<OP>(T(a[l]), T(b[l]))) << l;
    return m;
}
template <int OP> static inline M CMPU_W(W a, W b) { return compare_lanes<OP, uint32_t>(a, b); }
template <int OP> static inline M CMPS_W(W a, W b) { return compare_lanes<OP, int32_t>(a, b); }
template <int OP> static inline M CMPU_D(D a, D b) { return compare_lanes<OP, uint64_t>(a, b); }
template <int OP> static inline M CMPS_D(D a, D b) { return compare_lanes<OP, int64_t>(a, b); }
template <class V> static inline V permute(const V &src, W idx) {
    V out;
    for (int l = 0; l < 16; ++l) out[l] = src[idx[l] & 15];
    return out;
}
static inline W PERM_W(W src, W idx) { return permute(src, idx); }
static inline D PERM_D(D src, W idx) { return permute(src, idx); }

template <class V, class E>
static inline V read_any(const E *m, W a, uint32_t size) {
    V out;
    for (int l = 0; l < 16; ++l) out[l] = a[l] < size ? m[a[l] * 16 + l] : 0;
    return out;
}
static inline W read_words(const uint32_t *m, W a, uint32_t size) {
    return read_any<W>(m, a, size);
}
static inline D read_words(const uint64_t *m, W a, uint32_t size) {
    return read_any<D>(m, a, size);
}
template <class V, class E>
static inline void write_words(E *m, W a, uint32_t size, V d, V e) {
    for (int l = 0; l < 16; ++l)
        if (e[l] && a[l] < size) m[a[l] * 16 + l] = (m[a[l] * 16 + l] & ~e[l]) | (d[l] & e[l]);
}
#endif
