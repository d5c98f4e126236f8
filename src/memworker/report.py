"""The experiment report: `notebooks/report.ipynb`, built and executed from receipts.

`build_notebook(...)` writes a notebook whose code cells call the `show_*` functions below on the
inputs (receipts, and a corpus manifest or training logs where they exist); `execute(...)` runs it
headless with nbclient and strips what changes from one run to the next (execution timestamps,
kernel ids, random cell ids), so the same inputs give the same file. Every section says "not
available" with the reason when its input is missing.

Inputs (paths relative to the repository root unless given):

- corpus coverage: `data/<corpus>/manifest.json` (rows per domain and behaviour per split); else
  the rows per corpus and split that the stage receipts record.
- loss curves: a stage receipt's `log_history` (or `result.log_history`); else
  `runs/<stage>/trainer_state.json` when its sha256 equals the receipt's `trainer_state_sha256`;
  else the receipt's loss endpoints (mean and final train loss, validation loss).
- per-task bars and temporal errors: `receipts/release-receipt.json` `evaluation.<set>` (the
  evaluator's summaries).
- live vs isolated: `receipts/live-summary.json` (`python eval/live.py … --out DIR`, then copy
  `DIR/summary.json`).
- external diagnostic: `receipts/external-summary.json` (`python eval/studies/external.py …
  --out DIR`, then copy `DIR/summary.json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memworker.eval import results
from memworker.eval.grade import PRIMARY, TEMPORAL_CLASSES
from memworker.eval.live.runner import table as live_table
from memworker.eval.plots import task_bars
from memworker.eval.summary import metric_tables
from memworker.hashing import sha256_file
from memworker.receipts import RELEASE_RECEIPT as RELEASE

LIVE = "live-summary.json"
EXTERNAL = "external-summary.json"


class Inputs:
    """Where the report reads from; each loader returns (value, None) or (None, reason)."""

    def __init__(self, receipts: str | Path = "receipts", data: str | Path = "data",
                 runs: str | Path = "runs"):
        self.receipts, self.data, self.runs = Path(receipts), Path(data), Path(runs)

    # -- files ------------------------------------------------------------------------------
    def _json(self, path: Path) -> tuple[Any, str | None]:
        if not path.is_file():
            return None, f"{path} not found"
        try:
            return json.loads(path.read_text("utf-8")), None
        except json.JSONDecodeError as exc:
            return None, f"{path} is not JSON ({exc.msg}, line {exc.lineno})"

    def files(self) -> list[tuple[str, str]]:
        """(path, sha256) of every input file that exists, in a stable order."""
        paths = sorted(self.receipts.glob("*.json")) if self.receipts.is_dir() else []
        paths += sorted(self.data.glob("*/manifest.json")) if self.data.is_dir() else []
        paths += [p for _, p in self._trainer_states()]
        return [(str(p), sha256_file(p)) for p in paths]

    def stage_receipts(self) -> list[dict[str, Any]]:
        out = []
        if self.receipts.is_dir():
            for p in sorted(self.receipts.glob("*-receipt.json")):
                doc, _ = self._json(p)
                if isinstance(doc, dict) and "stage" in doc and "result" in doc:
                    out.append(doc)
        # training order: follow the lineage (a stage after its parent), then by name
        ordered, left = [], sorted(out, key=lambda d: d["stage"])
        done: set[str | None] = {None}
        while left:
            ready = [d for d in left if _parent_stage(d) in done] or left[:1]
            ordered.append(ready[0])
            done.add(ready[0]["stage"])
            left.remove(ready[0])
        return ordered

    def _trainer_states(self) -> list[tuple[dict[str, Any], Path]]:
        out = []
        for r in self.stage_receipts():
            p = self.runs / r["stage"] / "trainer_state.json"
            if p.is_file() and r.get("trainer_state_sha256") == sha256_file(p):
                out.append((r, p))
        return out

    # -- sections ---------------------------------------------------------------------------
    def coverage(self) -> tuple[dict[str, Any] | None, str | None]:
        corpora = {}
        if self.data.is_dir():
            for p in sorted(self.data.glob("*/manifest.json")):
                doc, _ = self._json(p)
                if isinstance(doc, dict) and isinstance(doc.get("counts"), dict):
                    corpora[p.parent.name] = {
                        split: {k: c.get(k, {}) for k in ("domains", "behaviours")}
                        for split, c in doc["counts"].items() if isinstance(c, dict)}
        if corpora:
            return {"source": "manifest", "corpora": corpora}, None
        rows: dict[str, dict[str, int]] = {}
        for r in self.stage_receipts():
            data = r.get("data", {})
            name = Path(str(data.get("corpus", "?"))).name
            for split in ("train", "val"):
                if isinstance(data.get(split), dict) and "rows" in data[split]:
                    rows.setdefault(name, {})[split] = data[split]["rows"]
        if rows:
            return {"source": "receipts", "rows": rows}, None
        return None, (f"no corpus manifest under {self.data}/ and no stage receipt in "
                      f"{self.receipts}/ records rows")

    def losses(self) -> tuple[list[dict[str, Any]] | None, str | None]:
        states = {r["stage"]: p for r, p in self._trainer_states()}
        out = []
        for r in self.stage_receipts():
            history = r.get("log_history") or r.get("result", {}).get("log_history")
            source = "receipt"
            if not history and r["stage"] in states:
                doc, _ = self._json(states[r["stage"]])
                history = (doc or {}).get("log_history")
                source = f"{states[r['stage']]} (sha256 = receipt's trainer_state_sha256)"
            res = r.get("result", {})
            entry = {"stage": r["stage"], "parent": _parent_stage(r),
                     "steps": res.get("global_step"),
                     "endpoints": {k: res.get(k) for k in ("mean_train_loss", "final_train_loss",
                                                           "val_loss")}}
            if history:
                entry["train"] = [(h["step"], h["loss"]) for h in history
                                  if "loss" in h and "step" in h]
                entry["val"] = [(h["step"], h["eval_loss"]) for h in history
                                if "eval_loss" in h and "step" in h]
                entry["source"] = source
            else:
                entry["source"] = "receipt endpoints only (no per-step history recorded)"
            out.append(entry)
        if not out:
            return None, f"no stage receipt (*-receipt.json with a stage) in {self.receipts}/"
        return out, None

    def evaluations(self) -> tuple[dict[str, Any] | None, str | None]:
        doc, why = self._json(self.receipts / RELEASE)
        if doc is None:
            return None, why
        ev = doc.get("evaluation")
        if not isinstance(ev, dict) or not ev:
            return None, (f"{self.receipts / RELEASE} has no evaluation section (python "
                          "eval/run.py … --into-receipt receipts/release-receipt.json)")
        return ev, None

    def live(self) -> tuple[dict[str, Any] | None, str | None]:
        doc, why = self._json(self.receipts / LIVE)
        if doc is None:
            return None, why + " (python eval/live.py … --out DIR; copy DIR/summary.json there)"
        return doc, None

    def external(self) -> tuple[dict[str, Any] | None, str | None]:
        doc, why = self._json(self.receipts / EXTERNAL)
        if doc is None:
            return None, why + (" (python eval/studies/external.py --locomo FILE … --out DIR; "
                                "copy DIR/summary.json there)")
        return doc, None


def _parent_stage(receipt: dict[str, Any]) -> str | None:
    parent = receipt.get("parent")
    return parent.get("stage") if isinstance(parent, dict) else None


# --- display helpers (run inside the notebook) ----------------------------------------------------

def setup() -> None:
    """Stable figures: Agg rendering, fixed size and resolution, no software/date metadata."""
    import matplotlib

    matplotlib.rcParams.update({"figure.dpi": 90, "savefig.dpi": 90, "font.size": 9,
                                "svg.hashsalt": "memworker", "figure.max_open_warning": 0})
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            ip.run_line_magic("matplotlib", "inline")
            ip.run_line_magic("config", "InlineBackend.figure_formats = ['png']")
            ip.run_line_magic("config", "InlineBackend.print_figure_kwargs = "
                              "{'bbox_inches': None, 'metadata': {'Software': None}}")
    except ImportError:
        pass


def _md(text: str) -> None:
    try:
        from IPython.display import Markdown, display

        display(Markdown(text))
    except ImportError:
        print(text)


def not_available(why: str) -> None:
    _md(f"*Not available:* {why}.")


def _available(loaded: tuple[Any, str | None]) -> Any:
    """The value of an `Inputs` loader's (value, reason), or None after saying why not."""
    value, why = loaded
    if value is None:
        not_available(why)
    return value


