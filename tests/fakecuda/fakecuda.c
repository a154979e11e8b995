/* A fake libcuda.so.1 for testing and profiling verdigris's host side without a GPU.

   cuda-bindings loads it like the real driver (it finds every entry point through
   cuGetProcAddress_v2, here a dlsym on this library). "Device memory" is host memory,
   modules are accepted unread, and a launch runs nothing: it records what it was given
   (function, grid, block, shared bytes, stream, context, and the kernelParams array) for
   tests to read back through the vgfake_* functions.
   VGFAKE_DEVICES sets the device count (default 1). A launch of a function whose context
   is not current fails with CUDA_ERROR_INVALID_CONTEXT when the stream is NULL, or when
   the stream's context differs (the driver refuses to launch across contexts).
   Entry points it does not define fail with CUDA_ERROR_NOT_SUPPORTED. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, INVALID_CONTEXT = 201, INVALID_HANDLE = 400,
       NOT_FOUND = 500, NOT_SUPPORTED = 801 };
#define MAX_DEVICES 8

typedef struct { int device; } Context;
typedef struct { Context *ctx; } Module;
typedef struct { Module *module; char name[128]; int max_dynamic_shared; } Function;
typedef struct { Context *ctx; unsigned flags; } Stream;
typedef struct { double time_ms; } Event;

static Context contexts[MAX_DEVICES];
static __thread Context *current;
static int n_devices = -1;

static int devices(void) {
    if (n_devices < 0) {
        const char *env = getenv("VGFAKE_DEVICES");
        n_devices = env ? atoi(env) : 1;
        if (n_devices > MAX_DEVICES) n_devices = MAX_DEVICES;
        for (int i = 0; i < MAX_DEVICES; i++) contexts[i].device = i;
    }
    return n_devices;
}

/* ------------------------------------------------------------------ what tests read */

typedef struct {
    long long count;
    void *function;
    unsigned grid[3], block[3], shared;
    void *stream;
    int device;  /* the device of the context it ran in */
    void **params;
    int cooperative;  /* through cuLaunchCooperativeKernel */
} Launch;

static Launch last;

const Launch *vgfake_last_launch(void) { return &last; }
const char *vgfake_function_name(void *f) { return f ? ((Function *)f)->name : ""; }

/* ------------------------------------------------------------------ init, devices */

CUresult cuInit(unsigned flags) { (void)flags; devices(); return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = devices(); return OK; }
CUresult cuDeviceGet(int *dev, int ordinal) {
    if (ordinal < 0 || ordinal >= devices()) return INVALID_VALUE;
    *dev = ordinal;
    return OK;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
    snprintf(name, len, "Fake GPU %d", dev);
    return OK;
}
CUresult cuDeviceTotalMem(size_t *bytes, int dev) { (void)dev; *bytes = 1ull << 34; return OK; }
CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    (void)dev;
    switch (attribute) {
    case 1: *value = 1024; break;      /* max threads per block */
    case 2: case 3: *value = 1024; break; /* max block x, y */
    case 4: *value = 64; break;        /* max block z */
    case 5: *value = 2147483647; break; /* max grid x */
    case 6: case 7: *value = 65535; break; /* max grid y, z */
    case 10: *value = 32; break;       /* warp size */
    case 11: *value = 2147483647; break; /* max pitch */
    case 16: *value = 132; break;      /* SMs */
    case 75: *value = 9; break;        /* compute capability */
    case 76: *value = 0; break;
    case 97: *value = 232448; break;   /* opt-in shared memory per block */
    default: *value = 1;
    }
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (dev < 0 || dev >= devices()) return INVALID_VALUE;
    *ctx = &contexts[dev];
    return OK;
}
CUresult cuDevicePrimaryCtxRelease(int dev) { (void)dev; return OK; }

/* ------------------------------------------------------------------ contexts */

CUresult cuCtxGetCurrent(void **ctx) { *ctx = current; return OK; }
CUresult cuCtxSetCurrent(void *ctx) { current = ctx; return OK; }
static __thread Context *stack[16];
static __thread int depth;
CUresult cuCtxPushCurrent(void *ctx) {
    if (depth == 16) return INVALID_VALUE;
    stack[depth++] = current;
    current = ctx;
    return OK;
}
CUresult cuCtxPopCurrent(void **ctx) {
    if (ctx) *ctx = current;
    current = depth ? stack[--depth] : NULL;
    return OK;
}
CUresult cuCtxGetDevice(int *dev) {
    if (!current) return INVALID_CONTEXT;
    *dev = current->device;
    return OK;
}
CUresult cuCtxSynchronize(void) { return current ? OK : INVALID_CONTEXT; }

