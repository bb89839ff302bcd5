"""XLA FFI handlers written in Python: the C ABI of xla/ffi/api/c_api.h in ctypes.

``make_handler(fn)`` turns ``fn(call: Call) -> None`` into an XLA FFI handler (a C function pointer
kept alive here) that ``register(name, fn, platform)`` hands to ``jax.ffi.register_ffi_target``.
The handler answers XLA's metadata query (API version, and the command-buffer trait when asked
for), ignores the instantiate / prepare / initialize stages, and on execute decodes the call
frame into buffers (pointer, XLA dtype code, dims) and the platform stream, calls ``fn`` and turns
any Python exception into an XLA error carrying its message. No C++ is built: the structs below
follow the header field by field (each begins with ``struct_size``, so newer runtimes that append
fields stay compatible).
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint32, c_void_p

EXTENSION_METADATA = 1
STAGE_EXECUTE = 3
ARG_BUFFER = RET_BUFFER = 1
TRAIT_COMMAND_BUFFER_COMPATIBLE = 1
ERROR_INVALID_ARGUMENT = 3
ERROR_INTERNAL = 13

# XLA_FFI_DataType -> the dtype names fp8gemm uses (intake / validate).
DTYPES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16", 8: "uint32",
          9: "uint64", 10: "float16", 11: "float32", 12: "float64", 16: "bfloat16",
          19: "float8_e5m2", 20: "float8_e4m3fn", 28: "float8_e4m3"}


class ExtensionBase(Structure):
    pass


ExtensionBase._fields_ = [("struct_size", c_size_t), ("type", c_int), ("next", POINTER(ExtensionBase))]


class ApiVersion(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p),
                ("major_version", c_int), ("minor_version", c_int)]


class Metadata(Structure):
    _fields_ = [("struct_size", c_size_t), ("api_version", ApiVersion), ("traits", c_uint32),
                ("state_type_id", c_int64)]


class MetadataExtension(Structure):
    _fields_ = [("extension_base", ExtensionBase), ("metadata", POINTER(Metadata))]


class Buffer(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("dtype", c_int),
                ("data", c_void_p), ("rank", c_int64), ("dims", POINTER(c_int64))]


class Args(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int)), ("args", POINTER(c_void_p))]


class Rets(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int)), ("rets", POINTER(c_void_p))]


class Attrs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int)), ("names", c_void_p), ("attrs", POINTER(c_void_p))]


class ErrorCreateArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("message", c_char_p),
                ("errc", c_int)]


class StreamGetArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("ctx", c_void_p),
                ("stream", c_void_p)]


class DeviceOrdinalGetArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("ctx", c_void_p),
                ("device_ordinal", c_int32)]


_API_FUNCTIONS = ("Error_Create", "Error_GetMessage", "Error_Destroy", "Handler_Register", "Stream_Get",
                  "Type_Register", "ExecutionContext_Get", "State_Set", "State_Get",
                  "DeviceMemory_Allocate", "DeviceMemory_Free", "ThreadPool_Schedule",
                  "ThreadPool_NumThreads", "Future_Create", "Future_SetAvailable", "Future_SetError",
                  "RunId_Get", "DeviceOrdinal_Get")


class Api(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("api_version", ApiVersion),
                ("internal_api", c_void_p)] + [(name, c_void_p) for name in _API_FUNCTIONS]


class CallFrame(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", POINTER(ExtensionBase)),
                ("api", POINTER(Api)), ("ctx", c_void_p), ("stage", c_int), ("args", Args),
                ("rets", Rets), ("attrs", Attrs), ("future", c_void_p)]


HANDLER = ctypes.CFUNCTYPE(c_void_p, POINTER(CallFrame))
_ERROR_CREATE = ctypes.CFUNCTYPE(c_void_p, POINTER(ErrorCreateArgs))
_STREAM_GET = ctypes.CFUNCTYPE(c_void_p, POINTER(StreamGetArgs))
_ORDINAL_GET = ctypes.CFUNCTYPE(c_void_p, POINTER(DeviceOrdinalGetArgs))


class FfiBuffer:
    """One argument or result: device (or host) pointer, dtype name, dims."""

    __slots__ = ("ptr", "dtype", "shape")

    def __init__(self, raw: Buffer):
        self.ptr = raw.data or 0
        self.dtype = DTYPES.get(raw.dtype, f"xla_dtype_{raw.dtype}")
        self.shape = tuple(raw.dims[i] for i in range(raw.rank))


class Call:
    """What a handler gets: buffers in order, and lazy access to the stream and device."""

    __slots__ = ("args", "rets", "_frame")

    def __init__(self, frame: CallFrame):
        self._frame = frame
        self.args = [_buffer(frame.args.types[i], frame.args.args[i], "argument", i)
                     for i in range(frame.args.size)]
        self.rets = [_buffer(frame.rets.types[i], frame.rets.rets[i], "result", i)
                     for i in range(frame.rets.size)]

    def stream(self) -> int:
        """The platform stream XLA runs this call on (a CUstream on CUDA), as an integer."""
        api = self._frame.api.contents
        args = StreamGetArgs(ctypes.sizeof(StreamGetArgs), None, self._frame.ctx, None)
        _check(api, _STREAM_GET(api.Stream_Get)(ctypes.byref(args)), "XLA_FFI_Stream_Get")
        return args.stream or 0

    def device(self) -> int:
        api = self._frame.api.contents
        args = DeviceOrdinalGetArgs(ctypes.sizeof(DeviceOrdinalGetArgs), None, self._frame.ctx, 0)
        _check(api, _ORDINAL_GET(api.DeviceOrdinal_Get)(ctypes.byref(args)), "XLA_FFI_DeviceOrdinal_Get")
        return args.device_ordinal


def _buffer(kind: int, ptr, what: str, index: int) -> FfiBuffer:
    if kind != ARG_BUFFER:
        raise TypeError(f"{what} {index} is not a buffer (XLA FFI type {kind})")
    return FfiBuffer(ctypes.cast(ptr, POINTER(Buffer)).contents)


class FfiError(RuntimeError):
    pass


class ErrorGetMessageArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("error", c_void_p),
                ("message", c_char_p)]


class ErrorDestroyArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("error", c_void_p)]


_ERROR_GET_MESSAGE = ctypes.CFUNCTYPE(None, POINTER(ErrorGetMessageArgs))
_ERROR_DESTROY = ctypes.CFUNCTYPE(None, POINTER(ErrorDestroyArgs))


def _check(api: Api, error, what: str) -> None:
    """Raise FfiError with XLA's message if an API call returned an error (which we then own and
    destroy)."""
    if not error:
        return
    msg = ErrorGetMessageArgs(ctypes.sizeof(ErrorGetMessageArgs), None, error, None)
    _ERROR_GET_MESSAGE(api.Error_GetMessage)(ctypes.byref(msg))
    text = (msg.message or b"").decode("utf-8", "replace")
    _ERROR_DESTROY(api.Error_Destroy)(ctypes.byref(ErrorDestroyArgs(ctypes.sizeof(ErrorDestroyArgs), None, error)))
    raise FfiError(f"{what} failed: {text}")


def _error(api_ptr, message: str, code: int) -> int:
    """An XLA_FFI_Error* carrying ``message`` (XLA takes ownership), or 0 when no API is at hand."""
    if not api_ptr:
        return 0
    api = api_ptr.contents
    buf = ctypes.create_string_buffer(message.encode("utf-8", "replace")[:4000])
    args = ErrorCreateArgs(ctypes.sizeof(ErrorCreateArgs), None, ctypes.cast(buf, c_char_p), code)
    return _ERROR_CREATE(api.Error_Create)(ctypes.byref(args)) or 0


_handlers = {}    # (name, platform) -> the ctypes callback (it must outlive every XLA executable using it)


def make_handler(fn, command_buffer_compatible: bool = False):
    """An XLA FFI handler (ctypes function pointer) that runs ``fn(Call)`` at the execute stage."""
    traits = TRAIT_COMMAND_BUFFER_COMPATIBLE if command_buffer_compatible else 0

    def handler(frame_ptr):
        try:
            frame = frame_ptr.contents
            ext = frame.extension_start
            if ext and ext.contents.type == EXTENSION_METADATA:
                md = ctypes.cast(ext, POINTER(MetadataExtension)).contents.metadata.contents
                version = frame.api.contents.api_version if frame.api else None
                md.api_version = ApiVersion(ctypes.sizeof(ApiVersion), None,
                                            version.major_version if version else 0,
                                            version.minor_version if version else 1)
                md.traits = traits
                return None
            if frame.stage != STAGE_EXECUTE:
                return None
            fn(Call(frame))
            return None
        except (TypeError, ValueError) as exc:
            return _error(frame_ptr.contents.api, f"{type(exc).__name__}: {exc}", ERROR_INVALID_ARGUMENT)
        except BaseException as exc:   # noqa: BLE001 -- nothing may unwind into XLA
            return _error(frame_ptr.contents.api, f"{type(exc).__name__}: {exc}", ERROR_INTERNAL)

    return HANDLER(handler)


def register(name: str, fn, platform: str, command_buffer_compatible: bool = False) -> None:
    """Register ``fn`` as the FFI target ``name`` on ``platform`` ("cpu" or "CUDA"), once per
    platform."""
    if (name, platform.lower()) in _handlers:
        return
    import jax

    cfunc = make_handler(fn, command_buffer_compatible)
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(cfunc), platform=platform)
    _handlers[name, platform.lower()] = cfunc