def _show(plt: Any, fig: Any) -> None:
    fig.tight_layout()
    plt.show()
    plt.close(fig)


def show_inputs(inputs: Inputs) -> None:
    rows = inputs.files()
    if not rows:
        not_available(f"no input files under {inputs.receipts}/")
        return
    _md("| input | sha256 |\n|---|---|\n" + "\n".join(f"| `{p}` | `{h[:16]}…` |"
                                                    for p, h in rows))


def show_coverage(inputs: Inputs) -> None:
    import matplotlib.pyplot as plt

    cov = _available(inputs.coverage())
    if cov is None:
        return
    if cov["source"] == "receipts":
        _md("Corpus manifests are not here; rows per corpus and split as the stage receipts "
            "record them (training rows used, not the whole corpus).")
        names = sorted(cov["rows"])
        splits = ["train", "val"]
        grid = [[cov["rows"][n].get(s, 0) for s in splits] for n in names]
        _heatmap(plt, grid, names, splits, "rows per corpus and split (stage receipts)")
        return
    cols = [(name, split) for name, per_split in cov["corpora"].items()
            for split in [s for s in ("train", "val", "test") if s in per_split]
            + sorted(s for s in per_split if s not in ("train", "val", "test"))]
    labels = [f"{name}\n{split}" for name, split in cols]
    for kind in ("domains", "behaviours"):
        keys = sorted({k for name, split in cols
                       for k in cov["corpora"][name][split].get(kind, {})})
        if not keys:
            continue
        grid = [[cov["corpora"][name][split].get(kind, {}).get(k, 0) for name, split in cols]
                for k in keys]
        _heatmap(plt, grid, keys, labels, f"rows per {kind[:-1]}, corpus and split "
                 "(manifests; colour = share of the column)", per_column=True)


