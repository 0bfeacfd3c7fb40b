"""An inference function learns which run of its case it makes (inference.num_runs):
the `run` keyword, given only to functions that declare it (or **kwargs)."""
import pytest

from evalbeam.metrics.agents.inference import FunctionInferrer, InferenceError, accepts_keyword, infer_all, user_turns
from evalbeam.metrics.rows.instance import case_id, run_number


def responses(target, ids):
    items = [(i, {"prompt": "p", "reference": "r"}) for i in ids]
    out = infer_all(lambda: FunctionInferrer(target, 2), items, 2, 10.0, run_of=run_number)
    return {key: fields.get("response", fields.get("inference_error")) for key, fields in out}


def test_a_function_that_declares_run_is_told_its_run():
    ids = ["c:run1", "c:run2", "x:runner:run3", "plain"]
    assert responses("tests.inference_app:run_named", ids) == {
        "c:run1": "run 1", "c:run2": "run 2", "x:runner:run3": "run 3", "plain": "run 1"}
    assert responses("tests.inference_app:run_named_async", ids[:2]) == {
        "c:run1": "async run 1", "c:run2": "async run 2"}
    assert responses("tests.inference_app:run_in_kwargs", ["c:run2"]) == {"c:run2": "options [('run', 2)]"}


def test_a_function_without_run_is_called_as_before():
    got = responses("tests.inference_app:answer", ["c:run1", "c:run2"])
    assert got == {"c:run1": "P", "c:run2": "P"}  # the prompt upper-cased: called with the fields alone
    assert not accepts_keyword(len, "run") and not accepts_keyword(lambda fields, *, other=1: 0, "run")
    assert accepts_keyword(lambda fields, run: 0, "run")


def test_case_and_run_of_an_instance_id():
    assert [case_id(i) for i in ("a:run1", "a:b:run12", "a:runner", "plain", "x:run")] == \
        ["a", "a:b", "a:runner", "plain", "x:run"]
    assert [run_number(i) for i in ("a:run1", "a:b:run12", "a:runner", "plain")] == [1, 12, 1, 1]


def test_a_scenario_case_has_no_fixed_turns_and_says_the_simulator_writes_them():
    """The user turns a deployed agent (A2A, Agent Engine) is sent: a conversation_scenario case
    has none (the simulator writes them: docs/agents.md, User simulation), and its error says so,
    not that a prompt is missing."""
    scenario = {"starting_prompt": "Hi", "conversation_plan": "Ask the weather in Paris."}
    with pytest.raises(InferenceError, match="conversation_scenario case has no fixed turns to send: its user "
                                             r"messages are written by the user simulator \(inference.user_simulator\)"):
        user_turns({"adk_case": {"eval_set_id": "s", "eval_id": "e", "conversation_scenario": scenario}})
    with pytest.raises(InferenceError, match="no prompt to send"):
        user_turns({"adk_case": {"eval_set_id": "s", "eval_id": "e"}})
    assert user_turns({"prompt": "p"}) == ["p"]
    assert user_turns({"invocations": [{"prompt": "a"}, {"prompt": "b"}]}) == ["a", "b"]


def test_without_repeated_runs_every_case_is_run_1_whatever_its_id():
    """num_runs 1: an input id that happens to end in ':run<k>' (say, rows exported from an earlier
    repeated run) is one case, run once: the function is told run 1, not k."""
    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.transforms.inference import InferFn

    def told(num_runs, ids):
        fn = InferFn("function", "tests.inference_app:run_named", 2, 10.0, num_runs)
        fn.setup()
        batch = [Instance(i, {"prompt": "p", "reference": "r"}, {}, "t") for i in ids]
        return {i.instance_id: i.fields["response"] for i in fn.process(batch)}

    assert told(1, ["q:run7", "plain"]) == {"q:run7": "run 1", "plain": "run 1"}
    assert told(3, ["q:run2", "q:run7:run3"]) == {"q:run2": "run 2", "q:run7:run3": "run 3"}
