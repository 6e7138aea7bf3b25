"""low_gpu_util, part of the slow family (parsers/slow/__init__.py lists these readers with its own): the GPUs are busy far
less than they could be. Two kinds of evidence, each over several readings:
- model FLOPs utilisation as trainers print it (torchtitan/nanoGPT/nanochat "mfu", llm.c "% bf16 MFU", Composer's
  throughput/device/mfu fraction) or TFLOP/s per GPU (Megatron --log-throughput, torchtitan "tflops",
  Megatron-DeepSpeed "TFLOPs:") against the
  GPU's dense BF16 peak;
- the SM / GPU-util column of nvidia-smi dmon or --query-gpu CSV samples while a job runs, or DCGM's SM activity
  (`dcgmi dmon -e 1002`: the SMACT column, a 0-1 ratio of cycles with an SM busy)."""
from __future__ import annotations

from statistics import median

from core import instances as I
from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, rx, search
from parsers.scan.rows import Family
from parsers.scan.scanner import hit_of
from parsers.step_series import Readings

MFU_LOW_PCT = 25.0      # dense BF16 MFU under a quarter of peak is low; 30-45% is normal for LLM training
UNNAMED_GPU_LOW_PCT = 8.0   # TFLOP/s on a GPU the log does not name: only a shortfall no datacenter GPU explains
UTIL_LOW_PCT = 70.0     # the seeds' target: GPU utilisation at least 70%
_MFU = rx(r"(?i)(?:\bmfu[:=]?\s+|throughput/device/mfu:\s*|\[MFU:\s*)(-?[\d.]+)(%)?|(-?[\d.]+)% bf16 MFU",
          needs=("mfu",), fold=True)
_TFLOPS = rx(r"throughput per GPU \(TFLOP/s/GPU\):\s*([\d.]+)|\btflops:\s*([\d,.]+)|\| TFLOPs: ([\d.]+) \|",
             needs=("TFLOP/s/GPU", "tflops:", "TFLOPs:"))   # the last: Megatron-DeepSpeed's per-GPU figure
GPU_NAME = rx(r"NVIDIA (?:[A-Z]\w*\s)?([ABGHL]\d{2,3}\w*)")
_DMON_HEAD = rx(r"^#\s*gpu\s+(?:\w+\s+)*?sm\b")
_CSV_HEAD = rx(r"utilization\.gpu \[%\]")
_DCGM_HEAD = rx(r"^#Entity\s+(?:\w+\s+)*?SMACT\b")
# nvidia-smi's default table, the row under each GPU's name: "| N/A 44C P0 72W / 300W | 5484MiB / 16130MiB | 0% Default |"
# (older and newer drivers space it differently); the GPU's index opens the row above it ("|   0  Tesla V100-SXM2…")
_SMI_ROW = rx(r"^\|\s*(?:N/A|\d+%)\s+-?\d+C\s+P\d+\s+(?:\S+\s+)?(N/A|\d+W)\s*/\s*(N/A|\d+W)\s*\|\s*(\d+)MiB\s*/\s*\d+MiB"
              r"\s*\|\s*(\d+)%", needs=("MiB /",))
IDLE_PCT, BUSY_PCT = 5.0, 50.0      # one snapshot: an idle GPU beside a busy one ...
IDLE_POWER, HELD_MIB = 0.35, 1024   # ... drawing little of its power cap while it holds a job's memory
LOW_POWER = 0.6                     # a GPU busy under half the time and drawing under 60% of its cap: underfed
_SMI_GPU = rx(r"^\|\s+(\d+)\s+\S")
# a whole job's average utilisation as a scheduler or DCGM reports it when the job ends: Slurm jobstats'
# "GPU utilization [|||||      33%]", `dcgmi stats -v -j`'s "| SM Utilization (%) | Avg: 0, Max: 0, Min: 0 |"
_JOB_AVG = rx(r"^\s*GPU utilization\s+\[[|\s]*?(\d+(?:\.\d+)?)%\]|\|\s*SM Utilization \(%\)\s*\|\s*Avg:\s*(\d+(?:\.\d+)?)",
              needs=("GPU utilization", "SM Utilization"))
SM_ACTIVE_LOW_PCT = 50.0   # DCGM's SM activity: under 0.5 its own guidance calls the GPU ineffectively used


