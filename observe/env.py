"""Every environment variable alpha-observe reads or sets, named once.

Grouped by who uses them, each a class of plain string constants (read
``os.environ.get(ChannelVars.RECEIPTS)``, never the literal). This module
imports nothing, so the light receipt client (``observe.channel``) can name its
variables here at no cost.

Named elsewhere, where the layering puts them (``gates`` may not import
``observe``): the lane configuration variables the device gates read,
``ALPHA_<LANE>_DEVICE_CONFIG`` (``gates.testing.DEVICE_CONFIG_VARS`` holds the
built-in lanes'; :class:`RecorderVars` the pattern the recorder captures), and
``NO_COLOR``, ``FORCE_COLOR`` and ``TERM``, which ``gates.report.use_colour``
reads from the environment its caller passes. The names a recording keeps in
its ``stream.open`` environment are a policy, not variables the tool reads:
``observe.secrets.envpolicy`` lists them.
"""

from __future__ import annotations

__all__ = [
    "AttestVars",
    "BuildkiteVars",
    "ChannelVars",
    "DebugVars",
    "GitHubVars",
    "GitLabVars",
    "RecorderVars",
    "SessionVars",
    "StoreVars",
    "TrackerVars",
]


class ChannelVars:
    """Set by the recorder for its command; read by ``alpha observe receipt`` and ``step`` inside it."""

    #: The stream being written (absolute path) and its id.
    STREAM = "AOS_STREAM"
    STREAM_ID = "AOS_STREAM_ID"
    #: The receipts file anyone may append a JSON line to.
    RECEIPTS = "AOS_RECEIPTS"
    #: The recorder's control socket (steps, artifacts, receipts.sync).
    CONTROL = "AOS_CONTROL"
    #: The span id of the step the process runs in.
    STEP = "AOS_STEP"
    #: ``dev:ino`` of the pipe (or terminal) whose bytes the recorder echoes, per fd.
    STDOUT_ID = "AOS_STDOUT_ID"
    STDERR_ID = "AOS_STDERR_ID"
    #: The recorder's own ``alpha`` shim (also first on the command's ``PATH``).
    ALPHA = "AOS_ALPHA"


class RecorderVars:
    """Read by the recorder from its own environment: tuning, test doubles, scopes, lane configurations."""

    #: Seconds from ``--timeout``'s SIGTERM to SIGKILL.
    KILL_GRACE = "ALPHA_OBSERVE_KILL_GRACE"
    #: Seconds stray background writers are still recorded after the command exits.
    DRAIN = "ALPHA_OBSERVE_DRAIN"
    #: The stream's zstd level.
    ZSTD_LEVEL = "ALPHA_OBSERVE_ZSTD_LEVEL"
    #: Threads compressing batches.
    ENCODERS = "ALPHA_OBSERVE_ENCODERS"
    #: How the command is contained: ``auto`` (a cgroup v2 of its own where one can be made, else the
    #: sweep) or ``sweep`` (force the fallback: observe.recorder.containment).
    CONTAINMENT = "ALPHA_OBSERVE_CONTAINMENT"
    #: Seconds each git command reading the recording's source may take.
    SOURCE_TIMEOUT = "ALPHA_OBSERVE_SOURCE_TIMEOUT"
    #: A JSON file of simulated GPUs (test doubles for NVML).
    SIMULATED_GPUS = "ALPHA_OBSERVE_SIMULATED_GPUS"
    #: Set while Arrow picks its default memory pool (to ``system``), then restored.
    ARROW_MEMORY_POOL = "ARROW_DEFAULT_MEMORY_POOL"
    #: Set to 1 (unless set) in a command that reads streams, before numpy loads: OpenBLAS, which
    #: numpy loads with pyarrow, raises SIGINT in its process when it cannot start its threads.
    BLAS_THREADS = "OPENBLAS_NUM_THREADS"
    #: ``attest``: the SLSA level of a scope is ``ALPHA_OBSERVE_SCOPE_<SCOPE>``.
    SCOPE_PREFIX = "ALPHA_OBSERVE_SCOPE_"
    #: A lane's device configuration file: ``ALPHA_<LANE>_DEVICE_CONFIG`` (the recorder captures each set).
    LANE_CONFIG_PREFIX = "ALPHA_"
    LANE_CONFIG_SUFFIX = "_DEVICE_CONFIG"


class SessionVars:
    """Set by ``alpha observe session run`` for its launcher; read by ``node`` and a nested ``session run``.

    Named FLEET, not SESSION: a name holding SESSION looks secret (observe.secrets.masking), and its value
    would be masked wherever it appears, the member streams' labels included."""

    #: The session's folder, where node streams and sub-sessions arrive.
    DIR = "ALPHA_FLEET_DIR"
    #: The session's origin (its checkpoint's first line), which each member's stream names.
    ORIGIN = "ALPHA_FLEET_ORIGIN"


class AttestVars:
    """Read by ``attest``: the identities its statements name, which only the user can give."""

    #: The attester's id (a URI): the VSA's ``verifier.id``, the provenance's ``runDetails.builder.id``.
    ATTESTER_ID = "ALPHA_ATTESTER_ID"
    #: The VSA's ``policy.uri`` (default: ``urn:alpha-observe:gate:NAME``).
    POLICY_URI = "ALPHA_ATTEST_POLICY_URI"


class StoreVars:
    """Read by ``push``, ``fetch``, the S3 store, ``query --store`` and ``tracker site``."""

    #: The default ``--store``.
    STORE = "ALPHA_STORE"
    #: The AWS SDK's variables (endpoint, credentials, region) all start so.
    AWS_PREFIX = "AWS_"
    #: The tool's cache folder (observe.util.cache): the memos of the index rows ``query --store`` checked
    #: and of the streams ``tracker site`` verified.
    CACHE = "ALPHA_CACHE"
    #: The user's cache folder (the tool's is under it by default).
    XDG_CACHE_HOME = "XDG_CACHE_HOME"


class TrackerVars:
    """Read by ``alpha tracker``."""

    #: The default ``--db``.
    DB = "ALPHA_TRACKER_DB"
    #: The default ``--signing-key``.
    SIGNING_KEY = "ALPHA_TRACKER_SIGNING_KEY"


class DebugVars:
    """Read by every ``alpha`` command."""

    #: ``1``: an error is raised with its traceback (a refusal's too, printed before its ``refused:`` line).
    DEBUG = "ALPHA_DEBUG"


class GitHubVars:
    """Set by GitHub Actions; read to fold steps, write job outputs and summaries, and name a run's job."""

    ACTIONS = "GITHUB_ACTIONS"
    OUTPUT = "GITHUB_OUTPUT"
    STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
    SERVER_URL = "GITHUB_SERVER_URL"
    REPOSITORY = "GITHUB_REPOSITORY"
    RUN_ID = "GITHUB_RUN_ID"
    RUN_ATTEMPT = "GITHUB_RUN_ATTEMPT"
    SHA = "GITHUB_SHA"


class GitLabVars:
    """Set by GitLab CI."""

    CI = "GITLAB_CI"
    JOB_URL = "CI_JOB_URL"
    COMMIT_SHA = "CI_COMMIT_SHA"


class BuildkiteVars:
    """Set by Buildkite."""

    BUILDKITE = "BUILDKITE"
    BUILD_URL = "BUILDKITE_BUILD_URL"
    COMMIT = "BUILDKITE_COMMIT"
