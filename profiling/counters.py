"""Hardware counters of one call, read by Nsight Compute (`ncu`): DRAM bytes read and written, the L2's hit rate,
achieved occupancy and the tensor pipe's activity, kernel by kernel, with ncu's CSV kept as it printed it.

Three pieces: the runner (`measurement.counted_call`: `python -m profiling counters-one`, one variant on one workload, built as a
session builds them, warmed up untimed, then one call between `torch.cuda.profiler.start()` and `stop()`); `read`
(the launcher: that runner under `ncu --profile-from-start off --csv --page raw`, its CSV parsed by `parse_raw_csv`);
and `Counters`, what a recording keeps (counters.json.gz, `recording.record_counters`) and a replay shows beside the
run of the same workload and variant. ncu missing, refused (ERR_NVGPUCTRPERM: no access to the counters) or timed out
is kept too, as its one line (`Counters.refusal`): never a failure of the recording.

ncu replays each kernel once per pass its metrics need, restoring memory between passes, and by default flushes the
caches before each kernel (`--cache-control all`) and locks the clocks to base (`--clock-control base`): the bytes are
a cold call's, and its durations are not the app's timings. No torch at module level.
"""
from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields

from .workload import Workload

COUNTERS_FILE = "counters.json.gz"
NCU = "ncu"
TIMEOUT_S = 240          # one variant under ncu: its start (torch, ncu's injection), a compile, the replays

# The metrics read, in one place: what each figure is, by its name on sm90 (Nsight Compute's metric names; the
# tensor pipe has two on Hopper: mma.sync's hmma and warpgroup wgmma's gmma).
METRICS = {
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "l2_hit": "lts__t_sector_hit_rate.pct",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "hmma": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "gmma": "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "time": "gpu__time_duration.sum",
}
# ncu's unit words -> (the base unit, its factor): --print-units base asks for bytes and nanoseconds, but a CSV
# printed with scaled units reads the same
UNITS = {"byte": ("byte", 1), "Kbyte": ("byte", 1e3), "Mbyte": ("byte", 1e6), "Gbyte": ("byte", 1e9),
         "Tbyte": ("byte", 1e12), "nsecond": ("ns", 1), "usecond": ("ns", 1e3), "msecond": ("ns", 1e6),
         "second": ("ns", 1e9), "%": ("%", 1)}
HEADER_START = '"ID","Process ID"'   # the raw page's first header cell (ncu's own columns come before the metrics)


@dataclass
class KernelCounters:
    """One kernel of the call as ncu read it: its name (demangled) and metric -> [value, unit] (base units)."""
    name: str
    metrics: dict[str, list] = field(default_factory=dict)

    def value(self, key: str) -> float | None:
        """The figure of METRICS[key] (bytes, ns or %), None where ncu gave none."""
        got = self.metrics.get(METRICS[key])
        return got[0] if got and isinstance(got[0], (int, float)) else None

    @property
    def tensor_pct(self) -> float | None:
        """The tensor pipe's active share: the larger of its hmma and gmma figures (a kernel issues one kind)."""
        figures = [v for v in (self.value("hmma"), self.value("gmma")) if v is not None]
        return max(figures) if figures else None


def _number(cell: str):
    """A cell as ncu prints it: '50,360,832' (thousands separated), '12.5', 'n/a'; a number, else the text."""
    plain = cell.strip().replace(",", "")
    try:
        return float(plain) if re.fullmatch(r"-?\d+(\.\d*)?([eE][-+]?\d+)?", plain) else cell.strip()
    except ValueError:
        return cell.strip()


def parse_raw_csv(text_: str) -> list[KernelCounters]:
    """The kernels of `ncu --csv --page raw`'s report: a header row (ncu's columns, "ID" … "CC", then one column per
    metric), a row of units, then one row per kernel; the lines around it (the program's own, ncu's ==PROF== lines)
    are not the report. Values in base units (UNITS), thousands separators read."""
    lines = text_.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADER_START)), None)
    if start is None:
        return []
    rows = [r for r in csv.reader(io.StringIO("\n".join(lines[start:]))) if r]
    header, units = rows[0], rows[1] if len(rows) > 1 else []
    if "Kernel Name" not in header:
        return []
    name_at = header.index("Kernel Name")
    metric_at = [i for i, h in enumerate(header) if "__" in h]  # ncu's metric names: unit__counter.rollup
    kernels = []
    for row in rows[2:]:
        if len(row) != len(header):  # a line after the report (ncu's or the program's)
            continue
        metrics = {}
        for i in metric_at:
            value, unit = _number(row[i]), units[i] if i < len(units) else ""
            base, factor = UNITS.get(unit, (unit, 1))
            metrics[header[i]] = [value * factor if isinstance(value, float) else value, base]
        kernels.append(KernelCounters(row[name_at], metrics))
    return kernels