/* ------------------------------------------------------------------ memory */

typedef struct { uintptr_t ptr; size_t size; int device; } Allocation;
static Allocation allocations[4096];

static int device_of(uintptr_t p) {
    for (int i = 0; i < 4096; i++)
        if (allocations[i].ptr && allocations[i].ptr <= p && p < allocations[i].ptr + allocations[i].size)
            return allocations[i].device;
    return -1;
}

CUresult cuMemAlloc(unsigned long long *dptr, size_t bytes) {
    void *p;
    if (!current) return INVALID_CONTEXT;
    if (posix_memalign(&p, 256, bytes ? bytes : 1)) return 2; /* out of memory */
    for (int i = 0; i < 4096; i++)
        if (!allocations[i].ptr) {
            allocations[i] = (Allocation){(uintptr_t)p, bytes, current->device};
            break;
        }
    *dptr = (uintptr_t)p;
    return OK;
}
CUresult cuMemFree(unsigned long long dptr) {
    for (int i = 0; i < 4096; i++)
        if (allocations[i].ptr == dptr) {
            allocations[i].ptr = 0;
            free((void *)(uintptr_t)dptr);
            return OK;
        }
    /* the real driver returns an error; a test wants to hear of it at once */
    fprintf(stderr, "fakecuda: cuMemFree(%#llx) of memory not allocated (freed twice?)\n", dptr);
    abort();
}
CUresult cuMemcpyHtoD(unsigned long long dst, const void *src, size_t n) {
    memcpy((void *)(uintptr_t)dst, src, n);
    return OK;
}
CUresult cuMemcpyDtoH(void *dst, unsigned long long src, size_t n) {
    memcpy(dst, (void *)(uintptr_t)src, n);
    return OK;
}
CUresult cuMemcpyDtoD(unsigned long long dst, unsigned long long src, size_t n) {
    memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
    return OK;
}
CUresult cuMemsetD8(unsigned long long dst, unsigned char v, size_t n) {
    memset((void *)(uintptr_t)dst, v, n);
    return OK;
}
CUresult cuMemsetD16(unsigned long long dst, unsigned short v, size_t n) {
    if (dst % 2) return INVALID_VALUE;
    for (size_t i = 0; i < n; i++) ((unsigned short *)(uintptr_t)dst)[i] = v;
    return OK;
}
CUresult cuMemsetD32(unsigned long long dst, unsigned v, size_t n) {
    if (dst % 4) return INVALID_VALUE;
    for (size_t i = 0; i < n; i++) ((unsigned *)(uintptr_t)dst)[i] = v;
    return OK;
}
CUresult cuMemsetD2D8(unsigned long long dst, size_t pitch, unsigned char v, size_t width, size_t height) {
    if (height > 1 && pitch < width) return INVALID_VALUE;
    for (size_t r = 0; r < height; r++) cuMemsetD8(dst + r * pitch, v, width);
    return OK;
}
CUresult cuMemsetD2D16(unsigned long long dst, size_t pitch, unsigned short v, size_t width, size_t height) {
    if ((height > 1 && pitch < 2 * width) || pitch % 2) return INVALID_VALUE;
    for (size_t r = 0; r < height; r++) cuMemsetD16(dst + r * pitch, v, width);
    return OK;
}
CUresult cuMemsetD2D32(unsigned long long dst, size_t pitch, unsigned v, size_t width, size_t height) {
    if ((height > 1 && pitch < 4 * width) || pitch % 4) return INVALID_VALUE;
    for (size_t r = 0; r < height; r++) cuMemsetD32(dst + r * pitch, v, width);
    return OK;
}
typedef struct {  /* CUDA_MEMCPY2D (v2) */
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    unsigned long long srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    unsigned long long dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} Memcpy2D;
CUresult cuMemcpy2D(const Memcpy2D *p) {
    enum { HOST = 1, DEVICE = 2 };
    if (p->srcMemoryType != DEVICE && p->srcMemoryType != HOST) return NOT_SUPPORTED;
    if (p->dstMemoryType != DEVICE && p->dstMemoryType != HOST) return NOT_SUPPORTED;
    if (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes) return INVALID_VALUE;
    const char *src = p->srcMemoryType == DEVICE ? (const char *)(uintptr_t)p->srcDevice : p->srcHost;
    char *dst = p->dstMemoryType == DEVICE ? (char *)(uintptr_t)p->dstDevice : p->dstHost;
    src += p->srcY * p->srcPitch + p->srcXInBytes;
    dst += p->dstY * p->dstPitch + p->dstXInBytes;
    for (size_t r = 0; r < p->Height; r++)
        memcpy(dst + r * p->dstPitch, src + r * p->srcPitch, p->WidthInBytes);
    return OK;
}
CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    *p = calloc(1, bytes ? bytes : 1);
    return *p ? OK : 2;
}
CUresult cuMemFreeHost(void *p) { free(p); return OK; }
CUresult cuMemHostGetDevicePointer(unsigned long long *d, void *p, unsigned flags) {
    (void)flags;
    *d = (uintptr_t)p;
    return OK;
}
CUresult cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) {
    int dev = device_of(ptr);
    if (dev < 0) return INVALID_VALUE;
    if (attribute == 9) { *(int *)data = dev; return OK; }      /* device ordinal */
    if (attribute == 1) { *(void **)data = &contexts[dev]; return OK; }  /* context */
    return NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ modules, launches */

static void *streams[256];

int vgfake_live_streams(void) {
    int n = 0;
    for (int i = 0; i < 256; i++) n += streams[i] != NULL;
    return n;
}

static int is_stream(void *stream) {
    for (int i = 0; i < 256; i++)
        if (streams[i] == stream) return 1;
    return 0;
}


CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned n, void *options, void **values) {
    (void)image; (void)n; (void)options; (void)values;
    if (!current) return INVALID_CONTEXT;
    Module *m = calloc(1, sizeof *m);
    m->ctx = current;
    *module = m;
    return OK;
}
CUresult cuModuleLoadData(void **module, const void *image) {
    return cuModuleLoadDataEx(module, image, 0, NULL, NULL);
}
CUresult cuModuleUnload(void *module) { free(module); return OK; }
CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    Function *f = calloc(1, sizeof *f);
    f->module = module;
    snprintf(f->name, sizeof f->name, "%s", name);
    *function = f;
    return OK;
}
CUresult cuFuncGetAttribute(int *value, int attribute, void *function) {
    Function *f = function;
    switch (attribute) {
    case 0: *value = 1024; break;  /* max threads per block */
    case 1: *value = 0; break;     /* static shared bytes */
    case 4: *value = 16; break;    /* registers */
    case 8: *value = f->max_dynamic_shared; break;
    default: *value = 0;
    }
    return OK;
}
CUresult cuFuncSetAttribute(void *function, int attribute, int value) {
    if (attribute == 8) ((Function *)function)->max_dynamic_shared = value;
    return OK;
}
CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra) {
    Function *f = function;
    Context *ctx = current;
    (void)extra;
    if (stream) {
        if (!is_stream(stream)) return INVALID_HANDLE;
        ctx = ((Stream *)stream)->ctx;
    }
    if (!f) return INVALID_HANDLE;
    if (ctx != f->module->ctx) return INVALID_CONTEXT;
    if (bx * by * bz > 1024 || !gx || !gy || !gz) return INVALID_VALUE;
    if (shared > 48 * 1024 && shared > (unsigned)f->max_dynamic_shared) return INVALID_VALUE;
    last.count++;
    last.function = f;
    last.grid[0] = gx; last.grid[1] = gy; last.grid[2] = gz;
    last.block[0] = bx; last.block[1] = by; last.block[2] = bz;
    last.shared = shared;
    last.stream = stream;
    last.device = ctx->device;
    last.params = params;
    last.cooperative = 0;
    return OK;
}
CUresult cuLaunchCooperativeKernel(void *function, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                   void *stream, void **params) {
    CUresult result = cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, NULL);
    if (result == OK) last.cooperative = 1;
    return result;
}
/* As a GPU of 2048 threads per multiprocessor, at most 32 blocks, whatever the kernel uses. */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *function, int threads,
                                                     size_t shared) {
    (void)function; (void)shared;
    *blocks = threads > 0 ? (2048 / threads < 32 ? 2048 / threads : 32) : 0;
    return OK;
}

