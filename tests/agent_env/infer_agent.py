"""Run metrics.agents.inference's AgentInferrer (what transforms/inference.py runs on each worker)
over cases given as JSON, in the agent venv (.agent/, evalbeam[agent]): python infer_agent.py AGENT CASES.json OUT.json.
CASES: [[key, fields]]; OUT: [[key, fields filled or failed]]."""
import json
import sys

from evalbeam.metrics.agents.inference import infer_all, make_inferrer

agent, cases_path, out_path = sys.argv[1:4]
cases = json.load(open(cases_path))
done = list(infer_all(lambda: make_inferrer("agent", agent, 4), [tuple(c) for c in cases], 4, 60))
json.dump(done, open(out_path, "w"))
