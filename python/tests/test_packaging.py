"""The package as users get it: its binaries, its version, the `ncclprof` command, and a wheel
that installs and runs on a machine without Go or the source tree."""

import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ncclprof
from ncclprof import _elf
from conftest import REPO, config_free_env, real_trace, run_py


def _core_version():
    text = (REPO / "plugin" / "core.h").read_text()
    return re.search(r'#define\s+NCCLPROF_VERSION\s+"([^"]+)"', text).group(1)


def test_versions_agree():
    p = run_py("import ncclprof; print(ncclprof.plugin_version())")
    assert ncclprof.__version__ == _core_version() == p.stdout.strip()


def test_binaries_fit_this_machine():
    lib = _elf.read(ncclprof.library_path())
    merge = _elf.read(ncclprof.ncclmerge_path())
    here = platform.machine()
    assert lib.machine == merge.machine == here
    assert lib.elf_type == "shared" and set(lib.needed) <= _elf.MANYLINUX_LIBS
    assert lib.glibc is not None and lib.glibc <= tuple(map(int, platform.libc_ver()[1].split(".")[:2]))
    exports = _elf.exported_symbols(ncclprof.library_path())
    assert {f"ncclProfiler_v{i}" for i in range(1, 7)} <= exports  # every NCCL ABI
    assert {"ncclprof_trace_start", "ncclprof_flush", "ncclprof_set_step"} <= exports
    if os.access(ncclprof.ncclmerge_path(), os.X_OK) and "_bin" in ncclprof.ncclmerge_path():
        assert merge.static  # built with CGO_ENABLED=0: runs on any Linux of the architecture


def test_platform_tag_rules():
    lib = _elf.ELFInfo("a", "x86_64", "shared", ("libc.so.6",), (2, 34))
    static = _elf.ELFInfo("b", "x86_64", "executable", (), None)
    old = _elf.ELFInfo("c", "aarch64", "shared", ("libc.so.6", "libpthread.so.0"), (2, 14))
    odd = _elf.ELFInfo("d", "x86_64", "shared", ("libstdc++.so.6",), (2, 17))
    assert _elf.platform_tag([lib, static]) == "manylinux_2_34_x86_64"
    assert _elf.platform_tag([old]) == "manylinux_2_17_aarch64"  # never below 2.17
    assert _elf.platform_tag([odd]) == "linux_x86_64"  # links a library manylinux does not allow
    with pytest.raises(_elf.ELFError, match="different CPUs"):
        _elf.platform_tag([lib, old])


def _cli(*args, env=None, check=True):
    exe = shutil.which("ncclprof", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "ncclprof"]
    p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=120,
                       env=config_free_env(env), stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd + list(args)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


# The ncclmerge commands `ncclprof` runs, each with a phrase of ncclmerge's own help for it.
NCCLMERGE_HELP = {
    "merge": "--timeline",
    "check": "Perfetto's JSON importer",
    "stats": "--each",
    "skew": "median absolute deviation",
    "why": "gpu_compute",
    "pprof": "go tool pprof -http",
    "report": "inline SVG",
    "hang": "Exit status: 0 a suspect is named",
    "demo": "labelled SIMULATED",
    "bench": "--what merge",
}