/* A tensor map holds what it was encoded from: the global address, then rank and type. */
CUresult cuTensorMapEncodeTiled(void *map, int type, unsigned rank, void *address,
                                const unsigned long long *dims, const unsigned long long *strides,
                                const unsigned *box, const unsigned *element_strides,
                                int interleave, int swizzle, int l2, int fill) {
    (void)dims; (void)strides; (void)box; (void)element_strides;
    (void)interleave; (void)swizzle; (void)l2; (void)fill;
    if (!map || rank < 1 || rank > 5) return INVALID_VALUE;
    memset(map, 0, 128);
    memcpy(map, &address, sizeof address);
    ((unsigned *)map)[2] = rank;
    ((unsigned *)map)[3] = (unsigned)type;
    return OK;
}

/* ------------------------------------------------------------------ streams, events */

CUresult cuStreamCreate(void **stream, unsigned flags) {
    if (!current) return INVALID_CONTEXT;
    if (flags > 1) return INVALID_VALUE;  /* CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING */
    Stream *s = calloc(1, sizeof *s);
    s->ctx = current;
    s->flags = flags;
    *stream = s;
    for (int i = 0; i < 256; i++)
        if (!streams[i]) { streams[i] = s; break; }
    return OK;
}
CUresult cuStreamDestroy(void *stream) {
    if (!is_stream(stream)) {  /* the real driver may crash; a test wants to hear of it */
        fprintf(stderr, "fakecuda: cuStreamDestroy(%p) of no stream (destroyed twice?)\n", stream);
        abort();
    }
    for (int i = 0; i < 256; i++)
        if (streams[i] == stream) streams[i] = NULL;
    free(stream);
    return OK;
}
CUresult cuStreamGetFlags(void *stream, unsigned *flags) {
    if (!is_stream(stream)) return INVALID_HANDLE;
    *flags = ((Stream *)stream)->flags;
    return OK;
}
CUresult cuStreamSynchronize(void *stream) { (void)stream; return OK; }
CUresult cuStreamQuery(void *stream) { (void)stream; return OK; }
CUresult cuStreamGetCtx(void *stream, void **ctx) {
    if (stream && !is_stream(stream)) return INVALID_HANDLE;
    *ctx = stream ? ((Stream *)stream)->ctx : current;
    return OK;
}
CUresult cuEventCreate(void **event, unsigned flags) {
    (void)flags;
    *event = calloc(1, sizeof(Event));
    return OK;
}
CUresult cuEventDestroy(void *event) { free(event); return OK; }
CUresult cuEventRecord(void *event, void *stream) {
    struct timespec t;
    (void)stream;
    clock_gettime(CLOCK_MONOTONIC, &t);
    ((Event *)event)->time_ms = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
    return OK;
}
CUresult cuEventSynchronize(void *event) { (void)event; return OK; }
CUresult cuEventQuery(void *event) { (void)event; return OK; }
CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
    (void)stream; (void)event; (void)flags;
    return OK;
}
CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
    *ms = (float)(((Event *)end)->time_ms - ((Event *)start)->time_ms);
    return OK;
}

/* ------------------------------------------------------------------ errors, lookup */

CUresult cuGetErrorName(CUresult err, const char **name) {
    *name = err == INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT" : "CUDA_ERROR_FAKE";
    return OK;
}
CUresult cuGetErrorString(CUresult err, const char **text) {
    (void)err;
    *text = "an error of the fake driver";
    return OK;
}

static CUresult not_supported(void) { return NOT_SUPPORTED; }

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             unsigned long long flags, int *status) {
    (void)version; (void)flags;
    void *found = dlsym(RTLD_DEFAULT, symbol);
    if (!found) {
        Dl_info info;
        if (dladdr((void *)cuInit, &info)) {
            void *self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
            if (self) found = dlsym(self, symbol);
        }
    }
    *pfn = found ? found : (void *)not_supported;
    if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
    return OK;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
