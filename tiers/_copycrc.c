/* tiers._copycrc: copy bytes into a writable buffer and compute their CRC32C in one pass.

   A save into host memory is a memcpy plus a checksum; done as two passes (copy, then CRC32C of
   each 512 KiB piece while it is in cache) it costs about 1.6-2 memcpys on one core. Here the
   source is read once: the CRC instructions read each line into L1, then the line is copied out
   of L1 with stores that bypass the cache (the destination is a tier file, read only at restore),
   so the whole costs about one memcpy (measured: docs/performance.md).
   x86-64 with SSE4.2 only: the module refuses to import elsewhere, and tiers/copycrc.py then
   copies and checksums in two passes. The GIL is released while it copies.

   The CRC runs as three independent streams, one per third of the copy, walked in lockstep a line
   at a time; their CRCs are joined once at the end by "shift through n zero bytes" operators over
   GF(2) (as in Mark Adler's crc32c.c and zlib's crc32_combine, zlib licence). One stream is bound
   by the instruction's latency, three keep it busy. Joining streams per 384-byte chunk instead
   (the first version) put a table-driven join on the one dependency chain of the whole copy: 1.4
   memcpys on an AMD EPYC host, while an earlier host hid it.

   Measured traps, kept out by the shape of the loop:
   - A load from an address with the same low 12 bits as a store still in flight waits for it
     ("4K aliasing"). A forward loop of 8-byte loads and stores ran up to 40x slower where the
     destination is 64-192 bytes ahead of its source (mod 4096); here a whole line is loaded by the
     CRC before its stores are issued (python -m bench.micro sweeps the destination offsets).
   - Bursts of more than about a dozen cache lines of streaming stores stall the loads behind
     them (1536-byte bursts: 2.2x a memcpy); a step here streams three lines. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_FUSED 1

#define POLY 0x82f63b78u  /* CRC32C (Castagnoli), reflected */
#define LINE 64
#define MIN_STEPS 4       /* a copy shorter than 3 x 4 lines is copied a word at a time */

static uint32_t zeros_op[64][32];  /* zeros_op[k]: appends 2^k zero bytes to a CRC */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

static void make_zeros_operators(void) {
    uint32_t one_bit[32], two[32], four[32], row = 1;
    one_bit[0] = POLY;
    for (int n = 1; n < 32; n++, row <<= 1) one_bit[n] = row;
    gf2_square(two, one_bit);
    gf2_square(four, two);
    gf2_square(zeros_op[0], four);  /* eight bits: one byte */
    for (int k = 1; k < 64; k++) gf2_square(zeros_op[k], zeros_op[k - 1]);
}

/* the CRC register after ``len`` more zero bytes: one operator per set bit of len */
static uint32_t shift(uint32_t crc, size_t len) {
    for (int k = 0; len; k++, len >>= 1)
        if (len & 1) crc = gf2_times(zeros_op[k], crc);
    return crc;
}

/* copy one line out of L1 with streaming stores; dst is LINE-aligned */
static inline void stream_line(uint8_t *dst, const uint8_t *src) {
    __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32)), d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, a);
    _mm_stream_si128((__m128i *)(dst + 16), b);
    _mm_stream_si128((__m128i *)(dst + 32), c);
    _mm_stream_si128((__m128i *)(dst + 48), d);
}

/* ends of a copy (before the first whole line, after the last step) and short copies: plain stores */
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

/* ``third`` bytes (whole lines) of each of three streams, a line of each per step; the CRC
   register of all 3 x third bytes continued from ``crc`` */
__attribute__((target("sse4.2")))
static uint64_t copy_crc_thirds(uint64_t crc, uint8_t *dst, const uint8_t *src, size_t third) {
    const uint8_t *s1 = src + third, *s2 = src + 2 * third;
    uint8_t *d1 = dst + third, *d2 = dst + 2 * third;
    uint64_t crc1 = 0, crc2 = 0, w0, w1, w2;
    for (size_t at = 0; at < third; at += LINE) {
        for (size_t x = at; x < at + LINE; x += 8) {
            memcpy(&w0, src + x, 8);
            memcpy(&w1, s1 + x, 8);
            memcpy(&w2, s2 + x, 8);
            crc = _mm_crc32_u64(crc, w0);
            crc1 = _mm_crc32_u64(crc1, w1);
            crc2 = _mm_crc32_u64(crc2, w2);
        }
        stream_line(dst + at, src + at);
        stream_line(d1 + at, s1 + at);
        stream_line(d2 + at, s2 + at);
    }
    crc = shift((uint32_t)crc, third) ^ (uint32_t)crc1;
    return shift((uint32_t)crc, third) ^ (uint32_t)crc2;
}

static uint32_t copy_crc32c(uint8_t *dst, const uint8_t *src, size_t len, uint32_t crc) {
    uint64_t c = ~crc;
    size_t head = (size_t)(-(uintptr_t)dst & (LINE - 1));
    if (head > len) head = len;
    c = copy_crc_plain(c, dst, src, head);
    dst += head, src += head, len -= head;
    size_t third = len / (3 * LINE) * LINE;
    if (third >= MIN_STEPS * LINE) {
        c = copy_crc_thirds(c, dst, src, third);
        dst += 3 * third, src += 3 * third, len -= 3 * third;
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
        make_zeros_operators();
        return PyModule_Create(&module);
    }
#endif
    PyErr_SetString(PyExc_ImportError, "the fused copy and CRC32C needs x86-64 with SSE4.2");
    return NULL;
}
