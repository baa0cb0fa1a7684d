"""Which environment values ``stream.open`` records: every name, values only on an allow-list.

A value not on the allow-list (nor named by ``--env NAME``) is recorded as
``"[NOT RECORDED]"``; an empty value is recorded as ``""`` (it holds nothing,
and gates tell set from unset by it). The allow-list is CI metadata that is not
secret, the locale, the shell's basics, toolchain and GPU selection variables,
and ``ALPHA_*`` / ``AOS_*``; each CI system adds its own (``recorded_names`` and
``recorded_prefixes`` of its module in ``observe.ci.systems``). A name that looks secret is never allowed by a
prefix (``BUILDKITE_AGENT_ACCESS_TOKEN`` stays unrecorded). Every value recorded
is still masked like everything else in the stream. docs/SECRETS.md lists it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from observe.secrets.masking import is_secret_name

__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "NOT_RECORDED", "allowed", "is_allowed", "recorded_env"]

NOT_RECORDED = "[NOT RECORDED]"

#: Variables whose values are recorded (exact names), besides those of the CI systems.
_NAMES: frozenset[str] = frozenset(
    {
        # CI in general: whether CI is running (each CI system adds its own names: observe.ci.systems).
        "CI",
        "CONTINUOUS_INTEGRATION",
        # Locale and the shell's basics.
        "LANG",
        "LANGUAGE",
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "TERM",
        "TZ",
        "TMPDIR",
        "SOURCE_DATE_EPOCH",
        # Toolchains.
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONHASHSEED",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "CC",
        "CXX",
        "CFLAGS",
        "CXXFLAGS",
        "CPPFLAGS",
        "LDFLAGS",
        "LD_LIBRARY_PATH",
        "LIBRARY_PATH",
        "CPATH",
        "PKG_CONFIG_PATH",
        "CMAKE_PREFIX_PATH",
        "JAVA_HOME",
        "GOPATH",
        "GOROOT",
        "GOFLAGS",
        "RUSTUP_TOOLCHAIN",
        "CARGO_HOME",
        "CUDA_HOME",
        "CUDA_PATH",
        # GPU selection and threading.
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    }
)

#: Prefixes whose variables' values are recorded, unless the name looks secret, besides those of the CI systems.
_PREFIXES: tuple[str, ...] = ("ALPHA_", "AOS_", "LC_")


def allowed() -> tuple[frozenset[str], tuple[str, ...]]:
    """The names and the prefixes recorded now: the house's and every registered CI system's."""
    from observe.ci.systems import SYSTEMS

    names = _NAMES.union(*(s.recorded_names for s in SYSTEMS))
    prefixes = tuple(sorted({*_PREFIXES, *(p for s in SYSTEMS for p in s.recorded_prefixes)}))
    return names, prefixes


#: Variables whose values are recorded (exact names), as registered at import.
#: Prefixes whose variables' values are recorded, unless the name looks secret, as registered at import.
ALLOWED_NAMES, ALLOWED_PREFIXES = allowed()


def is_allowed(name: str, policy: tuple[frozenset[str], tuple[str, ...]] | None = None) -> bool:
    """True when ``name``'s value is recorded without being asked for (under ``policy``, default ``allowed()``)."""
    names, prefixes = allowed() if policy is None else policy
    if name in names:
        return True
    return name.startswith(prefixes) and not is_secret_name(name)


def recorded_env(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """``stream.open``'s env: every name; the value when allowed (or in ``extra``), else ``[NOT RECORDED]``.

    The values are not masked here: the recorder masks every event it appends.
    """
    asked = frozenset(extra)
    policy = allowed()
    return {
        name: value if value == "" or name in asked or is_allowed(name, policy) else NOT_RECORDED
        for name, value in environ.items()
    }
