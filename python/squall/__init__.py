# SPDX-License-Identifier: BSD-3-Clause
"""squall: compressed gradient all-reduce, from Python.

``squall.Comm`` runs squall's engine (codecs, error feedback, cost model,
call header) over collectives written in Python: a framework's own
communicator. ``squall.torch.ddp_comm_hook`` builds one on a PyTorch
process group for ``DistributedDataParallel.register_comm_hook``.

The library is found, in this order, at ``$SQUALL_LIBRARY``, where
``make install`` put it (the prefix this package was installed with), and
by the loader's own search (``libsquall.so.<soname>``).
"""
import ctypes
import ctypes.util
import os

from . import _location

__all__ = ["Comm", "SquallError", "config", "library", "stats", "FLOAT32", "FLOAT16", "BFLOAT16", "INT64",
           "SUM", "MAX", "MIN", "AVG"]

# squall_coll.h's enums
FLOAT32, FLOAT16, BFLOAT16, INT64 = 0, 1, 2, 3
SUM, MAX, MIN, AVG = 0, 1, 2, 3
_CONFIG_BYTES = 16384  # room for any squallConfig_t: zeroed, squall takes it at its first size
_STATS_MAGIC = 0x53515354  # squall.h's SQUALL_STATS_MAGIC
_PASS_REASONS_MAX, _FLAT_REASONS_MAX = 32, 16


class SquallError(RuntimeError):
    """A squall call failed: the message is squall's own detail."""


def _candidates():
    env = os.environ.get("SQUALL_LIBRARY")
    if env:
        return [env]
    names = []
    if _location.LIBDIR:
        names.append(os.path.join(_location.LIBDIR, "libsquall.so." + _location.SONAME))
    names.append("libsquall.so." + _location.SONAME)
    found = ctypes.util.find_library("squall")
    if found:
        names.append(found)
    return names


def _load():
    errors = []
    for name in _candidates():
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("squall: cannot load libsquall (set SQUALL_LIBRARY to its path): " + "; ".join(errors))


_lib = None


def library():
    """The loaded libsquall (ctypes.CDLL), loaded on first use."""
    global _lib
    if _lib is None:
        lib = _load()
        lib.squallGetLastError.restype = ctypes.c_char_p
        lib.squallGetErrorString.restype = ctypes.c_char_p
        lib.squallVersionString.restype = ctypes.c_char_p
        lib.squallConfigCodecString.restype = ctypes.c_char_p
        lib.squallConfigCodecString.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.squallCollAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.squallCollReduceScatter.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.squallCollGetResidual.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                              ctypes.c_void_p]
        lib.squallCollCreate.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        for name in ("squallCollDestroy", "squallCollResetResiduals"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        lib.squallCollSetConfig.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.squallCollStats.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.squallPassReasonName.restype = ctypes.c_char_p
        lib.squallStatsGet.argtypes = [ctypes.c_void_p]
        _lib = lib
    return _lib


def _check(result, what):
    if result != 0:
        lib = library()
        detail = lib.squallGetLastError().decode(errors="replace")
        raise SquallError("%s: %s: %s" % (what, lib.squallGetErrorString(result).decode(), detail))


def version():
    """squall's version string, with its build features."""
    return library().squallVersionString().decode()


def config(spec=None, base=None):
    """A squallConfig_t (a ctypes buffer): the process's configuration
    (the SQUALL_* variables) or ``base``, with ``spec`` applied, e.g.
    ``"SQUALL_COMPRESS=topk:0.01 SQUALL_MIN_BYTES=64K"`` (squallConfigParse:
    the ``SQUALL_`` prefix may be left out). A bad setting raises
    SquallError naming it."""
    lib = library()
    buf = ctypes.create_string_buffer(_CONFIG_BYTES)
    if base is not None:
        ctypes.memmove(buf, base, _CONFIG_BYTES)
    else:
        _check(lib.squallGetConfig(buf), "squallGetConfig")
    if spec:
        _check(lib.squallConfigParse(buf, spec.encode()), "squallConfigParse(%r)" % spec)
    return buf


class _Stats(ctypes.Structure):
    """squallStats_t up to the members this package knows; squall fills
    as much as its size says (squall.h: structs that can grow)."""
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("calls", ctypes.c_uint64), ("compressedCalls", ctypes.c_uint64),
                ("passthroughCalls", ctypes.c_uint64), ("passthrough", ctypes.c_uint64 * _PASS_REASONS_MAX),
                ("bytesIn", ctypes.c_uint64), ("bytesWire", ctypes.c_uint64), ("codecSeconds", ctypes.c_double),
                ("flatCalls", ctypes.c_uint64), ("twoLevelCalls", ctypes.c_uint64),
                ("flat", ctypes.c_uint64 * _FLAT_REASONS_MAX), ("bytesInterNode", ctypes.c_uint64),
                ("bytesIntraNode", ctypes.c_uint64), ("pipelinedCalls", ctypes.c_uint64),
                ("pipelineChunks", ctypes.c_uint64), ("headers", ctypes.c_uint64)]


def _stats_dict(st):
    """squallStats_t as a dict: its counters by name, and "passthrough" by
    reason name (squallPassReasonName; the reasons that occurred)."""
    lib = library()
    out = {name: getattr(st, name) for name, _ in _Stats._fields_[3:] if name not in ("passthrough", "flat")}
    out["passthrough"] = {}
    for i in range(_PASS_REASONS_MAX):
        name = lib.squallPassReasonName(i)
        if st.passthrough[i] and name:
            out["passthrough"][name.decode()] = st.passthrough[i]
    return out


