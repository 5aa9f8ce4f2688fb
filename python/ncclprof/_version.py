# The package version; setup.py checks that it equals NCCLPROF_VERSION in profiler/core.h, so the
# Python package and the plugin it carries always carry the same number.
__version__ = "0.1.0"
