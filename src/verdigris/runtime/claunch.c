/* The compiled launcher (`runtime.clauncher`): what a generated launcher (`runtime.fastpath`)
   checks and packs for a launch on torch tensors, in C.

   Takes, once per launcher: the Python launcher it stands in front of (`fallback`), the
   kernel's CUfunction, grid, block and shared bytes, the fault flag's host address, and per
   parameter and per ABI slot what `clauncher.wrap` makes of the launch's plan. Gives
   the type `Launcher`, called like the Python launcher, and `describe(tensor)` and
   `driver_entry(name)`, which `clauncher` asks when it makes one. What it reads, checks
   and packs of each argument is in claunch_args.h.

   Per launch it reads each tensor through the DLPack C exchange API of its type
   (`__dlpack_c_exchange_api__`: `dltensor_from_py_object_no_sync` fills a DLTensor on the
   stack, no allocation), checks everything the Python launcher checks, packs the ABI
   values into its slots and calls cuLaunchKernel through the driver's own entry point.
   Arguments bind as in a call of the kernel (by position or keyword, defaults filled in).
   Anything it does not take (an unknown or repeated keyword, a missing argument, a failed
   check, a Python error on the way) goes to `fallback` unchanged: the Python launcher
   decides.

   The GIL is held from the first read to the driver's return, so one set of slots per
   launcher is enough: nothing else can write them in between. Python code runs only
   before the slots are written (the bounds guard, a constexpr's __eq__, a stream object's
   handle, a scalar's conversion), or after the launch (the error report, on a copy of
   the slots). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Pack2 _PyFloat_Pack2
#endif

#include "claunch_args.h"

/* ------------------------------------------------------------------ the launcher */

typedef int (*LaunchFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);

typedef struct {
    PyObject_HEAD
    PyObject *dict;
    vectorcallfunc vectorcall;
    PyObject *fallback, *guard, *failed, *handle, *num_warps, *constants;
    PyObject *names, *defaults, *no_default;  /* the parameters' names, defaults, 'none' */
    PyObject *described;  /* the parameters' descriptions: what `params` borrows from */
    void *function;
    LaunchFn launch;
    unsigned grid[3], block[3], shared;
    const volatile int64_t *flag;
    const DLPackExchangeAPI *stream_api;
    Rules rules;
    int nparams, nslots, retired, tile;
    unsigned long long misses;  /* calls handed to the fallback */
    Param params[MAX_PARAMS];
    Slot slots[MAX_SLOTS];
    uint64_t values[MAX_SLOTS];
    void *pointers[MAX_SLOTS];
} Launcher;

static PyObject *STREAM, *NUM_WARPS;  /* interned keyword names */