def _new_stats():
    code = ctypes.c_int()
    _check(library().squallGetVersion(ctypes.byref(code)), "squallGetVersion")
    return _Stats(ctypes.sizeof(_Stats), _STATS_MAGIC, code.value)


def stats():
    """The process's counters (squallStatsGet: every squall call of the
    process, whatever its entry), as Comm.stats() gives them."""
    st = _new_stats()
    _check(library().squallStatsGet(ctypes.byref(st)), "squallStatsGet")
    return _stats_dict(st)


# the callbacks' C types (squall_coll.h)
_ALLREDUCE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_ALLGATHER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_void_p)
_REDUCESCATTER = _ALLREDUCE  # (ctx, send, recv, recvcount, type, op, stream)


class _Collectives(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("ctx", ctypes.c_void_p), ("rank", ctypes.c_int),
                ("nranks", ctypes.c_int), ("memory", ctypes.c_int), ("allReduce", _ALLREDUCE),
                ("allGather", _ALLGATHER), ("allToAll", _ALLGATHER), ("reduceScatter", _REDUCESCATTER)]


class Comm:
    """squall's engine over Python collectives.

    all_reduce(send, recv, count, dtype, op), all_gather(send, recv, nbytes),
    all_to_all(send, recv, nbytes) (optional) and reduce_scatter(send,
    recv, recvcount, dtype, op) (optional: for Comm.reduce_scatter) take
    raw host addresses and run the plain collective over the caller's ranks
    (see squall_coll.h for their contract). An exception inside one makes
    the squall call fail, and is raised again, chained, by the call here.
    """

    def __init__(self, rank, nranks, all_reduce, all_gather, all_to_all=None, spec=None, reduce_scatter=None):
        self._lib = library()
        self._raised = None
        self._cbs = (self._wrap(all_reduce, _ALLREDUCE, 5), self._wrap(all_gather, _ALLGATHER, 3),
                     self._wrap(all_to_all, _ALLGATHER, 3) if all_to_all else _ALLGATHER(),
                     self._wrap(reduce_scatter, _REDUCESCATTER, 5) if reduce_scatter else _REDUCESCATTER())
        self._table = _Collectives(ctypes.sizeof(_Collectives), None, rank, nranks, 0, *self._cbs)
        self._cfg = config(spec)
        handle = ctypes.c_void_p()
        _check(self._lib.squallCollCreate(ctypes.byref(self._table), self._cfg, ctypes.byref(handle)),
               "squallCollCreate")
        self._handle = handle

    def _wrap(self, fn, ctype, nargs):
        def call(ctx, *args):
            try:
                fn(*args[:nargs])
                return 0
            except BaseException as e:  # noqa: B902 - carried back across C, raised by all_reduce
                if self._raised is None:
                    self._raised = e
                return 1
        return ctype(call)

    def all_reduce(self, send, recv, count, dtype=FLOAT32, op=AVG, key=None):
        """recv = the sum (SUM) or mean (AVG) over every rank's send; count
        elements of dtype at host addresses send and recv (may be equal).
        key: a positive integer naming the tensor (its residual follows
        it), or None for the buffers' addresses. Collective."""
        self._raised = None
        r = self._lib.squallCollAllReduce(self._handle, send, recv, count, dtype, op, key, None)
        self._raise_if_failed(r, "squallCollAllReduce of %d elements" % count)

    def reduce_scatter(self, send, recv, recvcount, dtype=FLOAT32, op=SUM, key=None):
        """recv = this rank's block of the sum over every rank's send, which
        holds nranks blocks of recvcount elements of dtype (host
        addresses; recv may be this rank's own block of send). key as for
        all_reduce; the residual covers the whole send buffer. Collective."""
        self._raised = None
        r = self._lib.squallCollReduceScatter(self._handle, send, recv, recvcount, dtype, op, key, None)
        self._raise_if_failed(r, "squallCollReduceScatter of %d elements per rank" % recvcount)

    def _raise_if_failed(self, r, what):
        raised, self._raised = self._raised, None
        if r != 0:
            detail = self._lib.squallGetLastError().decode(errors="replace")
            if raised is not None:  # named in the text too: a chain does not survive PyTorch's futures
                detail += " (%s: %s)" % (type(raised).__name__, raised)
            err = SquallError("%s failed: %s" % (what, detail))
            if raised is not None:
                raise err from raised
            raise err

    def residual(self, key, count, dtype=FLOAT32):
        """The error-feedback residual of tensor key (count floats, a
        ctypes array; a reduce-scatter's: count is its send buffer's), or
        None where squall keeps none."""
        out = (ctypes.c_float * count)()
        r = self._lib.squallCollGetResidual(self._handle, key, count, dtype, out)
        return out if r == 0 else None

    def stats(self):
        """This object's counters (squallCollStats), a dict: calls,
        compressedCalls, passthroughCalls, passthrough (by reason name),
        bytesIn, bytesWire, ... as squallStats_t names them."""
        st = _new_stats()
        _check(self._lib.squallCollStats(self._handle, ctypes.byref(st)), "squallCollStats")
        return _stats_dict(st)

    def reset_residuals(self):
        _check(self._lib.squallCollResetResiduals(self._handle), "squallCollResetResiduals")

    def set_config(self, spec):
        self._cfg = config(spec)
        _check(self._lib.squallCollSetConfig(self._handle, self._cfg), "squallCollSetConfig")

    def close(self):
        if getattr(self, "_handle", None):
            self._lib.squallCollDestroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()
