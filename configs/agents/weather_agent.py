"""The ADK agent of configs/adk_agent_eval_set.yaml: an LlmAgent with one Python tool.

Needs google-adk (evalbeam's `agent` extra: docs/agents.md#installing-the-agent-extra) and,
to run, Gemini credentials (GOOGLE_API_KEY, or Vertex AI through Application Default
Credentials with GOOGLE_GENAI_USE_VERTEXAI=true). Importing it calls no model, so
`evalbeam validate` needs none. Put this folder on the path to use it:
PYTHONPATH=configs/agents evalbeam run configs/adk_agent_eval_set.yaml
"""
from google.adk.agents import LlmAgent

from evalbeam.metrics.examples import get_weather

root_agent = LlmAgent(
    name="weather_agent",
    model="gemini-2.5-flash",
    instruction="Answer questions about the weather. Call get_weather for each city asked about, then "
                "answer in one short sentence with the temperature and the conditions.",
    tools=[get_weather],
)
