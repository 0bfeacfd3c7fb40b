"""A real ADK agent for tests/transforms/test_inference.py: an LlmAgent with real Python tools,
whose model calls go to the local generateContent server (tests/servers/judge_server.py) at
$EVALBEAM_TEST_MODEL_URL. Needs google-adk (the .adk venv)."""
import os

from google.adk.agents import LlmAgent
from google.adk.models.google_llm import Gemini
from google.adk.tools import ToolContext

from tests.inference_app import convert, get_weather


def remember_city(city: str, tool_context: ToolContext) -> dict:
    """Remember the city in the session state; returns how many the session holds."""
    cities = list(tool_context.state.get("cities", [])) + [city]
    tool_context.state["cities"] = cities
    return {"remembered": len(cities), "unit": tool_context.state.get("unit")}


def explode(reason: str) -> dict:
    """A tool that fails."""
    raise RuntimeError(f"the tool exploded: {reason}")


root_agent = LlmAgent(
    name="weather_agent",
    model=Gemini(model="gemini-test", base_url=os.environ.get("EVALBEAM_TEST_MODEL_URL")),
    instruction="Answer weather questions with the tools.",
    tools=[get_weather, convert, remember_city, explode],
)
