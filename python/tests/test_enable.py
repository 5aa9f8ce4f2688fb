"""ncclprof.enable(): what it sets, and the errors that say it is too late or would displace
another profiler plugin. These run in the pytest process and never load the library."""

import os
import re
import shutil
import types

import pytest

import ncclprof
from conftest import run_py

# enable() warns when the plugin build cannot see what it set (see the last test, which checks
# the warning itself); the other tests are about what it sets.
pytestmark = pytest.mark.filterwarnings("ignore::ncclprof.NcclprofWarning")


def test_sets_nccl_profiler_plugin_and_defaults(clean_env):
    got = ncclprof.enable()
    lib = ncclprof.library_path()
    assert os.path.isabs(lib) and os.path.isfile(lib)
    assert os.path.basename(lib) == "libnccl-profiler-ncclprof.so"
    assert os.environ["NCCL_PROFILER_PLUGIN"] == lib
    assert os.environ["NCCLPROF_GOMAXPROCS"] == "2"
    assert got == {"NCCL_PROFILER_PLUGIN": lib, "NCCLPROF_GOMAXPROCS": "2"}
    assert ncclprof.is_enabled()
    # Unset options leave the plugin's own defaults alone.
    for k in ("NCCLPROF_TRACE", "NCCLPROF_METRICS", "NCCLPROF_EVENT_MASK", "NCCLPROF_TRACE_DIR"):
        assert k not in os.environ


def test_arguments_become_plugin_variables(clean_env, tmp_path):
    got = ncclprof.enable(trace_dir=tmp_path / "t", metrics="console", event_mask="default,KernelCh",
                          output_dir="rel-out", trace_all=True, gomaxprocs=3,
                          env={"NCCLPROF_WINDOW_MS": 250})
    assert got["NCCLPROF_TRACE_DIR"] == str(tmp_path / "t")
    assert got["NCCLPROF_OUTPUT_DIR"] == os.path.abspath("rel-out")
    assert got["NCCLPROF_METRICS"] == "console"
    assert got["NCCLPROF_EVENT_MASK"] == "default,kernelch"
    assert got["NCCLPROF_TRACE"] == "1"
    assert got["NCCLPROF_GOMAXPROCS"] == "3"
    assert got["NCCLPROF_WINDOW_MS"] == "250"
    for k, v in got.items():
        assert os.environ[k] == v