def _peak(gpu: str, ctx: Context) -> tuple[str, float | None]:
    """The GPU's dense BF16 peak, from its name in the log or the instance family."""
    name = gpu or I.GPU_BY_FAMILY.get(str(ctx.job.get("instance_family", "")), "")
    return name, I.peak_tflops(name)


class UtilParser(Parser):
    name = "low_gpu_util"
    triggers = ("mfu", "MFU", "TFLOP/s/GPU", "tflops:", "TFLOPs:", "NVIDIA ")
    # Megatron's --log-throughput figure is on every iteration line of every rank: a line family, read in batches
    families = (Family("megatron_tflops", ("throughput per GPU (TFLOP/s/GPU):",),
                       (("v", r"throughput per GPU \(TFLOP/s/GPU\):\s*([\d.]+)"),), text=True),)

    def __init__(self) -> None:
        super().__init__()
        self.mfu, self.tflops = Readings(), Readings()   # bounded: a 1 GB log has millions of readings
        self.gpu = ""

    def feed_rows(self, rows) -> None:
        """A batch's figures (one a line, the first, as the line-by-line path takes it); a row's line is cleaned
        only for the readings kept as evidence. A row without a number is read as a line."""
        if None in rows.get("v"):
            for no, v, text in zip(rows.no, rows.get("v"), rows.text):
                self.feed(hit_of(no, text)) if v is None else self.tflops.add(float(v), no, hit_of(no, text).text)
            return
        self.tflops.extend([float(v) for v in rows.get("v")], lambda k: (rows.no[k], hit_of(0, rows.text[k]).text))

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if not self.gpu and "NVIDIA " in t and (g := search(GPU_NAME, t)):
            self.gpu = g.group(1)
        m = search(_MFU, t)
        if m:
            value = float(m.group(1) or m.group(3))
            if m.group(1) and not m.group(2) and value <= 1.5:
                value *= 100   # a fraction (Composer) rather than a percentage
            if value >= 0:     # nanoGPT prints -100% before it has timed a step
                self.mfu.add(value, hit.no, t)
        m = search(_TFLOPS, t)
        if m and not m.group(1):   # (Megatron's figure: its lines are the family's rows)
            self.tflops.add(float((m.group(1) or m.group(2) or m.group(3)).replace(",", "")), hit.no, t)

    def finish(self, ctx: Context) -> list[Finding]:
        gpu, peak = _peak(self.gpu, ctx)
        facts: dict = {}
        if len(self.mfu) >= 2:
            readings = (src := self.mfu).kept()   # the first logged step includes warm-up: kept() leaves it out
            pct = round(src.median(), 2)
            facts = {"mfu_pct": pct, "readings": len(readings)}
        elif len(self.tflops) >= 2:
            readings = (src := self.tflops).kept()
            tf = src.median()
            # an unnamed GPU is judged against the slowest datacenter peak (A100), and only a shortfall so large
            # that no datacenter GPU would explain it counts (small or MoE test models run far below peak anyway)
            pct = round(100 * tf / (peak or 312.0), 2)
            facts = {"tflops_per_gpu": round(tf, 1), "mfu_pct": pct, "readings": len(readings),
                     "peak_tflops": peak or 312.0}
        limit = MFU_LOW_PCT if peak or "tflops_per_gpu" not in facts else UNNAMED_GPU_LOW_PCT
        if gpu and peak and facts:
            facts["gpu_model"] = gpu
        keep = ("tflops_per_gpu", "gpu_model") + (("mfu_pct",) if peak or "tflops_per_gpu" not in facts else ())
        ctx.throughput = {k: facts[k] for k in keep if k in facts}   # the run's throughput, symptom or not
        if not facts or facts["mfu_pct"] >= limit:
            return []
        worst = src.worst()
        self.ev.add(worst[1], worst[2])
        title = (f"The GPUs run at {facts['mfu_pct']:g}% model FLOPs utilisation over {facts['readings']} logged "
                 f"steps (under {MFU_LOW_PCT:g}%; 30-45% is normal for LLM training)")
        return [Finding(symptom="low_gpu_util", rule="low_gpu_util.mfu", title=title, severity="warning",
                        confidence=0.7, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]


class UtilSamplesParser(Parser):
    """nvidia-smi dmon / --query-gpu CSV samples: the rows under the header carry no literal, so the header's hit
    brings the rows after it."""
    name = "low_gpu_util_samples"
    triggers = ("# gpu", "utilization.gpu [%]", "#Entity", "MiB /", "GPU utilization", "SM Utilization (%)")
    after = 64
    before = 1

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[float] = []
        self.gpus: set[str] = set()
        self.head: tuple[int, str] | None = None
        self.dcgm = False   # the samples are DCGM's SM activity (judged against its own, lower bar)
        self.idle: tuple[list[str], int, int, str] | None = None   # one snapshot's idle GPUs, its size, a line
        self.underfed: tuple[list[float], int, str] | None = None   # one snapshot, every GPU underfed
        # nvidia-smi table rows: util, GPU index (None without the row above), line, power / cap, MiB in use
        self.smi: list[tuple[float, str | None, int, str, float | None, int]] = []
        self.job_avg: list[tuple[float, int, str]] = []   # whole-job averages: value, line, text

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if search(_DCGM_HEAD, t):
            self._dcgm(hit)
            return
        if "tilization" in t and (m := search(_JOB_AVG, t)):
            self.job_avg.append((float(m.group(1) or m.group(2)), hit.no, t))
            return
        if "MiB /" in t:
            m = search(_SMI_ROW, t)
            if m and len(self.smi) < 10_000:
                g = search(_SMI_GPU, hit.before[-1]) if hit.before else None
                watts = [float(w[:-1]) if w != "N/A" else None for w in (m.group(1), m.group(2))]
                power = watts[0] / watts[1] if watts[0] is not None and watts[1] else None
                self.smi.append((float(m.group(4)), g.group(1) if g else None, hit.no, t, power, int(m.group(3))))
            return
        if search(_DMON_HEAD, t):
            col, split = t.lstrip("#").split().index("sm"), str.split
        elif search(_CSV_HEAD, t):
            col = [c.strip() for c in t.split(",")].index("utilization.gpu [%]")
            split = lambda row: [c.strip().rstrip(" %") for c in row.split(",")]   # noqa: E731
        else:
            return
        self.head = self.head or (hit.no, t)
        for row in hit.after:
            if row.lstrip().startswith("#"):
                if search(_DMON_HEAD, row):
                    break   # the header again (every screenful): its own hit reads the rows under it
                continue
            cells = split(row)
            if len(cells) <= col or not cells[0].strip().isdigit():
                break
            try:
                self.samples.append(float(cells[col]))
            except ValueError:
                continue
            self.gpus.add(cells[0].strip())

    def _dcgm(self, hit: Hit) -> None:
        """`dcgmi dmon` rows under "#Entity … SMACT …" (then an "ID" line): "GPU 0   0.512 …", N/A when unsampled."""
        col = hit.text.lstrip("#").split().index("SMACT") + 1   # the entity takes two cells: "GPU 0"
        self.head = self.head or (hit.no, hit.text)
        self.dcgm = True
        for row in hit.after:
            cells = row.split()
            if row.lstrip().startswith("#Entity"):
                break   # printed again every 14 rows: its own hit reads the rows under it
            if cells == ["ID"] or row.lstrip().startswith("#"):
                continue
            if len(cells) <= col or cells[0] != "GPU" or not cells[1].isdigit():
                break
            try:
                self.samples.append(100 * float(cells[col]))
            except ValueError:
                continue
            self.gpus.add(cells[1])

    def _smi_samples(self) -> None:
        """nvidia-smi table rows count as samples when they were taken over time (`nvidia-smi -l`, or a row per
        sample without the GPU's name above it), not when they are one snapshot of each GPU (which tells what the
        GPUs did at one instant, perhaps between two jobs)."""
        gpus = {r[1] for r in self.smi}
        if self.smi and None not in gpus and len(self.smi) <= len(gpus):
            self._snapshot()
            return
        if len(self.smi) < 3:
            return
        if not self.samples:
            self.head = (self.smi[0][2], self.smi[0][3])
        self.samples.extend(r[0] for r in self.smi)
        self.gpus |= {g for g in gpus if g is not None} or {"?"}

    def _snapshot(self) -> None:
        """One nvidia-smi snapshot of each GPU: GPUs that hold a job's memory but sit idle at low power while
        another GPU of the same job is busy (one rank doing the work, or the others waiting on it) — at least as many
        idle as busy, so a GPU caught between two kernels does not count."""
        rows = [(u, p, mib, g, no, t) for u, g, no, t, p, mib in self.smi]
        busy = [r for r in rows if r[0] >= BUSY_PCT]
        idle = [r for r in rows if r[0] <= IDLE_PCT and r[2] >= HELD_MIB and r[1] is not None and r[1] <= IDLE_POWER]
        # (every GPU idle that way is no evidence: a loaded model waiting for requests, or a job between phases,
        # looks the same in one snapshot — tests/corpus wave5's H100 case)
        if busy and len(idle) >= len(busy):
            self.idle = (sorted(r[3] for r in idle), len(rows), idle[0][4], idle[0][5])
        # every GPU of the snapshot holds a job's memory and works, but at well under half its capacity and power:
        # the job keeps all of them underfed at that instant (an idle server reads 0%, a healthy job near 100%)
        elif rows and all(IDLE_PCT < r[0] < BUSY_PCT and r[2] >= HELD_MIB and r[1] is not None and r[1] <= LOW_POWER
                          for r in rows):
            self.underfed = (sorted(r[0] for r in rows), rows[0][4], rows[0][5])

    def _job_average(self) -> list[Finding]:
        """A job's own average: judged alone (a job that held its GPUs at 0% is an idle allocation, not no job)."""
        util = round(median(v for v, _, _ in self.job_avg), 1)
        if util >= UTIL_LOW_PCT:
            return []
        self.ev.add(*self.job_avg[0][1:])
        title = (f"The job's average GPU utilisation is {util:g}% ({len(self.job_avg)} GPU or job summar"
                 f"{'y' if len(self.job_avg) == 1 else 'ies'}), under the {UTIL_LOW_PCT:g}% target")
        return [Finding(symptom="low_gpu_util", rule="low_gpu_util.job_average", title=title, severity="warning",
                        confidence=0.6, evidence=self.ev.items, facts={"util_pct": util, "samples": len(self.job_avg)},
                        first_line=self.ev.first())]

    def finish(self, ctx: Context) -> list[Finding]:
        if self.job_avg and not self.samples and not self.smi:
            return self._job_average()
        self._smi_samples()
        if self.idle and not self.samples:
            ids, n, no, text = self.idle
            self.ev.add(no, text)
            title = (f"GPU(s) {', '.join(ids)} hold memory but sit idle at low power while another GPU of the job is "
                     f"busy ({len(ids)} of {n} GPUs in the nvidia-smi snapshot)")
            return [Finding(symptom="low_gpu_util", rule="low_gpu_util.idle_gpus", title=title, severity="warning",
                            confidence=0.55, evidence=self.ev.items, facts={"gpus": n, "samples": n},
                            first_line=self.ev.first())]
        if self.underfed and not self.samples:
            utils, no, text = self.underfed
            self.ev.add(no, text)
            title = (f"Every GPU in the nvidia-smi snapshot holds the job's memory but is busy only "
                     f"{utils[0]:g}-{utils[-1]:g}% of the time at low power ({len(utils)} GPU(s)), under the "
                     f"{UTIL_LOW_PCT:g}% target")
            return [Finding(symptom="low_gpu_util", rule="low_gpu_util.snapshot", title=title, severity="warning",
                            confidence=0.5, evidence=self.ev.items, facts={"util_pct": utils[-1], "gpus": len(utils),
                                                                          "samples": len(utils)},
                            first_line=self.ev.first())]
        # an idle GPU (every sample 0) is no job at all, not an underused one
        if len(self.samples) < 3 or not any(self.samples) or self.head is None:
            return []
        util = round(median(self.samples), 1)
        low = SM_ACTIVE_LOW_PCT if self.dcgm else UTIL_LOW_PCT
        if util >= low:
            return []
        self.ev.add(*self.head)
        facts = {"util_pct": util, "samples": len(self.samples), "gpus": len(self.gpus)}
        what = "DCGM SM activity" if self.dcgm else "GPU utilisation"
        title = (f"{what} is {util:g}% (median of {len(self.samples)} samples over {len(self.gpus)} GPU(s)), "
                 f"under the {low:g}% {'DCGM guidance' if self.dcgm else 'target'}")
        return [Finding(symptom="low_gpu_util", rule="low_gpu_util.samples", title=title, severity="warning",
                        confidence=0.65, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]
