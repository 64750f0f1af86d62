/* tiers._copycrc: copy bytes into a writable buffer and compute their CRC32C in one pass.

   A save into host memory is a memcpy plus a checksum; done as two passes (copy, then CRC32C of
   each 512 KiB piece while it is in cache) it costs about 1.6 memcpys on one core. Here the source
   is read once, in chunks of 384 bytes: the CRC instructions read a chunk into L1, then the chunk
   is copied out of L1 with stores that bypass the cache (the destination is a tier file, read
   only at restore), so the whole costs about one memcpy (measured: docs/performance.md).
   x86-64 with SSE4.2 only: the module refuses to import elsewhere, and tiers/copycrc.py then
   copies and checksums in two passes. The GIL is released while it copies.

   Measured traps, kept out by the shape of the loop:
   - A load from an address with the same low 12 bits as a store still in flight waits for it
     ("4K aliasing"). A forward fused loop whose destination is 64-192 bytes ahead of its source
     (mod 4096) ran 40x slower; copying each chunk backwards, from L1, has no such distance.
   - Bursts of more than about a dozen cache lines of streaming stores stall the loads behind
     them (1536-byte chunks: 2.2x a memcpy; 384 or 768 bytes: 0.9x).

   CRC32C over a chunk runs as three interleaved streams whose CRCs are joined by a "shift through
   n zero bytes" operator over GF(2) (as in Mark Adler's crc32c.c, zlib licence): one stream is
   bound by the instruction's latency, three keep it busy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_FUSED 1

#define POLY 0x82f63b78u  /* CRC32C (Castagnoli), reflected */
#define STREAM 128        /* bytes per CRC stream in a chunk */
#define CHUNK (3 * STREAM)
#define LINE 64

static uint32_t stream_shift[4][256];  /* appends STREAM zero bytes to a CRC */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* op = the operator that appends len zero bytes to a CRC; len a power of two (one squaring per bit) */
static void zeros_operator(uint32_t *op, size_t len) {
    uint32_t odd[32], row = 1;
    odd[0] = POLY; /* one zero bit */
    for (int n = 1; n < 32; n++, row <<= 1) odd[n] = row;
    gf2_square(op, odd);  /* two zero bits */
    gf2_square(odd, op);  /* four: one zero byte is two squarings more */
    for (;;) {
        gf2_square(op, odd);
        if ((len >>= 1) == 0) return;
        gf2_square(odd, op);
        if ((len >>= 1) == 0) { memcpy(op, odd, sizeof odd); return; }
    }
}

static void make_shift_table(uint32_t table[4][256], size_t len) {
    uint32_t op[32];
    zeros_operator(op, len);
    for (uint32_t n = 0; n < 256; n++)
        for (int byte = 0; byte < 4; byte++) table[byte][n] = gf2_times(op, n << (8 * byte));
}

static inline uint32_t shift(uint32_t crc) {
    return stream_shift[0][crc & 0xff] ^ stream_shift[1][(crc >> 8) & 0xff] ^
           stream_shift[2][(crc >> 16) & 0xff] ^ stream_shift[3][crc >> 24];
}

/* CRC of one chunk, three streams joined; its loads bring the chunk into L1 */
__attribute__((target("sse4.2")))
static uint64_t crc_chunk(uint64_t crc, const uint8_t *src) {
    uint64_t crc1 = 0, crc2 = 0, w0, w1, w2;
    for (size_t x = 0; x < STREAM; x += 8) {
        memcpy(&w0, src + x, 8);
        memcpy(&w1, src + STREAM + x, 8);
        memcpy(&w2, src + 2 * STREAM + x, 8);
        crc = _mm_crc32_u64(crc, w0);
        crc1 = _mm_crc32_u64(crc1, w1);
        crc2 = _mm_crc32_u64(crc2, w2);
    }
    crc = shift((uint32_t)crc) ^ (uint32_t)crc1;
    return shift((uint32_t)crc) ^ (uint32_t)crc2;
}

