"""Run plain google-genai (its automatic function calling over real Python tools) instrumented by
OpenTelemetry's google-genai instrumentation (opentelemetry-instrumentation-google-genai, the
`otel_test` extra, in .agent/), its model the local generateContent server, and write what it
traced as OTLP JSON:

    EVALBEAM_TEST_MODEL_URL=... python otel_genai.py PROMPTS.json OUT.jsonl

PROMPTS: [user text, ...], one generate_content call each. OUT.jsonl.calls.json gets what the
app saw: [[prompt, response text, [[tool, args, result], ...]]] (google-genai's automatic function
calling history). Content is recorded on the spans
(the current GenAI conventions: OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY)."""
import json
import os
import random
import sys

os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

from opentelemetry.instrumentation.google_genai import GoogleGenAiSdkInstrumentor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the SDK's tracer provider with its in-memory exporter, and the OTLP JSON encoding
from otel_traces import EXPORTER, otlp_request  # noqa: E402

GoogleGenAiSdkInstrumentor().instrument()


def main(prompts_path, out_path):
    from google import genai
    from google.genai import types

    from tests.inference_app import convert, get_weather

    client = genai.Client(api_key=os.environ["GOOGLE_API_KEY"],
                          http_options=types.HttpOptions(base_url=os.environ["EVALBEAM_TEST_MODEL_URL"]))
    config = types.GenerateContentConfig(tools=[get_weather, convert], system_instruction="Answer with the tools.")
    seen = []
    for prompt in json.load(open(prompts_path)):
        response = client.models.generate_content(model="gemini-test", contents=prompt, config=config)
        history = response.automatic_function_calling_history or []
        calls = [p.function_call for c in history for p in c.parts or [] if p.function_call]
        results = [p.function_response for c in history for p in c.parts or [] if p.function_response]
        seen.append([prompt, response.text, [[c.name, c.args, r.response] for c, r in zip(calls, results)]])
    with open(out_path + ".calls.json", "w") as f:
        json.dump(seen, f)
    spans = list(EXPORTER.get_finished_spans())
    random.Random(11).shuffle(spans)
    with open(out_path, "w") as f:
        f.write(json.dumps(otlp_request(spans)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
