"""Which environment values ``stream.open`` records: every name, values only on an allow-list.

A value not on the allow-list (nor named by ``--env NAME``) is recorded as
``"[NOT RECORDED]"``; an empty value is recorded as ``""`` (it holds nothing,
and gates tell set from unset by it). The allow-list is CI metadata that is not
secret, the locale, the shell's basics, toolchain and GPU selection variables,
and ``ALPHA_*`` / ``AOS_*``. A name that looks secret is never allowed by a
prefix (``BUILDKITE_AGENT_ACCESS_TOKEN`` stays unrecorded). Every value recorded
is still masked like everything else in the stream. docs/SECRETS.md lists it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from observe.secrets.masking import is_secret_name

__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "NOT_RECORDED", "is_allowed", "recorded_env"]

NOT_RECORDED = "[NOT RECORDED]"

#: Variables whose values are recorded (exact names).
ALLOWED_NAMES: frozenset[str] = frozenset(
    {
        # CI providers: whether, where and what is running (never their tokens).
        "CI",
        "CONTINUOUS_INTEGRATION",
        "GITHUB_ACTIONS",
        "GITHUB_SHA",
        "GITHUB_REF",
        "GITHUB_REF_NAME",
        "GITHUB_REF_TYPE",
        "GITHUB_HEAD_REF",
        "GITHUB_BASE_REF",
        "GITHUB_RUN_ID",
        "GITHUB_RUN_NUMBER",
        "GITHUB_RUN_ATTEMPT",
        "GITHUB_JOB",
        "GITHUB_WORKFLOW",
        "GITHUB_WORKFLOW_REF",
        "GITHUB_REPOSITORY",
        "GITHUB_REPOSITORY_OWNER",
        "GITHUB_SERVER_URL",
        "GITHUB_EVENT_NAME",
        "GITHUB_ACTOR",
        "GITHUB_WORKSPACE",
        "GITHUB_ACTION",
        "RUNNER_OS",
        "RUNNER_ARCH",
        "RUNNER_NAME",
        "RUNNER_ENVIRONMENT",
        "GITLAB_CI",
        "CI_JOB_ID",
        "CI_JOB_URL",
        "CI_JOB_NAME",
        "CI_JOB_STAGE",
        "CI_PIPELINE_ID",
        "CI_PIPELINE_URL",
        "CI_PIPELINE_SOURCE",
        "CI_COMMIT_SHA",
        "CI_COMMIT_SHORT_SHA",
        "CI_COMMIT_REF_NAME",
        "CI_COMMIT_BRANCH",
        "CI_COMMIT_TAG",
        "CI_DEFAULT_BRANCH",
        "CI_MERGE_REQUEST_IID",
        "CI_PROJECT_ID",
        "CI_PROJECT_PATH",
        "CI_PROJECT_URL",
        "CI_SERVER_URL",
        "CI_RUNNER_ID",
        "BUILDKITE",
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

#: Prefixes whose variables' values are recorded, unless the name looks secret.
ALLOWED_PREFIXES: tuple[str, ...] = ("ALPHA_", "AOS_", "BUILDKITE_", "LC_")


def is_allowed(name: str) -> bool:
    """True when ``name``'s value is recorded without being asked for."""
    if name in ALLOWED_NAMES:
        return True
    return name.startswith(ALLOWED_PREFIXES) and not is_secret_name(name)


def recorded_env(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """``stream.open``'s env: every name; the value when allowed (or in ``extra``), else ``[NOT RECORDED]``.

    The values are not masked here: the recorder masks every event it appends.
    """
    asked = frozenset(extra)
    return {
        name: value if value == "" or name in asked or is_allowed(name) else NOT_RECORDED
        for name, value in environ.items()
    }