@pytest.mark.parametrize("cmd", NCCLMERGE_HELP)
def test_cli_passes_ncclmerge_commands_through(cmd):
    p = subprocess.run([sys.executable, "-m", "ncclprof", cmd, "--help"], capture_output=True,
                       text=True, timeout=60, env=config_free_env(), stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert f"Usage:\n  ncclmerge {cmd} " in p.stdout and NCCLMERGE_HELP[cmd] in p.stdout


def test_cli_version_help_and_passthrough(tmp_path):
    v = _cli("--version").stdout
    assert v.startswith(f"ncclprof {ncclprof.__version__}; plugin {_core_version()} ({ncclprof.library_path()})")
    assert f"ncclmerge {ncclprof.ncclmerge_path()}" in v
    h = _cli("--help").stdout
    for cmd in (*NCCLMERGE_HELP, "env", "info", "library"):
        assert re.search(rf"^  {cmd}\s", h, re.M), cmd
    src = real_trace("trace_filter_sampled_rank-0.json.gz")
    c = _cli("check", str(src)).stdout
    assert "4855 events" in c and "0 errors" in c
    bad = _cli("check", str(real_trace("nccl_parser_config_nccl_data.json.gz")), check=False)
    assert bad.returncode == 1 and "flow_without_end" in bad.stdout  # exit status passes through
    u = _cli("frobnicate", check=False)
    assert u.returncode == 2 and "unknown command 'frobnicate'" in u.stderr
    assert _cli("library").stdout.strip() == ncclprof.library_path()
    info = _cli("info").stdout
    assert f"plugin library: {ncclprof.library_path()}" in info and "loads here: yes" in info


def test_cli_hang_exit_status(tmp_path):
    # A dump written on request by a process with nothing in flight (docs/hang.md): the bundled
    # ncclmerge reads it, says so, and its exit status 3 (nothing in flight) comes through.
    import json
    dump = {"ncclprof_hang_version": 1, "host": "h", "pid": 7, "plugin_version": "", "simulated": True,
            "reason": "request", "timeout_s": 0, "event_mask": 3871, "written_unix_ns": 1800000000000000000,
            "first_detected_unix_ns": 0, "dumps_written": 1,
            "health": {"partial": False, "events_dropped": 0, "comms_not_tracked": 0, "ops_not_listed": 0},
            "comms": [{"comm_hash": "0x00000000000000aa", "name": "world", "rank": 0, "nranks": 2, "nnodes": 1,
                       "abi_version": 6, "completed": [], "p2p_completed": [], "ops_completed": 0, "open_ops": []}]}
    (tmp_path / "ncclprof-hang-h-7.json").write_text(json.dumps(dump))
    p = _cli("hang", str(tmp_path), check=False)
    assert p.returncode == 3, p.stderr
    assert p.stdout.startswith("nothing in flight: no dump shows an open NCCL operation")
    assert _cli("hang", str(tmp_path / "none"), check=False).returncode == 1


def test_cli_env_for_launchers(tmp_path):
    p = _cli("env", "--trace-dir", str(tmp_path / "tr ace"), "--event-mask", "default,kernelch",
             "--metrics", "otlp")
    assert p.stderr == ""  # no warning: exported by a launcher, the job sees these
    got = {}
    for line in p.stdout.splitlines():
        assert line.startswith("export ")
        k, v = line[len("export "):].split("=", 1)
        got[k] = shlex.split(v)[0]
    assert got["NCCL_PROFILER_PLUGIN"] == ncclprof.library_path()
    assert got["NCCLPROF_TRACE_DIR"] == str(tmp_path / "tr ace")  # quoted for the shell
    assert got["NCCLPROF_EVENT_MASK"] == "default,kernelch"
    assert got["NCCLPROF_METRICS"] == "otlp" and got["NCCLPROF_GOMAXPROCS"] == "2"
    # eval'd by a shell, as a launcher script does
    sh = subprocess.run(["bash", "-c", f'eval "$({shlex.join(_cli_cmd())} env --trace-all)"; '
                         'echo "$NCCL_PROFILER_PLUGIN|$NCCLPROF_TRACE"'],
                        capture_output=True, text=True, env=config_free_env(), timeout=60)
    assert sh.stdout.strip() == f"{ncclprof.library_path()}|1"
    bad = _cli("env", env={"NCCL_PROFILER_PLUGIN": "STATIC_PLUGIN"}, check=False)
    assert bad.returncode == 1 and "STATIC_PLUGIN" in bad.stderr and bad.stdout == ""


def _cli_cmd():
    exe = shutil.which("ncclprof", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "ncclprof"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel `make wheel` builds: pip wheel ./python (Go builds the binaries)."""
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out),
                        str(REPO / "python")], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    [whl] = out.glob("ncclprof-*.whl")
    return whl


def test_wheel_is_a_platform_wheel_with_both_binaries(wheel):
    name = wheel.name
    tag = name[:-len(".whl")].split("-")[-3:]
    assert tag[:2] == ["py3", "none"]  # no Python C API: one wheel for every Python 3
    with zipfile.ZipFile(wheel) as z:
        infos = {i.filename: i for i in z.infolist()}
        lib = infos["ncclprof/_bin/libnccl-profiler-ncclprof.so"]
        merge = infos["ncclprof/_bin/ncclmerge"]
        assert (merge.external_attr >> 16) & 0o111  # executable once installed
        wheel_meta = z.read(f"ncclprof-{ncclprof.__version__}.dist-info/WHEEL").decode()
        d = Path(str(wheel) + ".x")
        z.extract(lib, d)
        z.extract(merge, d)
    assert "Root-Is-Purelib: false" in wheel_meta
    expected = _elf.platform_tag([_elf.read(str(d / lib.filename)), _elf.read(str(d / merge.filename))])
    assert tag[2] == expected and re.fullmatch(r"manylinux_2_\d+_(x86_64|aarch64)", expected)
    assert f"Tag: py3-none-{expected}" in wheel_meta
    shutil.rmtree(d)


def test_wheel_installs_and_runs_without_go_or_sources(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    # No Go anywhere, no source tree on the path, run from elsewhere.
    env = {k: v for k, v in config_free_env().items()
           if k not in ("GO", "GOROOT", "GOPATH", "PYTHONPATH", "NCCLPROF_LIBRARY", "NCCLPROF_NCCLMERGE")}
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    assert shutil.which("go", path=env["PATH"]) is None
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                          capture_output=True, text=True, env=env, check=True).stdout.strip()
    v = subprocess.run([str(venv / "bin" / "ncclprof"), "--version"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=60)
    assert v.returncode == 0, v.stderr
    assert f"plugin {ncclprof.__version__} ({site}/ncclprof/_bin/libnccl-profiler-ncclprof.so)" in v.stdout
    assert f"ncclmerge {site}/ncclprof/_bin/ncclmerge" in v.stdout
    c = subprocess.run([str(py), "-m", "ncclprof", "check",
                        str(real_trace("trace_filter_sampled_rank-1.json.gz"))],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert c.returncode == 0 and "4720 events" in c.stdout
    e = subprocess.run([str(py), "-c", "import ncclprof; print(ncclprof.enable()['NCCL_PROFILER_PLUGIN'])"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert e.stdout.strip() == f"{site}/ncclprof/_bin/libnccl-profiler-ncclprof.so"
