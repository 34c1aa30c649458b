#!/usr/bin/env python3
"""Start CUDA as a job would, through the driver API (libcuda), and print one line:
"<CUDA version the driver supports> <cuInit's result> <GPUs CUDA sees>", for example
"13000 CUDA_SUCCESS 8". nvidia-smi lists GPUs that CUDA cannot use (an NVSwitch system whose
fabric manager is down: cuInit answers CUDA_ERROR_SYSTEM_NOT_READY), so node_verify asks CUDA.
The standard library only: it runs under the node's own python3, before any toolkit."""
import ctypes
import sys


def main() -> int:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")  # the driver's, installed with it (no toolkit)
        calls = (cuda.cuDriverGetVersion, cuda.cuInit, cuda.cuDeviceGetCount, cuda.cuGetErrorName)
    except (OSError, AttributeError):  # no driver, or a libcuda without the driver API
        print("0 LIBCUDA_NOT_LOADABLE 0")
        return 0
    get_version, init, get_count, error_name = calls
    version = ctypes.c_int(0)
    count = ctypes.c_int(0)
    # CUDA driver API, Version Management: "(1000 * major + 10 * minor)", 13000 for 13.0;
    # it needs no cuInit.
    get_version(ctypes.byref(version))
    result = init(0)
    if result == 0:
        result = get_count(ctypes.byref(count))
    name = ctypes.c_char_p()
    if error_name(result, ctypes.byref(name)) != 0 or not name.value:
        label = f"CUresult_{result}"
    else:
        label = name.value.decode("ascii", "replace")
    print(f"{version.value} {label} {count.value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
