"""What a run allows the diagnoser it hosts: one object instead of settings threaded through every call.

:class:`HostPolicy` is the whole contract between a caller (``diageval run``, ``diageval diagnose``) and
:mod:`diageval.hosting`: whether a box is required, the network, the per-case timeout, the limits on what
a diagnosis may be (:class:`~diageval.diagnosis.DiagnosisLimits`) and on what a box may use
(:class:`BoxLimits`), which environment variables pass, and which of the caller's folders to hide.

Decided here:

* the box is required by default, for every diagnoser (built-ins included: one rule, no list of trusted
  names to get wrong). Only ``sandbox=False`` (``--no-sandbox``) runs without, and such a run says
  ``isolation: none`` and is never ranked;
* the environment is an allowlist (:data:`PASSED_ENV`, :data:`PASSED_ENV_PREFIXES`), not the harness's
  environment minus a denylist: tokens and keys (``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``,
  ``OPENAI_API_KEY``) never reach a diagnoser unless the user names them (``--pass-env NAME``). With the
  network on, the variables of the built-in model adapters (``LLM_DIAGNOSER_*``, ``AGENT_DIAGNOSER_*``) and the proxy settings
  pass too, since they are what a networked diagnoser needs;
* box limits default to what the corpus' heaviest diagnoser needs with room to spare (hta on the real
  traces peaks below 2 GiB, see ``benchmarks/big_trace.py``): 8 GiB of memory, 512 processes, 256 MiB
  written to its output folder, 1 GiB in its ``/tmp``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from diageval.diagnosis import DEFAULT_LIMITS, DiagnosisLimits

DEFAULT_TIMEOUT_S = 300.0

# Passed to every box as they are: what a program needs to run and to format text, nothing that names a
# person's accounts or the harness's folders. HOME, PWD and TMPDIR are set to the box's own.
PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "NO_COLOR", "COLUMNS", "LINES",
              "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
              "NUMEXPR_MAX_THREADS", "MPLBACKEND")
PASSED_ENV_PREFIXES = ("LC_",)
# Passed only when the network is allowed: a networked diagnoser's endpoint settings and proxies.
NETWORK_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
               "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
NETWORK_ENV_PREFIXES = ("LLM_DIAGNOSER_", "AGENT_DIAGNOSER_")


class BoxLimits(BaseModel):
    """What one box may use. Enforced with cgroups where this machine lets diageval make them (processes,
    memory), with rlimits otherwise; ``/tmp`` is a tmpfs of ``max_tmp_mib``; the output folder is watched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_processes: int = Field(512, ge=8, description="processes and threads alive at once in the box")
    max_memory_mib: int = Field(8192, ge=64, description="memory of every process in the box together (its /tmp included)")
    max_out_mib: int = Field(256, ge=1, description="bytes the diagnoser may write to its output folder")
    max_tmp_mib: int = Field(1024, ge=1, description="size of the box's /tmp (a tmpfs)")


class HostPolicy(BaseModel):
    """Everything a caller decides about hosting a diagnoser (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    sandbox: bool = Field(True, description="False only by an explicit --no-sandbox: no box, never ranked")
    allow_network: bool = False
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0)
    output: DiagnosisLimits = DEFAULT_LIMITS
    box: BoxLimits = BoxLimits()
    pass_env: tuple[str, ...] = Field((), description="further environment variables the user names (--pass-env)")
    runs_dir: Path | None = Field(None, description="the run folders: hidden from the box")
    cases_dir: Path | None = Field(None, description="the labeled cases: hidden, but for the taxonomy")

    @field_validator("pass_env")
    @classmethod
    def _names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for n in names:
            if not n or "=" in n or n.startswith("DIAGEVAL_"):
                raise ValueError(f"--pass-env takes a variable name (not DIAGEVAL_*, which names the labels' folders), got {n!r}")
        return names

    def passes(self, name: str) -> bool:
        """Whether the environment variable ``name`` reaches the box."""
        if name in self.pass_env or name in PASSED_ENV or name.startswith(PASSED_ENV_PREFIXES):
            return True
        return self.allow_network and (name in NETWORK_ENV or name.startswith(NETWORK_ENV_PREFIXES))