/* copy one chunk out of L1, last line first, with streaming stores; dst is LINE-aligned */
static void stream_chunk_back(uint8_t *dst, const uint8_t *src) {
    for (size_t x = CHUNK; x;) {
        x -= LINE;
        __m128i a = _mm_loadu_si128((const __m128i *)(src + x)), b = _mm_loadu_si128((const __m128i *)(src + x + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + x + 32)), d = _mm_loadu_si128((const __m128i *)(src + x + 48));
        _mm_stream_si128((__m128i *)(dst + x), a);
        _mm_stream_si128((__m128i *)(dst + x + 16), b);
        _mm_stream_si128((__m128i *)(dst + x + 32), c);
        _mm_stream_si128((__m128i *)(dst + x + 48), d);
    }
}

/* ends of a copy (before the first whole line, after the last chunk): plain stores */
__attribute__((target("sse4.2")))
static uint64_t copy_crc_plain(uint64_t crc, uint8_t *dst, const uint8_t *src, size_t len) {
    uint64_t word;
    for (; len >= 8; len -= 8, src += 8, dst += 8) {
        memcpy(&word, src, 8);
        memcpy(dst, &word, 8);
        crc = _mm_crc32_u64(crc, word);
    }
    for (; len; len--, src++, dst++) {
        *dst = *src;
        crc = _mm_crc32_u8((uint32_t)crc, *src);
    }
    return crc;
}

static uint32_t copy_crc32c(uint8_t *dst, const uint8_t *src, size_t len, uint32_t crc) {
    uint64_t c = ~crc;
    size_t head = (size_t)(-(uintptr_t)dst & (LINE - 1));
    if (head > len) head = len;
    c = copy_crc_plain(c, dst, src, head);
    dst += head, src += head, len -= head;
    for (; len >= CHUNK; len -= CHUNK, src += CHUNK, dst += CHUNK) {
        c = crc_chunk(c, src);
        stream_chunk_back(dst, src);
    }
    c = copy_crc_plain(c, dst, src, len);
    _mm_sfence(); /* the streamed stores are visible before anyone is told the copy is done */
    return ~(uint32_t)c;
}
#endif

PyDoc_STRVAR(copy_crc32c_doc,
"copy_crc32c(dst, offset, src, crc) -> int\n\n"
"Copy the bytes of ``src`` into the writable buffer ``dst`` at ``offset`` and return the\n"
"CRC32C of those bytes continued from ``crc`` (as crc32c.crc32c(src, crc) would).");

static PyObject *py_copy_crc32c(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer dst, src;
    Py_ssize_t offset;
    unsigned long crc;
    if (!PyArg_ParseTuple(args, "w*ny*k", &dst, &offset, &src, &crc)) return NULL;
    PyObject *result = NULL;
    if (offset < 0 || offset > dst.len || src.len > dst.len - offset) {
        PyErr_Format(PyExc_ValueError, "%zd bytes at offset %zd do not fit a buffer of %zd",
                     src.len, offset, dst.len);
    } else if (crc > 0xffffffffUL) {
        PyErr_SetString(PyExc_ValueError, "crc is not a 32-bit value");
    } else {
        uint32_t out;
        Py_BEGIN_ALLOW_THREADS
        out = copy_crc32c((uint8_t *)dst.buf + offset, src.buf, (size_t)src.len, (uint32_t)crc);
        Py_END_ALLOW_THREADS
        result = PyLong_FromUnsignedLong(out);
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_crc32c", py_copy_crc32c, METH_VARARGS, copy_crc32c_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_copycrc", .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__copycrc(void) {
#ifdef HAVE_FUSED
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        make_shift_table(stream_shift, STREAM);
        return PyModule_Create(&module);
    }
#endif
    PyErr_SetString(PyExc_ImportError, "the fused copy and CRC32C needs x86-64 with SSE4.2");
    return NULL;
}