static PyObject *down(Launcher *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    self->misses++;
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* After the driver refused the launch: `failed(code, grid, block, address, stream,
   shared)` reports it (and retries in the kernel's context), on a copy of the slots. */
static PyObject *report(Launcher *self, int code, void *stream) {
    size_t n = (size_t)self->nslots;
    PyObject *copy = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(16 * (n ? n : 1)));
    if (!copy) return NULL;
    uint64_t *values = (uint64_t *)PyByteArray_AS_STRING(copy);
    void **pointers = (void **)(values + n);
    memcpy(values, self->values, 8 * n);
    for (size_t i = 0; i < n; i++) pointers[i] = values + i;
    PyObject *result = PyObject_CallFunction(
        self->failed, "i(III)(III)KNI", code, self->grid[0], self->grid[1], self->grid[2],
        self->block[0], self->block[1], self->block[2], (unsigned long long)(uintptr_t)pointers,
        stream ? PyLong_FromVoidPtr(stream) : Py_NewRef(Py_None), self->shared);
    Py_DECREF(copy);
    return result;
}

static PyObject *launcher_call(Launcher *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stream = Py_None, *num_warps = Py_None, *bound[MAX_PARAMS] = {NULL};
    Facts facts[MAX_PARAMS];
    if (self->retired || nargs > self->nparams) return down(self, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < nargs; i++) bound[i] = args[i];
    for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int at = -1;
        if (name == STREAM || PyUnicode_Compare(name, STREAM) == 0) { stream = args[nargs + i]; continue; }
        if (self->tile && (name == NUM_WARPS || PyUnicode_Compare(name, NUM_WARPS) == 0)) {
            num_warps = args[nargs + i];
            continue;
        }
        for (int k = 0; k < self->nparams && at < 0; k++) {
            PyObject *own = PyTuple_GET_ITEM(self->names, k);
            if (own == name || PyUnicode_Compare(own, name) == 0) at = k;
        }
        if (at < 0 || bound[at]) return down(self, args, nargsf, kwnames);
        bound[at] = args[nargs + i];
    }
    for (int k = 0; k < self->nparams; k++) {
        if (!bound[k]) bound[k] = PyTuple_GET_ITEM(self->defaults, k);
        if (bound[k] == self->no_default) return down(self, args, nargsf, kwnames);
    }
    if (num_warps != self->num_warps) {  /* None, or the very number this launcher is for */
        int equal = num_warps != Py_None && self->num_warps != Py_None
            && PyLong_CheckExact(num_warps)
            && PyObject_RichCompareBool(num_warps, self->num_warps, Py_EQ) == 1;
        if (!equal) { PyErr_Clear(); return down(self, args, nargsf, kwnames); }
    }
    if (self->constants != Py_None && constants_unchanged(self->constants))
        return down(self, args, nargsf, kwnames);
    if (*self->flag) return down(self, args, nargsf, kwnames);  /* a fault waits: Python raises it */
    for (int i = 0; i < self->nparams; i++) {
        const Param *p = &self->params[i];
        int miss = p->kind == ARRAY ? read_array(p, bound[i], &facts[i], &self->rules)
                 : p->kind == SCALAR ? check_scalar(p, bound[i], &self->rules)
                 : check_constant(p, bound[i]);
        if (miss) return down(self, args, nargsf, kwnames);
    }
    /* the alias check: a written array's bytes against every other array's, and a
       written strided view against itself */
    for (int w = 0; w < self->nparams; w++) {
        const Param *p = &self->params[w];
        if (p->kind != ARRAY || !p->written) continue;
        if (!p->contiguous && overlaps_itself(&facts[w], p->ndim))
            return down(self, args, nargsf, kwnames);
        if (!(facts[w].lo < facts[w].hi)) continue;
        for (int o = 0; o < self->nparams; o++)
            if (o != w && self->params[o].kind == ARRAY && facts[o].lo < facts[w].hi
                && facts[w].lo < facts[o].hi && facts[o].lo < facts[o].hi)
                return down(self, args, nargsf, kwnames);
    }
    if (self->guard != Py_None) {  /* guard(extents of every array in turn, then the arguments) */
        PyObject *atoms[MAX_PARAMS * (MAX_DIMS + 1)];
        int n = 0, ok = -1;
        for (int i = 0; i < self->nparams; i++)
            if (self->params[i].kind == ARRAY)
                for (int k = 0; k < self->params[i].ndim; k++)
                    if (!(atoms[n++] = PyLong_FromLongLong(facts[i].shape[k]))) goto guarded;
        for (int i = 0; i < self->nparams; i++) atoms[n++] = Py_NewRef(bound[i]);
        PyObject *verdict = PyObject_Vectorcall(self->guard, atoms, (size_t)n, NULL);
        if (verdict) { ok = PyObject_IsTrue(verdict); Py_DECREF(verdict); }
    guarded:
        for (int j = 0; j < n; j++) Py_XDECREF(atoms[j]);
        PyErr_Clear();
        if (ok != 1) return down(self, args, nargsf, kwnames);
    }
    void *handle = NULL;
    if (stream == Py_None) {
        if (self->stream_api && self->stream_api->current_work_stream(
                self->rules.device.device_type, self->rules.device.device_id, &handle)) {
            PyErr_Clear();
            return down(self, args, nargsf, kwnames);
        }
    } else {
        PyObject *number = PyLong_CheckExact(stream) ? Py_NewRef(stream)
                         : PyObject_CallOneArg(self->handle, stream);
        if (number) { handle = PyLong_AsVoidPtr(number); Py_DECREF(number); }
        if (PyErr_Occurred()) { PyErr_Clear(); return down(self, args, nargsf, kwnames); }
    }
    /* packed here first (a scalar's conversion may call its type's own code), then into
       the launcher's slots with nothing in between them and the driver */
    uint64_t values[MAX_SLOTS];
    for (int s = 0; s < self->nslots; s++) {
        const Slot *slot = &self->slots[s];
        const Facts *f = &facts[slot->index];
        int miss = slot->role == FIXED ? (values[s] = slot->fixed, 0)
                 : slot->role == VALUE ? pack_scalar(slot->format, bound[slot->index], &values[s])
                 : pack_int(slot->format, slot->role == PTR ? f->ptr : slot->role == SHAPE
                            ? f->shape[slot->axis] : f->strides[slot->axis], &values[s]);
        if (miss) return down(self, args, nargsf, kwnames);
    }
    memcpy(self->values, values, sizeof values[0] * (size_t)self->nslots);
    int err = self->launch(self->function, self->grid[0], self->grid[1], self->grid[2],
                           self->block[0], self->block[1], self->block[2], self->shared,
                           handle, self->pointers, NULL);
    if (err) {
        PyObject *result = report(self, err, handle);
        if (!result) return NULL;
        Py_DECREF(result);
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ construction */

static int fill_param(Param *p, PyObject *d) {
    /* ("a", type, api capsule, (code, bits, lanes), ndim, itemsize, contiguous, unit, aligned,
        on_grid, written) | ("s", type, range_bits, on_grid, narrow, unsigned) | ("c", value) */
    const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(d, 0));
    if (!kind) return -1;
    memset(p, 0, sizeof *p);
    if (kind[0] == 'c') {
        p->kind = CONSTANT;
        p->value = PyTuple_GET_ITEM(d, 1);
        p->type = Py_TYPE(p->value);
        return 0;
    }
    p->type = (PyTypeObject *)PyTuple_GET_ITEM(d, 1);
    if (kind[0] == 's') {
        p->kind = SCALAR;
        return PyArg_ParseTuple(d, "sOiiii", &kind, &p->type, &p->range_bits, &p->on_grid,
                                &p->narrow, &p->is_unsigned) ? 0 : -1;
    }
    PyObject *capsule;
    unsigned code, bits, lanes;
    p->kind = ARRAY;
    if (!PyArg_ParseTuple(d, "sOO(III)iiiiiii", &kind, &p->type, &capsule, &code, &bits, &lanes,
                          &p->ndim, &p->itemsize, &p->contiguous, &p->unit, &p->aligned,
                          &p->on_grid, &p->written))
        return -1;
    p->dtype.code = (uint8_t)code; p->dtype.bits = (uint8_t)bits; p->dtype.lanes = (uint16_t)lanes;
    p->api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    if (!p->api) return -1;
    if (p->api->header.version.major != 1 || !p->api->dltensor_from_py_object_no_sync
        || p->ndim > MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "this array type's DLPack exchange API is not usable");
        return -1;
    }
    return 0;
}