def _heatmap(plt: Any, grid: list[list[int]], rows: list[str], cols: list[str],
             title: str, per_column: bool = False) -> None:
    """Counts annotated in the cells; colour = the count, or its share of the column."""
    totals = [sum(r[j] for r in grid) or 1 for j in range(len(cols))]
    shade = [[v / totals[j] if per_column else v for j, v in enumerate(r)] for r in grid]
    fig, ax = plt.subplots(figsize=(2.2 + 0.75 * len(cols), 1.0 + 0.24 * len(rows)))
    im = ax.imshow(shade, aspect="auto", cmap="Blues")
    ax.set_xticks(range(len(cols)), cols, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    top = max((v for r in shade for v in r), default=0)
    for i, r in enumerate(grid):
        for j, v in enumerate(r):
            ax.text(j, i, str(v), ha="center", va="center", fontsize=6,
                    color="white" if top and shade[i][j] > 0.6 * top else "black")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04, label="share of column" if per_column else "rows")
    _show(plt, fig)


def show_losses(inputs: Inputs) -> None:
    import matplotlib.pyplot as plt

    stages = _available(inputs.losses())
    if stages is None:
        return
    lines = ["| stage | parent | steps | mean train loss | final train loss | val loss | "
             "source |", "|---|---|---|---|---|---|---|"]
    for s in stages:
        e = s["endpoints"]
        lines.append(f"| {s['stage']} | {s['parent'] or '–'} | {s['steps']} | "
                     + " | ".join("–" if e[k] is None else f"{e[k]:.4f}"
                                  for k in ("mean_train_loss", "final_train_loss", "val_loss"))
                     + f" | {s['source']} |")
    _md("\n".join(lines))
    curves = [s for s in stages if s.get("train")]
    if not curves:
        _md("No per-step loss history in these inputs; the table gives each stage's endpoints.")
        return
    fig, axes = plt.subplots(1, len(curves), figsize=(3.6 * len(curves), 2.8), squeeze=False)
    for ax, s in zip(axes[0], curves, strict=True):
        ax.plot([x for x, _ in s["train"]], [y for _, y in s["train"]], lw=1, label="train")
        if s["val"]:
            ax.plot([x for x, _ in s["val"]], [y for _, y in s["val"]], "o", label="val")
        ax.set_title(f"{s['stage']}" + (f" (from {s['parent']})" if s["parent"] else ""),
                     fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _show(plt, fig)


def show_tasks(inputs: Inputs) -> None:
    import matplotlib.pyplot as plt

    evs = _available(inputs.evaluations())
    if evs is None:
        return
    for set_name, summary in evs.items():
        # the same table as the README's results block (memworker.eval.results)
        _md("\n".join([*results.set_header(set_name, summary), "",
                       *results.set_table(summary)]))
        fig, ax = plt.subplots(figsize=(7.0, 3.2))
        task_bars(ax, summary, title=f"set {set_name}: primary metric per task",
                  ylabel="score (95 % interval)", title_size=9)
        _show(plt, fig)
        diffs = [f"| {c['label']} | {task} | {item['diff']:+.3f} [{item['ci'][0]:.3f}, "
                 f"{item['ci'][1]:.3f}] | "
                 + (f"{item['mcnemar']['p']:.3g}" if item.get("mcnemar") else "–")
                 + f" | {item['n_rows']} |"
                 for c in summary.get("comparisons", [])
                 for task, block in c["tasks"].items() if task in PRIMARY
                 for m, item in block.items()
                 if m == PRIMARY[task] and item["diff"] is not None and item["ci"]]
        if diffs:
            _md("Paired differences (primary metric):\n\n| pair | task | a − b [95 % CI] | "
                "McNemar p | n rows |\n|---|---|---|---|---|\n" + "\n".join(diffs))


def show_temporal(inputs: Inputs) -> None:
    import matplotlib.pyplot as plt

    evs = _available(inputs.evaluations())
    if evs is None:
        return
    for set_name, summary in evs.items():
        arms = summary["arms"]
        t = summary.get("temporal", {})
        lines = [f"**Set `{set_name}`**: temporal error classes on matched claims, before → "
                 "after the codec's normalisation.", "",
                 "| arm | dated pairs | " + " | ".join(TEMPORAL_CLASSES) + " |",
                 "|---|---|" + "---|" * len(TEMPORAL_CLASSES)]
        for arm in arms:
            a = t.get(arm)
            if not a:
                continue
            lines.append(f"| {arm} | {a['pairs']} | " + " | ".join(
                f"{a['before'][c]} → {a['after'][c]}" for c in TEMPORAL_CLASSES) + " |")
        _md("\n".join(lines))
        if not any(t.get(a, {}).get(stage, {}).get(c) for a in arms
                   for stage in ("before", "after") for c in TEMPORAL_CLASSES):
            _md(f"No temporal error in set `{set_name}` (dated pairs per arm: " + ", ".join(
                f"{a} {t.get(a, {}).get('pairs', 0)}" for a in arms) + ").")
            continue
        fig, ax = plt.subplots(figsize=(7.0, 3.0))
        width = 0.8 / max(2 * len(arms), 1)
        for k, arm in enumerate(arms):
            for j, stage in enumerate(("before", "after")):
                off = (2 * k + j - (2 * len(arms) - 1) / 2) * width
                ax.bar([i + off for i in range(len(TEMPORAL_CLASSES))],
                       [t[arm][stage][c] for c in TEMPORAL_CLASSES], width, color=f"C{k % 10}",
                       hatch="//" if stage == "before" else None, alpha=0.55 if j == 0 else 1,
                       label=f"{arm} {stage}")
        ax.set_xticks(range(len(TEMPORAL_CLASSES)),
                      [c.replace("_", "\n") for c in TEMPORAL_CLASSES], fontsize=7)
        ax.set_ylabel("matched claims")
        ax.set_title(f"set {set_name}: temporal errors before / after the codec", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
        _show(plt, fig)


def show_live(inputs: Inputs) -> None:
    summary = _available(inputs.live())
    if summary is None:
        return
    if not summary.get("arms"):
        not_available(f"{inputs.receipts / LIVE} lists no arm")
        return
    _md("Live = the store ended right after the scenario (checks); isolated = each worker call "
        "taken alone was right.\n\n" + live_table(summary))


def show_external(inputs: Inputs) -> None:
    summary = _available(inputs.external())
    if summary is None:
        return
    arms = summary["arms"]
    lic = summary.get("license")
    lines = [f"**{summary.get('disclaimer', '')}**", "",
             f"License declared by the file: {lic}." if lic else
             "The file declares no license.", "",
             *metric_tables(summary, ("extract", "reflect"), task_column=True)]
    cats = summary.get("reflect_by_category", {})
    names = sorted({c for a in arms for c in cats.get(a, {})})
    if names:
        lines += ["", "`reflect_correct` by QA category (as labelled in the file):", "",
                  "| category | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
        for c in names:
            lines.append(f"| {c} | " + " | ".join(
                f"{cats[a][c]['correct']}/{cats[a][c]['rows']}" if c in cats.get(a, {}) else "–"
                for a in arms) + " |")
    cfg = summary.get("config", {})
    if cfg.get("file"):
        per_task = summary.get("rows_per_task", {})
        lines += ["", f"File sha256 `{cfg['file'].get('sha256', '?')[:16]}…`; "
                  f"{per_task.get('extract', 0)} windows of up to {cfg.get('window')} turns, "
                  f"{per_task.get('reflect', 0)} QA rows, seed {cfg.get('seed')}."]
    _md("\n".join(lines))


# --- building and executing the notebook --------------------------------------------------------

SECTIONS = [
    ("Corpus coverage", "Rows per domain and behaviour in each split of every corpus.",
     "show_coverage"),
    ("Loss curves per stage", "Training and validation loss of every stage in the curriculum.",
     "show_losses"),
    ("Per-task results: base, student, rules",
     "The matched evaluation's key metrics per task with 95 % bootstrap intervals, the same "
     "table as the README's results block, then the primary metric as bars and every pair's "
     "paired difference (release receipt, `evaluation.<set>`).", "show_tasks"),
    ("Temporal error breakdown",
     "Date errors of matched claims before and after the codec's deterministic normalisation.",
     "show_temporal"),
    ("Live vs isolated", "The worker inside the hmem-shaped reference store (live acceptance) "
     "beside the same calls graded one by one.", "show_live"),
    ("External diagnostic (LoCoMo format)",
     "A diagnostic on real conversations, not LoCoMo QA accuracy.", "show_external"),
]


def build_notebook(receipts: str = "receipts", data: str = "data", runs: str = "runs") -> Any:
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    cells = [new_markdown_cell(
        "# memworker: experiment report\n\n"
        "Generated by `python notebooks/build.py` from the committed receipts (and a corpus "
        "manifest or training logs where they exist); never edited by hand. Rebuild: see "
        "`notebooks/README.md`. Each section says *not available* when its input is missing."),
        new_code_cell(
            "from memworker import report as R\n\nR.setup()\n"
            f"inputs = R.Inputs(receipts={receipts!r}, data={data!r}, runs={runs!r})\n"
            "R.show_inputs(inputs)")]
    for title, text, fn in SECTIONS:
        cells.append(new_markdown_cell(f"## {title}\n\n{text}"))
        cells.append(new_code_cell(f"R.{fn}(inputs)"))
    for n, cell in enumerate(cells):
        cell["id"] = f"cell-{n:02d}"
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return nb


def execute(nb: Any, cwd: str | Path, timeout: int = 600) -> Any:
    """Run every cell headless (nbclient), then strip volatile metadata."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(cwd)}}, allow_errors=False)
    client.execute()
    return strip_volatile(nb)


def strip_volatile(nb: Any) -> Any:
    """Drop what differs between two runs on the same inputs: execution timestamps, kernel and
    language versions, stderr streams (e.g. matplotlib's one-time font-cache notice); number
    the cells. A cell that fails stops the build before this (nbclient raises)."""
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                  "name": "python3"},
                   "language_info": {"name": "python"}}
    for n, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{n:02d}"
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None)
        cell.metadata.pop("scrolled", None)
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"] if not (
                o.get("output_type") == "stream" and o.get("name") == "stderr")]
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)
    return nb


def write(nb: Any, path: str | Path) -> Path:
    import nbformat

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(nbformat.writes(nb) + "\n", "utf-8")
    return p


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="notebooks/build.py", description=(
        "Build notebooks/report.ipynb from the receipts (and a corpus manifest or training logs "
        "where they exist) and execute it headless, so that its outputs are stored."))
    p.add_argument("--receipts", default="receipts", help="receipts folder (receipts)")
    p.add_argument("--data", default="data", help="corpora folder with */manifest.json (data)")
    p.add_argument("--runs", default="runs",
                   help="training runs folder with <stage>/trainer_state.json (runs)")
    p.add_argument("--out", default="notebooks/report.ipynb", help="notebook to write")
    p.add_argument("--no-execute", action="store_true", help="write the cells without running")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell (600)")
    args = p.parse_args(argv)
    try:
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError:
        print("notebook: error: nbformat and nbclient are not installed: pip install "
              "'memworker[report]'", file=sys.stderr)
        return 2
    if not Path(args.receipts).is_dir():
        print(f"notebook: error: no receipts folder at {args.receipts} (run from the repository "
              "root or pass --receipts DIR)", file=sys.stderr)
        return 2
    nb = build_notebook(args.receipts, args.data, args.runs)
    if not args.no_execute:
        from nbclient.exceptions import CellExecutionError

        try:
            nb = execute(nb, Path.cwd(), args.timeout)
        except CellExecutionError as exc:
            first = str(exc).strip().splitlines()
            print(f"notebook: error: a cell failed: {first[-1] if first else exc}",
                  file=sys.stderr)
            return 1
    out = write(nb, args.out)
    present = {name: getattr(Inputs(args.receipts, args.data, args.runs), name)()[0] is not None
               for name in ("coverage", "losses", "evaluations", "live", "external")}
    print(f"notebook: {out} ({'executed' if not args.no_execute else 'not executed'}; sections "
          "with input: " + ", ".join(k for k, v in present.items() if v) + "; not available: "
          + (", ".join(k for k, v in present.items() if not v) or "none") + ")")
    return 0
