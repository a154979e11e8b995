/* The arguments of a compiled launcher (claunch.c): what it reads and checks of each, and
   how it packs each ABI value. Included by claunch.c only (one translation unit).

   Takes: a parameter's description (`Param`, filled from what `clauncher` makes of the
   launch's plan), the launcher's `Rules` and an argument. Gives: `read_array` (a tensor's
   facts through its type's DLPack C exchange API, checked against its kinds: dtype,
   device, rank, C order, unit inner stride, alignment, extents, divisibility, byte range),
   `check_scalar`, `check_constant`, `constants_unchanged`, `overlaps_itself`, and
   `pack_int` / `pack_scalar` (a value into its 8-byte slot as `struct.pack_into` would).
   Guarantees: each returns -1 where the Python launcher (`fastpath`, `launcher_arrays`)
   would go down the chain or `struct` would raise, with no Python error left set. */
#ifndef VERDIGRIS_CLAUNCH_ARGS_H
#define VERDIGRIS_CLAUNCH_ARGS_H

/* ------------------------------------------------------------------ DLPack (dlpack.h 1.x) */

typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    void *managed_tensor_allocator, *managed_tensor_from_py_object_no_sync,
        *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *, DLTensor *);
    int (*current_work_stream)(int32_t, int32_t, void **);
} DLPackExchangeAPI;

#define MAX_PARAMS 64
#define MAX_DIMS 8
#define MAX_SLOTS 256

enum { ARRAY, SCALAR, CONSTANT };
enum { PTR, SHAPE, STRIDE, VALUE, FIXED };  /* an ABI slot's role */

typedef struct {
    int kind;
    /* borrowed from the launcher's descriptions, which it keeps */
    PyTypeObject *type;       /* the exact type (ARRAY, SCALAR; CONSTANT: its value's type) */
    PyObject *value;          /* CONSTANT: the value */
    /* ARRAY */
    const DLPackExchangeAPI *api;
    DLDataType dtype;
    int ndim, itemsize, contiguous, unit, aligned, written;
    /* ARRAY and SCALAR: a tile kernel's divisibility fact; -1: none */
    int on_grid;
    /* SCALAR */
    int range_bits;           /* a Python float's range (16, 32, 64); 0: not a weak float */
    int narrow;               /* int32's range or not; -1: no such fact */
    int is_unsigned;
} Param;

typedef struct { int role, index, axis; char format; uint64_t fixed; } Slot;

typedef struct {
    int64_t ptr, lo, hi;
    int64_t shape[MAX_DIMS], strides[MAX_DIMS];
} Facts;

/* What every launch of one launcher compares its arguments with, beside their kinds. */
typedef struct {
    DLDevice device;
    int64_t max_extent, max_elements, off_grid, multiple, narrow_low, narrow_end;
} Rules;


static PyObject *IS_NEG;  /* interned "is_neg" */

/* Whether torch's `obj.is_neg()` is false: a lazily negated view's memory holds the values
   un-negated, and the exchange API describes that memory as it is (the general path
   refuses such a tensor). */
static int not_negated(PyObject *obj) {
    PyObject *negated = PyObject_CallMethodNoArgs(obj, IS_NEG);
    if (!negated) { PyErr_Clear(); return 0; }
    Py_DECREF(negated);
    return negated == Py_False;
}

