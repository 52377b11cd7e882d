"""Every CUDA source of the package compiled by NVRTC, the compiler CuPy's ``RawModule`` uses on a
GPU, with the same options. NVRTC needs no GPU and no driver (the ``nvidia-cuda-nvrtc-cu12`` wheel,
in the test extra), so a kernel written on a CPU-only machine, where the CuPy stand-in runs it
through g++, is known to compile for the GPU before a lent GPU's minutes are spent on it: g++
accepts C++ that NVRTC does not (``std::`` math without includes, host-only library calls)."""
import ctypes
import re
from pathlib import Path

import pytest

import hpcsuite

ARCH = b"-arch=compute_90"        # an H100/H200; the sources use nothing architecture-specific


def _nvrtc():
    try:
        import nvidia.cuda_nvrtc
    except ImportError:
        return None
    for d in nvidia.cuda_nvrtc.__path__:
        lib = Path(d) / "lib" / "libnvrtc.so.12"
        if lib.exists():
            return ctypes.CDLL(str(lib))
    return None


NVRTC = _nvrtc()
pytestmark = pytest.mark.skipif(NVRTC is None, reason="NVRTC is not installed (pip install nvidia-cuda-nvrtc-cu12)")


def compile_cuda(source: str, name: str, options=(b"--fmad=false",)) -> tuple[int, str, str]:
    """``(result code, log, PTX)`` of NVRTC compiling ``source`` (0: success)."""
    prog = ctypes.c_void_p()
    assert NVRTC.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None) == 0
    opts = (ctypes.c_char_p * (len(options) + 1))(*options, ARCH)
    rc = NVRTC.nvrtcCompileProgram(prog, len(options) + 1, opts)

    def text(size_fn, get_fn):
        size = ctypes.c_size_t()
        size_fn(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        get_fn(prog, buf)
        return buf.value.decode(errors="replace")
    log = text(NVRTC.nvrtcGetProgramLogSize, NVRTC.nvrtcGetProgramLog)
    ptx = text(NVRTC.nvrtcGetPTXSize, NVRTC.nvrtcGetPTX) if rc == 0 else ""
    NVRTC.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log, ptx


def _sources() -> dict:
    """The source each ``cupy.RawModule`` of the package compiles, as it compiles it."""
    from hpcsuite.accel import kernels, temporal
    from hpcsuite.les import gpukernels, gpusubgrid
    from hpcsuite.runtime import index_copy
    from hpcsuite.solvers import thomas
    out = {f"accel.kernels[{t}]": kernels.CUDA_SOURCE.replace("real_t", t) for t in ("double", "float")}
    out.update({f"accel.temporal[{t}]": temporal.CUDA_STEPS_SOURCE.replace("real_t", t) for t in ("double", "float")})
    out.update({"les.gpukernels": gpukernels.CUDA_SOURCE, "les.gpusubgrid": gpusubgrid.CUDA_SOURCE,
                "runtime.index_copy": index_copy.CUDA_SOURCE, "solvers.thomas": thomas.CUDA_SOURCE})
    return out


def test_every_raw_module_of_the_package_is_listed_here():
    """A new ``RawModule`` must join the list below (one call site per module listed)."""
    root = Path(hpcsuite.__file__).parent
    sites = {str(p.relative_to(root)) for p in root.rglob("*.py")
             if re.search(r"cupy\.RawModule\(", p.read_text())}
    assert sites == {"accel/kernels.py", "accel/temporal.py", "les/gpukernels.py", "les/gpusubgrid.py",
                     "runtime/index_copy.py", "solvers/thomas.py"}, sites


@pytest.mark.parametrize("name", sorted(_sources()))
def test_cuda_source_compiles_with_nvrtc(name):
    """Compiles, and every ``extern "C"`` kernel is an entry point of the PTX under its own name
    (what ``RawModule.get_function`` looks up)."""
    source = _sources()[name]
    rc, log, ptx = compile_cuda(source, name)
    assert rc == 0, f"{name}: NVRTC error {rc}:\n{log}"
    kernels = re.findall(r'extern "C" __global__ void (\w+)\(', source)
    entries = set(re.findall(r"\.entry (\w+)\(", ptx))
    assert kernels and entries == set(kernels), (name, sorted(entries ^ set(kernels)))
    # compiled as CuPy compiles them (--fmad=false), no multiply-add of ours is fused: the GPU then
    # rounds each product as the CPU path does. CUDA's exp() is made of explicit fma instructions
    # that --fmad=false does not touch, so the kernels calling it are named here (and the list is
    # exact: a kernel on it without fma fails too, so it cannot go stale).
    fused = {k for k, body in _ptx_entries(ptx).items() if "fma." in body}
    assert fused == CALL_EXP.get(name, set()), (name, sorted(fused))


# kernels whose only fma instructions come from CUDA's exp() (the saturation vapour pressure)
CALL_EXP = {"les.gpukernels": {"les_thermo"}}


def _ptx_entries(ptx: str) -> dict:
    """``{kernel: its PTX body}``."""
    parts = re.split(r"(?=\.visible \.entry )", ptx)
    return {m.group(1): p for p in parts if (m := re.match(r"\.visible \.entry (\w+)\(", p))}


def test_fma_check_can_fail():
    """The ``fma.`` check above sees a fused multiply-add when NVRTC is allowed to make one."""
    src = 'extern "C" __global__ void k(double* a) { a[0] = a[1] * a[2] + a[3]; }'
    assert "fma." in compile_cuda(src, "fused", options=(b"--fmad=true",))[2]
    assert "fma." not in compile_cuda(src, "unfused")[2]


def test_nvrtc_refuses_what_only_g_plus_plus_accepts():
    """The check can fail: ``std::exp`` compiles in the stand-in's g++ harness (which includes
    <cmath>), not in NVRTC."""
    bad = 'extern "C" __global__ void k(double* a) { a[0] = std::exp(a[0]); }'
    rc, log, _ = compile_cuda(bad, "bad")
    assert rc != 0 and "std" in log, log
    good = 'extern "C" __global__ void k(double* a) { a[0] = exp(a[0]); }'
    assert compile_cuda(good, "good")[0] == 0