static PyTypeObject LauncherType;

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    /* Launcher(fallback, function, launch_address, grid, block, shared, flag_address,
                stream_capsule or None, (device_type, device_id), params, slots, guard,
                failed, handle, num_warps, constants, tile, limits, names, defaults,
                no_default) */
    PyObject *names, *defaults, *no_default, *fallback, *params, *slots, *guard, *failed, *handle, *num_warps, *constants, *capsule;
    unsigned long long function, launch, flag;
    unsigned g[3], b[3], shared;
    int device_type, device_id, tile;
    long long limits[6];
    (void)kw;
    if (!PyArg_ParseTuple(args, "OKK(III)(III)IKO(ii)O!O!OOOOOp(LLLLLL)O!O!O", &fallback, &function,
                          &launch, &g[0], &g[1], &g[2], &b[0], &b[1], &b[2], &shared, &flag,
                          &capsule, &device_type, &device_id, &PyTuple_Type, &params,
                          &PyTuple_Type, &slots, &guard, &failed, &handle, &num_warps,
                          &constants, &tile, &limits[0], &limits[1], &limits[2], &limits[3],
                          &limits[4], &limits[5], &PyTuple_Type, &names, &PyTuple_Type, &defaults,
                          &no_default))
        return NULL;
    Py_ssize_t np = PyTuple_GET_SIZE(params), ns = PyTuple_GET_SIZE(slots);
    if (np > MAX_PARAMS || ns > MAX_SLOTS || PyTuple_GET_SIZE(names) != np
        || PyTuple_GET_SIZE(defaults) != np) {
        PyErr_SetString(PyExc_ValueError, "too many parameters for the compiled launcher");
        return NULL;
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->vectorcall = (vectorcallfunc)launcher_call;
    self->fallback = Py_NewRef(fallback);
    self->guard = Py_NewRef(guard);
    self->failed = Py_NewRef(failed);
    self->handle = Py_NewRef(handle);
    self->num_warps = Py_NewRef(num_warps);
    self->constants = Py_NewRef(constants);
    self->names = Py_NewRef(names);
    self->defaults = Py_NewRef(defaults);
    self->no_default = Py_NewRef(no_default);
    self->function = (void *)(uintptr_t)function;
    self->launch = (LaunchFn)(uintptr_t)launch;
    memcpy(self->grid, g, sizeof g);
    memcpy(self->block, b, sizeof b);
    self->shared = shared;
    self->flag = (const volatile int64_t *)(uintptr_t)flag;
    self->rules.device.device_type = device_type;
    self->rules.device.device_id = device_id;
    self->tile = tile;
    self->rules.max_extent = limits[0]; self->rules.max_elements = limits[1];
    self->rules.off_grid = limits[2]; self->rules.multiple = limits[3];
    self->rules.narrow_low = limits[4]; self->rules.narrow_end = limits[5];
    if (capsule != Py_None && !(self->stream_api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api")))
        goto fail;
    self->described = Py_NewRef(params);
    self->nparams = (int)np;
    for (Py_ssize_t i = 0; i < np; i++)
        if (fill_param(&self->params[i], PyTuple_GET_ITEM(params, i))) goto fail;
    self->nslots = (int)ns;
    for (Py_ssize_t s = 0; s < ns; s++) {
        Slot *slot = &self->slots[s];
        const char *format;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(slots, s), "iiisK", &slot->role, &slot->index,
                              &slot->axis, &format, &slot->fixed))
            goto fail;
        slot->format = format[0];
        self->pointers[s] = &self->values[s];
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int launcher_traverse(Launcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->dict);
    Py_VISIT(self->fallback);
    Py_VISIT(self->guard);
    Py_VISIT(self->failed);
    Py_VISIT(self->handle);
    Py_VISIT(self->constants);
    Py_VISIT(self->names);
    Py_VISIT(self->defaults);
    Py_VISIT(self->no_default);
    Py_VISIT(self->described);
    return 0;
}

static int launcher_clear(Launcher *self) {
    Py_CLEAR(self->dict);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->guard);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->handle);
    Py_CLEAR(self->num_warps);
    Py_CLEAR(self->constants);
    Py_CLEAR(self->names);
    Py_CLEAR(self->defaults);
    Py_CLEAR(self->no_default);
    Py_CLEAR(self->described);
    self->retired = 1;
    return 0;
}

