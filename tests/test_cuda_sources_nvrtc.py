"""Every CUDA source of the package compiled by NVRTC, the compiler CuPy's ``RawModule`` uses on a
GPU, with the same options. NVRTC needs no GPU and no driver (the ``nvidia-cuda-nvrtc-cu12`` wheel,
in the test extra), so a kernel written on a CPU-only machine, where the CuPy stand-in runs it
through g++, is known to compile for the GPU before a lent GPU's minutes are spent on it: g++
accepts C++ that NVRTC does not (``std::`` math without includes, host-only library calls)."""
import ast
import ctypes
import importlib
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


def _users() -> set:
    """The package's modules that make a ``CudaSource`` (found in the source text, not imported)."""
    root = Path(hpcsuite.__file__).parent
    return {".".join(p.relative_to(root.parent).with_suffix("").parts) for p in root.rglob("*.py")
            if re.search(r"\bCudaSource\(", p.read_text()) and p.name != "cuda_modules.py"}


def _compiles_cuda(text: str) -> bool:
    """Whether a module calls (or imports) CuPy's CUDA compilers ``RawModule`` / ``RawKernel``."""
    names = {"RawModule", "RawKernel"}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in names:
                return True
        if isinstance(node, ast.ImportFrom) and any(a.name in names for a in node.names):
            return True
    return False


def _sources() -> dict:
    """The source each ``cupy.RawModule`` of the package compiles, as it compiles it: every
    ``CudaSource`` registered by the modules that make one, for each of its real types."""
    from hpcsuite.runtime import cuda_modules
    for name in sorted(_users()):
        importlib.import_module(name)
    out = {}
    for name, src in cuda_modules.SOURCES.items():
        short = name.removeprefix("hpcsuite.")
        for ctype, text in src.texts().items():
            out[short if ctype is None else f"{short}[{ctype}]"] = text
    return out


def test_every_cuda_module_is_compiled_through_the_one_compiler():
    """``RawModule`` is called in ``runtime/cuda_modules.py`` only (always ``--fmad=false``, cached),
    and every module that makes a ``CudaSource`` registered it: a new kernel module is compiled by
    the test below without being listed here."""
    from hpcsuite.runtime import cuda_modules
    root = Path(hpcsuite.__file__).parent
    sites = {str(p.relative_to(root)) for p in root.rglob("*.py") if _compiles_cuda(p.read_text())}
    assert sites == {"runtime/cuda_modules.py"}, sites
    assert cuda_modules.OPTIONS == ("--fmad=false",)
    _sources()
    users = _users()
    assert set(cuda_modules.SOURCES) == users, (sorted(users), sorted(cuda_modules.SOURCES))
    # today's six kernel modules are among them (the scan cannot lose them unnoticed)
    assert {"hpcsuite.accel.kernels", "hpcsuite.accel.temporal", "hpcsuite.les.gpukernels",
            "hpcsuite.les.gpusubgrid", "hpcsuite.runtime.index_copy", "hpcsuite.solvers.thomas"} <= users


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


def test_the_compiler_scan_can_fail():
    """The scan above sees a compiler called or imported under any spelling."""
    assert _compiles_cuda("import cupy\nm = cupy.RawModule(code=s)")
    assert _compiles_cuda("from cupy import RawKernel as K")
    assert _compiles_cuda("import cupy as cp\nk = cp.RawKernel(s, 'k')")
    assert not _compiles_cuda('"""compiled by ``cupy.RawModule``"""\nx = 1')


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