@dataclass
class Counters:
    """One call of `variant` on `workload` under ncu: its kernels' counters, the CSV as ncu printed it and ncu's
    version; or, where ncu could not read them, `refusal`: its one line (kernels empty)."""
    workload: Workload
    variant: str
    kernels: list[KernelCounters] = field(default_factory=list)
    raw_csv: str = ""
    ncu_version: str | None = None
    refusal: str | None = None

    def _sum(self, key: str) -> float | None:
        values = [k.value(key) for k in self.kernels]
        return sum(values) if values and None not in values else None

    def _weighted(self, figure) -> float | None:
        """A percentage over the call: each kernel's weighted by its duration under ncu."""
        pairs = [(k.value("time"), figure(k)) for k in self.kernels]
        if not pairs or any(t is None or v is None for t, v in pairs) or not sum(t for t, _ in pairs):
            return None
        return sum(t * v for t, v in pairs) / sum(t for t, _ in pairs)

    @property
    def dram_read_bytes(self) -> float | None:
        return self._sum("dram_read")

    @property
    def dram_write_bytes(self) -> float | None:
        return self._sum("dram_write")

    @property
    def l2_hit_pct(self) -> float | None:
        return self._weighted(lambda k: k.value("l2_hit"))

    @property
    def occupancy_pct(self) -> float | None:
        return self._weighted(lambda k: k.value("occupancy"))

    @property
    def tensor_pct(self) -> float | None:
        return self._weighted(lambda k: k.tensor_pct)

    def kernel(self, name: str) -> KernelCounters | None:
        return next((k for k in self.kernels if k.name == name), None)

    @property
    def main(self) -> KernelCounters | None:
        """The kernel ncu timed longest."""
        return max(self.kernels, key=lambda k: k.value("time") or 0, default=None)

    def to_dict(self) -> dict:
        """The fields, and for a client the call's figures summed over its kernels (read back, derived again)."""
        call = {name: getattr(self, name) for name in ("dram_read_bytes", "dram_write_bytes", "l2_hit_pct",
                                                       "occupancy_pct", "tensor_pct")}
        return asdict(self) | {"call": call}

    @classmethod
    def from_dict(cls, data: dict) -> "Counters":
        known = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known}, "workload": Workload(**data["workload"]),
                      "kernels": [KernelCounters(**k) for k in data.get("kernels", [])]})


# -- the launcher: the runner under ncu -------------------------------------------------------------------------
def ncu_version(ncu: str = NCU) -> str | None:
    """`ncu --version`'s last line ('Version 2025.3.0.0 (build …)'), None where there is no ncu."""
    if shutil.which(ncu) is None:
        return None
    try:
        said = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    return lines[-1] if lines else None


def command(workload: Workload, key: str, ncu: str = NCU, metrics=None) -> list[str]:
    """The command line: the runner under ncu, the call's kernels printed as the raw page's CSV."""
    return [ncu, "--profile-from-start", "off", "--target-processes", "all", "--csv", "--page", "raw",
            "--print-units", "base", "--print-kernel-base", "demangled",
            "--metrics", ",".join(metrics or METRICS.values()),
            sys.executable, "-m", "profiling", "counters-one", "--workload-json", json.dumps(asdict(workload)),
            "--variant", key]


def refusal_line(output: str) -> str | None:
    """ncu's first ==ERROR== line (ERR_NVGPUCTRPERM: no permission to read the counters; an unknown metric), or the
    runner's own refusal (a line starting 'counters-one: '), as said."""
    for line in output.splitlines():
        if line.startswith("==ERROR==") or line.startswith("counters-one: "):
            return line.strip()
    return None


def _unknown_metric(said: str, metrics: list[str]) -> str | None:
    """The first of `metrics` an ==ERROR== line of ncu's names (a metric it does not know on this GPU: 'Failed to find
    metric …'), if one does."""
    errors = [line for line in said.splitlines() if line.startswith("==ERROR==") and "metric" in line.lower()]
    return next((m for m in metrics  # named in full or by its counter (the name before its rollup)
                 if any(re.search(rf"(?<![\w.]){re.escape(m.split('.')[0])}(?!\w)", e) for e in errors)), None)


def read(workload: Workload, key: str, ncu: str = NCU, timeout_s: float = TIMEOUT_S, run=subprocess.run) -> Counters:
    """One call of `key` on `workload` under ncu, parsed; a metric ncu does not know on this GPU is dropped and the call
    read again (once per metric), so the others still come back. Never raises for ncu: no ncu, a refusal, a time-out,
    or a report with no kernel is the Counters' `refusal`, in one line."""
    version = ncu_version(ncu)
    counters = Counters(workload, key, ncu_version=version)
    if version is None:
        counters.refusal = f"no {ncu} on this machine's PATH"
        return counters
    metrics = list(METRICS.values())
    while True:
        try:
            done = run(command(workload, key, ncu, metrics), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            counters.refusal = f"{ncu} did not finish in {timeout_s:.0f} s"
            return counters
        except OSError as error:
            counters.refusal = f"{ncu} could not start: {error}"
            return counters
        said = (done.stdout or "") + "\n" + (done.stderr or "")
        counters.raw_csv = done.stdout or ""
        refused = refusal_line(said)
        unknown = _unknown_metric(said, metrics)
        if unknown is not None and len(metrics) > 1:
            metrics.remove(unknown)
            continue
        counters.kernels = parse_raw_csv(done.stdout or "")
        if not counters.kernels:
            counters.refusal = refused or next((line.strip() for line in said.splitlines()
                                                if line.startswith("==WARNING==")), None) \
                or f"{ncu} read no kernel (exit status {done.returncode})"
        return counters