def test_metrics_endpoints_imply_the_exporter(clean_env):
    got = ncclprof.enable(otlp_endpoint="http://collector:4318")
    assert got["NCCLPROF_METRICS"] == "otlp"
    assert got["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    got = ncclprof.enable(prometheus_port=9500)
    assert got["NCCLPROF_METRICS"] == "prometheus" and got["NCCLPROF_PROMETHEUS_PORT"] == "9500"
    assert ncclprof.enable(metrics=False)["NCCLPROF_METRICS"] == "none"


@pytest.mark.parametrize("kwargs, msg", [
    (dict(metrics="statsd"), "use one of file, otlp, prometheus, console, none"),
    (dict(metrics="file", otlp_endpoint="http://x"), "otlp_endpoint is for metrics='otlp'"),
    (dict(prometheus_port=70000), "not a port number"),
    (dict(event_mask="default,kernelchannel"), "'kernelchannel' is not an event type"),
    (dict(event_mask=1 << 15), "outside 0..0x7fff"),
    (dict(event_mask=""), "names no event type"),
    (dict(gomaxprocs=0), "gomaxprocs must be at least 1"),
    (dict(env={"GOGC": "50"}), "GOGC is not an NCCLPROF_* or OTEL_* variable"),
])
def test_bad_arguments_say_what_is_wrong(clean_env, kwargs, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        ncclprof.enable(**kwargs)
    assert "NCCL_PROFILER_PLUGIN" not in os.environ  # nothing half-applied


def test_event_mask_forms():
    p = ncclprof.parse_event_mask
    assert p("default") == (0xF1F, "default")
    assert p("default,kernelch")[0] == 0xF1F | 0x40
    assert p("coll|p2p + proxyop") == (0xE, "coll,p2p,proxyop")
    assert p(["Coll", "KernelLaunch"]) == (0x802, "coll,kernellaunch")
    assert p(0x46) == (0x46, "0x46")
    assert p("0x46") == (0x46, "0x46")
    assert p("all")[0] == 0x7FFF and p("none")[0] == 0
    with pytest.raises(TypeError):
        p(True)


def test_keeps_what_the_launcher_set(clean_env):
    clean_env.setenv("NCCLPROF_GOMAXPROCS", "4")
    clean_env.setenv("NCCLPROF_METRICS", "otlp")
    got = ncclprof.enable()
    assert got["NCCLPROF_GOMAXPROCS"] == "4" and got["NCCLPROF_METRICS"] == "otlp"


def test_idempotent_and_accepts_its_own_library_under_another_name(clean_env, tmp_path):
    lib = ncclprof.library_path()
    link = tmp_path / "libnccl-profiler-ncclprof.so"
    link.symlink_to(lib)
    clean_env.setenv("NCCL_PROFILER_PLUGIN", str(link))  # same file: not a conflict
    assert ncclprof.is_enabled()
    ncclprof.enable(trace_dir=tmp_path)
    assert ncclprof.enable(trace_dir=tmp_path)["NCCL_PROFILER_PLUGIN"] == lib


@pytest.mark.parametrize("value", ["STATIC_PLUGIN", "static_plugin", "Static", "s", "STATIC_PL"])
def test_static_plugin_and_its_prefixes_conflict(clean_env, value):
    clean_env.setenv("NCCL_PROFILER_PLUGIN", value)
    with pytest.raises(ncclprof.PluginConflictError) as e:
        ncclprof.enable()
    assert "STATIC_PLUGIN" in str(e.value) and "any prefix" in str(e.value)
    assert os.environ["NCCL_PROFILER_PLUGIN"] == value  # left as the user set it


def test_a_name_that_is_not_a_static_prefix_is_another_plugin(clean_env):
    clean_env.setenv("NCCL_PROFILER_PLUGIN", "statics")  # not a prefix of STATIC_PLUGIN
    with pytest.raises(ncclprof.PluginConflictError, match="selects another NCCL profiler plugin"):
        ncclprof.enable()


@pytest.mark.parametrize("value", ["none", "NONE"])
def test_profiler_disabled_by_none(clean_env, value):
    clean_env.setenv("NCCL_PROFILER_PLUGIN", value)
    with pytest.raises(ncclprof.PluginConflictError, match="disables NCCL's profiler plugins"):
        ncclprof.enable()


def test_other_plugin_configured(clean_env, empty_plugin):
    clean_env.setenv("NCCL_PROFILER_PLUGIN", str(empty_plugin))
    with pytest.raises(ncclprof.PluginConflictError) as e:
        ncclprof.enable()
    msg = str(e.value)
    assert str(empty_plugin) in msg and "Unset it to use ncclprof" in msg
    assert "one profiler plugin per process" in msg


def test_other_ncclprof_build_configured(clean_env, tmp_path):
    other = tmp_path / "libnccl-profiler-ncclprof.so"
    shutil.copy(ncclprof.library_path(), other)  # a copy is another file: another Go runtime
    clean_env.setenv("NCCL_PROFILER_PLUGIN", str(other))
    assert not ncclprof.is_enabled()
    with pytest.raises(ncclprof.PluginConflictError, match="another ncclprof build") as e:
        ncclprof.enable()
    assert "NCCLPROF_LIBRARY" in str(e.value)
    clean_env.setenv("NCCLPROF_LIBRARY", str(other))  # what the message proposes
    assert ncclprof.enable()["NCCL_PROFILER_PLUGIN"] == str(other)


def test_inspector_conflicts(clean_env):
    clean_env.setenv("NCCL_INSPECTOR_ENABLE", "1")
    with pytest.raises(ncclprof.PluginConflictError, match="NCCL Inspector"):
        ncclprof.enable()
    clean_env.setenv("NCCL_INSPECTOR_ENABLE", "0")
    ncclprof.enable()


def _fake_dist(backend):
    return types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 get_backend=lambda g=None: backend)


@pytest.mark.parametrize("backend", ["nccl", "cpu:gloo,cuda:nccl"])
def test_too_late_after_a_nccl_process_group(clean_env, backend):
    # A NCCL process group needs a GPU; torch.distributed's state is stood in for here (the
    # gloo case below and test_torch.py use the real torch.distributed).
    clean_env.setitem(__import__("sys").modules, "torch.distributed", _fake_dist(backend))
    with pytest.raises(ncclprof.TooLateError) as e:
        ncclprof.enable()
    msg = str(e.value)
    assert "a NCCL process group already exists" in msg and backend in msg
    assert "before torch.distributed.init_process_group()" in msg
    assert "python -m ncclprof env" in msg
    assert "NCCL_PROFILER_PLUGIN" not in os.environ


def test_gloo_process_group_is_not_too_late(clean_env):
    clean_env.setitem(__import__("sys").modules, "torch.distributed", _fake_dist("gloo"))
    ncclprof.enable()


def test_another_profiler_already_loaded(empty_plugin, tmp_path):
    # NCCL loaded another profiler plugin in this process (it keeps it): a real load, in a
    # process of its own.
    p = run_py(f"""
        import ctypes, os, ncclprof
        ctypes.CDLL({str(empty_plugin)!r}, mode=os.RTLD_LOCAL)
        try:
            ncclprof.enable()
        except ncclprof.PluginConflictError as e:
            print("ERROR", e)
        print("PLUGIN", os.environ.get("NCCL_PROFILER_PLUGIN"))
    """)
    assert f"NCCL has already loaded another profiler plugin in this process ({empty_plugin})" in p.stdout
    assert "PLUGIN None" in p.stdout


def test_control_calls_before_a_communicator_do_not_make_it_too_late():
    # Issue 13 #2: counters(), plugin_version() and set_step() load the library, but the plugin
    # reads its settings only when NCCL creates the first communicator, so enable() after them
    # must work and what it set must reach the plugin: the Prometheus endpoint then serves.
    p = run_py("""
        import socket, urllib.request, ncclprof
        from nccl_standin import NCCL
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        ncclprof.counters(); ncclprof.plugin_version(); ncclprof.set_step("x")
        ncclprof.enable(metrics="prometheus", prometheus_port=port)
        print("ENABLED")
        comm = NCCL().comm()
        comm.sendrecv_self()
        body = ""
        for _ in range(100):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
                break
            except OSError:
                __import__("time").sleep(0.05)
        print("SERVED", "ncclprof_" in body)
    """)
    assert "ENABLED" in p.stdout and "SERVED True" in p.stdout, p.stdout + p.stderr


def test_settings_frozen_once_a_communicator_exists(tmp_path):
    # Once NCCL created a communicator the plugin has read its variables: changing them is
    # refused. The event mask stays changeable (NCCL reads it per operation), and so does the
    # trace directory (ncclprof.profile hands it to the plugin with each window).
    p = run_py("""
        import ncclprof
        from nccl_standin import NCCL
        ncclprof.enable(metrics="file")
        ncclprof.stats()  # loads the library: not too late yet
        ncclprof.enable(metrics="none")
        print("STILL OPEN")
        comm = NCCL().comm()
        try:
            ncclprof.enable(metrics="console")
        except ncclprof.TooLateError as e:
            print("ERROR", e)
        ncclprof.enable(metrics="none", trace_dir="elsewhere")
        print("DIR", ncclprof.settings()["NCCLPROF_TRACE_DIR"].endswith("/elsewhere"))
        ncclprof.enable(event_mask="coll,p2p")
        print("MASK", hex(ncclprof.get_event_mask()))
    """)
    assert "STILL OPEN" in p.stdout
    assert "ERROR the ncclprof plugin is already running in this process" in p.stdout
    assert "NCCLPROF_METRICS cannot change now" in p.stdout
    assert "DIR True" in p.stdout
    assert "MASK 0x6" in p.stdout


def test_real_gloo_process_group_then_enable():
    # With the real torch.distributed: a gloo group does not make enable() too late.
    from conftest import require_torch
    require_torch()
    p = run_py("""
        import os, torch.distributed as dist, ncclprof
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        print("ENABLED", ncclprof.enable()["NCCL_PROFILER_PLUGIN"] == ncclprof.library_path())
        dist.destroy_process_group()
    """)
    assert "ENABLED True" in p.stdout


def test_go_side_variables_reach_the_plugin_or_enable_says_so(tmp_path):
    # The plugin's Go side reads NCCLPROF_TRACE (and the metrics settings) once, when the
    # library loads. A build that reads the live environment sees what enable() set; one that
    # reads the environment the process started with does not, and enable() warns so.
    d = tmp_path / "t"
    script = f"""
        import warnings, ncclprof
        from nccl_standin import NCCL
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ncclprof.enable(trace_all=True, trace_dir={str(d)!r})
        print("WARNED", any(issubclass(x.category, ncclprof.NcclprofWarning) for x in w))
        for x in w: print("MESSAGE", x.message)
        comm = NCCL().comm()
        for _ in range(3): comm.sendrecv_self()
        print("FLUSH", ncclprof.flush(5))
    """
    live = ncclprof._enable.reads_live_env(ncclprof.library_path())
    p = run_py(script)
    files = list(d.glob("ncclprof-*.trace.json"))
    assert "FLUSH flushed" in p.stdout
    if live:
        assert "WARNED False" in p.stdout and len(files) == 1
    else:
        assert "WARNED True" in p.stdout
        assert "reads NCCLPROF_TRACE, NCCLPROF_TRACE_DIR from the environment the process started with" in p.stdout
        assert "NCCLPROF_TRACE=1 NCCLPROF_TRACE_DIR=" in p.stdout  # the remedy, ready to paste
        assert files == []  # indeed not seen
        # The remedy works: the same settings in the environment the process starts with.
        p = run_py(script, env={"NCCLPROF_TRACE": "1", "NCCLPROF_TRACE_DIR": str(d)})
        assert "WARNED False" in p.stdout
        assert len(list(d.glob("ncclprof-*.trace.json"))) == 1


def test_process_group_is_fine_when_the_launcher_configured_ncclprof(clean_env):
    # NCCL_PROFILER_PLUGIN named this library before the group was created: NCCL loads it.
    clean_env.setenv("NCCL_PROFILER_PLUGIN", ncclprof.library_path())
    clean_env.setitem(__import__("sys").modules, "torch.distributed", _fake_dist("nccl"))
    assert ncclprof.enable()["NCCL_PROFILER_PLUGIN"] == ncclprof.library_path()