/* Source of a tensor's facts; 0, or -1 when the launch goes down the chain. */
static int read_array(const Param *p, PyObject *obj, Facts *f, const Rules *rules) {
    DLTensor t;
    if (Py_TYPE(obj) != p->type) return -1;
    if (p->api->dltensor_from_py_object_no_sync(obj, &t)) { PyErr_Clear(); return -1; }
    if (!not_negated(obj)) return -1;
    if (t.dtype.code != p->dtype.code || t.dtype.bits != p->dtype.bits ||
        t.dtype.lanes != p->dtype.lanes || t.device.device_type != rules->device.device_type ||
        t.device.device_id != rules->device.device_id || t.ndim != p->ndim)
        return -1;
    f->ptr = (int64_t)((uintptr_t)t.data + t.byte_offset);
    int64_t expected = 1, extents = 0, elements = 1;
    int contiguous = 1;
    for (int k = p->ndim - 1; k >= 0; k--) {
        int64_t n = t.shape[k], s = t.strides[k];
        f->shape[k] = n;
        extents |= n;
        if (n != 1 && s != expected) contiguous = 0;  /* torch's is_contiguous() */
        f->strides[k] = s;
        expected *= n;
    }
    if (expected == 0) contiguous = 1;
    if (p->contiguous && !contiguous) return -1;  /* (a strided launcher takes any layout) */
    if (p->contiguous) {  /* the strides a C-order array is launched with: its extents' products */
        int64_t step = 1;
        for (int k = p->ndim - 1; k >= 0; k--) { f->strides[k] = step; step *= f->shape[k]; }
    } else if ((f->strides[p->ndim - 1] == 1) != p->unit) {
        return -1;
    }
    if (((f->ptr & 15) == 0) != p->aligned) return -1;
    if (extents > rules->max_extent) return -1;
    if (p->ndim > 1) {
        for (int k = 0; k < p->ndim; k++)
            if (__builtin_mul_overflow(elements, f->shape[k], &elements)) return -1;
        if (!(0 < elements && elements <= rules->max_elements)) return -1;
    }
    if (p->on_grid >= 0) {
        int64_t strides = 0;
        if (!p->contiguous)
            for (int k = 0; k < p->ndim - 1; k++) strides |= f->strides[k];
        int off = (extents & rules->off_grid) || (strides & (rules->multiple - 1));
        if (off == p->on_grid) return -1;
    }
    /* the byte range it can touch (`interop.span`) */
    int64_t lo = 0, hi = 0;
    f->lo = f->hi = f->ptr;
    for (int k = 0; k < p->ndim; k++) {
        if (f->shape[k] == 0) return 0;
        if (f->strides[k] > 0) hi += (f->shape[k] - 1) * f->strides[k];
        else lo += (f->shape[k] - 1) * f->strides[k];
    }
    f->lo = f->ptr + lo * p->itemsize;
    f->hi = f->ptr + (hi + 1) * p->itemsize;
    return 0;
}

/* `interop.overlaps_itself`: two indices reach one element (a zero or overlapping stride). */
static int overlaps_itself(const Facts *f, int ndim) {
    int64_t extent[MAX_DIMS], stride[MAX_DIMS], covered = 0;
    int n = 0;
    for (int k = 0; k < ndim; k++) {
        if (f->shape[k] == 0) return 0;
        if (f->shape[k] > 1) {  /* sorted by |stride| as it goes in */
            int64_t s = f->strides[k] < 0 ? -f->strides[k] : f->strides[k];
            int j = n++;
            while (j > 0 && stride[j - 1] > s) { stride[j] = stride[j - 1]; extent[j] = extent[j - 1]; j--; }
            stride[j] = s; extent[j] = f->shape[k];
        }
    }
    for (int j = 0; j < n; j++) {
        if (stride[j] <= covered) return 1;
        covered += stride[j] * (extent[j] - 1);
    }
    return 0;
}

/* A scalar argument as an int; 0, or -1 (not an int, or past 64 bits: down the chain). */
static int int_value(PyObject *obj, int64_t *out) {
    PyObject *index = PyNumber_Index(obj);
    if (!index) { PyErr_Clear(); return -1; }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (overflow || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return -1; }
    *out = v;
    return 0;
}

static int float_range_bits(double d) {  /* `types.float_range_bits` */
    double m = fabs(d);
    if (m <= 65504.0 || isnan(m) || isinf(m)) return 16;
    return m <= 3.4028234663852886e38 ? 32 : 64;
}