static void launcher_dealloc(Launcher *self) {
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *launcher_retire(Launcher *self, PyObject *unused) {
    (void)unused;
    self->retired = 1;
    Py_RETURN_NONE;
}

static PyMethodDef launcher_methods[] = {
    {"retire", (PyCFunction)launcher_retire, METH_NOARGS,
     "Hand every call to the fallback from now on."},
    {NULL}
};

static PyMemberDef launcher_members[] = {
    {"misses", T_ULONGLONG, offsetof(Launcher, misses), READONLY,
     "how many calls it handed to the Python launcher behind it"},
    {NULL}
};

static PyGetSetDef launcher_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}
};

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "verdigris._claunch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_dictoffset = offsetof(Launcher, dict),
    .tp_methods = launcher_methods,
    .tp_members = launcher_members,
    .tp_getset = launcher_getset,
};

/* The address of a driver entry point in the loaded libcuda (what cuda-bindings calls). */
static PyObject *driver_entry(PyObject *module, PyObject *name) {
    (void)module;
    const char *symbol = PyUnicode_AsUTF8(name);
    if (!symbol) return NULL;
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *address = library ? dlsym(library, symbol) : NULL;
    if (!address) return PyLong_FromLong(0);
    return PyLong_FromVoidPtr(address);
}

/* What the exchange API of `obj`'s type says of it: ((code, bits, lanes), (device type,
   id), address, shape, strides). */
static PyObject *describe(PyObject *module, PyObject *obj) {
    (void)module;
    PyObject *capsule = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__dlpack_c_exchange_api__");
    if (!capsule) return NULL;
    const DLPackExchangeAPI *api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule);
    DLTensor t;
    if (!api || api->header.version.major != 1 || !api->dltensor_from_py_object_no_sync) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "this array type's DLPack exchange API is not usable");
        return NULL;
    }
    if (api->dltensor_from_py_object_no_sync(obj, &t)) return NULL;
    PyObject *shape = PyTuple_New(t.ndim), *strides = PyTuple_New(t.ndim);
    for (int k = 0; shape && strides && k < t.ndim; k++) {
        PyTuple_SET_ITEM(shape, k, PyLong_FromLongLong(t.shape[k]));
        PyTuple_SET_ITEM(strides, k, PyLong_FromLongLong(t.strides[k]));
    }
    if (!shape || !strides) { Py_XDECREF(shape); Py_XDECREF(strides); return NULL; }
    return Py_BuildValue("(III)(ii)KNN", t.dtype.code, t.dtype.bits, t.dtype.lanes,
                         t.device.device_type, t.device.device_id,
                         (unsigned long long)((uintptr_t)t.data + t.byte_offset), shape, strides);
}

static PyMethodDef module_methods[] = {
    {"describe", describe, METH_O, "What an array type's DLPack exchange API says of an array."},
    {"driver_entry", driver_entry, METH_O, "The address of a loaded libcuda entry point, or 0."},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_claunch", NULL, -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__claunch(void) {
    if (PyType_Ready(&LauncherType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    STREAM = PyUnicode_InternFromString("stream");
    NUM_WARPS = PyUnicode_InternFromString("num_warps");
    IS_NEG = PyUnicode_InternFromString("is_neg");
    Py_INCREF(&LauncherType);
    if (PyModule_AddObject(module, "Launcher", (PyObject *)&LauncherType) < 0) return NULL;
    return module;
}
