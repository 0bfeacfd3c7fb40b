"""Regenerates docs/report.png, the picture of `evalbeam report` in docs/tables.md.

    .venv/bin/python docs/report_screenshot.py [--html report.html]   # --html: keep the page too

Three nightly runs of a small made-up support-agent eval (the third regresses on one topic and
has two unusable records), the report of the last one compared with the one before, and a
screenshot of its top in headless Chromium (Debian's `chromium`, as `make test` installs).
"""
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EVALBEAM = str(Path(sys.executable).with_name("evalbeam"))
WORDS = ["reset", "router", "refund", "invoice", "parcel", "tracking", "password", "firmware", "account", "label"]


def rows(night: int) -> list[str]:
    rng = random.Random(7)  # the same cases every night; only the answers change
    out = []
    for k in range(240):
        topic = ("billing", "devices", "shipping")[k % 3]
        reference = " ".join(rng.choice(WORDS) for _ in range(9))
        right = rng.random() < 0.8 + 0.03 * night
        response = reference if right else " ".join(reference.split()[:4])
        if night == 2 and topic == "devices" and right and k % 4 == 1:
            response = "Please contact support."
        out.append(json.dumps({"id": f"case-{k:03d}", "topic": topic, "prompt": f"Customer question {k} about {topic}",
                               "response": response, "reference": reference,
                               "latency_in_seconds": round(rng.uniform(0.6, 2.4) * (1.3 if night == 2 else 1.0), 3)}))
    if night == 2:
        out += ['{"id": "case-240", "topic": "billing", "response": ', json.dumps({"id": "case-241", "topic": "devices"})]
    return out


def main() -> None:
    chromium = shutil.which("chromium")
    if not chromium:
        sys.exit("needs Debian's chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for night, date in enumerate(["2026-11-19", "2026-11-20", "2026-11-21"]):
            data = tmp / f"night{night}.jsonl"
            data.write_text("\n".join(rows(night)) + "\n")
            config = {"name": "support-agent", "input": {"uri": str(data), "id_column": "id", "slice_columns": ["topic"]},
                      "metrics": ["exact_match", "rouge_1", "rouge_l"], "output": {"parquet": str(tmp / "out")}}
            (tmp / "eval.yaml").write_text(yaml.safe_dump(config))
            subprocess.run([EVALBEAM, "run", tmp / "eval.yaml", "--set", f"run_date={date}"], check=True,
                           capture_output=True, cwd=ROOT)
        page = tmp / "report.html"
        subprocess.run([EVALBEAM, "report", "support-agent-20261121", "--compare", "support-agent-20261120",
                        "--parquet", tmp / "out", "-o", page], check=True, cwd=ROOT)
        shot = ROOT / "docs" / "report.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={tmp / 'profile'}", f"--screenshot={shot}", "--window-size=1200,1900",
                        page.as_uri()], check=True, capture_output=True)
        print(f"wrote {shot}")
        if "--html" in sys.argv:
            shutil.copy(page, sys.argv[sys.argv.index("--html") + 1])


if __name__ == "__main__":
    main()