static int check_scalar(const Param *p, PyObject *obj, const Rules *rules) {
    if (Py_TYPE(obj) != p->type) return -1;
    if (p->range_bits) {
        double d = PyFloat_AS_DOUBLE(obj);  /* exactly a float */
        return float_range_bits(d) == p->range_bits ? 0 : -1;
    }
    if (p->on_grid < 0 && p->narrow < 0) return 0;
    int64_t v;
    if (int_value(obj, &v)) return -1;
    if (p->on_grid >= 0 && ((v & (rules->multiple - 1)) == 0) != p->on_grid) return -1;
    if (p->narrow >= 0) {
        int inside = v < rules->narrow_end && (p->is_unsigned || v >= rules->narrow_low);
        if (inside != p->narrow) return -1;
    }
    return 0;
}

static int check_constant(const Param *p, PyObject *obj) {
    if (obj == p->value) return 0;
    if (Py_TYPE(obj) != p->type || PyTuple_Check(obj)) return -1;  /* a tuple: Python decides */
    int equal = PyObject_RichCompareBool(obj, p->value, Py_EQ);
    if (equal < 0) PyErr_Clear();
    return equal == 1 ? 0 : -1;
}

/* The module constants the kernel reads (`runtime.constants`) are the objects it was
   specialized for: (holder, name or None, value) per constant, a dict or a cell. */
static int constants_unchanged(PyObject *constants) {
    Py_ssize_t n = PyTuple_GET_SIZE(constants);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyTuple_GET_ITEM(constants, i);
        PyObject *holder = PyTuple_GET_ITEM(entry, 0), *name = PyTuple_GET_ITEM(entry, 1);
        PyObject *now = name == Py_None ? PyCell_GET(holder) : PyDict_GetItemWithError(holder, name);
        if (now != PyTuple_GET_ITEM(entry, 2)) { PyErr_Clear(); return -1; }
    }
    return 0;
}

/* One ABI value into its 8-byte slot, as `struct.pack_into` would; -1 where struct raises. */
static int pack_int(char format, int64_t v, uint64_t *slot) {
    int64_t lo, hi;
    switch (format) {
    case 'b': lo = INT8_MIN; hi = INT8_MAX; break;
    case 'B': lo = 0; hi = UINT8_MAX; break;
    case 'h': lo = INT16_MIN; hi = INT16_MAX; break;
    case 'H': lo = 0; hi = UINT16_MAX; break;
    case 'i': lo = INT32_MIN; hi = INT32_MAX; break;
    case 'I': lo = 0; hi = UINT32_MAX; break;
    case 'q': lo = INT64_MIN; hi = INT64_MAX; break;
    case 'Q': lo = 0; hi = INT64_MAX; break;  /* past 2**63: not read as an int64, Python packs */
    default: return -1;
    }
    if (v < lo || v > hi) return -1;
    switch (format) {  /* little-endian hosts: the value's low bytes first, the rest zero */
    case 'b': case 'B': *slot = (uint8_t)v; break;
    case 'h': case 'H': *slot = (uint16_t)v; break;
    case 'i': case 'I': *slot = (uint32_t)v; break;
    default: *slot = (uint64_t)v;
    }
    return 0;
}

static uint16_t bfloat16_bits(double d) {  /* `module._bfloat16_bits`: through float32 */
    float f = (float)d;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

static int pack_scalar(char format, PyObject *obj, uint64_t *slot) {
    *slot = 0;
    if (format == '?') {
        int truth = PyObject_IsTrue(obj);
        if (truth < 0) { PyErr_Clear(); return -1; }
        *slot = (uint64_t)truth;
        return 0;
    }
    if (strchr("fder", format)) {
        double d = PyFloat_AsDouble(obj);
        if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return -1; }
        if (format == 'd') { memcpy(slot, &d, 8); return 0; }
        if (format == 'r') { *slot = bfloat16_bits(d); return 0; }
        if (format == 'e') {
            if (PyFloat_Pack2(d, (char *)slot, 1) < 0) { PyErr_Clear(); return -1; }
            return 0;
        }
        float f = (float)d;
        if (isinf(f) && !isinf(d)) return -1;  /* struct: "float too large to pack with f format" */
        memcpy(slot, &f, 4);
        return 0;
    }
    int64_t v;
    if (int_value(obj, &v)) return -1;
    return pack_int(format, v, slot);
}

#endif
